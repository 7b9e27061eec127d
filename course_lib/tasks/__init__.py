"""The tasks several chapters share, below the chapters: a task's environment and split, its settings, its
demonstrator and its held-out evaluator, so that a chapter module holds only its story (config, arms, run, claims,
report) and no chapter imports another.

- `tool_task`: `ToolTask`, a chapter's training task as the course's tools train on it, and `held_out_on_test`.
- `bases`: the bases' glue (task splits, warm-started bases, `base_for`, `on_environment`, `held_out_seeds`).
- the tasks: `tool_arithmetic` (chapter 00's), `blocks_planning` (01's), `key_door_grid` (07's), `two_hop_search`
  (08's), `lake_reasoning` (09's).
"""

from __future__ import annotations

from collections.abc import Callable

from course_lib.envs.base import Dialogue


def demonstrators() -> dict[str, Callable[[int, int], list[Dialogue]]]:
    """Task -> `(count, seed) -> episodes` of its warm start's demonstrator played in its training environment, as
    chat messages: the text the stand-ins' tokenizer is trained on (`course.standins`), in this fixed order (chapters
    00, 07 and 08's tasks), so that the tokenizer does not change when a task is added."""
    from course_lib.tasks import key_door_grid, tool_arithmetic, two_hop_search

    return {
        "tool_arithmetic": tool_arithmetic.demonstrator_episodes,
        "key_door_grid": key_door_grid.demonstrator_episodes,
        "two_hop_search": two_hop_search.demonstrator_episodes,
    }
