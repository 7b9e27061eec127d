"""Chapter 09, exercise 2: StarPO-S with RAGEN's other filter ratios (keep 50% and 75% of the groups), 20 iterations
each from the base, against the recorded StarPO-S (25%) and StarPO (no filter) of the same seed."""

import copy
import dataclasses

from course_lib import course_config, data
from course_lib.algos.filters import FilterConfig
from course_lib.chapters import ch09_ragen as ch09
from course_lib.course import recorded
from course_lib.rl.train import train_grpo

SEED, ITERATIONS = 0, 20
cfg = ch09.preset("cpu")
model, tokenizer = data.load_base(ch09.BASE_NAME, "cpu")
print(f"seed {SEED}, {ITERATIONS} iterations, held-out success at iterations 0/10/20")
for name, arm in (("keep 25% (recorded StarPO-S)", "starpo_s"), ("no filter (recorded StarPO)", "starpo")):
    curve = dict(recorded.load_curves("ch09", f"{arm}/eval_success")[SEED])
    print(f"{name}: success {[round(curve[i], 3) for i in (0, 10, 20)]}")
for keep in (0.5, 0.75):
    grpo = dataclasses.replace(
        ch09.arm_config(cfg, "starpo_s"), filter=FilterConfig(keep_fraction=keep), iterations=ITERATIONS
    )
    course_config.seed_everything(SEED)
    history = train_grpo(
        copy.deepcopy(model), tokenizer, lambda: ch09.make_env("train"), cfg.sampling, grpo, SEED,
        evaluate=ch09.HeldOutEvaluator(tokenizer, cfg, SEED + 1),
    )  # fmt: skip
    kept = sorted({round(r["kept_rows"], 2) for r in history if "kept_rows" in r})
    success = [round(value, 3) for _, value in ch09.eval_curve(history)]
    print(f"keep {keep:.0%}: rows kept per update {kept}; success {success}")
