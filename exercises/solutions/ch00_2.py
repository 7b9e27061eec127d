"""Chapter 00, exercise 2: a base that rarely uses the tool (5% of demonstrations instead of 40%). Can GRPO still
discover the tool? The base is rebuilt into a temporary folder with the chapter's warm start, shortened from 1000
to 500 steps to keep the exercise near a CPU-minute (the chapter's base, 1000 steps, is the one its runs use)."""

import dataclasses
import tempfile

from course_lib import course_config, models
from course_lib.chapters import ch00_tool_agent as ch00
from course_lib.rl.train import train_grpo
from course_lib.tasks import tool_arithmetic

SEED = 0
chapter = ch00.preset()
cfg = dataclasses.replace(chapter, tool_share=0.05, sft=dataclasses.replace(chapter.sft, steps=500))
with tempfile.TemporaryDirectory() as folder:
    ch00.build_base(folder, seed=0, progress=False, config=cfg)
    model, tokenizer = models.load(folder)
grpo = dataclasses.replace(cfg.grpo, iterations=20)
course_config.seed_everything(SEED)
history = train_grpo(
    model,
    tokenizer,
    ch00.make_env,
    cfg.sampling,
    grpo,
    SEED,
    evaluate=lambda m: tool_arithmetic.evaluate(m, tokenizer, cfg, SEED),
)
evaluations = [r for r in history if "eval_success" in r]
print("rare-tool base (tool_share 0.05), held-out:")
for r in evaluations:
    print(f"  iteration {r['iteration']:2d}: success {r['eval_success']:.3f}  tool use {r['eval_tool_use']:.3f}")
steps = [r["reward_std"] for r in history if "reward_std" in r]
print(f"iterations with any reward spread inside a group: {sum(v > 0 for v in steps)} of {len(steps)}")
print("mean within-group reward std, first 10 iterations:", " ".join(f"{v:.3f}" for v in steps[:10]))
