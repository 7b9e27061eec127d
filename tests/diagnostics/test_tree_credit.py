"""C8.4: soft credit (GRPO on a tree's leaves) equals hard credit (one prefix copy, the leaves' mean advantage)
on a real tree's shared prefix, exactly under token-mean; not under per-sequence means of leaves of unequal lengths
(built by hand: a sampled tree's lengths depend on the machine)."""

from __future__ import annotations

import pytest
import torch

from course_lib import envs
from course_lib.algos.grpo import group_advantages
from course_lib.diagnostics.tree_credit import prefix_gradient_gap, shared_prefix, token_weights
from course_lib.engine.rollout import RolloutEngine, SamplingConfig, Trajectory
from course_lib.engine.tree_rollout import TreeConfig, sample_trees


@pytest.fixture
def real_tree(warm_model, tokenizer):
    """A sampled tree (one global sample, the rest branches) with a shared prefix that holds policy tokens: the
    first generator seed whose tree has one. What the model samples depends on the machine's float kernels, so
    the tests below assert properties of whatever tree this is, never its sampled tokens or lengths."""
    engine = RolloutEngine(warm_model, tokenizer, SamplingConfig(snapshot_envs=True))
    tree = TreeConfig(global_samples=1, alpha=1.0, beta=0.0)
    for seed in range(10):
        made = [envs.make("tool_arithmetic") for _ in range(8)]
        trajectories, stats = sample_trees(engine, made, [5], 8, tree, torch.Generator().manual_seed(seed))
        leaves, cut = shared_prefix(trajectories, stats)
        if len(leaves) >= 2 and cut > 0:
            return trajectories, stats
    raise AssertionError("no tree of ten branched after a tool call")


def hand_tree(suffix_lengths: list[int]) -> tuple[list[Trajectory], int]:
    """Leaves built by hand: a shared prefix of 9 tokens (4 of prompt, 3 policy tokens, 2 of tool output), then
    each leaf's own policy tokens, as many as `suffix_lengths` says; returns them and the prefix's length."""
    prefix, prefix_mask = [11, 12, 13, 14, 21, 22, 23, 31, 32], [0, 0, 0, 0, 1, 1, 1, 0, 0]
    leaves = []
    for k, length in enumerate(suffix_lengths):
        ids = prefix + [40 + 3 * k + j for j in range(length)]
        leaves.append(
            Trajectory(
                env=None,
                token_ids=ids,
                loss_mask=prefix_mask + [1] * length,
                logprobs=[0.0] * len(ids),
                entropies=[0.0] * len(ids),
                turn_ids=[-1] * 4 + [0] * (len(ids) - 4),
            )
        )
    return leaves, len(prefix)


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


def test_per_sequence_means_break_the_identity_when_lengths_differ(make_model):
    """Leaves of 8, 5, 8 and 5 valid tokens sharing a prefix: under `token-mean` every token weighs 1 / 26 and soft
    credit equals hard; under `seq-mean-token-mean` a leaf's tokens weigh 1 / (4 x its length), and the gap is, by
    hand, |sum A w - n mean(A) mean(w)| / (n mean(A) mean(w)) = 0.01875 / 0.40625 (the prefix's gradient is the
    same in every leaf). Leaves of equal length close it again."""
    model = make_model()
    chosen = [1.0, 2.0, 3.0, 4.0]  # unequal advantages, so unequal weights tilt the sum
    leaves, cut = hand_tree([5, 2, 5, 2])
    rows = list(range(len(leaves)))
    assert [sum(t.loss_mask) for t in leaves] == [8, 5, 8, 5]
    gap = prefix_gradient_gap(model, leaves, rows, cut, chosen, token_weights(leaves, rows, "token-mean"))
    assert gap["equal_lengths"] == 0.0 and gap["prefix_policy_tokens"] == 3 and gap["relative_gap"] < 1e-12
    weights = token_weights(leaves, rows, "seq-mean-token-mean")
    assert weights == [1 / 32, 1 / 20, 1 / 32, 1 / 20]
    gap = prefix_gradient_gap(model, leaves, rows, cut, chosen, weights)
    assert gap["relative_gap"] == pytest.approx(0.01875 / 0.40625, rel=1e-9)
    equal, cut = hand_tree([4, 4, 4, 4])
    gap = prefix_gradient_gap(model, equal, rows, cut, chosen, token_weights(equal, rows, "seq-mean-token-mean"))
    assert gap["equal_lengths"] == 1.0 and gap["relative_gap"] < 1e-12


def test_weights_by_hand(real_tree):
    trajectories, _ = real_tree
    valid = [sum(t.loss_mask) for t in trajectories]
    assert token_weights(trajectories, [0, 1], "token-mean") == [1 / sum(valid)] * 2
    assert token_weights(trajectories, [0, 1], "seq-mean-token-mean") == [1 / (8 * valid[0]), 1 / (8 * valid[1])]
    with pytest.raises(ValueError, match="token-mean"):
        token_weights(trajectories, [0], "token-sum")


def test_leaves_that_do_not_share_the_prefix_are_refused(make_model):
    leaves, cut = hand_tree([3, 3])
    leaves[1].token_ids[5] = 99  # a policy token of the prefix differs
    with pytest.raises(ValueError, match="share"):
        prefix_gradient_gap(make_model(), leaves, [0, 1], cut, [1.0, 1.0], [1.0, 1.0])
