"""Chapter 06, exercise 1: no failures at test time. How much of the gain survives without failures?"""

import copy
import dataclasses

from course_lib import course_config, data
from course_lib.chapters import ch06_artist as ch06

SEED = 0
cfg = ch06.preset()
model, tokenizer = data.load_base(ch06.BASE_NAME, course_config.device())
base = copy.deepcopy(model)
course_config.seed_everything(SEED)
ch06.train(model, tokenizer, cfg, SEED, cfg.w_tool)  # ARTIST's reward, failures at the chapter's rate 0.3
no_failures = dataclasses.replace(cfg, failure_rate=0.0)
print("held-out success   failure rate 0.3   failure rate 0")
for name, policy in (("base", base), ("trained", model)):
    with_f = ch06.evaluate(policy, tokenizer, cfg, SEED + 1)["success"]
    without = ch06.evaluate(policy, tokenizer, no_failures, SEED + 1)["success"]
    print(f"{name:16}   {with_f:17.3f}   {without:15.3f}")
