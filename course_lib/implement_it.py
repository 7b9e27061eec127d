"""The implement-it functions' two editions: the reference here, the student's files in the student edition.

Twelve functions of the library are the reference solutions of the implement-it exercises (`exercises/`). Each is
marked where it is defined, `@implement_it("<exercise>", bridge)`. In this repository (the instructor's edition)
the mark changes nothing. The student edition (`python -m course_lib.lab.student_edition`) writes a copy of the
library whose marked functions hold no body (the reference is taken out of the source, not hidden) and sets
`EDITION` to "student": the mark then returns the `bridge` (`course_lib/bridges.py`), which calls the student's
function in `exercises/<module>.py` with the library function's signature. A chapter that trains with GRPO's
advantages, the clipped loss or the multi-turn rollout then trains with the student's.

One exercise has no mark: `loop.grpo_update`. The update it asks for is `rl.train.policy_iteration`'s, which every
chapter runs with other advantages and losses too; it stays in the student edition, built from the student's parts.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path

EDITION = "instructor"
"""`"instructor"` (this repository: the references run) or `"student"` (written so by the student edition)."""

MARKED: dict[str, str] = {}
"""Exercise name -> the qualified name of the library function marked as its reference."""


def implement_it(exercise: str, bridge: Callable) -> Callable[[Callable], Callable]:
    """Mark the decorated function as the reference of `exercise` (`<module>.<function>` of `exercises/`); in the
    student edition the decorated name is bound to `bridge` instead (with the reference's name and docstring)."""

    def mark(function: Callable) -> Callable:
        MARKED[exercise] = f"{function.__module__}.{function.__qualname__}"
        if EDITION == "instructor":
            return function
        bridge.__name__, bridge.__qualname__, bridge.__doc__ = (
            function.__name__,
            function.__qualname__,
            function.__doc__,
        )
        bridge.__module__ = function.__module__
        return bridge

    return mark


def _find_exercises() -> None:
    """Put the folder that holds `exercises/` on `sys.path`: the working folder or one above it (a notebook runs in
    `notebooks/`, the autograder at the edition's top)."""
    for folder in (Path.cwd(), *Path.cwd().parents):
        if (folder / "exercises" / "__init__.py").is_file():
            sys.path.insert(0, str(folder))
            return
    raise ModuleNotFoundError(
        "the student edition's library calls your files in exercises/, and no exercises/ folder was found here or "
        "above: run from the edition's folder (or its notebooks/)"
    )


def student(exercise: str) -> Callable:
    """The student's function for `exercise`, from `exercises/<module>.py` (as last imported or reloaded)."""
    module, function = exercise.split(".")
    try:
        found = importlib.import_module(f"exercises.{module}")
    except ModuleNotFoundError as error:
        if error.name not in ("exercises", f"exercises.{module}"):
            raise
        _find_exercises()
        found = importlib.import_module(f"exercises.{module}")
    return getattr(found, function)
