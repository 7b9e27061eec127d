"""`key_door`: a two-room grid world with a key and a locked door, for step-level credit (chapter 07, GiGPO).

A `size` x `size` grid (6 to 8) is split by a vertical interior wall at column `size // 2` into a
left and a right room, joined by ONE door cell in the wall whose row varies per task. The agent
starts in the left room, where the key lies; the goal is in the right room. So every solution has
the same shape (walk to the key, `pickup`, walk next to the door, `open`, walk through to the
goal), and the steps that matter are few among many that do not: what GiGPO's step-level groups
are for. A task is (start cell, key cell, door row, goal cell), drawn from the seed; with 6x6 there
are 22,032 tasks, split into train and held-out test by a hash of the task's *layout* (door row,
goal cell; `split_of`). Splitting by layout and not by task keeps every held-out observation out of
training: once the key is held the observation shows only the agent, the door and the goal, so a
split by whole task would let a training task with the same door and goal (and another start or
key) show a held-out task's later states, its sub-problems.

Actions are the words `up`, `down`, `left`, `right`, `pickup`, `open`. The tags `<action>` and
`</action>` may surround the word and are ignored; anything else (empty text, several words, an
unknown word) is invalid: the observation is feedback followed by the unchanged state, the reward
is 0, `info["valid"]` is False, and the step still counts toward `max_steps`. The reward is 0, not
a penalty, on purpose: the training loop applies GiGPO's invalid-action penalty (0.1, as
verl-agent does), so the env's `invalid_penalty` is 0.0.

Like gym grid worlds, valid actions that achieve nothing are no-ops, not errors: moving into an
edge, the wall or the closed door; `pickup` away from the key (or with it in hand); `open` without
the key or when not orthogonally adjacent to the door. They only waste steps, which RL must learn
to avoid. The agent may step onto the door cell once it is open. Reaching the goal ends the episode
with reward 1 and `info["success"]` True; otherwise the reward is 0 and the episode is truncated
after `max_steps` steps (default 30). Optimal plans on 6x6 take 12.4 steps on average and 24 at
most (28 on 7x7, 33 on 8x8, so raise `max_steps` for 8x8).

Observations are word-level (cells are `r3 c4`, never digits to copy), one of three `view`s:

- `full`: `at r2 c1 key r4 c0 door r3 goal r5 c5 holding none door closed` (after `pickup`:
  `key held` and `holding key`; after `open`: `door open`);
- `aliased`: the same without the inventory and door-state words, and the key always shown where it
  lay at reset, so different true states (key in hand or not, door open or not) share one text;
- `noisy`: the full text plus two nonce words, `n<i>` for the environment's `noise_id` and `n<k>` for
  the observation's index in the episode (both modulo 64), the stand-in for the session ids and
  timestamps that make real observations (web pages) unique: the words carry nothing about the task,
  and no two observations of a batch of up to 64 environments (distinct `noise_id`s) and 64 steps
  share a text, so an observation never repeats.

`anchor()` is the true state `(row, col, has_key, door_open)`; `observation_key()` is the exact
observation text last emitted, the raw-observation anchor verl-agent groups by. `expert_action`
and `shortest_plan_length` plan by breadth-first search from the current true state (warm-start
demonstrations, tests); `render` draws the grid. `vocabulary()` lists every word the env emits or
accepts; `<action>` and `</action>` are not tags of `course_lib.tokenizer`, so they are listed
there as ordinary words (`<feedback>` tags are tokenizer tags and are left out).
"""

from __future__ import annotations

import hashlib
import random
from collections import deque
from functools import lru_cache
from typing import Any

from course_lib.envs import register
from course_lib.envs.base import Dialogue, TextEnv

SIZES = (6, 7, 8)
VIEWS = ("full", "aliased", "noisy")
ACTIONS = ("up", "down", "left", "right", "pickup", "open")
ACTION_TAGS = ("<action>", "</action>")
NOISE_WORDS = tuple(f"n{i}" for i in range(64))
STATE_WORDS = ("at", "key", "door", "goal", "holding", "none", "held", "closed", "open")
FEEDBACK_WORDS = ("invalid", "action")
MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}

Cell = tuple[int, int]
Task = tuple[Cell, Cell, int, Cell]
"""(start cell, key cell, door row, goal cell); cells are (row, col)."""
State = tuple[int, int, bool, bool]
"""(agent row, agent col, has_key, door_open): the true state, and the anchor."""


def vocabulary() -> list[str]:
    """Every word this environment emits or accepts, besides the tokenizer's tags (`<action>` and
    `</action>` are not tokenizer tags, so they are listed as ordinary words)."""
    cells = [f"r{i}" for i in range(max(SIZES))] + [f"c{i}" for i in range(max(SIZES))]
    words = [*STATE_WORDS, *cells, *ACTIONS, *ACTION_TAGS, *FEEDBACK_WORDS, *NOISE_WORDS]
    return list(dict.fromkeys(words))  # "open" is both a state word and an action


def wall_col(size: int) -> int:
    return size // 2


