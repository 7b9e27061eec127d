"""Chapter 04, exercise 2: a base that rarely writes code. How much learning signal toward the tool is left?

Rebuilding the base with tool_share=0.1 takes about 10 minutes, and a short warm start gives a base that solves
nothing (tried: 150 steps left both shares at about 1% accuracy). So measure the committed base instead: how often
its code and its direct answers are right, then compute what a group of 8 sees at the chapter's code share and at a
share of 0.1 (each response independent: a group is 8 draws)."""

from course_lib import course_config, data
from course_lib.chapters import ch04_torl as ch04
from course_lib.rl.train import evaluate_policy

SEED, G = 0, 8
cfg = ch04.preset()
model, tokenizer = data.load_base(ch04.BASE_NAME, course_config.device())
seeds = ch04.test_seeds(cfg.eval_tasks)
_, trajectories = evaluate_policy(model, tokenizer, lambda: ch04.make_env("test", 1), seeds, cfg.sampling, SEED)
code = [sum(t.rewards) > 0 for t in trajectories if t.env.calls]
direct = [sum(t.rewards) > 0 for t in trajectories if not t.env.calls]
p_code, p_direct = sum(code) / len(code), sum(direct) / len(direct)
share = len(code) / len(trajectories)
print(f"base on {len(trajectories)} held-out problems: code share {share:.2f}")
print(f"accuracy with code {p_code:.3f} ({len(code)} responses), without {p_direct:.3f} ({len(direct)})")
print("code share  P(group has mixed rewards)  P(group has a right code answer)")
for s in (share, 0.1):
    p = s * p_code + (1 - s) * p_direct
    mixed = 1 - p**G - (1 - p) ** G
    right_code = 1 - (1 - s * p_code) ** G
    print(f"{s:10.2f}  {mixed:26.2f}  {right_code:32.2f}")
