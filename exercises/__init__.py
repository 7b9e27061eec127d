"""Exercises: implement the course's algorithms yourself, and the measured solutions of every notebook's exercises.

**Implement it.** Each of the modules `grpo`, `rollout`, `loop`, `ppo`, `gigpo`, `arpo`, `filters`, `mi`, `aepo`
and `tree_grpo` holds stubs: a function with the docstring of what it computes (paper, equation, shapes, edge
cases) and a body that raises `NotImplementedError`. Fill one in, then check it:

    pytest exercises/test_gigpo.py                        # the checks, on your implementation
    pytest exercises/ --impl library                      # the same checks on the library's (they pass)
    from exercises import check
    check("gigpo.step_group_advantages", use="mine")      # in a notebook: one line, never raises

The checks (`exercises/checks/`, one module per algorithm) use inputs whose values were computed by hand from the
papers' equations, then seeded random inputs compared with the library's implementation, the reference solution.
See `exercises/README.md` for the twelve exercises.

**Measured exercises.** `exercises/solutions/chNN_K.py` solves exercise K of chapter NN; `exercises.measure` runs
them and keeps the notebooks' collapsed solutions and expected outcomes equal to what ran.
"""

from __future__ import annotations

NAMES = (
    "grpo.group_advantages",
    "grpo.clipped_surrogate_loss",
    "rollout.play_episode",
    "loop.grpo_update",
    "gigpo.step_group_advantages",
    "arpo.branch_decision",
    "ppo.gae",
    "filters.starpo_s",
    "filters.snr",
    "mi.cross_scoring",
    "aepo.balanced_clip",
    "tree_grpo.tree_advantages",
)
"""The implement-it exercises, by the name `check` takes, in the order of the chapters."""


def check(name: str, use: str | None = None) -> None:
    """Run the checks of exercise `name` (one of `NAMES`) on the library's implementation (`use="library"`, the
    default in the course's repository) or on yours in `exercises/<module>.py` (`use="mine"`, reloaded, so an edit
    counts at once; the default in the student edition, which has no reference), and print one line:
    `<name>: ... passes N checks`, or the first failing check's message. It does not raise when a check fails, so
    a notebook cell runs on."""
    from exercises.checks import check as run_checks  # imported here: `python -m exercises.measure` needs no torch

    run_checks(name, use)
