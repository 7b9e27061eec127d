"""StarPO-S's and RAGEN-2's group filters against hand-computed selections (course_lib.algos.filters)."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.algos.filters import group_reward_std, top_groups_by_reward_std, top_p_groups_by_reward_std


def pairs_with_stds(stds: list[float], interleave: bool = False) -> tuple[torch.Tensor, list[int]]:
    """Groups of two rewards (0, s * sqrt(2)), whose unbiased std is s; group ids 10, 11, ... (optionally with
    the groups' rows interleaved: first rows of every group, then second rows)."""
    rows = [(g + 10, r) for g, s in enumerate(stds) for r in (0.0, s * math.sqrt(2))]
    if interleave:
        rows = rows[0::2] + rows[1::2]
    return torch.tensor([r for _, r in rows]), [g for g, _ in rows]


def kept_groups(mask: torch.Tensor, ids: list[int]) -> set[int]:
    groups = {g for g, keep in zip(ids, mask.tolist(), strict=True) if keep}
    assert all(keep == (g in groups) for g, keep in zip(ids, mask.tolist(), strict=True)), "whole groups only"
    return groups


def test_group_reward_std_with_interleaved_ids():
    order, stds = group_reward_std(torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 5.0]), [7, 3, 7, 3, 7, 3, 9])
    assert order == [7, 3, 9]
    assert stds.tolist() == pytest.approx([math.sqrt(1 / 3), math.sqrt(1 / 3), 0.0])  # a group of one scores 0
    with pytest.raises(ValueError):
        group_reward_std(torch.zeros(3), [0, 0])


@pytest.mark.parametrize("interleave", [False, True])
def test_starpo_s_keeps_the_top_quarter(interleave):
    rewards, ids = pairs_with_stds([0.1, 0.4, 0.0, 0.3, 0.2, 0.0, 0.5, 0.05], interleave)
    assert kept_groups(top_groups_by_reward_std(rewards, ids, 0.25), ids) == {16, 11}  # int(0.25 * 8) = 2
    assert kept_groups(top_groups_by_reward_std(rewards, ids, 0.5), ids) == {16, 11, 13, 14}
    assert top_groups_by_reward_std(rewards, ids, 1.0).all()
    assert not top_groups_by_reward_std(rewards, ids, 0.1).any()  # int(0.8) = 0 groups, as topk(0)


def test_starpo_s_ties_go_to_the_group_seen_first():
    rewards, ids = pairs_with_stds([0.0, 0.0, 0.0, 0.0])
    assert kept_groups(top_groups_by_reward_std(rewards, ids, 0.5), ids) == {10, 11}
    rewards, ids = pairs_with_stds([0.2, 0.3, 0.3, 0.1])
    assert kept_groups(top_groups_by_reward_std(rewards, ids, 0.25), ids) == {11}
    with pytest.raises(ValueError):
        top_groups_by_reward_std(rewards, ids, 1.5)


@pytest.mark.parametrize("interleave", [False, True])
def test_top_p_linear_by_hand(interleave):
    rewards, ids = pairs_with_stds([0.3, 0.0, 0.5, 0.2], interleave)  # sum 1.0, sorted 0.5, 0.3, 0.2
    # threshold 0.9 * 1.0 - 0.01 = 0.89: 0.5 and 0.8 fall short, 1.0 reaches it
    assert kept_groups(top_p_groups_by_reward_std(rewards, ids, 0.9), ids) == {12, 10, 13}
    assert kept_groups(top_p_groups_by_reward_std(rewards, ids, 0.5), ids) == {12}  # 0.5 >= 0.49
    assert kept_groups(top_p_groups_by_reward_std(rewards, ids, 0.8), ids) == {12, 10}  # 0.8 >= 0.79
    # zero-std groups are never kept in linear mode, even when included and top_p is 1
    assert kept_groups(top_p_groups_by_reward_std(rewards, ids, 1.0, include_zero=True), ids) == {12, 10, 13}


def test_top_p_linear_empty_cases():
    rewards, ids = pairs_with_stds([0.0, 0.0, 0.0])
    assert not top_p_groups_by_reward_std(rewards, ids, 0.9).any()  # nothing to keep: the step is skipped
    rewards, ids = pairs_with_stds([0.005, 0.003])  # 0.9 * 0.008 - 0.01 < 0: the threshold is met by no group
    assert not top_p_groups_by_reward_std(rewards, ids, 0.9).any()
    with pytest.raises(ValueError):
        top_p_groups_by_reward_std(rewards, ids, 0.0)
    with pytest.raises(ValueError):
        top_p_groups_by_reward_std(rewards, ids, 0.9, mode="cubic")


def test_top_p_softmax_by_hand():
    rewards, ids = pairs_with_stds([0.3, 0.0, 0.5, 0.2])
    # softmax of (0.5, 0.3, 0.2, 0): cumulative 0.316, 0.574, 0.808, 1; searchsorted(p) + 1 groups
    weights = [math.exp(s) for s in (0.5, 0.3, 0.2, 0.0)]
    assert sum(weights[:2]) / sum(weights) == pytest.approx(0.5744, abs=1e-4)
    assert kept_groups(top_p_groups_by_reward_std(rewards, ids, 0.5, mode="softmax"), ids) == {12, 10}
    assert kept_groups(top_p_groups_by_reward_std(rewards, ids, 0.9, mode="softmax"), ids) == {12, 10, 13, 11}
    assert kept_groups(top_p_groups_by_reward_std(rewards, ids, 0.3, mode="softmax"), ids) == {12}


def test_top_p_one_keeps_fewer_groups_than_the_official_code():
    """At `top_p` 1 RAGEN-2's code keeps every group (every non-zero-std one without `include_zero`); linear mode
    here still applies its threshold: zero-std groups go, and so does a tail of stds summing to less than eps."""
    rewards, ids = pairs_with_stds([0.003, 0.0, 0.7])  # threshold 1.0 * 0.703 - 0.01 = 0.693, met by 0.7 alone
    for include_zero in (False, True):
        kept = top_p_groups_by_reward_std(rewards, ids, 1.0, include_zero=include_zero)
        assert kept_groups(kept, ids) == {12}
    assert top_p_groups_by_reward_std(rewards, ids, 1.0, mode="softmax", include_zero=True).all()
    assert top_p_groups_by_reward_std(rewards, ids, 1.0, mode="softmax", include_zero=False).all(), (
        "softmax mode scores every group whatever include_zero (the official code would drop the zero-std one)"
    )
