"""Implement it (chapters 09 and 10): the batch filters that keep whole groups by the spread of their rewards.

Fill in `starpo_s` (chapter 09) and `snr` (chapter 10), then run `pytest exercises/test_filters.py`, or in the
notebooks `check("filters.starpo_s", use="mine")` and `check("filters.snr", use="mine")`. The reference solution
is `course_lib/algos/filters.py` (`top_groups_by_reward_std`, `top_p_groups_by_reward_std` in linear mode).

Both score a group by the unbiased standard deviation of its episodes' rewards (as `torch.std`; a group of one
scores 0) and keep or drop every row of a group together. A group whose rewards are all equal gives GRPO no
gradient (every advantage is 0); a group whose rewards spread is where the policy's choices made a difference.
"""

from __future__ import annotations

import torch


def starpo_s(rewards: torch.Tensor, group_ids: torch.Tensor, keep_fraction: float = 0.25) -> torch.Tensor:
    """StarPO-S's filter: keep the groups whose rewards vary most.

    RAGEN (Wang et al. 2025, arXiv 2504.20073), StarPO-S's trajectory filtering: rank the G groups of the batch by
    the std of their rewards and keep the top `int(keep_fraction * G)` of them, whole (0.25 in the released
    configuration). Notebook 09's section 1 shows it on four groups.

    Args:
        rewards: `[B]` float, one episode reward per row.
        group_ids: `[B]` integers, the group (prompt) of each row; the rows of a group need not be adjacent.
        keep_fraction: the share of groups kept, in [0, 1].

    Returns:
        `[B]` bool mask, True on every row of a kept group.

    Contract:
        - a group's score is the unbiased std of its rewards, as `torch.std`; a group of one scores 0 (not NaN);
        - the groups with the largest scores are kept;
        - `int()` rounds down: 0.1 of 8 groups keeps no group; `keep_fraction` 1 keeps every row;
        - groups with equal scores are ranked in the order they first appear in the batch, so the filter is
          deterministic.
    """
    raise NotImplementedError("filters.starpo_s: implement me (see the docstring)")


def snr(rewards: torch.Tensor, group_ids: torch.Tensor, top_p: float = 0.9, eps: float = 0.01) -> torch.Tensor:
    """RAGEN-2's SNR-aware filter (linear mode): keep the fewest high-spread groups that hold a share of the spread.

    RAGEN-2 (arXiv 2604.06268), its top-p reward-variance filter as the released `RewardRolloutFilter` runs it in
    linear mode without zero-std groups: the kept groups are the shortest run of the largest-std groups whose
    summed std reaches `top_p * total - eps`, total being the summed std of every group with a non-zero std.
    Notebook 10's section 1 writes it in pseudocode and shows it on four groups.

    Args:
        rewards: `[B]` float, one episode reward per row.
        group_ids: `[B]` integers, the group of each row; rows of a group need not be adjacent.
        top_p: the share of the summed std the kept groups must hold, in (0, 1].
        eps: the tolerance subtracted from the threshold (0.01 in the released code).

    Returns:
        `[B]` bool mask, True on every row of a kept group.

    Contract:
        - a group's std is the unbiased std of its rewards, as in `starpo_s`;
        - zero-std groups are never kept; if every group has std 0, nothing is kept (the training step is skipped);
        - because of eps, at `top_p` 1 a tail of groups whose stds add up to less than eps is dropped (stds 0.7 and
          0.003 keep only the first);
        - ties at equal std go to the group seen first, as in `starpo_s`.
    """
    raise NotImplementedError("filters.snr: implement me (see the docstring)")
