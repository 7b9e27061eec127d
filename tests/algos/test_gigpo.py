"""GiGPO maths (arXiv 2505.10978): returns, step groups, episode/step advantages, the penalty."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
import torch

from course_lib.algos.gigpo import (
    GiGPOSettings,
    apply_invalid_action_penalty,
    discounted_returns,
    episode_advantages,
    gigpo_advantages,
    step_group_advantages,
    step_group_ids,
    step_group_sizes,
    to_hashable,
    token_advantages,
)

R2 = 0.70711  # (v - mean) / unbiased std for any two different values: 0.5 / sqrt(0.5)


def approx(values):
    return pytest.approx(values, rel=1e-4, abs=1e-6)


def test_discounted_returns():
    assert discounted_returns([0, 0, 1], 0.5) == approx([0.25, 0.5, 1.0])  # 1*0.5^2, 1*0.5, 1
    assert discounted_returns([1, 2, 3], 1.0) == approx([6.0, 5.0, 3.0])  # suffix sums
    assert discounted_returns([], 0.9) == []
    for gamma in (-0.1, 1.5):
        with pytest.raises(ValueError, match="gamma"):
            discounted_returns([1.0], gamma)


# Two episode groups; "s" appears in both and must not be pooled across them.
RETURNS = [1, 0, 3, 5, 10, 2, 2, 7]
ANCHORS = ["s", "s", "s", "s", "s", ("x", 1), ("x", 1), "lonely"]
GROUPS = [0, 0, 1, 1, 1, 0, 0, 1]


def test_step_groups_are_keyed_by_episode_group_and_anchor():
    assert step_group_ids(ANCHORS, GROUPS) == [0, 0, 1, 1, 1, 2, 2, 3]
    assert step_group_sizes(ANCHORS, GROUPS) == [2, 2, 3, 3, 3, 2, 2, 1]


def test_step_group_advantages_by_hand():
    # (0,"s"): [1,0], mean 0.5, std sqrt(0.5) -> +-0.70711
    # (1,"s"): [3,5,10], mean 6, std sqrt((9+1+16)/2) = sqrt(13) = 3.60555 -> -3/3.60555, -1/.., 4/..
    # (0,("x",1)): [2,2] ties -> 0;  (1,"lonely"): singleton -> 0
    expected = [R2, -R2, -0.83205, -0.27735, 1.10940, 0.0, 0.0, 0.0]
    assert step_group_advantages(RETURNS, ANCHORS, GROUPS) == approx(expected)
    # mean_norm: only the centring
    expected = [0.5, -0.5, -3.0, -1.0, 4.0, 0.0, 0.0, 0.0]
    assert step_group_advantages(RETURNS, ANCHORS, GROUPS, scale_by_std=False) == approx(expected)


def test_repeated_state_in_one_trajectory_shares_a_step_group():
    # anchors a, b, a: rows 0 and 2 form one group [1, 3], mean 2, std sqrt(2) -> -0.70711, +0.70711
    assert step_group_ids(["a", "b", "a"], [0, 0, 0]) == [0, 1, 0]
    assert step_group_advantages([1, 2, 3], ["a", "b", "a"], [0, 0, 0]) == approx([-R2, 0.0, R2])


# Group 0: trajectory 0 has three rows scored 1, trajectory 1 one row scored 0; group 1: one row.
SCORES = [1, 1, 1, 0, 0.7]
EP_GROUPS = [0, 0, 0, 0, 1]
TRAJ = [0, 0, 0, 1, 2]
STEP = [0, 1, 2, 0, 0]


def test_episode_advantages_pooled_vs_per_trajectory():
    # pooled: [1,1,1,0], mean 0.75, std sqrt((3*0.0625 + 0.5625)/3) = 0.5 -> 0.5, -1.5;
    # the one-row group 1 uses mean 0, std 1 -> its raw score 0.7 / (1 + 1e-6)
    pooled = episode_advantages(SCORES, EP_GROUPS, TRAJ, STEP)
    assert pooled == approx([0.5, 0.5, 0.5, -1.5, 0.7])
    assert episode_advantages(SCORES, EP_GROUPS, TRAJ, STEP, scale_by_std=False) == approx([0.25] * 3 + [-0.75, 0.7])
    # per trajectory: [1, 0], mean 0.5, std sqrt(0.5) -> +-0.70711; one trajectory in group 1 -> 0
    per_traj = episode_advantages(SCORES, EP_GROUPS, TRAJ, STEP, pooled=False)
    assert per_traj == approx([R2, R2, R2, -R2, 0.0])


def test_per_trajectory_uses_the_first_step_score_and_each_rows_own_score():
    # trajectory 0's step 1 (listed first) is penalised to 0.9; its score is step 0's 1.0.
    # sample [1.0, 0.0]: mean 0.5, std sqrt(0.5); row 0: (0.9 - 0.5) / 0.70711 = 0.56569
    adv = episode_advantages([0.9, 1.0, 0.0], [0, 0, 0], [0, 0, 1], [1, 0, 0], pooled=False)
    assert adv == approx([0.56569, R2, -R2])


def test_pooled_episode_advantages_equal_grpo_on_step_rows():
    torch = pytest.importorskip("torch")
    from course_lib.algos.grpo import group_advantages

    scores = [1.0, 1.0, 1.0, 0.0, 0.5, 0.5, 2.0, 3.0, 3.0, 3.0]
    groups = [0, 0, 0, 0, 0, 0, 1, 1, 1, 1]
    traj = [0, 0, 0, 1, 2, 2, 3, 4, 4, 4]
    steps = [0, 1, 2, 0, 0, 1, 0, 0, 1, 2]
    expected = group_advantages(torch.tensor(scores), torch.tensor(groups)).tolist()
    assert episode_advantages(scores, groups, traj, steps) == approx(expected)


def test_invalid_action_penalty_is_step_local():
    assert apply_invalid_action_penalty([1, 2, 3], [True, False, True]) == approx([1.0, 1.9, 3.0])
    assert apply_invalid_action_penalty([1, 2], [False, True], coef=0.5) == approx([0.5, 2.0])
    out = gigpo_advantages([0, 0, 1], [True, False, True], ["a", "b", "c"], [0] * 3, [0] * 3, [0, 1, 2], gamma=0.5)
    # returns [0.25, 0.5, 1] -> only the invalid middle step loses 0.1; step 0 keeps 0.25
    assert out.returns == approx([0.25, 0.4, 1.0])
    assert out.scores == approx([1.0, 0.9, 1.0])  # R(tau) = 1, minus the row's own penalty


# Full example, one group, gamma 0.9. Trajectory 0: start -> hall -> door, rewards 0, 0, 1.
# Trajectory 1: start -> start (stays: a repeated anchor) -> hall, rewards 0, 0, 0.5.
FULL = dict(
    rewards=[0, 0, 1, 0, 0, 0.5],
    valid=[True] * 6,
    anchors=["start", "hall", "door", "start", "start", "hall"],
    group_ids=[0] * 6,
    traj_ids=[0, 0, 0, 1, 1, 1],
    step_index=[0, 1, 2, 0, 1, 2],
    gamma=0.9,
)
# A^E: scores [1,1,1,.5,.5,.5], mean 0.75, std sqrt(6 * 0.0625 / 5) = 0.27386 -> +-0.91287
EPISODE = [0.91287] * 3 + [-0.91287] * 3
# returns [0.81, 0.9, 1.0, 0.405, 0.45, 0.5]
# "start": [0.81, 0.405, 0.45], mean 0.555, std sqrt((.255^2 + .15^2 + .105^2) / 2) = 0.22198
#   -> 0.255/0.22198 = 1.14875, -0.15/0.22198 = -0.67574, -0.105/0.22198 = -0.47302
# "hall": [0.9, 0.5] -> +-0.70711; "door": singleton -> 0
STEP_ADV = [1.14875, R2, 0.0, -0.67574, -0.47302, -R2]


def test_gigpo_full_example_by_hand():
    out = gigpo_advantages(**FULL)
    assert out.returns == approx([0.81, 0.9, 1.0, 0.405, 0.45, 0.5])
    assert out.scores == approx([1.0, 1.0, 1.0, 0.5, 0.5, 0.5])
    assert out.episode == approx(EPISODE)
    assert out.step == approx(STEP_ADV)
    assert out.advantages == approx([e + s for e, s in zip(EPISODE, STEP_ADV)])  # omega = 1
    assert out.step_group_size == [3, 2, 1, 3, 3, 2]
    assert gigpo_advantages(**FULL, pooled=False).episode == approx([R2] * 3 + [-R2] * 3)  # [1, .5]
    no_step = gigpo_advantages(**FULL, omega=0.0)
    assert no_step.advantages == approx(no_step.episode)


def test_gamma_one_with_terminal_reward_makes_step_advantages_copy_the_outcome():
    """Pitfall: with gamma = 1 every return of a trajectory equals R(tau), so A^S only re-compares
    the trajectories' outcomes (here exactly the per-trajectory A^E): no credit assignment."""
    out = gigpo_advantages(
        [0, 0, 1, 0, 0, 0], [True] * 6, ["s0", "s1", "s2"] * 2, [0] * 6, [0, 0, 0, 1, 1, 1], [0, 1, 2] * 2,
        gamma=1.0, pooled=False,
    )  # fmt: skip
    assert out.returns == approx([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    assert out.step == approx(out.episode)
    assert out.step == approx([R2] * 3 + [-R2] * 3)


def test_row_order_does_not_matter():
    reference = gigpo_advantages(**FULL)
    order = list(range(6))
    random.Random(0).shuffle(order)
    shuffled = {k: [v[i] for i in order] if isinstance(v, list) else v for k, v in FULL.items()}
    out = gigpo_advantages(**shuffled)
    for field in ("advantages", "episode", "step", "returns", "scores", "step_group_size"):
        assert getattr(out, field) == approx([getattr(reference, field)[i] for i in order])


def test_to_hashable():
    assert to_hashable("room") == "room"
    assert to_hashable(3) == 3
    assert to_hashable([1, [2, 3]]) == (1, (2, 3))
    assert to_hashable({"b": [1], "a": 2}) == (("a", 2), ("b", (1,)))
    assert to_hashable(np.array([[1, 2], [3, 4]])) == (1, 2, 3, 4)
    assert to_hashable(np.int64(5)) == 5 and type(to_hashable(np.int64(5))) is int
    assert step_group_ids([np.array([1, 2]), np.array([1, 2]), np.array([2, 1])], [0, 0, 0]) == [0, 0, 1]
    with pytest.raises(TypeError, match="object"):
        to_hashable(object())
    from course_lib.envs.two_hop_qa import Question

    question = Question("arvex works", "brenna", "founder", "born_in")
    key = to_hashable((question, (("arvex works founder", "x"),)))
    assert key == (("Question", ("arvex works", "brenna", "founder", "born_in")), (("arvex works founder", "x"),))
    assert step_group_ids([(question, ()), (question, ()), (Question("b", "c", "ceo", "lives_in"), ())], [0] * 3) == [
        0,
        0,
        1,
    ], "equal questions with equal calls share a step group"


def test_input_validation():
    base = dict(rewards=[0, 1], valid=[True, True], anchors=["a", "b"], group_ids=[0, 0], traj_ids=[0, 0])
    with pytest.raises(ValueError, match="duplicate step"):
        gigpo_advantages(**base, step_index=[0, 0])
    with pytest.raises(ValueError, match="same length"):
        gigpo_advantages(**base, step_index=[0])
    with pytest.raises(ValueError, match="gamma"):
        gigpo_advantages(**base, step_index=[0, 1], gamma=2.0)
    with pytest.raises(ValueError, match="more than one episode group"):
        gigpo_advantages(**{**base, "group_ids": [0, 1]}, step_index=[0, 1])


def test_token_advantages_combine_eq8_over_the_callers_token_layout():
    """Hand-computed: one group, trajectories a and b of two steps, gamma 0.5, pooled=False. Returns a: 0.5, 1;
    b: 0, 0. Step group s0 = {a0: 0.5, b0: 0} gives A^S = +-0.25 / 0.35355 = +-0.70711; s1, s2 are singletons (0).
    Episode scores 1 and 0 give A^E = +-0.5 / 0.70711 = +-0.70711. A = A^E + A^S per token (Eq. 8), one token per
    step at column = step index."""
    rows, cols = torch.tensor([0, 0, 1, 1]), torch.tensor([0, 1, 0, 1])

    def spread(values):
        out = torch.zeros(2, 3)
        out[rows, cols] = values
        return out

    table = dict(
        rewards=[0.0, 1.0, 0.0, 0.0], valid=[True] * 4, anchors=["s0", "s1", "s0", "s2"], group_ids=[0] * 4,
        traj_ids=["a", "a", "b", "b"], step_index=[0, 1, 0, 1],
    )  # fmt: skip
    settings = GiGPOSettings(gamma=0.5, step_weight=1.0, episode_baseline="trajectory", invalid_penalty=0.0)
    tokens, stats = token_advantages(table, spread, settings)
    r = 0.70711
    expected = torch.tensor([[2 * r, r, 0.0], [-2 * r, -r, 0.0]])
    assert torch.allclose(tokens, expected, atol=1e-4) and tokens.dtype == torch.float32
    assert stats == {"step_group_singleton_share": 0.5, "step_group_size_mean": 1.5}
    # omega weighs only the step part; a given episode part replaces the spread A^E
    half, _ = token_advantages(table, spread, dataclasses.replace(settings, step_weight=0.5))
    assert torch.allclose(half, torch.tensor([[1.5 * r, r, 0.0], [-1.5 * r, -r, 0.0]]), atol=1e-4)
    only_step, _ = token_advantages(table, spread, settings, episode_tokens=torch.zeros(2, 3))
    assert torch.allclose(only_step, torch.tensor([[r, 0.0, 0.0], [-r, 0.0, 0.0]]), atol=1e-4)
    # an empty table gives zeros and no division by zero in the statistics
    empty = dict(rewards=[], valid=[], anchors=[], group_ids=[], traj_ids=[], step_index=[])
    nothing, stats = token_advantages(empty, lambda values: torch.zeros(2, 3) + values.sum(), settings)
    assert torch.equal(nothing, torch.zeros(2, 3)) and stats["step_group_size_mean"] == 0.0
