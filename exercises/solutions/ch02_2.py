"""Chapter 02, exercise 2: LATS without its memory of failures (memory_penalty 1.0: a failed step is as likely as
before) against the chapter's LATS and best-of-k, at every budget, on 50 held-out problems per length (seed 0)."""

import dataclasses

from course_lib import course_config
from course_lib.chapters import ch01_rap as ch01
from course_lib.chapters import ch02_lats as ch02

SEED = 0
PER_LENGTH = 50
cfg = ch02.preset()
lm = ch01.load_lm()
problems = [(i, g, n) for n, pairs in ch01.test_problems(PER_LENGTH, SEED).items() for i, g in pairs]
print("success at budgets " + " / ".join(str(b) for b in cfg.budgets))
generator = course_config.seed_everything(SEED)
runs = [(i, g, ch02.retries_at_budgets(lm, i, g, n, cfg.budgets, generator, None)) for i, g, n in problems]
best = [sum(ch02.evaluate_outcome(r[b], i, g) for i, g, r in runs) / len(runs) for b in cfg.budgets]
print(f"{'best-of-k':22}" + " / ".join(f"{s:.3f}" for s in best))
for penalty in (0.2, 1.0):
    arm = dataclasses.replace(cfg, lats=dataclasses.replace(cfg.lats, memory_penalty=penalty))
    rates = []
    for budget in cfg.budgets:
        generator = course_config.seed_everything(SEED)
        outcomes = [(ch02.grounded_method("lats", lm, i, g, n, budget, arm, generator), i, g) for i, g, n in problems]
        rates.append(sum(ch02.evaluate_outcome(o, i, g) for o, i, g in outcomes) / len(outcomes))
    name = "LATS (memory 0.2)" if penalty < 1 else "LATS without memory"
    print(f"{name:22}" + " / ".join(f"{s:.3f}" for s in rates))
