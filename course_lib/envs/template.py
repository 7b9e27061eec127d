"""`number_line`: the environment to copy when you add your own (docs/extending.md walks through it).

The agent stands on a number line and must reach a goal: `<question> at 3 goal 9 </question>`, then one move per
turn, `<move> right </move>` or `<move> left </move>`, each answered by `<position> 4 </position>`. Reaching the
goal ends the episode with reward 1; running out of turns gives 0 (a sparse reward, as in the course's grid worlds).

Everything a course environment needs is here, each with the reason:
- `vocabulary()`: every word it can show or expect, so a word-level tokenizer can be built for it;
- a split by a hash of the problem, so the test problems are never trained on (`split_of`);
- `reset(seed)` deterministic per split and seed (`random.Random(f"{split}:{seed}")`), so a group of rollouts on
  one prompt replays one problem;
- `anchor()`: the true state as a hashable value, which GiGPO groups steps by;
- `problem_key()` (the default, the reset observation, names the whole problem here);
- `info["success"]` on the episode's last step: what held-out success counts;
- malformed actions raise `InvalidAction`, which the base class turns into feedback and `invalid_penalty`;
- `stop_tags`: what ends an action, so a chapter forked onto the environment stops its turns there;
- `valid_action(rng)`: an action valid now, so `check_env` can play whole episodes and check what `step` returns.
Check a copy with `envs.check_env(lambda split="train": YourEnv(split))` before training on it. An environment whose
reset text does not name the whole problem (a hidden goal) overrides `problem_key()`: docs/extending.md's does.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from course_lib.envs import register
from course_lib.envs.base import InvalidAction, TextEnv, extract_tag

LENGTH = 12
"""Positions 0..LENGTH."""
MOVES = {"left": -1, "right": 1}


def vocabulary() -> list[str]:
    """Every word the environment writes or reads, its own tags included (the course's tags are in every word-level
    tokenizer already: `course_lib.tokenizer.TAGS`)."""
    tags = ["<move>", "</move>", "<position>", "</position>"]
    return [str(n) for n in range(LENGTH + 1)] + ["at", "goal", *MOVES, "write", "or", *tags]


def split_of(start: int, goal: int, test_fraction: float = 0.2) -> str:
    """`test` for a fixed pseudo-random fifth of the (start, goal) pairs, else `train`."""
    digest = hashlib.sha256(f"number_line:{start}:{goal}".encode()).digest()
    return "test" if int.from_bytes(digest[:4], "big") < test_fraction * 2**32 else "train"


class NumberLineEnv(TextEnv):
    """Walk from `start` to `goal` one step per turn; reward 1 on arrival."""

    stop_tags = ("</move>",)

    max_turns = LENGTH + 2
    invalid_penalty = -0.1

    def __init__(self, split: str = "train"):
        super().__init__()
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        self.split = split
        self.position = self.goal = 0

    def _reset(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        rng = random.Random(f"{self.split}:{seed}")
        while True:
            start, goal = rng.randint(0, LENGTH), rng.randint(0, LENGTH)
            if start != goal and split_of(start, goal) == self.split:
                break
        self.position, self.goal = start, goal
        return f"<question> at {start} goal {goal} </question>", {"start": start, "goal": goal}

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        move = extract_tag(action, "move")
        if move not in MOVES:
            raise InvalidAction("write <move> left </move> or <move> right </move>")
        self.position = min(LENGTH, max(0, self.position + MOVES[move]))
        arrived = self.position == self.goal
        # `info["success"]` on the last step is what evaluation counts (`Trajectory.success`)
        return f"<position> {self.position} </position>", float(arrived), arrived, {"success": arrived}

    def valid_action(self, rng: random.Random) -> str:
        """A move left or right (`check_env` plays episodes of these)."""
        return f"<move> {rng.choice(list(MOVES))} </move>"

    def reward_range(self) -> tuple[float, float]:
        """1 on success, 0 otherwise, or the invalid-action penalty."""
        return (min(self.invalid_penalty, 0.0), 1.0)

    def anchor(self) -> tuple[int, int]:
        return (self.position, self.goal)


register("number_line", NumberLineEnv)
