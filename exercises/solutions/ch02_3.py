"""Chapter 02, exercise 3: does the agent know when it has succeeded? For LATS at 48 interactions and RAP(20), the
agent's own belief (LATS: it observed the goal; RAP: its plan reached the goal in imagination) against the truth
(the plan re-executed in a fresh environment), on 50 held-out problems per length (seed 0)."""

from course_lib import course_config
from course_lib.chapters import ch01_rap as ch01
from course_lib.chapters import ch02_lats as ch02
from course_lib.tasks import blocks_planning

SEED = 0
PER_LENGTH = 50
cfg = ch02.preset()
lm = ch01.load_lm()
problems = [(i, g, n) for n, pairs in ch01.test_problems(PER_LENGTH, SEED).items() for i, g in pairs]
generator = course_config.seed_everything(SEED)
lats = []
for i, g, n in problems:
    outcome = ch02.grounded_method("lats", lm, i, g, n, 48, cfg, generator)
    lats.append((outcome.believed_solved, ch02.evaluate_outcome(outcome, i, g)))
generator = course_config.seed_everything(SEED)
rap = []
for i, g, n in problems:
    found = blocks_planning.rap_search(lm, i, g, n, cfg.rap_iterations, cfg.chapter01, generator)
    rap.append((found.solved, ch01.execute(found.plan, i, g)["success"]))
for name, pairs in (("LATS (48)", lats), ("RAP(20)", rap)):
    believed, real = sum(b for b, _ in pairs), sum(r for _, r in pairs)
    wrong = sum(b and not r for b, r in pairs)
    missed = sum(r and not b for b, r in pairs)
    print(f"{name:9} of {len(pairs)}: believed solved {believed}, solved {real}, "
          f"believed but failed {wrong}, solved but not believed {missed}")  # fmt: skip
