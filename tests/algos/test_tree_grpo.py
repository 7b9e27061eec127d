"""Tree-GRPO maths (arXiv 2509.21240): intra-tree plus inter-tree GRPO advantages, hand-computed."""

from __future__ import annotations

import pytest
import torch

from course_lib.algos.grpo import group_advantages
from course_lib.algos.tree_grpo import tree_advantages


def approx(values):
    return pytest.approx(values, abs=1e-4)


def t(values, dtype=torch.float):
    return torch.tensor(values, dtype=dtype)


def test_one_tree_is_twice_grpo():
    # root -> a, b; a -> l1, l2; b -> l3, l4; rewards 1, 0, 0, 0: mean 0.25, std 0.5, z = 1.5, -0.5 (both terms)
    out = tree_advantages(t([1, 0, 0, 0]), t([0, 0, 0, 0], torch.long), t([7, 7, 7, 7], torch.long))
    assert out.tolist() == approx([3.0, -1.0, -1.0, -1.0])


def test_two_trees_sum_the_two_z_scores():
    # tree A leaves (1, 1, 0), tree B (0, 0, 0): prompt mean 1/3, std 0.5164 -> +1.2910 / -0.6455;
    # intra A: mean 2/3, std 0.5774 -> +0.5774, +0.5774, -1.1547; intra B: equal rewards -> 0
    out = tree_advantages(t([1, 1, 0, 0, 0, 0]), t([0] * 6, torch.long), t([0, 0, 0, 1, 1, 1], torch.long))
    assert out.tolist() == approx([1.8683, 1.8683, -1.8002, -0.6455, -0.6455, -0.6455])
    mixed = tree_advantages(t([1, 0, 0, 1, 1, 0]), t([0] * 6, torch.long), t([0, 0, 0, 1, 1, 1], torch.long))
    assert mixed.tolist() == approx([2.0676, -1.4902, -1.4902, 1.4902, 1.4902, -2.0676])


def test_chains_give_grpo_exactly_and_the_official_code_adds_the_raw_reward():
    rewards, prompts = t([1, 0, 0, 0, 1, 1]), t([0, 0, 0, 0, 1, 1], torch.long)
    chains = torch.arange(6)
    assert torch.equal(tree_advantages(rewards, prompts, chains), group_advantages(rewards, prompts))
    official = tree_advantages(t([1, 0, 0, 0]), t([0] * 4, torch.long), torch.arange(4), singleton="raw")
    assert official.tolist() == approx([2.5, -0.5, -0.5, -0.5])


def test_prompts_are_separate_groups_and_mean_only_centres():
    out = tree_advantages(t([1, 0, 1, 1]), t([0, 0, 1, 1], torch.long), t([0, 0, 1, 1], torch.long))
    assert out.tolist() == approx([2 * 0.70711, -2 * 0.70711, 0.0, 0.0])
    centred = tree_advantages(t([1, 0, 0, 0]), t([0] * 4, torch.long), t([0, 0, 1, 1], torch.long), scale_by_std=False)
    assert centred.tolist() == approx([0.75 + 0.5, -0.25 - 0.5, -0.25, -0.25])


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="one prompt"):
        tree_advantages(t([1, 0]), t([0, 1], torch.long), t([0, 0], torch.long))
    with pytest.raises(ValueError, match="same shape"):
        tree_advantages(t([1, 0]), t([0], torch.long), t([0, 0], torch.long))
    with pytest.raises(ValueError, match="singleton"):
        tree_advantages(t([1, 0]), t([0, 0], torch.long), t([0, 1], torch.long), singleton="mean")
