"""GraphGPO maths (arXiv 2605.26684): the group's state graph, distances to success, graph returns, advantages."""

from __future__ import annotations

import pytest

from course_lib.algos.gigpo import gigpo_advantages
from course_lib.algos.graphgpo import SUCCESS, distances, graphgpo_advantages, next_states, progress

# Three episodes of one task: tau1 A -> B -> C -> success; tau2 A -> B -> (fails); tau3 A -> E -> (invalid, fails)
ANCHORS = list("ABCABAE")
GROUPS = [0] * 7
TRAJS = [1, 1, 1, 2, 2, 3, 3]
STEPS = [0, 1, 2, 0, 1, 0, 1]
REWARDS = [0, 0, 10, 0, 0, 0, 0]
VALID = [True] * 6 + [False]


def approx(values):
    return pytest.approx(values, abs=1e-4)


def test_distances_are_shortest_paths_and_unreachable_is_dmax_plus_one():
    edges = [("A", "B"), ("B", "C"), ("C", SUCCESS), ("A", "E"), ("E", "E"), ("B", "A")]
    assert distances(edges) == {"A": 3, "B": 2, "C": 1, SUCCESS: 0, "E": 4}
    assert distances([("A", "B"), ("B", "B")]) == {"A": 1, "B": 1}  # nothing succeeded: every node 1


def test_hand_computed_example():
    # d(s'): B 2, C 1, success 0, B 2, dead end 4, E 4, dead end 4; R^G = 10 * 0.1^d - 0.1 if invalid
    # A^G: group A returns (0.1, 0.1, 0.001) -> +1/sqrt3, +1/sqrt3, -2/sqrt3; group B (1, 0.001) -> +-1/sqrt2
    # A^E: pooled step scores (10, 10, 10, 0, 0, 0, -0.1): mean 4.2714, std 5.3554
    out = graphgpo_advantages(REWARDS, VALID, ANCHORS, GROUPS, TRAJS, STEPS, omega=0.1, success_reward=10)
    assert out.distance == [2, 1, 0, 2, 4, 4, 4]
    assert out.graph_returns == approx([0.1, 1.0, 10.0, 0.1, 0.001, 0.001, -0.099])
    assert out.step == approx([0.5774, 0.7071, 0.0, 0.5774, -0.7071, -1.1547, 0.0])
    assert out.advantages == approx([1.6464, 1.7761, 1.0690, -0.2198, -1.5042, -1.9518, -0.8158])


def test_progress_inside_a_failed_episode_is_credited_where_gigpo_penalises_it():
    graph = graphgpo_advantages(REWARDS, VALID, ANCHORS, GROUPS, TRAJS, STEPS, omega=0.1, success_reward=10)
    gigpo = gigpo_advantages(REWARDS, VALID, ANCHORS, GROUPS, TRAJS, STEPS, gamma=0.1)
    assert graph.step[3] > 0 > gigpo.step[3]  # tau2's A -> B, the first step of a failed episode
    success = [True, True, True, False, False, False, False]
    assert progress(ANCHORS, GROUPS, TRAJS, STEPS, success) == [True, True, True, True, False, False, False]
    assert graph.failed_progress_share == pytest.approx(1 / 4)  # of the failed rows 3-6, only tau2's A -> B
    everyone_fails = graphgpo_advantages([0, 0], [True, True], ["A", "B"], [0, 0], [1, 1], [0, 1])
    succeeds = graphgpo_advantages([0, 1], [True, True], ["A", "B"], [0, 0], [1, 1], [0, 1])
    assert everyone_fails.failed_progress_share == 0.0  # d = 1 everywhere: no step gets closer
    assert succeeds.failed_progress_share != succeeds.failed_progress_share  # no failed episode: nan


def test_reduces_to_gigpo_on_uniform_groups_whose_successes_are_shortest_paths():
    # group 0: two successes along shortest paths (A B C, A D); group 1: two failures; omega = gamma
    anchors = ["A", "B", "C", "A", "D", "X", "Y", "X", "Z"]
    groups = [0, 0, 0, 0, 0, 1, 1, 1, 1]
    trajs = [0, 0, 0, 1, 1, 2, 2, 3, 3]
    steps = [0, 1, 2, 0, 1, 0, 1, 0, 1]
    rewards = [0, 0, 1, 0, 1, 0, 0, 0, 0]
    valid = [True] * 8 + [False]
    graph = graphgpo_advantages(rewards, valid, anchors, groups, trajs, steps, omega=0.9)
    gigpo = gigpo_advantages(rewards, valid, anchors, groups, trajs, steps, gamma=0.9)
    assert graph.step == approx(gigpo.step)
    assert graph.advantages == approx(gigpo.advantages)


def test_next_states_and_bad_input():
    following = next_states(list("AB"), [0, 0], [5, 5], [1, 0], [True, True])
    assert following == [SUCCESS, "A"]  # rows in any order: step 0 is the second row
    with pytest.raises(ValueError, match="duplicate step"):
        graphgpo_advantages([0, 1], [True, True], list("AB"), [0, 0], [1, 1], [0, 0])
    with pytest.raises(ValueError, match="omega"):
        graphgpo_advantages([1], [True], ["A"], [0], [1], [0], omega=0.0)
    with pytest.raises(ValueError, match="same length"):
        graphgpo_advantages([1], [True], ["A", "B"], [0], [1], [0])


def test_the_success_scale_cancels_only_where_no_step_is_penalised():
    # one group: tau1 A -> B -> success; tau2 A -> C -> B -> success; tau3 A -> D -> (fails). d: B 1, C 2, D 3
    # (unreachable: d_max + 1). Step group A holds r omega^1, r omega^2 and r omega^3 (minus 0.1 where A -> D is
    # invalid): without the penalty they are one vector times r, which the std normalisation removes; with it,
    # (0.1, 0.01, -0.099) at r = 1 and (1, 0.1, -0.09) at r = 10 are not multiples of each other.
    anchors, trajs, steps = list("ABACBAD"), [1, 1, 2, 2, 2, 3, 3], [0, 1, 0, 1, 2, 0, 1]
    rewards, groups = [0, 1, 0, 0, 1, 0, 0], [0] * 7

    def group_a(valid: list[bool], success_reward: float) -> list[float]:
        out = graphgpo_advantages(rewards, valid, anchors, groups, trajs, steps, omega=0.1,
                                  success_reward=success_reward, eps=0.0)  # fmt: skip
        assert out.distance == [1, 0, 2, 1, 0, 3, 3]
        return [out.step[row] for row in (0, 2, 5)]

    clean, penalised = [True] * 7, [True] * 5 + [False, True]
    assert group_a(clean, 1.0) == approx(group_a(clean, 10.0))
    assert group_a(clean, 1.0) == approx([1.1508, -0.4932, -0.6576])  # z-scores (sample std) of (0.1, 0.01, 0.001)
    assert group_a(penalised, 1.0) == approx([0.9667, 0.0636, -1.0303])  # z-scores of (0.1, 0.01, -0.099)
    assert group_a(penalised, 10.0) == approx([1.1392, -0.4065, -0.7328])  # z-scores of (1, 0.1, -0.09)