def door_cell(task: Task, size: int) -> Cell:
    return task[2], wall_col(size)


def left_cells(size: int) -> list[Cell]:
    return [(r, c) for r in range(size) for c in range(wall_col(size))]


def right_cells(size: int) -> list[Cell]:
    return [(r, c) for r in range(size) for c in range(wall_col(size) + 1, size)]


def all_tasks(size: int = 6) -> list[Task]:
    """Every task of a grid (the key never lies under the start): 22,032 for 6x6."""
    return [
        (start, key, door, goal)
        for start in left_cells(size)
        for key in left_cells(size)
        if key != start
        for door in range(size)
        for goal in right_cells(size)
    ]


def check_task(task: Task, size: int) -> None:
    """Raise ValueError unless `task` is a task of a `size` grid."""
    start, key, door, goal = task
    left = left_cells(size)
    if start not in left or key not in left or key == start or not 0 <= door < size or goal not in right_cells(size):
        raise ValueError(f"not a task of a {size}x{size} grid: {task!r}")


def split_of(task: Task, size: int = 6, test_fraction: float = 0.2) -> str:
    """`test` for the tasks of a fixed pseudo-random fifth of the layouts (door row, goal cell), else
    `train` (see the module docstring for why the layout and not the task)."""
    digest = hashlib.sha256(f"key_door:{size}:{task[2]}:{task[3]}".encode()).digest()
    return "test" if int.from_bytes(digest[:4], "big") < test_fraction * 2**32 else "train"


def draw_task(seed: int, split: str, size: int = 6) -> Task:
    """The task of `split` for `seed` (deterministic; uniform over the split's tasks)."""
    rng = random.Random(f"key_door-{size}-{split}-{seed}")
    left, right = left_cells(size), right_cells(size)
    while True:
        start, key = rng.sample(left, 2)
        task = (start, key, rng.randrange(size), rng.choice(right))
        if split_of(task, size) == split:
            return task


def transition(task: Task, size: int, state: State, action: str) -> State:
    """The state after valid `action` (a no-op leaves `state` as it is)."""
    row, col, has_key, door_open = state
    door = door_cell(task, size)
    if action in MOVES:
        r, c = row + MOVES[action][0], col + MOVES[action][1]
        inside = 0 <= r < size and 0 <= c < size
        # The wall column is solid except the door cell, which is passable only when open.
        blocked = not inside or (c == wall_col(size) and ((r, c) != door or not door_open))
        return state if blocked else (r, c, has_key, door_open)
    if action == "pickup":
        return (row, col, True, door_open) if (row, col) == task[1] else state
    if action == "open":
        adjacent = abs(row - door[0]) + abs(col - door[1]) == 1
        return (row, col, has_key, True) if has_key and adjacent else state
    raise ValueError(f"unknown action {action!r}")


@lru_cache(maxsize=65536)
def shortest_plan(task: Task, size: int, state: State) -> tuple[str, ...]:
    """A shortest action sequence from `state` to the goal, by breadth-first search over true states.
    Ties go to the earlier action of `ACTIONS` at the earliest step (deterministic)."""
    parents: dict[State, tuple[State, str] | None] = {state: None}
    queue = deque([state])
    while queue:
        current = queue.popleft()
        if current[:2] == task[3]:
            plan = []
            while parents[current] is not None:
                current, action = parents[current]
                plan.append(action)
            return tuple(reversed(plan))
        for action in ACTIONS:
            nxt = transition(task, size, current, action)
            if nxt not in parents:
                parents[nxt] = (current, action)
                queue.append(nxt)
    raise ValueError(f"goal unreachable from {state!r} in task {task!r}")  # cannot happen for a valid task


def optimal_actions(env: KeyDoorEnv) -> list[str]:
    """Every action that starts a shortest plan from the env's current true state, in `ACTIONS` order."""
    task, size, state = env.task, env.size, env.anchor()
    remaining = len(shortest_plan(task, size, state))
    if not remaining:
        raise ValueError("the agent is already on the goal")
    return [a for a in ACTIONS if len(shortest_plan(task, size, transition(task, size, state, a))) == remaining - 1]


def expert_action(env: KeyDoorEnv) -> str:
    """The first of `optimal_actions` (up before down before left before right): a tie-break a small
    model can learn (move vertically while that is on a shortest path), unlike the search's own order."""
    return optimal_actions(env)[0]


def shortest_plan_length(env: KeyDoorEnv) -> int:
    """The number of actions of a shortest plan from the env's current true state to the goal."""
    return len(shortest_plan(env.task, env.size, env.anchor()))


def render(env: KeyDoorEnv) -> str:
    """The grid as ASCII lines: `#` wall, `D`/`d` closed/open door, `K` key (until picked up), `G`
    goal, `A` agent, `.` floor."""
    row, col, has_key, door_open = env.anchor()
    (_, key, _, goal), size = env.task, env.size
    grid = [["#" if c == wall_col(size) else "." for c in range(size)] for _ in range(size)]
    door = door_cell(env.task, size)
    grid[door[0]][door[1]] = "d" if door_open else "D"
    grid[goal[0]][goal[1]] = "G"
    if not has_key:
        grid[key[0]][key[1]] = "K"
    grid[row][col] = "A"
    return "\n".join("".join(line) for line in grid)


