"""Chapter 00, exercise 1: Dr. GRPO (advantages not divided by the group's std) against GRPO, from the same base."""

import dataclasses

from course_lib import course_config, data
from course_lib.chapters import ch00_tool_agent as ch00
from course_lib.rl.train import train_grpo
from course_lib.tasks import tool_arithmetic

SEED = 0
cfg = ch00.preset()
for scale_by_std in (True, False):
    model, tokenizer = data.load_base(ch00.BASE_NAME, "cpu")
    grpo = dataclasses.replace(cfg.grpo, iterations=30, scale_by_std=scale_by_std)
    course_config.seed_everything(SEED)
    history = train_grpo(
        model,
        tokenizer,
        ch00.make_env,
        cfg.sampling,
        grpo,
        SEED,
        evaluate=lambda m, tokenizer=tokenizer: tool_arithmetic.evaluate(m, tokenizer, cfg, SEED),
    )
    curve = " ".join(f"{r['eval_success']:.3f}" for r in history if "eval_success" in r)
    name = "GRPO (divide by std)" if scale_by_std else "Dr. GRPO (no std)   "
    print(f"{name} held-out success at iterations 0/10/20/30: {curve}")
