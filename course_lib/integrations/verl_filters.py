"""StarPO-S's and RAGEN-2's group filters and AEPO's balanced clip on verl's tensors.

**Group filters** (RAGEN's StarPO-S, arXiv 2504.20073; RAGEN-2's SNR-aware top-p, `algos.filters`): keep whole
groups by the std of their episodes' rewards. verl 0.9.1 has no public batch-filter hook (its DAPO-style
`algorithm.filter_groups`, in the v1 trainer's replay buffer, evicts the groups whose metric has zero std and
refills them with new prompts: a fixed rule, not a pluggable one, and not a top-k or top-p by std), so the
filter runs inside the same `compute_advantage` wrapper as GiGPO (`verl_patch`), before the estimator, and it
*zeroes the `response_mask` of the dropped groups* instead of selecting rows. Why not select: verl splits the batch
into `ppo_mini_batch_size * rollout.n` rows per mini-batch and shards it over the data-parallel ranks, so the row
count must stay divisible by both; a filter that keeps a fraction of the groups would break that (DAPO's recipe
refills with more generation instead). With the mask zeroed, the dropped rows add nothing to the loss, and verl's
"token-mean" divides by the number of mask tokens, so the loss and its gradient are those of the kept rows alone,
as the course computes them (`train.policy_iteration` selects rows), provided one mini-batch holds the whole batch
(`ppo_mini_batch_size` = `data.train_batch_size`); the cost is the forward/backward work on the masked rows.
Advantages of the kept groups do not change (GRPO and GiGPO normalise within a group). When the filter keeps
nothing, the course skips the update; here every advantage is set to 0 and the mask left alone (a zero mask would
make verl's token-mean 0/0), so the policy-gradient term is exactly 0 (an optimizer with momentum or weight decay
still moves the weights; `verl_patch` reports `course/filter_kept_share` 0 for that step).

Ties at equal std go to the group seen first, in batch order: verl's `trainer.balance_batch=True` reorders the rows
before advantages are computed, so set it False to keep generation order (as the course's does).

**Balanced clip** (AEPO, arXiv 2510.14545, `algos.aepo.balanced_clip_losses`): registered with
`register_policy_loss` as `POLICY_LOSS`, selected with `actor_rollout_ref.actor.policy_loss.loss_mode`; it gets
verl's seven arguments (`verl/workers/utils/losses.py`) and aggregates with verl's own `agg_loss` and the
`global_batch_info` the actor fills in. verl's vanilla loss clamps the log-ratio to [-20, 20]; this one does not
(the course's arithmetic). Nothing in this module imports verl at import time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from course_lib.integrations.verl_gigpo import dense_ids

POLICY_LOSS = "course_entropy_balanced"
"""`actor_rollout_ref.actor.policy_loss.loss_mode` of AEPO's balanced clip."""
FILTERS = ("none", "starpo_s", "snr_top_p")


@dataclass(frozen=True)
class FilterSettings:
    """`+algorithm.course.filter.*` in verl; the fields of `train.FilterConfig` plus the filter's name."""

    name: str = "none"
    keep_fraction: float = 0.25
    top_p: float = 0.9
    mode: str = "linear"
    include_zero: bool = False

    @classmethod
    def from_algorithm_config(cls, algorithm: Any) -> FilterSettings:
        course = (algorithm.get("course", None) if algorithm is not None else None) or {}
        block = course.get("filter", None) or {}
        settings = cls(**{key: block[key] for key in cls.__dataclass_fields__ if key in block})
        if settings.name not in FILTERS:
            raise ValueError(f"algorithm.course.filter.name must be one of {FILTERS}, got {settings.name!r}")
        return settings

    @classmethod
    def from_course(cls, name: str, config) -> FilterSettings:
        """From a course batch-filter name and `train.FilterConfig`."""
        return cls(name, config.keep_fraction, config.top_p, config.mode, config.include_zero)


