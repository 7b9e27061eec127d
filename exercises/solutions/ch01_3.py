"""Chapter 01, exercise 3: the reward weight alpha in r = m^alpha * h^(1 - alpha). RAP(10) on the chapter's
held-out problems with alpha 0.1 (mostly the goal heuristic), 0.5 (the chapter's) and 0.9 (mostly the model)."""

import dataclasses

from course_lib import course_config
from course_lib.chapters import ch01_rap as ch01

SEED = 0
cfg = ch01.preset()
problems = ch01.test_problems(cfg.tasks_per_length, SEED)
lm = ch01.load_lm()
for alpha in (0.1, 0.5, 0.9):
    arm = dataclasses.replace(cfg, reward=dataclasses.replace(cfg.reward, alpha=alpha))
    generator = course_config.seed_everything(SEED)
    scores = {n: ch01.evaluate_search(lm, p, n, 10, arm, generator)["real"] for n, p in problems.items()}
    row = "  ".join(f"{n}-step {s:.3f}" for n, s in scores.items())
    print(f"alpha {alpha}: RAP(10) real success {row}  mean {sum(scores.values()) / len(scores):.3f}")
