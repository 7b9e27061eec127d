"""Per-chapter configuration and glue: one module per chapter, named after its notebook.

The chapters are found, not listed: `modules()` reads the package's files (`chNN_<name>.py`; a designed setting,
`chNN_design.py`, is its chapter's `designs()` entry), so a new chapter is its module, its notebook and its test.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # this index is imported by `results` and `designs`, which must not load the engine
    from course_lib.chapters.skeleton import Chapter
    from course_lib.engine.rollout import SamplingConfig
    from course_lib.envs.base import TextEnv


@dataclass(frozen=True)
class ToolTask:
    """A tool task of the course: its environment's name, its chapter's base model, cpu-preset
    sampling limits, and a factory for training-split environments."""

    label: str
    base: str
    sampling: SamplingConfig
    make_env: Callable[[], TextEnv]


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


def load(key: str) -> Chapter:
    """The `skeleton.Chapter` chapter `key` describes itself with (imports its module; ValueError unless the module
    defines exactly one)."""
    import importlib

    from course_lib.chapters.skeleton import Chapter

    module = importlib.import_module(f"{__name__}.{modules()[chapter_key(key)]}")
    found = [value for value in vars(module).values() if isinstance(value, Chapter)]
    if len(found) != 1:
        raise ValueError(f"{module.__name__} defines {len(found)} skeleton.Chapter objects; a chapter defines one")
    return found[0]


def all() -> dict[str, Chapter]:  # noqa: A001 (the course's chapters: `course_lib.chapters.all()`)
    """Every chapter, by key, in order (imports every chapter module: a few seconds)."""
    return {key: load(key) for key in modules()}


def chapter_key(chapter: str | int) -> str:
    """`"00"`, `0`, `"ch00"` -> `"ch00"`: the key of `tool_tasks()` and `results.MODULES`."""
    text = str(chapter).strip().lower().removeprefix("ch")
    if not text.isdigit():
        raise ValueError(f"not a chapter: {chapter!r}")
    return f"ch{int(text):02d}"


def tool_tasks() -> dict[str, ToolTask]:
    """The course's tool tasks by chapter (`"ch00"`, `"ch03"` ... `"ch06"`), as the chapters train on them."""
    # Imported here: the chapter modules import this package.
    from course_lib.chapters import ch00_tool_agent as ch00
    from course_lib.chapters import ch03_planner_r1 as ch03
    from course_lib.chapters import ch04_torl as ch04
    from course_lib.chapters import ch05_toolrl as ch05
    from course_lib.chapters import ch06_artist as ch06
    from course_lib.envs.function_calling import FunctionCallingEnv

    c03, c05, c06 = ch03.preset("cpu"), ch05.preset("cpu"), ch06.preset("cpu")
    return {
        "ch00": ToolTask(ch00.ENV_NAME, ch00.BASE_NAME, ch00.preset("cpu").sampling, ch00.make_env),
        "ch03": ToolTask(ch03.ENV_NAME, ch03.BASE_NAMES["small"], c03.sampling, lambda: ch03.make_env("train", c03)),
        "ch04": ToolTask(ch04.ENV_NAME, ch04.BASE_NAME, ch04.preset("cpu").sampling, lambda: ch04.make_env("train")),
        "ch05": ToolTask(
            "function_calling", ch05.BASE_NAME, c05.sampling, lambda: FunctionCallingEnv(mix=c05.task_mix)
        ),
        "ch06": ToolTask(ch06.ENV_NAME, ch06.BASE_NAME, c06.sampling, lambda: ch06.make_env("train", c06)),
    }
