"""Per-chapter configuration and glue: one module per chapter, named after its notebook."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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
