"""Chapter 06, exercise 2: a larger tool term (w_tool = 1.0). Does the policy inflate its calls?"""

import dataclasses

from course_lib import course_config, data
from course_lib.chapters import ch06_artist as ch06
from course_lib.course import recorded

SEED = 0
cfg = dataclasses.replace(ch06.preset(), w_tool=1.0)
model, tokenizer = data.load_base(ch06.BASE_NAME, course_config.device())
course_config.seed_everything(SEED)
history = ch06.train(model, tokenizer, cfg, SEED, cfg.w_tool)
curves = recorded.load("ch06")["seeds"][str(SEED)]["curves"]  # the chapter's w_tool = 0.2 run, recorded
calls = dict(curves["tool/eval_tool_calls"])
success = dict(curves["tool/eval_success"])
print("iteration  tool calls per problem (w 1.0 / 0.2)  held-out success (w 1.0 / 0.2)")
for r in (r for r in history if "eval_success" in r):
    i = r["iteration"]
    print(f"{i:9}  {r['eval_tool_calls']:18.2f} / {calls[i]:.2f}  {r['eval_success']:22.3f} / {success[i]:.3f}")
