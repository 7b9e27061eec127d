"""Chapter 06, exercise 3: a base that rarely retries. How often does a group of 8 hold a retry to learn from?

Rebuilding the base with retry_share=0.05 takes about 10 minutes; instead, measure the committed base (demonstrations
retry after 20% of failures) and compute what a group of 8 sees, assuming the base's retry rate scales with the
demonstrations' retry share (an assumption, not a measurement) and each episode is an independent draw."""

from course_lib import course_config, data
from course_lib.chapters import ch06_artist as ch06

SEED, G = 0, 8
cfg = ch06.preset()
model, tokenizer = data.load_base(ch06.BASE_NAME, course_config.device())
stats = ch06.evaluate(model, tokenizer, cfg, SEED)
with_failure = stats["episodes_with_failure"] / cfg.eval_tasks
print(f"base: {with_failure:.2f} of episodes have a failed call; retry rate after a failure {stats['retry_rate']:.3f}")
print(f"      success of episodes with a failure {stats['recovered']:.3f}, overall {stats['success']:.3f}")
print("retry share  retry rate  P(group of 8 holds a retried failure)")
for share in (cfg.retry_share, 0.05):
    rate = stats["retry_rate"] * share / cfg.retry_share
    print(f"{share:11.2f}  {rate:10.3f}  {1 - (1 - with_failure * rate) ** G:37.2f}")
