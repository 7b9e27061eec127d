"""Chapter 03, exercise 1: stage 2 alone (only the macro terms: schema, all commonsense, all hard constraints, final
pass), the small policy, seed 0, 40 iterations as the chapter's arms, beside the recorded dense and sparse runs of
the same seed (`results/ch03.json`, 500 distinct held-out queries). Evaluated at iterations 0 and 40 only."""

import copy
import dataclasses

from course_lib import course_config, data
from course_lib.chapters import ch03_planner_r1 as ch03
from course_lib.course import recorded

SEED = 0
cfg = ch03.preset()
cfg = dataclasses.replace(cfg, grpo=dataclasses.replace(cfg.grpo, eval_every=cfg.grpo.iterations))
ch03.ARMS["macro"] = 2  # this process only
model, tokenizer = data.load_base(ch03.BASE_NAMES["small"], "cpu")
course_config.seed_everything(SEED)
history = ch03.train(copy.deepcopy(model), tokenizer, cfg, SEED, "macro")
evaluations = [r for r in history if "eval_success" in r]
numbers = recorded.load("ch03")["seeds"][str(SEED)]["numbers"]
print(f"small policy, seed {SEED}, held-out final pass after {cfg.grpo.iterations} iterations:")
print(f"  base {evaluations[0]['eval_success']:.3f}")
print(f"  stage 2 (macro), this run {evaluations[-1]['eval_success']:.3f}")
for arm in ("dense", "sparse"):
    print(f"  {arm}, recorded {numbers[f'small_{arm}_success']:.3f}")
