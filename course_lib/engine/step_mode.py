"""Step mode: every environment step is its own short sequence (how verl-agent trains GiGPO).

In trajectory mode one sequence grows with every turn, which a tiny model's context cannot hold for
episodes of tens of steps. In step mode the prompt of step t is the current observation, preceded by
the last `window` (observation, action) pairs (`window = 0`: the observation alone), and the response
is the action; all environments of a batch take their step t together, and an episode is the list of
its step rows. Each row is an ordinary `Trajectory` of one turn (its `traj_id`, `step_index` and
`episode_reward` say where it belongs), so the same collation, advantage estimators and losses serve
both modes.

The anchor of a step (the key GiGPO groups states by) is, as in verl-agent, the raw observation the
action was taken in (`anchor_source="observation"`), or the environment's true state (`"state"`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from course_lib.engine.rollout import RolloutEngine, Trajectory
from course_lib.envs.base import TextEnv

ANCHOR_SOURCES = ("observation", "state")


STEP_MODE_SNAPSHOTS = (
    "SamplingConfig.snapshot_envs=True in step mode: a step's row is one turn of a view that ends after it, so there "
    "is nothing to branch from; branching samplers (ARPO's tree) need rollout_mode='trajectory' (or set "
    "snapshot_envs=False)"
)
"""Why step mode refuses environment snapshots."""


def step_prompt(observation: str, history: Sequence[tuple[str, str]], window: int) -> str:
    """The prompt of one step: the last `window` (observation, action) pairs of `history`, then the
    current observation."""
    if window < 0:
        raise ValueError(f"window must be >= 0, got {window}")
    recent = history[-window:] if window else []
    return " ".join([*(f"{seen} {action}" for seen, action in recent), observation])


class _OneStep:
    """A view of an environment that ends after one action, so the engine samples exactly one turn.

    The real episode goes on: its observation, end flags and the anchor of the state the action was
    taken in are kept here for the next step."""

    def __init__(self, env: TextEnv, observation: str, anchor_source: str):
        self.env, self.observation, self.anchor_source = env, observation, anchor_source
        self.terminated = self.truncated = False

    def anchor(self) -> Any:
        return self.observation if self.anchor_source == "observation" else self.env.anchor()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.observation, self.terminated, self.truncated = observation, terminated, truncated
        return "", reward, True, False, info


@dataclass
class Episode:
    """One episode played in step mode: its one-turn rows in order, with the summaries that
    `diagnostics.rollout_stats` reads from a `Trajectory`."""

    env: TextEnv
    group_id: int
    seed: int
    traj_id: int
    rows: list[Trajectory] = field(default_factory=list)
    history: list[tuple[str, str]] = field(default_factory=list)
    """(observation, action) of every step so far, the text the prompt window draws on."""
    terminated: bool = False
    truncated: bool = False

    @property
    def rewards(self) -> list[float]:
        return [reward for row in self.rows for reward in row.rewards]

    @property
    def infos(self) -> list[dict[str, Any]]:
        return [info for row in self.rows for info in row.infos]

    @property
    def anchors(self) -> list[Any]:
        return [anchor for row in self.rows for anchor in row.anchors]

    @property
    def loss_mask(self) -> list[int]:
        return [m for row in self.rows for m in row.loss_mask]

    @property
    def entropies(self) -> list[float]:
        return [e for row in self.rows for e in row.entropies]

    @property
    def total_reward(self) -> float:
        return float(sum(self.rewards))

    @property
    def success(self) -> bool:
        infos = self.infos
        return bool(infos and infos[-1].get("success", False))

    @property
    def num_turns(self) -> int:
        return len(self.rows)


def rollout_steps(
    engine: RolloutEngine,
    envs: Sequence[TextEnv],
    seeds: Sequence[int],
    group_ids: Sequence[int] | None = None,
    generator: torch.Generator | None = None,
    window: int = 0,
    anchor_source: str = "observation",
) -> list[Episode]:
    """Reset `envs[i]` with `seeds[i]` and play every episode to its end, one batched step at a time.

    Returns one `Episode` per environment, `traj_id` = its index. A row cut by the engine's length cap
    (its action never reached the environment) ends its episode as truncated.
    """
    if anchor_source not in ANCHOR_SOURCES:
        raise ValueError(f"anchor_source must be one of {ANCHOR_SOURCES}, got {anchor_source!r}")
    if len(envs) != len(seeds):
        raise ValueError("envs and seeds must have the same length")
    if engine.config.snapshot_envs:
        raise ValueError(STEP_MODE_SNAPSHOTS)
    group_ids = list(range(len(envs))) if group_ids is None else list(group_ids)
    tokenizer = engine.tokenizer
    episodes, views = [], []
    for index, (env, seed, group) in enumerate(zip(envs, seeds, group_ids, strict=True)):
        observation, _ = env.reset(seed=seed)
        episodes.append(Episode(env=env, group_id=group, seed=seed, traj_id=index))
        views.append(_OneStep(env, observation, anchor_source))
    live = list(range(len(envs)))
    while live:
        rows = []
        for index in live:
            episode, view = episodes[index], views[index]
            text = step_prompt(view.observation, episode.history, window)
            prompt = engine.format.prompt_ids(tokenizer, text)  # BOS + text in the course's plain format
            rows.append(
                Trajectory(
                    env=view,
                    token_ids=prompt,
                    loss_mask=[0] * len(prompt),
                    logprobs=[0.0] * len(prompt),
                    entropies=[0.0] * len(prompt),
                    turn_ids=[-1] * len(prompt),
                    group_id=episode.group_id,
                    seed=episode.seed,
                    traj_id=episode.traj_id,
                    step_index=len(episode.rows),
                )
            )
        seen = [views[index].observation for index in live]
        engine.run(rows, generator)
        still = []
        for index, row, observation in zip(live, rows, seen, strict=True):
            episode, view = episodes[index], views[index]
            episode.rows.append(row)
            if row.cut or not row.rewards:  # the action never reached the environment
                episode.truncated = True
                continue
            episode.history.append((observation, episode.env.transcript.actions[-1]))
            episode.terminated, episode.truncated = view.terminated, view.truncated
            if not (view.terminated or view.truncated):
                still.append(index)
        live = still
    for episode in episodes:
        total = episode.total_reward
        for row in episode.rows:
            row.episode_reward = total
    return episodes
