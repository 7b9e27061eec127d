"""Blocksworld: the planning task of RAP (chapter 01) and LATS (chapter 02), symbolic and resettable.

Three to five blocks (`a` to `e`) stand in stacks on a table; one hand holds at most one block.
Four actions, as in the PDDL domain RAP uses: `pick-up x` (x clear, on the table, hand empty),
`put-down x` (holding x), `stack x y` (holding x, y clear) and `unstack x y` (x clear and on y,
hand empty). A goal is a full arrangement with the hand empty, so every optimal plan has an even
number of steps (2, 4 or 6 in the task sets).

States render as canonical word-level text: stacks bottom to top, separated by `|`, sorted by
their bottom block, then the hand, e.g. `a c | b | hand empty` (c stands on a, b on the table).
`parse_state` reads such text back and returns None for anything malformed or physically
impossible, so a learned world model's bad prediction becomes a failed node, never an exception.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections import deque
from functools import lru_cache
from typing import Any

from course_lib.envs import register
from course_lib.envs.base import InvalidAction, TextEnv

BLOCKS = ("a", "b", "c", "d", "e")
VERBS = ("pick-up", "put-down", "stack", "unstack")
WORDS = (*BLOCKS, *VERBS, "|", "hand", "empty", "goal", "state", "act", "next", "plan", "eval", "good", "bad")
FEEDBACK_WORDS = ("illegal", "malformed", "action")

# A state: (stacks, held). stacks is a sorted tuple of tuples (bottom to top); held is a block or None.
State = tuple[tuple[tuple[str, ...], ...], str | None]


def make_state(stacks, held: str | None = None) -> State:
    """The canonical state for `stacks` (iterables of blocks, bottom to top) and the held block."""
    return tuple(sorted(tuple(s) for s in stacks if s)), held


def render_state(state: State) -> str:
    stacks, held = state
    parts = [" ".join(stack) for stack in stacks]
    return " | ".join([*parts, f"hand {held or 'empty'}"])


def render_goal(goal: State) -> str:
    """A goal arrangement without the hand (goals always have it empty)."""
    return " | ".join(" ".join(stack) for stack in goal[0])


def parse_state(text: str, blocks: tuple[str, ...] | None = None) -> State | None:
    """The state written in `text`, or None if it is malformed (unknown words, a block twice, a
    missing block when `blocks` is given, a missing or doubled hand)."""
    if not isinstance(text, str):
        return None
    parts = [p.split() for p in text.split("|")]
    if not parts or len(parts[-1]) != 2 or parts[-1][0] != "hand":
        return None
    held = parts[-1][1]
    held = None if held == "empty" else held
    stacks = parts[:-1]
    seen = [b for s in stacks for b in s] + ([held] if held else [])
    if any(not s for s in stacks) or any(b not in BLOCKS for b in seen) or len(set(seen)) != len(seen):
        return None
    if blocks is not None and sorted(seen) != sorted(blocks):
        return None
    return make_state(stacks, held)


def parse_goal(text: str) -> State | None:
    return parse_state(f"{text} | hand empty")


def legal_actions(state: State) -> list[str]:
    """Every legal action in `state`, in a fixed order (RAP enumerates candidates this way)."""
    stacks, held = state
    if held is None:
        actions = []
        for stack in stacks:
            top = stack[-1]
            actions.append(f"pick-up {top}" if len(stack) == 1 else f"unstack {top} {stack[-2]}")
        return sorted(actions)
    return [f"put-down {held}", *sorted(f"stack {held} {stack[-1]}" for stack in stacks)]


def apply_action(state: State, action: str) -> State:
    """The successor of `state` under `action`; raises `InvalidAction` when it is malformed or illegal."""
    words = action.split() if isinstance(action, str) else []
    if not words or words[0] not in VERBS or any(w not in BLOCKS for w in words[1:]):
        raise InvalidAction("malformed action")
    verb, args = words[0], words[1:]
    if len(args) != (2 if verb in ("stack", "unstack") else 1):
        raise InvalidAction("malformed action")
    if " ".join(words) not in legal_actions(state):
        raise InvalidAction("illegal action")
    stacks, held = [list(s) for s in state[0]], state[1]
    if verb in ("pick-up", "unstack"):
        stack = next(s for s in stacks if s[-1] == args[0])
        stack.pop()
        return make_state(stacks, args[0])
    if verb == "put-down":
        return make_state([*stacks, [held]], None)
    next(s for s in stacks if s[-1] == args[1]).append(held)
    return make_state(stacks, None)


def supports(state: State) -> dict[str, str]:
    """What each block stands on (`table`, another block, or `hand`)."""
    stacks, held = state
    out = {held: "hand"} if held else {}
    for stack in stacks:
        for below, block in zip(("table", *stack), stack, strict=False):
            out[block] = below
    return out


def goal_fraction(state: State, goal: State) -> float:
    """Share of the goal's `x on y` facts (y a block or the table) that hold in `state` (RAP's heuristic)."""
    want, have = supports(goal), supports(state)
    return sum(have.get(b) == below for b, below in want.items()) / len(want)


def is_goal(state: State, goal: State) -> bool:
    return state == goal


@lru_cache(maxsize=8)
def all_arrangements(blocks: tuple[str, ...]) -> list[State]:
    """Every hand-empty arrangement of `blocks` (13 for 3 blocks, 73 for 4, 501 for 5)."""
    out = set()
    for order in itertools.permutations(blocks):
        for cuts in itertools.product((0, 1), repeat=len(blocks) - 1):
            stacks, current = [], [order[0]]
            for block, cut in zip(order[1:], cuts, strict=True):
                if cut:
                    stacks.append(current)
                    current = []
                current.append(block)
            stacks.append(current)
            out.add(make_state(stacks))
    return sorted(out)


@lru_cache(maxsize=4096)
def distances_to(goal: State) -> dict[State, int]:
    """Optimal plan length from every state (hand empty or not) to `goal`, by breadth-first search
    backwards (every action has an inverse, so forward and backward distances agree)."""
    dist, queue = {goal: 0}, deque([goal])
    while queue:
        state = queue.popleft()
        for nxt in successors(state).values():
            if nxt not in dist:
                dist[nxt] = dist[state] + 1
                queue.append(nxt)
    return dist


@lru_cache(maxsize=65536)
def successors(state: State) -> dict[str, State]:
    """Every legal action of `state` and the state it leads to."""
    return {action: apply_action(state, action) for action in legal_actions(state)}


def optimal_actions(state: State, goal: State) -> list[str]:
    """The legal actions on some optimal plan from `state` to `goal`."""
    dist = distances_to(goal)
    return [a for a, nxt in successors(state).items() if dist[nxt] == dist[state] - 1]


def optimal_path_states(init: State, goal: State) -> frozenset[State]:
    """Every state on some optimal plan from `init` to `goal`, `init` included and `goal` left out:
    the (state, goal) sub-problems a policy or a search faces while solving the problem. (A state s
    is on an optimal plan when d(init, s) + d(s, goal) = d(init, goal); every action has an inverse,
    so `distances_to(init)` gives d(init, s).)"""
    to_goal, from_init = distances_to(goal), distances_to(init)
    length = to_goal[init]
    return frozenset(s for s, d in from_init.items() if d < length and to_goal.get(s) == length - d)


def split_of(init: State, goal: State) -> str:
    """`train` or `test`, by a hash of the problem (about 25% of problems are held out)."""
    digest = hashlib.sha256(f"{render_state(init)} -> {render_goal(goal)}".encode()).digest()
    return "test" if digest[0] < 64 else "train"


def draw_problem(seed: int, split: str, length: int) -> tuple[State, State]:
    """A problem `(init, goal)` of `split` whose optimal plan has exactly `length` steps."""
    rng = random.Random(f"blocksworld-{split}-{length}-{seed}")
    while True:
        blocks = BLOCKS[: rng.choice((3, 4, 5))]
        arrangements = all_arrangements(blocks)
        goal = rng.choice(arrangements)
        dist = distances_to(goal)
        starts = [s for s in arrangements if dist[s] == length]
        if starts:
            init = rng.choice(starts)
            if split_of(init, goal) == split:
                return init, goal


def problem_text(state: State, goal: State) -> str:
    """The text a policy reads: the goal, then the current state."""
    return f"goal {render_goal(goal)} state {render_state(state)}"


class Blocksworld(TextEnv):
    """One Blocksworld problem per reset. Reward 1 on reaching the goal, `invalid_penalty` for a
    malformed or illegal action (the state does not change), 0 otherwise.

    `reset(seed)` draws problem `seed` of the split with optimal length `length`; passing
    `options={"init": text, "goal": text}` sets the problem directly. Observations are the state
    text; the goal is in `info["goal"]` and in the first observation's `problem` text.
    """

    invalid_penalty = -0.1

    def __init__(self, split: str = "train", length: int = 4, max_turns: int = 12):
        super().__init__()
        self.split, self.length, self.max_turns = split, length, max_turns
        self.state: State = make_state([])
        self.goal: State = make_state([])
        self.init: State = make_state([])

    def _reset(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if "init" in options:
            init, goal = parse_state(options["init"]), parse_goal(options["goal"])
            if init is None or goal is None or sorted(supports(init)) != sorted(supports(goal)):
                raise ValueError("options must hold a valid init state and goal over the same blocks")
        else:
            init, goal = draw_problem(seed, self.split, self.length)
        self.state, self.goal, self.init = init, goal, init
        return render_state(init), {"goal": render_goal(goal), "problem": problem_text(init, goal)}

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        self.state = apply_action(self.state, " ".join(action.split()))
        solved = is_goal(self.state, self.goal)
        info = {"success": solved, "goal_fraction": goal_fraction(self.state, self.goal)}
        return render_state(self.state), float(solved), solved, info

    def feedback(self, message: str) -> str:
        return f"<feedback> {message} </feedback>"

    def valid_action(self, rng: random.Random) -> str:
        """One of the legal actions of the current state."""
        return rng.choice(legal_actions(self.state))

    def reward_range(self) -> tuple[float, float]:
        """1 on success, 0 otherwise, or the invalid-action penalty."""
        return (min(self.invalid_penalty, 0.0), 1.0)

    def anchor(self) -> State:
        return self.state

    def problem_key(self) -> str:
        """The start state *and* the goal (the reset observation shows only the state)."""
        return problem_text(self.init, self.goal)


register("blocksworld", Blocksworld)
