"""Chapter 09, exercise 1: StarPO at half and twice the course's learning rate, 20 iterations each, from the base."""

import copy
import dataclasses

from course_lib import data
from course_lib.chapters import ch09_ragen as ch09
from course_lib.course import recorded

SEED, ITERATIONS = 0, 20
cfg = ch09.preset("cpu")
model, tokenizer = data.load_base(ch09.BASE_NAME, "cpu")
print(f"StarPO from the base, seed {SEED}, {ITERATIONS} iterations, held-out success at iterations 0/10/20")
curve = {
    key: recorded.load_curves("ch09", f"starpo/{key}")[SEED] for key in ("eval_success", "invalid_rate", "grad_norm")
}
first = [y for x, y in curve["invalid_rate"] if x < ITERATIONS]
invalid = [round(sum(rows) / len(rows), 3) for rows in (first[:5], first[-5:])]
peak = max(y for x, y in curve["grad_norm"] if x < ITERATIONS)
success = [round(dict(curve["eval_success"])[i], 3) for i in (0, 10, 20)]
print(f"lr 5e-4 (recorded): success {success}; invalid turns first/last 5 iterations {invalid};", end=" ")
print(f"largest grad norm {peak:.2f}")
for lr in (2.5e-4, 1e-3):
    grpo = dataclasses.replace(cfg.grpo, learning_rate=lr, iterations=ITERATIONS, eval_every=10)
    history = ch09.train(copy.deepcopy(model), tokenizer, dataclasses.replace(cfg, grpo=grpo), SEED, "starpo")
    success = [round(value, 3) for _, value in ch09.eval_curve(history)]
    train_rows = [r for r in history if "invalid_rate" in r and "time_rollout" in r]
    invalid = [round(sum(r["invalid_rate"] for r in rows) / len(rows), 3) for rows in (train_rows[:5], train_rows[-5:])]
    peak = max(r["grad_norm"] for r in train_rows)
    print(f"lr {lr:g}: success {success}; invalid turns first/last 5 iterations {invalid};", end=" ")
    print(f"largest grad norm {peak:.2f}")