def keep_rows(
    scores: torch.Tensor, index: Sequence, settings: FilterSettings, episodes: Sequence | None = None
) -> torch.Tensor:
    """`[B]` bool: the rows whose group the filter keeps.

    `scores` `[B]`: each row's episode reward (verl: `token_level_rewards.sum(-1)`, or the `episode_reward` column
    of step rows); `index` `[B]`: the group uids; `episodes` `[B]`: the episode of each row in step mode (one
    reward per episode enters the group's std, as `loop._episode_filter` does), None when each row is an
    episode."""
    from course_lib.algos.filters import top_groups_by_reward_std, top_p_groups_by_reward_std

    rows = len(index)
    if settings.name == "none":
        return torch.ones(rows, dtype=torch.bool)
    episode_of = list(range(rows)) if episodes is None else list(episodes)
    first: dict[Any, int] = {}
    for row, episode in enumerate(episode_of):
        first.setdefault(episode, row)
    representatives = list(first.values())
    groups = dense_ids(list(index))
    rewards = scores.detach().float().cpu()[representatives]
    group_tensor = torch.tensor([groups[r] for r in representatives])
    if settings.name == "starpo_s":
        keep = top_groups_by_reward_std(rewards, group_tensor, settings.keep_fraction)
    else:
        keep = top_p_groups_by_reward_std(rewards, group_tensor, settings.top_p, settings.mode, settings.include_zero)
    verdict = dict(zip(first, keep.tolist(), strict=True))
    return torch.tensor([verdict[e] for e in episode_of], dtype=torch.bool)


def filter_batch(
    batch: Mapping[str, torch.Tensor], non_tensor_batch: Mapping[str, Sequence], settings: FilterSettings
) -> tuple[torch.Tensor, dict[str, float]]:
    """Apply the group filter to a verl batch in place: `batch["response_mask"]` `[B, T]` is zeroed on the dropped
    rows (all rows kept when the filter keeps none; see the module docstring). Returns the `[B]` keep verdict and
    metrics. Reads `token_level_scores` (else `token_level_rewards`; `episode_reward`/`episode_uid` in step mode)
    and `uid`."""
    index = non_tensor_batch["uid"]
    if "episode_uid" in non_tensor_batch:
        scores = torch.tensor([float(r) for r in non_tensor_batch["episode_reward"]])
        episodes = list(non_tensor_batch["episode_uid"])
    else:
        # the scores before any in-reward KL penalty (`token_level_rewards` = scores when there is none)
        source = "token_level_scores" if "token_level_scores" in batch.keys() else "token_level_rewards"
        scores, episodes = batch[source].sum(-1), None
    keep = keep_rows(scores, index, settings, episodes)
    kept = int(keep.sum())
    if kept:
        mask = batch["response_mask"]
        mask.mul_(keep.to(mask.device, mask.dtype)[:, None])
    return keep, {"course/filter_kept_share": kept / max(len(keep), 1)}


def balanced_clip_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """AEPO's balanced clip with verl's policy-loss signature: `[B, T]` tensors in, a scalar loss and metrics out.

    Clip bounds from verl's actor config (`clip_ratio_low`/`clip_ratio_high`, else `clip_ratio`), dual clip from
    `clip_ratio_c` (3, the course's too); the per-token losses are `algos.aepo.balanced_clip_losses`', aggregated by
    verl's `agg_loss` with the actor's `global_batch_info` (so data-parallel ranks normalise by the global count)."""
    from verl.trainer.ppo.core_algos import agg_loss

    from course_lib.algos.aepo import balanced_clip_losses

    clip = config.clip_ratio
    low = config.clip_ratio_low if config.clip_ratio_low is not None else clip
    high = config.clip_ratio_high if config.clip_ratio_high is not None else clip
    dual = float(config.get("clip_ratio_c", 3.0))
    losses, above = balanced_clip_losses(log_prob, old_log_prob, advantages, low, high, dual)
    if rollout_is_weights is not None:
        losses = losses * rollout_is_weights
    info = dict(getattr(config, "global_batch_info", None) or {})
    loss = agg_loss(loss_mat=losses, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **info)
    with torch.no_grad():
        mask = response_mask.bool()
        count = max(int(mask.sum()), 1)
        metrics = {
            "actor/pg_upper_clipfrac": float((above & mask).sum()) / count,
            "actor/ppo_kl": float(((old_log_prob - log_prob) * mask).sum()) / count,
        }
    return loss, metrics
