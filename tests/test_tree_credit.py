"""C8.4: soft credit (GRPO on a tree's leaves) equals hard credit (one prefix copy, the leaves' mean advantage)
on a real tree's shared prefix, exactly under token-mean; not under per-sequence means of unequal lengths."""

from __future__ import annotations

import pytest
import torch

from course_lib import envs
from course_lib.algos.grpo import group_advantages
from course_lib.rollout import RolloutEngine, SamplingConfig
from course_lib.tree_credit import prefix_gradient_gap, shared_prefix, token_weights
from course_lib.tree_rollout import TreeConfig, sample_trees


@pytest.fixture
def real_tree(warm_model, tokenizer):
    engine = RolloutEngine(warm_model, tokenizer, SamplingConfig(snapshot_envs=True))
    made = [envs.make("tool_arithmetic") for _ in range(8)]
    tree = TreeConfig(global_samples=1, alpha=1.0, beta=0.0)
    return sample_trees(engine, made, [5], 8, tree, torch.Generator().manual_seed(0))


def test_soft_equals_hard_on_a_real_shared_prefix_under_token_mean(warm_model, tokenizer, real_tree):
    trajectories, stats = real_tree
    leaves, cut = shared_prefix(trajectories, stats)
    assert len(leaves) >= 2 and cut > 0
    rewards = torch.tensor([t.total_reward for t in trajectories])
    advantages = group_advantages(rewards, torch.zeros(len(trajectories), dtype=torch.long))
    # the check needs a non-zero mean advantage over the leaves; make one if the draw gave a tie
    chosen = [float(advantages[i]) + 0.5 for i in leaves]
    weights = token_weights(trajectories, leaves, "token-mean")
    gap = prefix_gradient_gap(warm_model, trajectories, leaves, cut, chosen, weights)
    assert gap["leaves"] == len(leaves) and gap["prefix_policy_tokens"] > 0
    assert gap["relative_gap"] < 1e-12


def test_per_sequence_means_break_the_identity_when_lengths_differ(warm_model, tokenizer, real_tree):
    """This tree's leaves all have 6 valid tokens, so `seq-mean-token-mean` weighs them equally and the identity
    holds; the weights it would give leaves of 6, 3, 6, ... valid tokens break it."""
    trajectories, stats = real_tree
    leaves, cut = shared_prefix(trajectories, stats)
    assert {sum(trajectories[i].loss_mask) for i in leaves} == {6}
    chosen = [1.0 + i for i in range(len(leaves))]  # unequal advantages, so unequal weights tilt the sum
    weights = token_weights(trajectories, leaves, "seq-mean-token-mean")
    gap = prefix_gradient_gap(warm_model, trajectories, leaves, cut, chosen, weights)
    assert gap["equal_lengths"] == 1.0 and gap["relative_gap"] < 1e-12
    unequal = [1 / (8 * (3 if k % 2 else 6)) for k in range(len(leaves))]
    gap = prefix_gradient_gap(warm_model, trajectories, leaves, cut, chosen, unequal)
    assert gap["relative_gap"] > 1e-3


def test_weights_by_hand(real_tree):
    trajectories, _ = real_tree
    valid = [sum(t.loss_mask) for t in trajectories]
    assert token_weights(trajectories, [0, 1], "token-mean") == [1 / sum(valid)] * 2
    assert token_weights(trajectories, [0, 1], "seq-mean-token-mean") == [1 / (8 * valid[0]), 1 / (8 * valid[1])]
    with pytest.raises(ValueError, match="token-mean"):
        token_weights(trajectories, [0], "token-sum")


def test_leaves_that_do_not_share_the_prefix_are_refused(warm_model, tokenizer, real_tree):
    trajectories, stats = real_tree
    leaves, cut = shared_prefix(trajectories, stats)
    outside = [i for i, t in enumerate(trajectories) if t.token_ids[:cut] != trajectories[leaves[0]].token_ids[:cut]]
    assert outside  # a refill or another global sample wrote something else
    with pytest.raises(ValueError, match="share"):
        prefix_gradient_gap(warm_model, trajectories, [leaves[0], outside[0]], cut, [1.0, 1.0], [1.0, 1.0])
