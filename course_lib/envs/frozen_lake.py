"""`frozen_lake`: a slippery 4x4 lake with holes, one reasoned move per turn (chapters 09-10, RAGEN).

RAGEN's FrozenLake is gymnasium's: a random 4x4 map (each tile frozen with probability 0.8), a start, a goal, holes
that end the episode, and slippery ice. A map here is a start, a goal and 1-4 holes on a 4x4 grid with a hole-free
path of at most 6 moves from start to goal (`random_map`). The observation names every cell in words, never digits
to copy: `you r1 c2 goal r4 c3 holes r2 c2 r3 c1`. Each turn is `<think> ... </think> <answer> MOVE </answer>`
(`envs.reasoning`; moves `up`, `down`, `left`, `right`). The ice is slippery: the intended move happens with
probability `intended_probability` (0.8), and each perpendicular move with half the rest. Gymnasium's slippery lake
moves as intended only a third of the time; at that rate a tiny policy's success is mostly luck, so the course uses
0.8 and says so. A move into the edge leaves the agent in place.

Reward 1 on reaching the goal (`info["success"]`), 0 otherwise; falling into a hole ends the episode with 0; a
broken format gets RAGEN's -0.1 and feedback, and costs a turn. At most `max_turns` (8) turns.

Maps are split into train and held-out test by a hash of their *layout*, the goal and the holes (`split_of`),
about a fifth of the layouts held out. Not by a hash of the whole map: the observation leaves the start out, so a
training map with a held-out map's goal and holes shows every state of it, the held-out start too (split by map,
22 of chapter 09's 128 held-out first prompts and 426 of their 1,601 state observations were in the base's
demonstrations). Split by layout, no observation of a held-out map occurs on any training map.

`expert_move` is a shortest-path move from the current cell (breadth-first search around the holes), used for
warm-start demonstrations.
"""

from __future__ import annotations

import hashlib
import random
from collections import deque
from typing import Any

from course_lib.envs import register
from course_lib.envs.base import InvalidAction, TextEnv
from course_lib.envs.reasoning import FEEDBACK_WORDS, FORMAT_PENALTY, parse_turn, turn_text

SIZE = 4
MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
PERPENDICULAR = {"up": ("left", "right"), "down": ("left", "right"), "left": ("up", "down"), "right": ("up", "down")}
WORDS = ("you", "goal", "holes", "fell", "reached", "go", *MOVES)

Cell = tuple[int, int]
Map = tuple[Cell, Cell, tuple[Cell, ...]]
"""(start, goal, holes), cells (row, col) from 0."""


def vocabulary() -> list[str]:
    """Every word this environment emits or accepts, besides the tokenizer's tags."""
    return [*FEEDBACK_WORDS, *WORDS, *(f"r{i + 1}" for i in range(SIZE)), *(f"c{i + 1}" for i in range(SIZE))]


def cell_words(cell: Cell) -> str:
    return f"r{cell[0] + 1} c{cell[1] + 1}"


def layout(lake: Map) -> tuple[Cell, tuple[Cell, ...]]:
    """(goal, holes): everything an observation shows of the map, which leaves the start out."""
    return lake[1], lake[2]


def observation_text(lake: Map, position: Cell) -> str:
    """What the agent sees on `lake` at `position`: its cell, the goal and the holes."""
    goal, holes = layout(lake)
    return f"you {cell_words(position)} goal {cell_words(goal)} holes " + " ".join(map(cell_words, holes))


