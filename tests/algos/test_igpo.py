"""IGPO maths (arXiv 2510.14967): information gains, turn rewards, joint normalisation, reward-to-go."""

from __future__ import annotations

import math

import pytest

from course_lib.algos.igpo import episode_turn_rewards, igpo_advantages, information_gains

# A group of two episodes, a tool call then the answer each; p_0 = 0.2 for both.
# A: p_1 = 0.6 (IG +0.4), outcome 1; B: p_1 = 0.1 (IG -0.1), outcome 0.
# Pooled rewards (0.4, 1.0, -0.1, 0.0): mean 0.325, population std 0.43229.
GROUPS, TRAJS, STEPS = [0, 0, 0, 0], ["A", "A", "B", "B"], [0, 1, 0, 1]
OUTCOME = [False, True, False, True]


def approx(values):
    return pytest.approx(values, abs=1e-4)


def test_gains_are_differences_of_geometric_mean_probabilities_and_telescope():
    logps = [math.log(0.2), math.log(0.6), math.log(0.3)]
    gains = information_gains(logps)
    assert gains == approx([0.4, -0.3])
    assert sum(gains) == pytest.approx(0.3 - 0.2, abs=1e-12)  # p_last - p_0
    assert information_gains(logps, gain="log_prob") == approx([math.log(3), math.log(0.5)])
    assert information_gains([math.log(0.5)]) == []


def test_joint_normalisation_then_reward_to_go():
    rewards = [0.4, 1.0, -0.1, 0.0]
    out = igpo_advantages(rewards, OUTCOME, GROUPS, TRAJS, STEPS)
    assert out == approx([1.7349, 1.5615, -1.7349, -0.7518])
    halved = igpo_advantages(rewards, OUTCOME, GROUPS, TRAJS, STEPS, gamma=0.5)
    assert halved == approx([0.9542, 1.5615, -1.3590, -0.7518])


def test_equal_outcomes_still_give_the_tool_turns_a_signal():
    # both outcomes 0 (GRPO's advantage is 0 for the whole group); pooled (0.4, 0, -0.1, 0): mean 0.075, std 0.19203
    out = igpo_advantages([0.4, 0.0, -0.1, 0.0], OUTCOME, GROUPS, TRAJS, STEPS)
    assert out == approx([1.3019, -0.3906, -1.3019, -0.3906])


def test_separate_pools_and_rows_in_any_order():
    # gains (0.4, -0.1): +-1 (population std 0.25); outcomes (1, 0): +-1
    out = igpo_advantages([0.0, -0.1, 1.0, 0.4], [True, False, True, False], GROUPS, ["B", "B", "A", "A"], [1, 0, 1, 0],
                          normalisation="separate")  # fmt: skip
    assert out == approx([-1.0, -2.0, 1.0, 2.0])
    single = igpo_advantages([0.7], [True], [0], ["A"], [0])  # a pool of one: std 1, centred to 0
    assert single == approx([0.0])


def test_turn_rewards_of_an_episode_and_bad_input():
    assert episode_turn_rewards([0.4, 0.1, 0.2], 1.0, 3) == [0.4, 0.1, 1.0]
    assert episode_turn_rewards([], 0.0, 1) == [0.0]
    with pytest.raises(ValueError, match="information gains"):
        episode_turn_rewards([0.4], 1.0, 3)
    with pytest.raises(ValueError, match="normalisation"):
        igpo_advantages([1.0], [True], [0], ["A"], [0], normalisation="per_turn")
    with pytest.raises(ValueError, match="duplicate"):
        igpo_advantages([1.0, 0.0], [True, False], [0, 0], ["A", "A"], [0, 0])
    with pytest.raises(ValueError, match="gain"):
        information_gains([0.0], gain="ratio")


def folded_at_zero(normalised: list[float], gamma: float) -> list[float]:
    """The official turn rule on one episode's normalised turn rewards `[T]`: a turn ends where its reward is
    non-zero (the last turn always ends), and a turn that does not end shares the advantage of the next that does."""
    ends = [t for t, r in enumerate(normalised) if r != 0 or t == len(normalised) - 1]
    advantages, running = [0.0] * len(normalised), 0.0
    for end, start in zip(reversed(ends), reversed([0] + [e + 1 for e in ends[:-1]])):
        running = normalised[end] + gamma * running
        advantages[start : end + 1] = [running] * (end + 1 - start)
    return advantages


def test_a_turn_whose_normalised_reward_is_zero_is_discounted_here_and_folded_in_the_official_code():
    # pooled (0.5, 1.0, 0.5, 0.0): mean 0.5, population std sqrt(0.125); normalised (0, +1.4142, 0, -1.4142)
    rewards = [0.5, 1.0, 0.5, 0.0]
    normalised = {"A": [0.0, 1.4142], "B": [0.0, -1.4142]}
    for gamma in (1.0, 0.5):
        ours = igpo_advantages(rewards, OUTCOME, GROUPS, TRAJS, STEPS, gamma=gamma)
        official = folded_at_zero(normalised["A"], gamma) + folded_at_zero(normalised["B"], gamma)
        assert ours == approx([gamma * 1.4142, 1.4142, -gamma * 1.4142, -1.4142])
        assert official == approx([1.4142, 1.4142, -1.4142, -1.4142])  # the first turn folded into the answer's
        assert (ours == approx(official)) == (gamma == 1.0)  # they differ by the skipped discount step
