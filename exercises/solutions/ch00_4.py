"""Chapter 00, exercise 4: a broken tool that answers every call with an error. Which logged number tells you?"""

import dataclasses

from course_lib import course_config, data, tools
from course_lib.chapters import ch00_tool_agent as ch00
from course_lib.rl.train import train_grpo
from course_lib.tasks import tool_arithmetic

SEED = 0
cfg = ch00.preset()
tools.register("python", lambda code: "error: broken")  # this process only: the course's tool is not changed
model, tokenizer = data.load_base(ch00.BASE_NAME, "cpu")
course_config.seed_everything(SEED)
history = train_grpo(
    model,
    tokenizer,
    ch00.make_env,
    cfg.sampling,
    dataclasses.replace(cfg.grpo, iterations=30),
    SEED,
    evaluate=lambda m: tool_arithmetic.evaluate(m, tokenizer, cfg, SEED),
)
print("iteration  train success  tool use  tool error rate  held-out success")
for r in history:
    if "loss" in r and r["iteration"] % 5 == 0:
        held_out = f"{r['eval_success']:.3f}" if "eval_success" in r else ""
        row = f"{r['iteration']:9d}  {r['success']:13.3f}  {r['tool_use']:8.3f}  {r['tool_error_rate']:15.3f}"
        print(f"{row}  {held_out}".rstrip())
final = [r for r in history if "eval_success" in r][-1]
print(
    f"held-out after {final['iteration']} iterations: success {final['eval_success']:.3f}, "
    f"tool use {final['eval_tool_use']:.3f}"
)
