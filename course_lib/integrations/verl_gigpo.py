"""GiGPO (Feng et al. 2025, arXiv 2505.10978) as a verl advantage estimator, in trajectory mode and in step mode.

verl calls an estimator registered with `register_adv_est` (`verl/trainer/ppo/core_algos.py`) from
`compute_advantage` (`verl/trainer/ppo/ray_trainer.py`) with the padded tensors `token_level_rewards` and
`response_mask` `[B, T]` (T = `rollout.response_length`, responses right-padded), the group uid of each row
(`index`) and the algorithm config. GiGPO needs more than that: each step's reward, validity and anchor, and which
response tokens are each step's action. `CourseEnvAgentLoop` already returns them in `extra_fields`
(`verl.episode_extra_fields`), which verl's worker turns into per-row object columns of `non_tensor_batch`; only the
built-in `gdpo` estimator is handed that dict, so `verl_patch.install` wraps `compute_advantage` to pass it to the
estimator registered here as `ESTIMATOR` ("course_gigpo") as well.

Two row layouts, the two modes of `course_lib.rl.seams.gigpo`:

- **trajectory mode**: a row is a whole episode. Its columns `env_steps`, `step_rewards`, `step_valid`, `anchors`
  and `action_spans` (`[start, end)` of each step's action within the response) give its steps; step k's
  advantage lands on the response tokens of `action_spans[k]` that carry mask 1.
- **step mode** (how verl-agent trains GiGPO; chapter 07): a row is one environment step, its prompt the
  observation (`course_lib.engine.step_mode`), its response the action. `step_rows` converts played step-mode episodes
  into such rows; each carries the same step columns (one step) plus `episode_uid` (the episode it belongs to),
  `step_offset` (its index within the episode) and `episode_reward` (the episode's total, verl-agent's row score).

The arithmetic is the course's own: `algos.gigpo.token_advantages` on the flat step table, the combination step
`seams.gigpo` calls too (`gigpo_advantages`, the per-step values spread over the action tokens in float32, A^E +
omega A^S); also its step-mode detail: with the pooled episode baseline and groups of several episodes the episode
part is GRPO's group-normalised episode reward over the step rows (`algos.grpo.group_advantages`). Nothing here
imports verl.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from course_lib.algos import gigpo

ESTIMATOR = "course_gigpo"
"""`algorithm.adv_estimator` of GiGPO (registered by `verl_patch.register`)."""
STEP_COLUMNS = ("env_steps", "step_rewards", "step_valid", "anchors", "action_spans")
"""The `non_tensor_batch` columns every row needs (trajectory and step mode)."""
STEP_MODE_COLUMNS = ("episode_uid", "step_offset", "episode_reward")
"""The extra columns of step-mode rows."""


@dataclass(frozen=True)
class GiGPOSettings(gigpo.GiGPOSettings):
    """`algos.gigpo.GiGPOSettings`, read from verl's config too.

    In verl: `gamma` is `algorithm.gamma` and `scale_by_std` `algorithm.norm_adv_by_std_in_grpo`; the rest come
    from `+algorithm.course.gigpo.*` (see `from_algorithm_config`)."""

    @classmethod
    def from_algorithm_config(cls, algorithm: Any) -> GiGPOSettings:
        """From verl's `algorithm` config (a DictConfig or a mapping): `gamma`, `norm_adv_by_std_in_grpo` and the
        optional `course.gigpo` block (`step_weight`, `episode_baseline`, `invalid_penalty`)."""
        get = algorithm.get if algorithm is not None else (lambda key, default=None: default)
        course = get("course", None) or {}
        extra = course.get("gigpo", None) or {}
        defaults = cls()
        return cls(
            gamma=float(get("gamma", defaults.gamma)),
            step_weight=float(extra.get("step_weight", defaults.step_weight)),
            episode_baseline=str(extra.get("episode_baseline", defaults.episode_baseline)),
            scale_by_std=bool(get("norm_adv_by_std_in_grpo", defaults.scale_by_std)),
            invalid_penalty=float(extra.get("invalid_penalty", defaults.invalid_penalty)),
        )


def dense_ids(values: Sequence) -> list[int]:
    """0, 1, ... in order of first appearance of each distinct value (verl's uids are strings)."""
    seen: dict[Any, int] = {}
    return [seen.setdefault(value, len(seen)) for value in values]


@dataclass
class StepTable:
    """The flat step table of a batch (as `RolloutBatch`'s `step_*` fields): one entry per environment step."""

    row: list[int]
    start: list[int]
    end: list[int]
    index: list[int]
    traj: list[Any]
    group: list[int]
    reward: list[float]
    valid: list[bool]
    anchors: list[Any]


def step_table(non_tensor_batch: Mapping[str, Sequence], groups: Sequence[int]) -> StepTable:
    """Read the steps of every row from the `STEP_COLUMNS` (and, in step mode, `STEP_MODE_COLUMNS`) columns."""
    missing = [name for name in STEP_COLUMNS if name not in non_tensor_batch]
    if missing:
        raise KeyError(f"GiGPO needs the columns {missing} in non_tensor_batch (CourseEnvAgentLoop's extra_fields)")
    step_mode = "episode_uid" in non_tensor_batch
    table = StepTable([], [], [], [], [], [], [], [], [])
    for row, group in enumerate(groups):
        steps = int(non_tensor_batch["env_steps"][row])
        offset = int(non_tensor_batch["step_offset"][row]) if step_mode else 0
        traj = non_tensor_batch["episode_uid"][row] if step_mode else row
        for k in range(steps):
            start, end = non_tensor_batch["action_spans"][row][k]
            table.row.append(row)
            table.start.append(int(start))
            table.end.append(int(end))
            table.index.append(offset + k)
            table.traj.append(traj)
            table.group.append(group)
            table.reward.append(float(non_tensor_batch["step_rewards"][row][k]))
            table.valid.append(bool(non_tensor_batch["step_valid"][row][k]))
            table.anchors.append(non_tensor_batch["anchors"][row][k])
    return table


def spread(table: StepTable, values: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Per-step `values` `[K]` over each step's action tokens: `[B, T]`, 0 elsewhere and where the mask is 0."""
    out = torch.zeros(response_mask.shape, dtype=values.dtype, device=response_mask.device)
    for k, (row, start, end) in enumerate(zip(table.row, table.start, table.end, strict=True)):
        out[row, start:end] = values[k]
    return out * response_mask.to(values.dtype)


def gigpo_token_advantages(
    response_mask: torch.Tensor, non_tensor_batch: Mapping[str, Sequence], index: Sequence, settings: GiGPOSettings
) -> tuple[torch.Tensor, dict[str, float]]:
    """GiGPO's per-token advantages `[B, T]` on verl's response tensor, and step-group statistics.

    `response_mask` `[B, T]`: verl's (1 on the policy's tokens); `non_tensor_batch`: the batch's object columns;
    `index` `[B]`: the rows' group uids (`non_tensor_batch["uid"]`, one per prompt, shared by its `rollout.n`
    samples: GiGPO's episode group)."""
    from course_lib.algos.grpo import group_advantages

    groups = dense_ids(list(index))
    table = step_table(non_tensor_batch, groups)
    pooled = settings.episode_baseline == "pooled"
    mask = response_mask.float()
    step_mode = "episode_uid" in non_tensor_batch
    episodes_per_group: dict[int, set] = {}
    if step_mode:
        for group, episode in zip(groups, non_tensor_batch["episode_uid"], strict=True):
            episodes_per_group.setdefault(group, set()).add(episode)
    episode = None
    if pooled and step_mode and any(len(e) > 1 for e in episodes_per_group.values()):
        # seams.gigpo's step-mode branch: GRPO on the step rows' episode rewards (minus each row's penalty)
        rewards = torch.tensor([float(r) for r in non_tensor_batch["episode_reward"]], dtype=torch.float)
        if settings.invalid_penalty:
            invalid = torch.zeros(len(groups))
            invalid.index_add_(0, torch.tensor(table.row, dtype=torch.long), (~torch.tensor(table.valid)).float())
            rewards = rewards - settings.invalid_penalty * invalid
        episode = group_advantages(rewards, torch.tensor(groups), settings.scale_by_std)[:, None] * mask
    table_columns = {
        "rewards": table.reward, "valid": table.valid, "anchors": table.anchors, "group_ids": table.group,
        "traj_ids": table.traj, "step_index": table.index,
    }  # fmt: skip
    return gigpo.token_advantages(table_columns, lambda values: spread(table, values, mask), settings, episode)


def step_rows(episodes: Sequence, uid_of_group: Mapping[int, str] | None = None) -> list[dict[str, Any]]:
    """Step-mode rows of played episodes, as the keyword arguments of verl's `AgentLoopOutput`.

    `episodes`: `course_lib.engine.step_mode.Episode`s (each a list of one-turn `Trajectory` rows). Each row: the step's
    prompt ids, its action as the response (mask 1, the sampling log-probs), `reward_score` the episode's total
    (verl-agent's row score, which a GRPO baseline on these rows normalises), and `extra_fields` with the step
    columns plus `episode_uid`, `step_offset`, `episode_reward` and `uid_hint` (the group's uid, for a test or an
    export that assigns verl's `uid` itself)."""
    rows = []
    for episode in episodes:
        total = float(episode.total_reward)
        group_uid = (uid_of_group or {}).get(episode.group_id, f"group-{episode.group_id}")
        episode_uid = f"{group_uid}/episode-{episode.traj_id}"  # unique across batches whose group uids are
        for row in episode.rows:
            prompt = sum(1 for turn in row.turn_ids if turn < 0)
            response = row.token_ids[prompt:]
            steps = len(row.rewards)
            rows.append(
                {
                    "prompt_ids": list(row.token_ids[:prompt]),
                    "response_ids": list(response),
                    "response_mask": list(row.loss_mask[prompt:]),
                    "response_logprobs": [float(p) for p in row.logprobs[prompt:]],
                    "reward_score": total,
                    "num_turns": 2,
                    "metrics": {},
                    "extra_fields": {
                        "env_steps": steps,
                        "step_rewards": [float(r) for r in row.rewards],
                        "step_valid": [bool(info.get("valid", True)) for info in row.infos],
                        "anchors": list(row.anchors[:steps]),
                        "action_spans": [[0, sum(row.loss_mask[prompt:])]] * steps,
                        "episode_uid": episode_uid,
                        "step_offset": int(row.step_index),
                        "episode_reward": total,
                        "uid_hint": group_uid,
                        "turn_scores": [float(r) for r in row.rewards],
                        "tool_rewards": [],
                    },
                }
            )
    return rows
