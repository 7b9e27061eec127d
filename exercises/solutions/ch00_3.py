"""Chapter 00, exercise 3: train without the loss mask on the tool's output (the policy is also trained to predict
the tokens the tool wrote), against the masked run, from the same base and seed."""

import dataclasses

from course_lib import course_config, data
from course_lib.chapters import ch00_tool_agent as ch00
from course_lib.rl.train import train_grpo
from course_lib.tasks import tool_arithmetic

SEED = 0
cfg = ch00.preset()
for masked in (True, False):
    model, tokenizer = data.load_base(ch00.BASE_NAME, "cpu")
    grpo = dataclasses.replace(cfg.grpo, iterations=30, mask_observations=masked)
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
    errors = [r["tool_error_rate"] for r in history if "loss" in r]
    print(f"{'tool output masked' if masked else 'no mask':18} held-out success at iterations 0/10/20/30: {curve}")
    print(
        f"{'':18} training tool error rate: max {max(errors):.3f}, last 10 iterations mean {sum(errors[-10:]) / 10:.3f}"
    )
