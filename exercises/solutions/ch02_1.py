"""Chapter 02, exercise 1: which value term matters? LATS's value V = lambda * LM + (1 - lambda) * SC with lambda 0
(self-consistency only), 0.5 (the chapter's) and 1 (the model's self-evaluation only), at budgets of 12 and 48
interactions, on 50 held-out problems per plan length (seed 0)."""

import dataclasses

from course_lib import course_config
from course_lib.chapters import ch01_rap as ch01
from course_lib.chapters import ch02_lats as ch02

SEED = 0
PER_LENGTH = 50
cfg = ch02.preset()
lm = ch01.load_lm()
problems = ch01.test_problems(PER_LENGTH, SEED)
for weight in (0.0, 0.5, 1.0):
    arm = dataclasses.replace(cfg, lats=dataclasses.replace(cfg.lats, value_weight=weight))
    row = []
    for budget in (12, 48):
        generator = course_config.seed_everything(SEED)
        solved = [
            ch02.evaluate_outcome(ch02.grounded_method("lats", lm, i, g, n, budget, arm, generator), i, g)
            for n, pairs in problems.items()
            for i, g in pairs
        ]
        row.append(f"budget {budget}: {sum(solved) / len(solved):.3f}")
    print(f"lambda {weight}: LATS success " + "   ".join(row))
