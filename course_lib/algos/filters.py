"""Batch filters that keep whole groups by their reward spread: StarPO-S and RAGEN-2's SNR-aware filter.

A group whose rewards are all equal gives GRPO no signal (every advantage is 0) and gives PPO's critic little;
a group whose rewards spread widely is where the policy's choices made a difference. Both filters score a group
by the standard deviation of its episodes' rewards (unbiased, as `torch.std`; a group of one scores 0) and keep
whole groups; advantages are computed afterwards, on the kept rows.

- **StarPO-S** (RAGEN, arXiv 2504.20073; v1 code `_filter_rollout`): keep the top `int(keep_fraction * G)` groups
  by std (`keep_fraction` 0.25 in the released config; 1 keeps everything). The code breaks ties at equal std
  arbitrarily (`torch.topk`); here ties go to the group seen first in the batch, so the filter is deterministic.
- **SNR-aware, top-p** (RAGEN-2, arXiv 2604.06268; `RewardRolloutFilter`): sort the groups by std, largest first,
  and keep the shortest prefix that holds a share `top_p` of the total. `linear` mode (the docs' recommendation,
  with zero-std groups dropped): the prefix's summed std reaches `top_p * sum - eps`; if it never does (for
  example every std is 0), nothing is kept and the step is skipped. `softmax` mode (the published main-table
  recipe, zero-std groups included): the same on softmax(std), which is much flatter, so nearly every group stays.

Where the SNR-aware filter departs from the official code (`mll-lab-nu/RAGEN`, `RolloutFilter._select_top_groups`
and `RewardRolloutFilter.filter` in `ragen/trainer/rollout_filter.py`); the chapters use linear mode at `top_p`
0.9 with `include_zero=False`, where the two keep the same groups (up to ties and float32 rounding at the
threshold):

- **`top_p` 1.** The official code applies no threshold: `_select_top_groups` returns every candidate group
  at once (every group with `include_zero`, the groups with a non-zero std without it), and with
  `include_zero` `filter` hands back the whole batch. Here the linear rule runs at 1 as at any other value, so it
  keeps fewer: zero-std groups are dropped even with `include_zero` (the prefix stops at the first non-positive
  score), and so are the smallest positive-std groups once the prefix has reached `sum - eps` without them (with
  stds 0.7 and 0.003, only the 0.7 group is kept). `softmax` mode keeps every group at 1 (as the official code
  with `include_zero`; without it, see the next point).
- **`softmax` with `include_zero=False`.** The official code drops the zero-std groups before the softmax; here
  `include_zero` is read in linear mode only, and softmax mode always scores every group.
- **Defaults.** `include_zero` defaults to False here (the docs' recommendation), to True in the official config.
- **Ties** at equal std go to the group seen first here; the official code's `torch.sort` orders them as it
  happens to. It also scores in float32, here in float64.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from course_lib import bridges
from course_lib.implement_it import implement_it
from course_lib.validation import one_of, within

FILTER_MODES = ("linear", "softmax")
"""`FilterConfig.mode` (`top_p_groups_by_reward_std`)."""


@dataclass
class FilterConfig:
    """The batch filters' settings (`GRPOConfig.filter`), with the papers' defaults."""

    keep_fraction: float = 0.25
    """StarPO-S (`batch_filter="starpo_s"`): the share of groups kept, RAGEN v1's `rollout_filter_ratio`."""
    top_p: float = 0.9
    """SNR-aware (`batch_filter="snr_top_p"`): the share of the summed reward std the kept groups hold."""
    mode: str = "linear"
    """SNR-aware: `linear` (RAGEN-2's docs) or `softmax` (its published main-table recipe)."""
    include_zero: bool = False
    """SNR-aware: whether zero-std groups are candidates (the docs: no; the main-table recipe: yes)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Refuse shares outside (0, 1] and an unknown mode (a ValueError naming the field); also run by
        `GRPOConfig.validate`, for a config changed in place."""
        within("FilterConfig.keep_fraction", self.keep_fraction, 0.0, 1.0, low_open=True)
        within("FilterConfig.top_p", self.top_p, 0.0, 1.0, low_open=True)
        one_of("FilterConfig.mode", self.mode, FILTER_MODES)


def _as_ids(group_ids: Sequence[int] | torch.Tensor) -> list[int]:
    return [int(g) for g in (group_ids.tolist() if isinstance(group_ids, torch.Tensor) else group_ids)]


