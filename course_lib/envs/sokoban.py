"""`sokoban`: a 6x6 room with one box and one target, one reasoned move per turn (chapters 09-10, RAGEN).

RAGEN's SimpleSokoban is a 6x6 room with one box and at most 10 actions, rewarded as gym-sokoban's defaults:
-0.1 per step, +1 when the box is pushed onto the target, -1 when it is pushed off, +10 when the puzzle is solved
(so the solving push earns -0.1 + 1 + 10; with one box, solving ends the episode, so the box is never pushed off
its target and the -1 never arises). Here the room's border is wall and its 4x4 interior is floor; a puzzle
is a player cell, a box cell and a target cell that `solve` can finish within `max_turns` (10) moves, the box not
on its target. The observation names the cells in words: `you r3 c2 box r3 c3 target r3 c5`. Each turn is
`<think> ... </think> <answer> MOVE </answer>` (`envs.reasoning`); moving into a wall, or pushing the box into a
wall, leaves everything in place (a wasted step, -0.1); a broken format gets the -0.1 format penalty and feedback.
Pushing the box into a corner that is not the target makes the puzzle unsolvable: the episode goes on until
`max_turns`, as in gym-sokoban. Puzzles are split into train and held-out test by a hash (`split_of`).
`expert_move` is the first move of a shortest solution from the current state (breadth-first search).
"""

from __future__ import annotations

import hashlib
import random
from collections import deque
from typing import Any

from course_lib.envs import register
from course_lib.envs.base import InvalidAction, TextEnv
from course_lib.envs.reasoning import FEEDBACK_WORDS, FORMAT_PENALTY, parse_turn, turn_text

SIZE = 6
MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
STEP_PENALTY, ON_TARGET, SOLVED = -0.1, 1.0, 10.0
WORDS = ("you", "box", "target", "solved", "go", *MOVES)

Cell = tuple[int, int]
Puzzle = tuple[Cell, Cell, Cell]
"""(player, box, target), cells (row, col) from 0; the interior is rows and columns 1-4."""


def vocabulary() -> list[str]:
    """Every word this environment emits or accepts, besides the tokenizer's tags."""
    return [*FEEDBACK_WORDS, *WORDS, *(f"r{i + 1}" for i in range(SIZE)), *(f"c{i + 1}" for i in range(SIZE))]


def cell_words(cell: Cell) -> str:
    return f"r{cell[0] + 1} c{cell[1] + 1}"


def floor(cell: Cell) -> bool:
    return 1 <= cell[0] <= SIZE - 2 and 1 <= cell[1] <= SIZE - 2


def push(player: Cell, box: Cell, move: str) -> tuple[Cell, Cell]:
    """The (player, box) after `move`: a step onto floor, a push of the box if the cell behind it is floor, or
    nothing."""
    dr, dc = MOVES[move]
    ahead = (player[0] + dr, player[1] + dc)
    if not floor(ahead):
        return player, box
    if ahead != box:
        return ahead, box
    behind = (box[0] + dr, box[1] + dc)
    return (ahead, behind) if floor(behind) else (player, box)


def solve(player: Cell, box: Cell, target: Cell, limit: int = 10) -> list[str] | None:
    """A shortest move sequence that puts the box on the target within `limit` moves, or None."""
    previous: dict[tuple[Cell, Cell], tuple[tuple[Cell, Cell], str] | None] = {(player, box): None}
    queue = deque([((player, box), 0)])
    while queue:
        state, depth = queue.popleft()
        if state[1] == target:
            moves = []
            while previous[state] is not None:
                state, move = previous[state]
                moves.append(move)
            return moves[::-1]
        if depth == limit:
            continue
        for move in MOVES:
            nxt = push(*state, move)
            if nxt not in previous:
                previous[nxt] = (state, move)
                queue.append((nxt, depth + 1))
    return None


def split_of(puzzle: Puzzle, test_fraction: float = 0.2) -> str:
    """`train` or `test` by a hash of the puzzle."""
    digest = hashlib.sha256(repr(puzzle).encode()).digest()
    return "test" if int.from_bytes(digest[:4], "big") / 2**32 < test_fraction else "train"


def random_puzzle(rng: random.Random, limit: int = 10) -> Puzzle:
    """Player, box and target on distinct interior cells, solvable within `limit` moves."""
    cells = [(r, c) for r in range(1, SIZE - 1) for c in range(1, SIZE - 1)]
    while True:
        player, box, target = rng.sample(cells, 3)
        if solve(player, box, target, limit) is not None:
            return player, box, target


class SokobanEnv(TextEnv):
    """See the module docstring."""

    stop_tags = ("</answer>",)

    invalid_penalty = FORMAT_PENALTY

    def __init__(self, split: str = "train", max_turns: int = 10, max_think_words: int = 8) -> None:
        super().__init__()
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        self.split, self.max_turns, self.max_think_words = split, max_turns, max_think_words
        self.puzzle: Puzzle = ((1, 1), (2, 2), (3, 3))
        self.player, self.box = self.puzzle[0], self.puzzle[1]

    def _reset(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        draws = random.Random(seed)
        while True:
            puzzle = random_puzzle(draws, self.max_turns)
            if split_of(puzzle) == self.split:
                break
        self.puzzle = puzzle
        self.player, self.box = puzzle[0], puzzle[1]
        return self.observation(), {"success": False}

    def observation(self) -> str:
        return f"you {cell_words(self.player)} box {cell_words(self.box)} target {cell_words(self.puzzle[2])}"

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        _, move = parse_turn(action, self.max_think_words)
        if move not in MOVES:
            raise InvalidAction("answer up down left or right")
        self.player, self.box = push(self.player, self.box, move)
        if self.box == self.puzzle[2]:  # one box: on its target is solved, and the episode ends
            return "solved", STEP_PENALTY + ON_TARGET + SOLVED, True, {"success": True}
        return self.observation(), STEP_PENALTY, False, {"success": False}

    def valid_action(self, rng: random.Random) -> str:
        """One of the four moves, in the reasoning-then-answer format."""
        return turn_text([], rng.choice(list(MOVES)))

    def reward_range(self) -> tuple[float, float]:
        """A step's -0.1 (or the format penalty), up to the solving push's -0.1 + 1 + 10."""
        return (min(STEP_PENALTY, self.invalid_penalty), STEP_PENALTY + ON_TARGET + SOLVED)

    def anchor(self) -> tuple:
        return (self.puzzle, self.player, self.box)

    def problem_key(self) -> Puzzle:
        return self.puzzle


def expert_move(env: SokobanEnv) -> str:
    """The first move of a shortest solution from the current state."""
    moves = solve(env.player, env.box, env.puzzle[2], limit=env.max_turns)
    if not moves:
        raise ValueError("no move: the puzzle is solved or cannot be solved from here")
    return moves[0]


def reasoning(env: SokobanEnv, move: str) -> list[str]:
    """A demonstrator's reasoning before `move`: the player's and the box's cells and the move
    (`you r2 c3 box r3 c3 go down`, 8 words)."""
    return ["you", *cell_words(env.player).split(), "box", *cell_words(env.box).split(), "go", move]


register("sokoban", SokobanEnv)
