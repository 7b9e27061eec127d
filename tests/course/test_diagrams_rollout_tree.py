"""Chapter 08's diagram draws the branch probabilities and decisions ARPO's rule computes for the worked example."""

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from course_lib.algos.arpo import branch_probability, should_branch  # noqa: E402
from course_lib.course.diagrams import rollout_tree  # noqa: E402


def drawn(fig) -> dict[str, str]:
    return {text.get_gid(): text.get_text() for ax in fig.axes for text in ax.texts if text.get_gid()}


def test_labels_are_the_library_values():
    example = rollout_tree.EXAMPLE
    tree = rollout_tree.grow(example)
    texts = drawn(rollout_tree.figure(example))
    generator = torch.Generator().manual_seed(example.seed)
    for i, (after, initial) in enumerate(zip(example.after, example.initial)):
        probability = float(branch_probability(after, initial, example.alpha, example.beta))
        assert tree.probabilities[i] == probability
        assert tree.branched[i] == should_branch(probability, generator)  # the same draws, in the same order
        assert texts[f"point-{i}"] == rollout_tree.point_label(after, initial, probability, tree.branched[i])
    assert tree.probabilities == pytest.approx([0.7, 0.05])


def test_the_budget_is_spent_exactly():
    for seed in range(20):
        tree = rollout_tree.grow(rollout_tree.TreeExample(seed=seed))
        assert len(tree.leaves) == 4
        forks = [index for kind, index in tree.leaves if kind == "branch"]
        assert forks == [i for i, b in enumerate(tree.branched) if b]


def test_certain_branching_fills_the_budget_without_refills():
    example = rollout_tree.TreeExample(alpha=1.0, beta=0.0)
    tree = rollout_tree.grow(example)
    assert tree.probabilities == [1.0, 1.0] and tree.branched == [True, True]
    assert [kind for kind, _ in tree.leaves] == ["global", "global", "branch", "branch"]
    never = rollout_tree.grow(rollout_tree.TreeExample(alpha=0.0, beta=0.0))
    assert [kind for kind, _ in never.leaves] == ["global", "global", "refill", "refill"]
