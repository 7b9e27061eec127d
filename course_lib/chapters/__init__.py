"""The chapters: one module per notebook, each holding its story (config, arms, run, claims, report), and their
index.

The chapters are found, not listed: `modules()` reads the package's files (`chNN_<name>.py`; a designed setting,
`chNN_design.py`, is its chapter's `designs()` entry and `design()`'s `DESIGN`), and each module describes itself
once, as a `skeleton.Chapter`: its run and claims, and what the course's tools need of it (its training task for
TRL, verl, the golden run and the benchmarks; its leakage audit; its golden cases; its data builder, `build_data`).
The tools above the chapters (`course_lib.lab`, `course_lib.integrations`) walk `index()` and read these, so a new
chapter is its module, its notebook and its test; none of them names a chapter. `python -m course_lib.chapters chNN
...` runs chapter chNN's command. What several chapters share lives below them, in `course_lib.tasks`; no chapter
imports another.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from course_lib.tasks.tool_task import ToolTask

if TYPE_CHECKING:  # the index loads no chapter module until asked
    from course_lib.chapters.skeleton import Chapter
    from course_lib.course.designs import Design


FOLDER = Path(__file__).resolve().parent
CHAPTER_FILE = re.compile(r"(ch\d\d)_([a-z0-9_]+)\.py")


def modules(folder: Path = FOLDER) -> dict[str, str]:
    """Chapter key -> module name under `course_lib.chapters` (`"ch07"` -> `"ch07_gigpo"`), in chapter order, from
    the files of `folder`: every `chNN_<name>.py` but the designed settings' `chNN_design.py`. Two modules for one
    key are refused (ValueError naming both)."""
    found: dict[str, str] = {}
    for path in sorted(folder.glob("ch[0-9][0-9]_*.py")):
        match = CHAPTER_FILE.fullmatch(path.name)
        if match is None or match.group(2) == "design":
            continue
        key = match.group(1)
        if key in found:
            raise ValueError(f"two modules claim chapter {key}: {found[key]}.py and {path.name}")
        found[key] = path.stem
    return found


def designs(folder: Path = FOLDER) -> dict[str, str]:
    """Chapter key -> the importable module of its designed setting (`chNN_design.py`, which defines `DESIGN`)."""
    return {path.name[:4]: f"course_lib.chapters.{path.stem}" for path in sorted(folder.glob("ch[0-9][0-9]_design.py"))}


def design(key: str) -> Design | None:
    """Chapter `key`'s pre-registered designed setting (`DESIGN` in `chNN_design.py`), or None when it has no design
    module, or one still without a `DESIGN`."""
    import importlib

    name = designs().get(key)
    if name is None:
        return None
    try:
        return getattr(importlib.import_module(name), "DESIGN", None)
    except ModuleNotFoundError as error:
        if error.name != name:
            raise
        return None


def module(key: str | int) -> ModuleType:
    """The chapter module of `key` (`"ch09"`, `9`), imported: how code outside `chapters/` reaches a chapter's own
    functions (a diagram of its setting, a benchmark of its workload) by its key, not its module's name."""
    import importlib

    return importlib.import_module(f"{__name__}.{modules()[chapter_key(key)]}")


def load(key: str) -> Chapter:
    """The `skeleton.Chapter` chapter `key` describes itself with (imports its module; ValueError unless the module
    defines exactly one)."""
    from course_lib.chapters.skeleton import Chapter

    imported = module(key)
    found = [value for value in vars(imported).values() if isinstance(value, Chapter)]
    if len(found) != 1:
        raise ValueError(f"{imported.__name__} defines {len(found)} skeleton.Chapter objects; a chapter defines one")
    return found[0]


OPTIONAL_PACKAGES = ("trl",)
"""Optional extras a chapter module may need at import (chapter 13: `pip install -e .[trl]`). Without one, `index()`
leaves that chapter out and `unavailable()` says why, so the course's tables work in an environment without it
(verl's, for one)."""


def index() -> dict[str, Chapter]:
    """Every chapter, by key, in order (imports every chapter module: a few seconds), but one whose module needs an
    optional package that is not installed (`unavailable()`)."""
    found = {}
    for key in modules():
        try:
            found[key] = load(key)
        except ModuleNotFoundError as error:
            if (error.name or "").split(".")[0] not in OPTIONAL_PACKAGES:
                raise
    return found


def unavailable() -> dict[str, str]:
    """Chapter key -> why `index()` leaves it out (an optional package its module needs is not installed)."""
    import importlib.util

    reasons = {}
    for key in modules():
        try:
            load(key)
        except ModuleNotFoundError as error:
            package = (error.name or "").split(".")[0]
            if package not in OPTIONAL_PACKAGES:
                raise
            found = importlib.util.find_spec(package) is not None
            reasons[key] = f"{package} is not installed: pip install -e .[{package}]" if not found else str(error)
    return reasons


def chapter_key(chapter: str | int) -> str:
    """`"00"`, `0`, `"ch00"` -> `"ch00"`: the key of `tool_tasks()` and `results.MODULES`."""
    text = str(chapter).strip().lower().removeprefix("ch")
    if not text.isdigit():
        raise ValueError(f"not a chapter: {chapter!r}")
    return f"ch{int(text):02d}"


def task(key: str | int) -> ToolTask:
    """The training task chapter `key` gives (`Chapter.task`), or a KeyError naming the chapters that give one."""
    chapter = load(key)
    if chapter.task is None:
        raise KeyError(f"chapter {chapter.id} has no training task; chapters with one: {sorted(tasks())}")
    return dataclasses.replace(chapter.task(), chapter=chapter.id)


def tasks() -> dict[str, ToolTask]:
    """Every chapter's training task, by chapter key, in order (`Chapter.task`; imports every chapter module)."""
    return {key: dataclasses.replace(c.task(), chapter=key) for key, c in index().items() if c.task is not None}


def tool_tasks() -> dict[str, ToolTask]:
    """The course's tool tasks trained with plain GRPO, by chapter (`"ch00"`, `"ch03"` ... `"ch06"`), as the
    chapters train on them: the tasks of `tasks()` without a method of their own."""
    return {key: found for key, found in tasks().items() if found.method is None and not found.step_mode}
