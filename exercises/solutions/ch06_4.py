"""Chapter 06, exercise 4: no mask (tool responses in the loss). Does the policy write <tool_response> itself?"""

import dataclasses

from course_lib import course_config, data
from course_lib.chapters import ch06_artist as ch06
from course_lib.course import recorded
from course_lib.rl.train import evaluate_policy
from course_lib.tokenizer import tag_id

SEED = 0
cfg = ch06.preset()
cfg = dataclasses.replace(cfg, grpo=dataclasses.replace(cfg.grpo, mask_observations=False))
model, tokenizer = data.load_base(ch06.BASE_NAME, course_config.device())
course_config.seed_everything(SEED)
history = ch06.train(model, tokenizer, cfg, SEED, cfg.w_tool)
masked = dict(recorded.load("ch06")["seeds"][str(SEED)]["curves"]["tool/eval_success"])  # the chapter's run
print("iteration  held-out success unmasked / masked (recorded)")
for r in (r for r in history if "eval_success" in r):
    print(f"{r['iteration']:9}  {r['eval_success']:16.3f} / {masked[r['iteration']]:.3f}")
seeds = ch06.test_seeds(cfg.eval_tasks)
_, trajectories = evaluate_policy(model, tokenizer, lambda: ch06.make_env("test", cfg), seeds, cfg.sampling, SEED + 1)
response = tag_id(tokenizer, "<tool_response>")
written = sum(any(m and i == response for i, m in zip(t.token_ids, t.loss_mask)) for t in trajectories)
print(f"held-out responses with a <tool_response> the policy wrote itself: {written} of {len(trajectories)}")
