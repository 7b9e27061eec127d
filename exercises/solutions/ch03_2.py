"""Chapter 03, exercise 2: a looser budget. Queries drawn with a budget slack of up to 8 instead of 2: how do the
small base's final pass, its failure breakdown and a sparse-reward GRPO run (40 iterations, seed 0) change? The
slack-2 numbers of the same seed are read from `results/ch03.json`."""

import copy
import dataclasses

from course_lib import course_config, data
from course_lib.chapters import ch03_planner_r1 as ch03
from course_lib.course import recorded

SEED = 0
cfg = ch03.preset()
loose = dataclasses.replace(cfg, max_slack=8, grpo=dataclasses.replace(cfg.grpo, eval_every=cfg.grpo.iterations))
model, tokenizer = data.load_base(ch03.BASE_NAMES["small"], "cpu")
start = ch03.evaluate(model, tokenizer, loose, SEED + 1)
course_config.seed_everything(SEED)
history = ch03.train(copy.deepcopy(model), tokenizer, loose, SEED, "sparse", start)
final = [r for r in history if "eval_success" in r][-1]
numbers = recorded.load("ch03")["seeds"][str(SEED)]["numbers"]
print(
    f"slack 2 (recorded): base {numbers['small_base_success']:.3f}, sparse GRPO {numbers['small_sparse_success']:.3f}"
)
print(f"slack 8 (this run): base {start['success']:.3f}, sparse GRPO {final['eval_success']:.3f}")
for name, row in (("base", start), ("after sparse GRPO", {k.removeprefix("eval_"): v for k, v in final.items()})):
    shares = {k.removeprefix("fail_"): round(v, 2) for k, v in row.items() if k.startswith("fail_")}
    print(f"failure shares at slack 8, {name}: {shares}")
