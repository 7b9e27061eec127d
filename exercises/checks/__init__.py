"""The checks of the implement-it exercises: one definition serves `pytest exercises/` and `exercises.check`.

Each exercise (`Exercise`) names the stub a student fills in (`exercises/<module>.py::<function>`), the library
function that is its reference solution (wrapped by an adapter to the stub's signature) and its checks (`Case`):
fixed inputs with values computed by hand from the paper's equations, then seeded random inputs compared with the
library. A check raises `ExerciseFailure` with a message that says what is wrong and why; `first_failure` runs the
checks in order and returns the first such message, with a stub's `NotImplementedError` turned into
"not implemented yet". The checks live in one module per algorithm (`checks/grpo.py`, ...).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from exercises.checks.common import Case, Exercise, ExerciseFailure, RecordedValuesMissing

__all__ = [
    "Case",
    "Exercise",
    "ExerciseFailure",
    "cases",
    "check",
    "exercise",
    "exercises",
    "first_failure",
    "implementation",
    "run_case",
]

USES = ("library", "mine")


def _registry() -> dict[str, Exercise]:
    from exercises.checks import aepo, arpo, filters, gigpo, grpo, loop, mi, ppo, rollout, tree_grpo

    found = {}
    for module in (grpo, rollout, loop, gigpo, arpo, ppo, filters, mi, aepo, tree_grpo):  # the order of the chapters
        for item in module.EXERCISES:
            found[item.name] = item
    return found


_EXERCISES: dict[str, Exercise] = {}


def exercises() -> dict[str, Exercise]:
    """Every exercise by name, in the course's order."""
    if not _EXERCISES:
        _EXERCISES.update(_registry())
    return _EXERCISES


def exercise(name: str) -> Exercise:
    if name not in exercises():
        raise ValueError(f"no exercise {name!r}; the exercises are {', '.join(exercises())}")
    return exercises()[name]


def cases(name: str) -> list[Case]:
    """The checks of exercise `name`, in order (for `pytest.mark.parametrize`)."""
    return [Case(name, title, run) for title, run in exercise(name).cases]


def implementation(name: str, use: str = "mine") -> Callable:
    """The function the checks run: the library's (`use="library"`) or the student's stub module, reloaded so that
    an edit made since the last call counts (`use="mine"`)."""
    if use not in USES:
        raise ValueError(f"use must be one of {USES}, got {use!r}")
    item = exercise(name)
    if use == "library":
        from course_lib import implement_it

        if implement_it.EDITION == "student":
            raise ValueError(
                "the student edition holds no reference implementations: its library calls your files in exercises/, "
                "so the checks run on yours (use='mine')"
            )
        return item.library
    module = importlib.reload(importlib.import_module(f"exercises.{item.module}"))
    return getattr(module, item.function)


def run_case(case: Case, fn: Callable) -> str | None:
    """None if `fn` passes the check, else the message that teaches what is wrong."""
    item = exercise(case.exercise)
    try:
        case.run(fn)
    except NotImplementedError as error:
        needed = str(error).split(":")[0]
        if needed != item.name and needed in exercises():  # the student edition's library called another stub
            return f"{item.name}: needs {needed} first: fill in {exercise(needed).stub}"
        return f"{item.name}: not implemented yet: fill in {item.stub}"
    except ExerciseFailure as failure:
        return f"{item.name}: check '{case.title}' fails: {failure}"
    except RecordedValuesMissing:  # the edition is broken, not the student's code: stop, do not grade
        raise
    except Exception as error:  # the student's code crashed: say where, not a traceback into the checks
        return f"{item.name}: check '{case.title}' fails: your function raised {type(error).__name__}: {error}"
    return None


def first_failure(name: str, fn: Callable) -> tuple[int, str | None]:
    """Run the checks of `name` on `fn` in order: how many passed before the first failure, and its message."""
    passed = 0
    for case in cases(name):
        message = run_case(case, fn)
        if message is not None:
            return passed, message
        passed += 1
    return passed, None


def check(name: str, use: str | None = None) -> None:
    """Print whether the implementation `use` ("library" or "mine"; by default the library's, yours in the student
    edition) passes the checks of exercise `name`, or the first failing check's message. Never raises for a failing
    implementation, so a notebook cell runs on."""
    if use is None:
        from course_lib import implement_it

        use = "mine" if implement_it.EDITION == "student" else "library"
    fn = implementation(name, use)
    passed, message = first_failure(name, fn)
    if message is None:
        who = "library implementation" if use == "library" else "your implementation"
        print(f"{name}: {who} passes {passed} checks")
    else:
        print(message)
