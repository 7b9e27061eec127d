"""A chapter's training task as the course's tools train on it: `ToolTask` (its environment, base, sampling and
held-out seeds), given by a chapter's `skeleton.Chapter.task` and read by TRL, verl, the golden run and the
benchmarks; `held_out_on_test` makes its held-out seeds from a chapter's `test_seeds`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from course_lib.engine.rollout import SamplingConfig
    from course_lib.envs.base import TextEnv
    from course_lib.rl.train import GRPOConfig


@dataclass(frozen=True)
class ToolTask:
    """A chapter's training task as the integrations (TRL, verl), the golden run and the benchmarks train on it: its
    environment's name, its base model, its cpu-preset sampling limits and its environments. A chapter gives it as
    `skeleton.Chapter.task`; `tasks()` collects them."""

    label: str
    base: str
    sampling: SamplingConfig
    make_env: Callable[..., TextEnv]
    """`make_env()`: a new training environment, configured as the chapter trains; `make_env(split)`: one of
    another split (where `held_out` is given)."""
    held_out: Callable[[str, int], list[int]] | None = None
    """`held_out(split, count)`: the chapter's `count` distinct evaluation seeds of a held-out split (verl's export
    needs them); None where the task is trained only."""
    method: Callable[[], GRPOConfig] | None = None
    """The loop configuration of the chapter's own method (chapters 07 and 08: GiGPO, ARPO), which TRL's methods
    route trains; None: plain GRPO, which TRL's tool route trains."""
    method_name: str = ""
    """The name of that method (`"gigpo"`, `"arpo"`: a key of `integrations.trl_chapters.METHODS`)."""
    step_mode: bool = False
    """Whether the chapter trains in step mode (a prompt per step), which an agent loop over whole episodes
    (verl's) cannot play."""
    chapter: str = ""
    """The chapter key (`"ch00"`): set by `tasks()` and `task()`."""

    def held_out_seeds(self, split: str, count: int) -> list[int]:
        """`held_out(split, count)`, or a ValueError naming the chapter when it gives none."""
        if self.held_out is None:
            raise ValueError(f"chapter {self.chapter or self.label} names no held-out seeds for its task")
        return self.held_out(split, count)


def held_out_on_test(test_seeds: Callable[[int], list[int]], make_env: Callable[..., TextEnv]):
    """`held_out(split, count)` for a chapter that evaluates on `test`: its own (cached) `test_seeds(count)` there,
    and the same rule, the first `count` seeds with distinct problems, for any other held-out split."""

    def held_out(split: str, count: int) -> list[int]:
        from course_lib.envs.base import distinct_seeds

        return test_seeds(count) if split == "test" else distinct_seeds(lambda: make_env(split), count)

    return held_out