def shortest_path(start: Cell, goal: Cell, holes: tuple[Cell, ...]) -> list[Cell] | None:
    """Cells of a shortest hole-free path from start to goal (both included), or None."""
    previous: dict[Cell, Cell | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            path = [cell]
            while previous[path[-1]] is not None:
                path.append(previous[path[-1]])
            return path[::-1]
        for dr, dc in MOVES.values():
            nxt = (cell[0] + dr, cell[1] + dc)
            if 0 <= nxt[0] < SIZE and 0 <= nxt[1] < SIZE and nxt not in holes and nxt not in previous:
                previous[nxt] = cell
                queue.append(nxt)
    return None


def random_map(rng: random.Random, longest: int = 6) -> Map:
    """A start, a goal at least 3 moves away and 1-4 holes, with a hole-free path between them of at most
    `longest` moves (so that an episode of 8 turns has room for a slip or two)."""
    cells = [(r, c) for r in range(SIZE) for c in range(SIZE)]
    while True:
        start, goal = rng.sample(cells, 2)
        if abs(start[0] - goal[0]) + abs(start[1] - goal[1]) < 3:
            continue
        others = [cell for cell in cells if cell not in (start, goal)]
        holes = tuple(sorted(rng.sample(others, rng.randint(1, 4))))
        path = shortest_path(start, goal, holes)
        if path is not None and len(path) - 1 <= longest:
            return start, goal, holes


def split_of(lake: Map, test_fraction: float = 0.2) -> str:
    """`train` or `test` by a hash of the map's layout (goal, holes), never of its start: maps that differ only by
    their start show the same states, so they must fall in the same split (see the module docstring)."""
    digest = hashlib.sha256(f"frozen_lake:{layout(lake)!r}".encode()).digest()
    return "test" if int.from_bytes(digest[:4], "big") / 2**32 < test_fraction else "train"


class FrozenLakeEnv(TextEnv):
    """See the module docstring."""

    stop_tags = ("</answer>",)

    invalid_penalty = FORMAT_PENALTY

    def __init__(
        self, split: str = "train", intended_probability: float = 0.8, max_turns: int = 8, max_think_words: int = 8
    ) -> None:
        super().__init__()
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        self.split, self.intended_probability = split, intended_probability
        self.max_turns, self.max_think_words = max_turns, max_think_words
        self.lake: Map = ((0, 0), (0, 0), ())
        self.position: Cell = (0, 0)
        self.rng = random.Random(0)

    def _reset(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        draws = random.Random(seed)
        while True:  # maps are drawn until one of the split comes up (a fifth are test maps)
            lake = random_map(draws)
            if split_of(lake) == self.split:
                break
        self.lake, self.position = lake, lake[0]
        self.rng = random.Random(seed * 7919 + 1)
        return self.observation(), {"success": False}

    def observation(self) -> str:
        return observation_text(self.lake, self.position)

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        _, move = parse_turn(action, self.max_think_words)
        if move not in MOVES:
            raise InvalidAction("answer up down left or right")
        roll = self.rng.random()
        if roll >= self.intended_probability:
            side = PERPENDICULAR[move]
            move = side[0] if roll < self.intended_probability + (1 - self.intended_probability) / 2 else side[1]
        dr, dc = MOVES[move]
        row, col = self.position[0] + dr, self.position[1] + dc
        if 0 <= row < SIZE and 0 <= col < SIZE:
            self.position = (row, col)
        _, goal, holes = self.lake
        if self.position == goal:
            return "reached goal", 1.0, True, {"success": True, "moved": move}
        if self.position in holes:
            return "fell", 0.0, True, {"success": False, "moved": move}
        return self.observation(), 0.0, False, {"success": False, "moved": move}

    def valid_action(self, rng: random.Random) -> str:
        """One of the four moves, in the reasoning-then-answer format."""
        return turn_text([], rng.choice(list(MOVES)))

    def reward_range(self) -> tuple[float, float]:
        """1 on success, 0 otherwise, or the invalid-action penalty."""
        return (min(self.invalid_penalty, 0.0), 1.0)

    def anchor(self) -> tuple:
        return (self.lake, self.position)

    def problem_key(self) -> Map:
        return self.lake


def expert_move(env: FrozenLakeEnv) -> str:
    """The first move of a shortest hole-free path from the agent's cell to the goal."""
    _, goal, holes = env.lake
    path = shortest_path(env.position, goal, holes)
    if path is None or len(path) < 2:
        raise ValueError("no move: the agent is at the goal or cut off from it")
    step = (path[1][0] - path[0][0], path[1][1] - path[0][1])
    return next(name for name, delta in MOVES.items() if delta == step)


def reasoning(env: FrozenLakeEnv, move: str) -> list[str]:
    """A demonstrator's reasoning before `move`: where the agent is and where it goes (`you r2 c3 go down`)."""
    return ["you", *cell_words(env.position).split(), "go", move]


register("frozen_lake", FrozenLakeEnv)
