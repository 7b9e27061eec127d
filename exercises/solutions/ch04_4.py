"""Chapter 04, exercise 4: the unmasked variant with C = 3. With fewer skipped calls, do hallucinated responses drop?"""

import dataclasses

from course_lib import course_config, data
from course_lib.chapters import ch04_torl as ch04

SEED = 0
cfg = dataclasses.replace(ch04.preset(), max_tool_calls=3)
model, tokenizer = data.load_base(ch04.BASE_NAME, course_config.device())
course_config.seed_everything(SEED)
run = ch04.train(model, tokenizer, cfg, SEED, mask_observations=False)
print("unmasked, C = 3")
print("iteration  accuracy  skipped calls  tool silent: writes <tool_response>")
for r in (r for r in run["history"] if "eval_success" in r):
    print(
        f"{r['iteration']:9}  {r['eval_success']:8.3f}  {r['eval_skipped_rate']:13.3f}  "
        f"{r['eval_silent_tool_hallucination']:35.3f}"
    )
print(f"final (another sampling seed): accuracy {run['final']['success']:.3f}")
