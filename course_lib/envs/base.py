"""The text-environment interface every chapter uses (Gymnasium-style, text in and text out).

`reset(seed) -> (obs, info)` and `step(action) -> (obs, reward, terminated, truncated, info)`.
`info["valid"]` says whether the action parsed and was legal; `info["anchor"]` is a hashable key
of the true state (GiGPO groups steps by it). A malformed or illegal action never raises: it gets
feedback text and `invalid_penalty`. Each environment keeps a `transcript` of every action it
received and every observation it returned, so tests can check the token-level bookkeeping of a
rollout against what the environment really saw.

`training_step` is the index of the training iteration an episode belongs to. `train.train_grpo`
sets it on every training environment before each rollout, so a reward that follows a schedule
(ToolRL's reward scales, Planner-R1's curriculum) reads it instead of counting resets itself.
"""

from __future__ import annotations

import re
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
