"""The text-environment interface every chapter uses (Gymnasium-style, text in and text out).

`reset(seed) -> (obs, info)` and `step(action) -> (obs, reward, terminated, truncated, info)`.
`info["valid"]` (also `info["is_action_valid"]`, as GEM and SkyRL-gym name it) says whether the action parsed and
was legal; `info["success"]` on an episode's last step is what evaluation counts (`Trajectory.success`);
`fork()` copies the environment mid-episode for tree rollouts; `info["anchor"]` is a hashable key
of the true state (GiGPO groups steps by it). A malformed or illegal action never raises: it gets
feedback text and `invalid_penalty`. Each environment keeps a `transcript` of every action it
received and every observation it returned, so tests can check the token-level bookkeeping of a
rollout against what the environment really saw.

`training_step` is the index of the training iteration an episode belongs to. `train.train_grpo`
sets it on every training environment before each rollout, so a reward that follows a schedule
(ToolRL's reward scales, Planner-R1's curriculum) reads it instead of counting resets itself.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

MAX_ACTION_CHARS = 4_000


@dataclass
class Transcript:
    """What the environment returned (`observations[0]` is the reset text) and received."""

    observations: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)


class TextEnv:
    """Base class: subclasses implement `_reset(seed, options)` and `_step(action)`.

    The public `reset`/`step` wrap them to validate input, record the transcript, enforce the turn
    limit, and turn any exception in a subclass's parsing into an invalid action.
    """

    max_turns: int = 4
    invalid_penalty: float = -0.1

    def __init__(self) -> None:
        self.transcript = Transcript()
        self.turn = 0
        self.done = False
        self.training_step = 0

    # Subclass interface -------------------------------------------------------------------
    def _reset(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        """Return `(observation, reward, terminated, info)`; raise `InvalidAction` for bad input."""
        raise NotImplementedError

    def anchor(self) -> Any:
        """A hashable key of the current true state."""
        raise NotImplementedError

    def fork(self) -> TextEnv:
        """An independent copy in the same state, to continue from here on another branch (tree rollouts, MCTS).
        A deep copy by default; an environment holding something that cannot be copied (a process, a connection)
        overrides it."""
        return copy.deepcopy(self)

    def problem_key(self) -> Hashable:
        """The identity of the problem of the current episode: two resets with the same key pose the
        same problem. The reset observation by default; an environment whose first observation does
        not name the whole problem (Blocksworld shows the state, not the goal) overrides it."""
        if not self.transcript.observations:
            raise RuntimeError("problem_key() called before reset()")
        return self.transcript.observations[0]

    # Public API -----------------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self.transcript = Transcript()
        self.turn = 0
        self.done = False
        obs, info = self._reset(0 if seed is None else int(seed), dict(options or {}))
        info.setdefault("anchor", self.anchor())
        self.transcript.observations.append(obs)
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.done:
            raise RuntimeError("step() called after the episode ended; call reset() first")
        if not isinstance(action, str):
            action = ""
        action = action[:MAX_ACTION_CHARS]
        self.turn += 1
        try:
            obs, reward, terminated, info = self._step(action)
            info.setdefault("valid", True)
        except InvalidAction as bad:
            obs, reward, terminated = self.feedback(str(bad)), self.invalid_penalty, False
            info = {"valid": False, "error": str(bad)}
        truncated = not terminated and self.turn >= self.max_turns
        self.done = terminated or truncated
        info["is_action_valid"] = info["valid"]  # the name GEM and SkyRL-gym give it
        info.setdefault("anchor", self.anchor())
        self.transcript.actions.append(action)
        self.transcript.observations.append(obs)
        return obs, float(reward), terminated, truncated, info

    def feedback(self, message: str) -> str:
        """The observation returned for an invalid action."""
        return f"<feedback> {message} </feedback>"


class InvalidAction(Exception):
    """Raised by `_step` for an unparseable or illegal action; its text becomes feedback."""


def extract_tag(text: str, tag: str) -> str | None:
    """The content of the first `<tag> ... </tag>` in `text`, stripped; None when absent."""
    match = re.search(rf"<{tag}>(.*?)</{tag}>", text, flags=re.DOTALL)
    return None if match is None else match.group(1).strip()


def distinct_seeds(
    make_env: Callable[[], TextEnv], count: int, start: int = 0, max_draws: int | None = None
) -> list[int]:
    """The first `count` seeds from `start` on whose problems are pairwise distinct (by `problem_key`).

    Seeds index draws *with replacement* from a split, so the first N seeds of a small task space
    repeat problems (e.g. 500 seeds of chapter 03's test split pose 333 different queries) and an
    evaluation over them weighs some problems twice. Skipping the seeds of problems already taken
    makes "N held-out problems" mean N different ones. Deterministic: the same arguments give the
    same seeds. Raises ValueError when the first `max_draws` seeds (default `20 * count + 1000`) hold
    fewer than `count` distinct problems, which means the split is too small for `count`.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    max_draws = 20 * count + 1000 if max_draws is None else max_draws
    env, seen, seeds = make_env(), set(), []
    for seed in range(start, start + max_draws):
        if len(seeds) == count:
            break
        env.reset(seed=seed)
        key = env.problem_key()
        if key not in seen:
            seen.add(key)
            seeds.append(seed)
    if len(seeds) < count:
        raise ValueError(
            f"only {len(seeds)} distinct problems in {max_draws} draws of this split, {count} asked for: "
            "the split is too small for that many held-out problems; ask for fewer"
        )
    return seeds