class KeyDoorEnv(TextEnv):
    """One key-and-door task per reset (see the module docstring for rules, views and rewards).

    `reset(seed)` draws task `seed` of the split; `options={"task": task}` sets the task directly.
    """

    stop_tags = ("</action>",)

    invalid_penalty = 0.0  # the training loop applies GiGPO's penalty, not the env

    def __init__(self, split: str = "train", size: int = 6, view: str = "full", max_steps: int = 30, noise_id: int = 0):
        super().__init__()
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        if size not in SIZES:
            raise ValueError(f"size must be one of {SIZES}, got {size!r}")
        if view not in VIEWS:
            raise ValueError(f"view must be one of {VIEWS}, got {view!r}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.split, self.size, self.view = split, size, view
        self.max_steps = self.max_turns = max_steps
        self.task: Task = draw_task(0, split, size)
        self.state: State = (*self.task[0], False, False)
        self.noise_id = noise_id
        self._emitted = 0

    def _reset(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if "task" in options:
            (sr, sc), (kr, kc), door, (gr, gc) = options["task"]
            task: Task = ((int(sr), int(sc)), (int(kr), int(kc)), int(door), (int(gr), int(gc)))
            check_task(task, self.size)
        else:
            task = draw_task(seed, self.split, self.size)
        self.task = task
        self.state = (*task[0], False, False)
        self._emitted = 0
        return self._observe(), {"task": task, "success": False}

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        words = [w for w in action.split() if w not in ACTION_TAGS]
        if len(words) != 1 or words[0] not in ACTIONS:
            # Returned rather than raised as InvalidAction so that info carries `success` like every step.
            info = {"valid": False, "error": "invalid action", "success": False}
            return self.feedback(info["error"]), self.invalid_penalty, False, info
        self.state = transition(self.task, self.size, self.state, words[0])
        success = self.state[:2] == self.task[3]
        return self._observe(), float(success), success, {"success": success, "action": words[0]}

    def feedback(self, message: str) -> str:
        """Feedback, then the unchanged state: a step-mode policy sees only the latest observation."""
        return f"<feedback> {message} </feedback> {self._observe()}"

    def _observe(self) -> str:
        """The observation text of the current state in this env's view (with the nonce words if noisy)."""
        row, col, has_key, door_open = self.state
        (_, (kr, kc), door, (gr, gc)) = self.task
        # The aliased view always shows the key where it lay at reset, so it cannot tell whether it is held.
        key = "key held" if has_key and self.view != "aliased" else f"key r{kr} c{kc}"
        text = f"at r{row} c{col} {key} door r{door} goal r{gr} c{gc}"
        if self.view != "aliased":
            text += f" holding {'key' if has_key else 'none'} door {'open' if door_open else 'closed'}"
        if self.view == "noisy":
            count = len(NOISE_WORDS)
            text += f" {NOISE_WORDS[self.noise_id % count]} {NOISE_WORDS[self._emitted % count]}"
        self._emitted += 1
        return text

    def valid_action(self, rng: random.Random) -> str:
        """One of `ACTIONS` and the stop tag, as a step-mode policy writes it."""
        return f"{rng.choice(ACTIONS)} {ACTION_TAGS[1]}"

    def reward_range(self) -> tuple[float, float]:
        """1 on success, 0 otherwise, or the invalid-action penalty."""
        return (min(self.invalid_penalty, 0.0), 1.0)

    def anchor(self) -> State:
        return self.state

    def observation_key(self) -> str:
        """The exact observation text last emitted (verl-agent's anchor: the raw observation)."""
        if not self.transcript.observations:
            raise RuntimeError("observation_key() called before reset()")
        return self.transcript.observations[-1]

    def problem_key(self) -> Task:
        """The task: the aliased and noisy reset texts do not identify it as the full view does."""
        return self.task


register("key_door", KeyDoorEnv)


def demonstrator_episodes(
    task_seeds: list[int], seed: int, size: int, max_steps: int, noise: float, stop: str
) -> list[Dialogue]:
    """Chapter 07's noisy expert played on the training tasks `task_seeds` (deterministic for `seed`): at each step a
    uniformly random action with probability `noise`, else `expert_action`'s, each written with the stop tag `stop`;
    each observation after it is a `user` turn."""
    rng, env, episodes = random.Random(seed), KeyDoorEnv(split="train", size=size, max_steps=max_steps), []
    for task_seed in task_seeds:
        observation, _ = env.reset(seed=task_seed)
        episode = [("user", observation)]
        while not env.done:
            action = rng.choice(ACTIONS) if rng.random() < noise else expert_action(env)
            observation, *_ = env.step(f"{action} {stop}")
            episode += [("assistant", f"{action} {stop}"), ("user", observation)]
        episodes.append(episode)
    return episodes
