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
import math
import numbers
import random
import re
import warnings
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MAX_ACTION_CHARS = 4_000


Dialogue = list[tuple[str, str]]
"""One played episode as chat messages `(role, content)`: the reset observation as `user`, each action as
`assistant`, each non-empty observation after it as `tool` (a tool's response) or `user` (a grid world's next
state). The environments' demonstrators (`demonstrator_episodes`) write these; the stand-ins' tokenizer trains on
them."""


@dataclass
class Transcript:
    """What the environment returned (`observations[0]` is the reset text) and received."""

    observations: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)

    def turns(self) -> list[tuple[str, str]]:
        """`(action, observation that answered it)` per step, in order."""
        return list(zip(self.actions, self.observations[1:], strict=True))


class TextEnv:
    """Base class: subclasses implement `_reset(seed, options)` and `_step(action)`.

    The public `reset`/`step` wrap them to validate input, record the transcript and enforce the turn limit. In
    `_step`, `InvalidAction` (raise it for an action you cannot read or cannot play) and a ValueError (what `int()` and
    friends raise on bad text; warned once per class) become an invalid action: feedback and `invalid_penalty`, never a
    crash. Any other exception is a bug: it is re-raised as an `EnvironmentStepError` naming the environment, step,
    seed and action.
    """

    max_turns: int = 4
    invalid_penalty: float = -0.1
    stop_tags: tuple[str, ...] = ()
    """The strings that end one action (its closing tags, e.g. `("</move>",)`); empty when undeclared. A chapter
    forked onto this environment stops its turns at them unless its config names others (`bases.on_environment`),
    and TRL's `--env` samples with them."""

    def __init__(self) -> None:
        self.transcript = Transcript()
        self.turn = 0
        self.done = False
        self.training_step = 0
        self.episode_seed: int | None = None
        """The seed of the current episode (`reset`), named in the errors of a subclass that returns a wrong type."""

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

    def demonstration(self) -> tuple[str, list[tuple[str, str]]]:
        """The episode so far as a demonstration, `(reset text, turns)`: the turn boundaries the environment itself
        drew, so a warm start masks every observation out of its loss whatever its text looks like (a grid's
        `<pos> 2 3 </pos>` as well as a `<tool_response>`). The observation after an episode's last action is left
        out (empty), as a rollout never shows it. `warm_start.demonstration_examples` and
        `checkpoint.demonstration_examples` take it as they take a `(prompt, completion)` pair."""
        if not self.transcript.observations:
            raise RuntimeError("demonstration() called before reset()")
        turns = self.transcript.turns()
        if self.done and turns:
            turns[-1] = (turns[-1][0], "")
        return self.transcript.observations[0], turns

    def reward_range(self) -> tuple[float, float] | None:
        """`(lowest, highest)` reward one step can return, the invalid-action penalty included, or None when the
        environment does not declare it (the default). `check_env` checks every reward it sees against a declared
        range, and an OpenEnv export (`integrations.openenv`) writes it into the manifest."""
        return None

    def valid_action(self, rng: random.Random) -> str | None:
        """An action that is valid in the current state (drawn with `rng` when there are several), or None when the
        environment cannot name one (the default). `check_env` plays whole episodes of such actions, so that what
        `step` returns on the path a trained policy takes is checked (hostile actions only reach the invalid-action
        branch); an environment that names none can be checked with candidate actions (`check_env(actions=...)`)."""
        return None

    # Public API -----------------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self.transcript = Transcript()
        self.turn = 0
        self.done = False
        self.episode_seed = 0 if seed is None else int(seed)
        result = self._reset(self.episode_seed, dict(options or {}))
        where = f"{type(self).__name__}._reset"
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(f"{where} returned {_shown(result)} (seed {self.episode_seed}), not (observation, info)")
        obs, info = result
        if not isinstance(obs, str):
            raise TypeError(f"{where} returned a {type(obs).__name__} observation (seed {self.episode_seed}), not str")
        if not isinstance(info, dict):
            raise TypeError(f"{where} returned a {type(info).__name__} info (seed {self.episode_seed}), not dict")
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
            result = self._step(action)
        except InvalidAction as bad:
            obs, reward, terminated = self.feedback(str(bad)), self.invalid_penalty, False
            info = {"valid": False, "error": str(bad)}
        except ValueError as bad:  # what int(), float() and unpacking raise on text they cannot read
            self._warn_parse_error(bad, action)
            obs, reward, terminated = self.feedback(f"could not read the action: {bad}"), self.invalid_penalty, False
            info = {"valid": False, "error": str(bad), "raised": type(bad).__name__}
        except Exception as error:
            raise EnvironmentStepError(
                f"{type(self).__name__}._step raised {type(error).__name__} at step {self.turn} (seed "
                f"{self.episode_seed}) on the action {_shown(action)}: {error}"
            ) from error
        else:
            obs, reward, terminated, info = self._checked(result)
            info.setdefault("valid", True)
        truncated = not terminated and self.turn >= self.max_turns
        self.done = terminated or truncated
        info["is_action_valid"] = info["valid"]  # the name GEM and SkyRL-gym give it
        info.setdefault("anchor", self.anchor())
        self.transcript.actions.append(action)
        self.transcript.observations.append(obs)
        return obs, float(reward), terminated, truncated, info

    def _warn_parse_error(self, error: ValueError, action: str) -> None:
        """Say once per environment class that a ValueError became an invalid action: a parsing error is one, but a
        bug that raises ValueError on every action would otherwise only show as a run of invalid actions."""
        name = type(self).__name__
        if name not in _WARNED_PARSE_ERRORS:
            _WARNED_PARSE_ERRORS.add(name)
            warnings.warn(
                f"{name}._step raised ValueError at step {self.turn} (seed {self.episode_seed}) on the action "
                f"{_shown(action)}: {error}; it was taken as an invalid action (feedback and the penalty). Raise "
                "envs.base.InvalidAction for actions your environment cannot read, to say so and silence this.",
                RuntimeWarning,
                stacklevel=3,
            )

    def feedback(self, message: str) -> str:
        """The observation returned for an invalid action."""
        return f"<feedback> {message} </feedback>"

    def _checked(self, result: object) -> tuple[str, float, bool, dict[str, Any]]:
        """`_step`'s return, refused with a TypeError naming the environment, the step and the seed when a value has
        the wrong type: a dict observation or a None reward would otherwise travel on and fail far away (in the
        tokenizer, in an advantage), with nothing to say which environment returned it."""
        where = f"{type(self).__name__}._step returned"
        at = f"at step {self.turn} (seed {self.episode_seed})"
        if not (isinstance(result, tuple) and len(result) == 4):
            raise TypeError(f"{where} {_shown(result)} {at}, not (observation, reward, terminated, info)")
        obs, reward, terminated, info = result
        if not isinstance(obs, str):
            raise TypeError(f"{where} a {type(obs).__name__} observation {at}, not str: {_shown(obs)}")
        if not isinstance(reward, numbers.Real) or not math.isfinite(reward):
            raise TypeError(f"{where} a {type(reward).__name__} reward {at}, not a finite number: {_shown(reward)}")
        if isinstance(terminated, np.bool_):  # numpy's bool (named `bool` under numpy 2, `bool_` before) is accepted
            terminated = bool(terminated)
        if not isinstance(terminated, bool):
            kind = type(terminated).__qualname__
            kind = kind if type(terminated).__module__ == "builtins" else f"{type(terminated).__module__}.{kind}"
            raise TypeError(f"{where} a {kind} `terminated` {at}, not bool: {_shown(terminated)}")
        if not isinstance(info, dict):
            raise TypeError(f"{where} a {type(info).__name__} info {at}, not dict: {_shown(info)}")
        return obs, reward, terminated, info


