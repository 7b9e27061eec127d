"""Chapter 04, exercise 1: a longer run. Does the code ratio keep rising after accuracy saturates?"""

import dataclasses

from course_lib import course_config, data
from course_lib.chapters import ch04_torl as ch04

SEED = 0
cfg = ch04.preset()
cfg = dataclasses.replace(cfg, grpo=dataclasses.replace(cfg.grpo, iterations=100, eval_every=20))
model, tokenizer = data.load_base(ch04.BASE_NAME, course_config.device())
course_config.seed_everything(SEED)
run = ch04.train(model, tokenizer, cfg, SEED)
print("iteration  accuracy  code ratio  ineffective calls  skipped calls")
for r in (r for r in run["history"] if "eval_success" in r):
    print(
        f"{r['iteration']:9}  {r['eval_success']:8.3f}  {r['eval_code_ratio']:10.3f}  "
        f"{r['eval_ineffective_rate']:17.3f}  {r['eval_skipped_rate']:13.3f}"
    )
