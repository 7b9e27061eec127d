"""Chapter 04, exercise 3: a broken tool (ToRL issue #27). Which curve tells you?"""

from course_lib import course_config, data, tools
from course_lib.chapters import ch04_torl as ch04

SEED = 0
cfg = ch04.preset()
model, tokenizer = data.load_base(ch04.BASE_NAME, course_config.device())
tools.register("python", lambda code: "error: broken")  # every call now fails, whatever the code
course_config.seed_everything(SEED)
run = ch04.train(model, tokenizer, cfg, SEED)  # the masked recipe, C = 1
steps = [r for r in run["history"] if "tool_use" in r]
evals = [r for r in run["history"] if "eval_success" in r]
print("training rollouts:  iteration  tool_error_rate  share executing code  mean reward")
for r in steps[::10] + steps[-1:]:
    print(f"{r['iteration']:>28}  {r['tool_error_rate']:15.2f}  {r['tool_use']:20.2f}  {r['reward']:11.2f}")
print("held-out:  iteration  code ratio  accuracy")
for r in evals:
    print(f"{r['iteration']:>20}  {r['eval_code_ratio']:10.3f}  {r['eval_success']:8.3f}")