def _shown(value: object) -> str:
    """A value's repr cut to 60 characters, for an error message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class InvalidAction(Exception):
    """Raised by `_step` for an unparseable or illegal action; its text becomes feedback."""


class EnvironmentStepError(RuntimeError):
    """An exception other than a parsing error raised in an environment's `_step`, re-raised naming the environment,
    the step, the episode's seed and the action (the original is its `__cause__`)."""


_WARNED_PARSE_ERRORS: set[str] = set()
"""The environment classes `TextEnv.step` has already warned about a ValueError taken as an invalid action."""


def extract_tag(text: str, tag: str) -> str | None:
    """The content of the first `<tag> ... </tag>` in `text`, stripped; None when absent."""
    match = re.search(rf"<{tag}>(.*?)</{tag}>", text, flags=re.DOTALL)
    return None if match is None else match.group(1).strip()


def calls_tool(action: str) -> bool:
    """Whether the action is a tool call: a `<tool_call>` that comes before any `<answer>` (an action holding both is
    read in the order the policy wrote them)."""
    call_at, answer_at = action.find("<tool_call>"), action.find("<answer>")
    return call_at >= 0 and (answer_at < 0 or call_at < answer_at)


def parse_call(action: str) -> tuple[str, str]:
    """`(tool, arguments)` of the action's `<tool_call> tool arguments </tool_call>`; `InvalidAction` when there is
    none."""
    body = extract_tag(action, "tool_call")
    if body is None:
        raise InvalidAction("invalid action")
    tool, _, arguments = body.partition(" ")
    return tool, arguments.strip()


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
