"""Chapter 01, exercise 2: the backup rule. RAP's max-of-mean backup against a plain running mean, at RAP(10), on
the chapter's held-out problems (same seed, so the two searches start from the same samples)."""

import dataclasses

from course_lib import course_config
from course_lib.chapters import ch01_rap as ch01

SEED = 0
cfg = ch01.preset()
problems = ch01.test_problems(cfg.tasks_per_length, SEED)
lm = ch01.load_lm()
for backup in ("max_mean", "mean"):
    arm = dataclasses.replace(cfg, mcts=dataclasses.replace(cfg.mcts, backup=backup))
    generator = course_config.seed_everything(SEED)
    scores = {n: ch01.evaluate_search(lm, p, n, 10, arm, generator)["real"] for n, p in problems.items()}
    row = "  ".join(f"{n}-step {s:.3f}" for n, s in scores.items())
    print(f"backup {backup:8} RAP(10) real success: {row}  mean {sum(scores.values()) / len(scores):.3f}")