def group_reward_std(rewards: torch.Tensor, group_ids: Sequence[int] | torch.Tensor) -> tuple[list[int], torch.Tensor]:
    """The groups in order of first appearance and the unbiased std of each one's rewards ([G]; 0 for a group of
    one). rewards: [B] episode rewards; group_ids: [B], any integers, rows of a group need not be adjacent."""
    ids = _as_ids(group_ids)
    if len(ids) != rewards.shape[0]:
        raise ValueError(f"{len(ids)} group ids for {rewards.shape[0]} rewards")
    order = list(dict.fromkeys(ids))
    stds = []
    for group in order:
        members = rewards[[i for i, g in enumerate(ids) if g == group]].double()
        stds.append(members.std().item() if members.numel() > 1 else 0.0)
    return order, torch.tensor(stds, dtype=torch.float64)


def _rows_of(groups: Sequence[int], kept: set[int]) -> torch.Tensor:
    return torch.tensor([g in kept for g in groups], dtype=torch.bool)


def _ranked(stds: torch.Tensor) -> list[int]:
    """Group positions by std, largest first; ties to the group seen first (a stable sort)."""
    return sorted(range(len(stds)), key=lambda k: -stds[k].item())


@implement_it("filters.starpo_s", bridges.top_groups_by_reward_std)
def top_groups_by_reward_std(
    rewards: torch.Tensor, group_ids: Sequence[int] | torch.Tensor, keep_fraction: float = 0.25
) -> torch.Tensor:
    """StarPO-S's filter: a [B] bool mask keeping every row of the top `int(keep_fraction * G)` groups by
    within-group reward std (ties to the group seen first). `keep_fraction` 1 keeps all rows; a fraction that
    rounds down to no group keeps none (as the code's `topk(0)`)."""
    if not 0.0 <= keep_fraction <= 1.0:
        raise ValueError(f"keep_fraction must lie in [0, 1], got {keep_fraction}")
    ids = _as_ids(group_ids)
    order, stds = group_reward_std(rewards, ids)
    if keep_fraction == 1.0:
        return torch.ones(len(ids), dtype=torch.bool)
    return _rows_of(ids, {order[k] for k in _ranked(stds)[: int(keep_fraction * len(order))]})


@implement_it("filters.snr", bridges.top_p_groups_by_reward_std)
def top_p_groups_by_reward_std(
    rewards: torch.Tensor,
    group_ids: Sequence[int] | torch.Tensor,
    top_p: float = 0.9,
    mode: str = "linear",
    include_zero: bool = False,
    eps: float = 0.01,
) -> torch.Tensor:
    """RAGEN-2's SNR-aware filter: a [B] bool mask keeping every row of the shortest prefix of groups, sorted by
    reward std (largest first, ties to the group seen first), that holds a share `top_p` of the scores.

    `linear`: scores are the stds; zero-std groups (|std| <= 1e-10) are dropped unless `include_zero`; the prefix's
    sum must reach `top_p * sum(std) - eps`, adding only positive scores; if it cannot, nothing is kept.
    `softmax`: scores are softmax(std) over all groups, whatever `include_zero`; keep the first
    `searchsorted(cumsum, top_p) + 1`.
    In linear mode the prefix stops at the first non-positive score, so zero-std groups are never kept, even with
    `include_zero`; and it stops as soon as it reaches `top_p * sum - eps`, so at `top_p` 1 the trailing groups
    whose stds add up to less than `eps` are dropped too. `top_p` 1 in linear mode therefore keeps the groups with
    a positive std except that small tail, where the official code keeps every group (module docstring).
    """
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must lie in (0, 1], got {top_p}")
    ids = _as_ids(group_ids)
    order, stds = group_reward_std(rewards, ids)
    ranked = _ranked(stds)
    if mode == "softmax":
        probabilities = torch.softmax(stds[ranked], dim=0)
        count = int(torch.searchsorted(probabilities.cumsum(0), torch.tensor(top_p, dtype=torch.float64))) + 1
        return _rows_of(ids, {order[k] for k in ranked[: min(count, len(ranked))]})
    if mode != "linear":
        raise ValueError(f"mode must be 'linear' or 'softmax', got {mode!r}")
    if not include_zero:
        ranked = [k for k in ranked if abs(stds[k].item()) > 1e-10]
    threshold = top_p * sum(stds[k].item() for k in ranked) - eps
    kept, total = [], 0.0
    for k in ranked:
        if total >= threshold:
            break
        if stds[k].item() <= 0:
            break
        kept.append(k)
        total += stds[k].item()
    if total < threshold:
        kept = []
    return _rows_of(ids, {order[k] for k in kept})
