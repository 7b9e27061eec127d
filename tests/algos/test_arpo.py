"""ARPO's branching rule (arXiv 2507.19849): branch probability by hand, normalised entropy, seeded draws."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.algos.arpo import branch_probability, normalised_entropy, should_branch


def test_branch_probability_by_hand():
    # 0.5 + 0.2 * dH, clipped to [0, 1]
    assert branch_probability(0.4, 0.4) == pytest.approx(0.5)  # dH = 0: the fair coin
    assert branch_probability(1.0, 0.0) == pytest.approx(0.7)  # dH = 1
    assert branch_probability(0.0, 1.0) == pytest.approx(0.3)  # dH = -1
    assert branch_probability(0.0, 3.0) == 0.0  # 0.5 - 0.6 -> clipped to 0
    assert branch_probability(3.0, 0.0) == 1.0  # 0.5 + 0.6 -> clipped to 1
    assert branch_probability(0.3, 0.1, alpha=0.2, beta=1.0) == pytest.approx(0.4)  # 0.2 + 1.0 * 0.2
    assert isinstance(branch_probability(0.5, 0.2), float)
    assert isinstance(branch_probability(1, 0), float)


def test_branch_probability_is_elementwise_on_tensors():
    after = torch.tensor([0.4, 1.0, 0.0, 3.0])
    initial = torch.tensor([0.4, 0.0, 3.0, 0.0])
    out = branch_probability(after, initial)
    assert isinstance(out, torch.Tensor) and out.shape == (4,)
    assert torch.allclose(out, torch.tensor([0.5, 0.7, 0.0, 1.0]))
    # a tensor and a float broadcast: one initial entropy, several segments
    assert torch.allclose(branch_probability(torch.tensor([[0.0], [0.5]]), 0.5), torch.tensor([[0.4], [0.5]]))


def test_branch_probability_checks_its_constants():
    for alpha in (-0.1, 1.1):
        with pytest.raises(ValueError, match="alpha"):
            branch_probability(0.0, 0.0, alpha=alpha)
    with pytest.raises(ValueError, match="beta"):
        branch_probability(0.0, 0.0, beta=-0.2)


def test_normalised_entropy_of_uniform_and_peaked_logits():
    assert normalised_entropy(torch.zeros(10)).item() == pytest.approx(1.0)  # uniform: log V / log V
    peaked = torch.tensor([100.0, 0.0, 0.0, 0.0])
    assert normalised_entropy(peaked).item() == pytest.approx(0.0, abs=1e-6)
    # two equally likely tokens out of 4 (the others impossible): log 2 / log 4 = 0.5
    half = torch.tensor([0.0, 0.0, -float("inf"), -float("inf")])
    assert normalised_entropy(half).item() == pytest.approx(0.5)
    # shape [..., V] -> [...], every row independent
    batch = torch.stack([torch.zeros(4), peaked, half]).reshape(3, 1, 4)
    out = normalised_entropy(batch)
    assert out.shape == (3, 1) and torch.allclose(out.flatten(), torch.tensor([1.0, 0.0, 0.5]), atol=1e-6)


def test_normalised_entropy_matches_the_definition():
    logits = torch.randn(5, 7, generator=torch.Generator().manual_seed(0))
    p = torch.softmax(logits, -1)
    expected = -(p * p.log()).sum(-1) / math.log(7)
    assert torch.allclose(normalised_entropy(logits), expected, atol=1e-6)
    with pytest.raises(ValueError, match="at least 2"):
        normalised_entropy(torch.zeros(1))


def test_should_branch_is_reproducible_and_exact_at_the_ends():
    def draws(seed: int) -> list[bool]:
        gen = torch.Generator().manual_seed(seed)
        return [should_branch(0.5, gen) for _ in range(50)]

    assert draws(3) == draws(3) and draws(3) != draws(4)
    assert 10 < sum(draws(3)) < 40  # a fair coin, not a constant
    gen = torch.Generator().manual_seed(0)
    assert all(should_branch(1.0, gen) for _ in range(200))
    assert not any(should_branch(0.0, gen) for _ in range(200))
    assert should_branch(torch.tensor(1.0), gen)  # a 0-d tensor from branch_probability works too
    with pytest.raises(ValueError, match="probability"):
        should_branch(1.5, gen)


def test_should_branch_consumes_one_draw_whatever_the_probability():
    """The stream does not depend on earlier probabilities: after one draw at p = 0 or p = 1, the
    generators agree again."""
    a, b = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    should_branch(0.0, a)
    should_branch(1.0, b)
    assert [should_branch(0.5, a) for _ in range(20)] == [should_branch(0.5, b) for _ in range(20)]


def test_branch_frequency_matches_the_probability():
    gen = torch.Generator().manual_seed(1)
    p = branch_probability(0.9, 0.4)  # 0.5 + 0.2 * 0.5 = 0.6
    rate = sum(should_branch(p, gen) for _ in range(4000)) / 4000
    assert rate == pytest.approx(0.6, abs=0.03)  # 4 standard errors: sqrt(0.24 / 4000) = 0.0077
