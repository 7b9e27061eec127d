"""GRPO maths: group advantages, masked aggregation, the clipped surrogate and KL estimators."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from course_lib.algos.grpo import clipped_surrogate_loss, group_advantages, kl_k1, kl_k3, masked_aggregate

A = 0.5 / math.sqrt(1 / 3)  # (r - mean) / unbiased std for rewards [1, 0, 0, 1]: 0.8660


def t(values, **kwargs):
    return torch.tensor(values, **{"dtype": torch.float, **kwargs})


def test_group_advantages_one_group():
    """Rewards [1,0,0,1]: mean 0.5, unbiased std 0.57735, advantages +-0.866."""
    adv = group_advantages(t([1, 0, 0, 1]), torch.tensor([0, 0, 0, 0]))
    assert adv.tolist() == pytest.approx([A, -A, -A, A], rel=1e-5)


def test_group_advantages_two_groups_are_independent():
    """Each group is normalised with its own mean and std."""
    rewards = t([1, 0, 0, 1, 3, 1, 2])
    adv = group_advantages(rewards, torch.tensor([0, 0, 0, 0, 7, 7, 7]))
    assert adv.tolist() == pytest.approx([A, -A, -A, A, 1.0, -1.0, 0.0], rel=1e-5, abs=1e-6)


def test_group_advantages_without_std_scaling():
    """Dr. GRPO (scale_by_std=False) gives r - mean(r)."""
    adv = group_advantages(t([3, 1, 2, 10]), torch.tensor([0, 0, 0, 1]), scale_by_std=False)
    assert adv.tolist() == pytest.approx([1.0, -1.0, 0.0, 0.0])


def test_group_advantages_flat_and_singleton_groups_are_zero():
    """All-equal rewards and one-member groups carry no signal: exactly 0, never NaN."""
    adv = group_advantages(t([0.7, 0.7, 0.7, 5.0, 1.0, 0.0]), torch.tensor([0, 0, 0, 1, 2, 2]))
    assert not torch.isnan(adv).any()
    assert adv[:4].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert adv[4] > 0 > adv[5]


@pytest.mark.parametrize(
    "rewards, groups",
    [(torch.zeros(4), torch.zeros(3, dtype=torch.long)), (torch.zeros(2, 2), torch.zeros(2, 2, dtype=torch.long))],
)
def test_group_advantages_shape_errors(rewards, groups):
    """Mismatched or non-1-D inputs raise ValueError."""
    with pytest.raises(ValueError):
        group_advantages(rewards, groups)


@settings(max_examples=50, deadline=None, derandomize=True)
@example(pairs=[(0, -8.3046875), (0, -8.3040060665689)])  # found by a random run: nearly equal rewards
@given(st.lists(st.tuples(st.integers(0, 3), st.floats(-10, 10, allow_nan=False)), min_size=1, max_size=24))
def test_group_advantages_have_zero_mean_per_group(pairs):
    """Property: within every group the advantages sum to zero, up to float32 rounding. The advantages are computed
    in float32 (`group_advantages` casts, so the golden run's arithmetic stays put): centring rewards of size |r|
    leaves an error of a few float32 eps times |r| on every member, which the std divides, so two nearly equal
    rewards (-8.3047 and -8.3040, std 5e-4) give a mean of 1e-3. The bound is that error, not a fixed 1e-4."""
    groups = torch.tensor([g for g, _ in pairs])
    rewards = t([r for _, r in pairs], dtype=torch.float64)
    adv = group_advantages(rewards, groups)
    assert torch.isfinite(adv).all()
    for g in groups.unique():
        members = rewards[groups == g].float().double()
        if members.numel() < 2 or bool((members == members[0]).all()):
            assert bool((adv[groups == g] == 0).all())
            continue
        rounding = 4 * torch.finfo(torch.float32).eps * float(members.abs().max()) / float(members.std())
        assert abs(float(adv[groups == g].double().mean())) < 1e-6 + rounding


VALUES = t([[1, 2, 3, 4], [10, 20, 30, 40], [5, 5, 5, 5]])
MASK = t([[1, 1, 1, 0], [0, 1, 0, 0], [0, 0, 0, 0]])  # the third sequence is fully masked out


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", (1 + 2 + 3 + 20) / 4),  # 6.5
        ("seq-mean-token-mean", (2 + 20) / 2),  # 11
        ("seq-mean-token-sum", (6 + 20) / 2),  # 13
    ],
)
def test_masked_aggregate_modes(mode, expected):
    """Hand-computed values; the fully masked third sequence is ignored by sequence means."""
    assert masked_aggregate(VALUES, MASK, mode).item() == pytest.approx(expected)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_masked_aggregate_all_zero_mask_is_zero(mode):
    """An all-zero mask gives 0, not NaN."""
    out = masked_aggregate(VALUES, torch.zeros_like(MASK), mode)
    assert out.item() == 0.0


def test_masked_aggregate_unknown_mode():
    with pytest.raises(ValueError):
        masked_aggregate(VALUES, MASK, "bogus")


def test_surrogate_on_policy_is_minus_mean_advantage():
    """old == new log-probs: ratio 1, loss = -mean over masked tokens of A, nothing clipped."""
    logp = t([[-1.0, -2.0, -0.5], [-0.3, -0.7, -0.1]])
    mask = t([[1, 1, 0], [1, 0, 0]])
    loss, stats = clipped_surrogate_loss(logp, logp.clone(), t([2.0, -1.0]), mask)
    assert loss.item() == pytest.approx(-(2 + 2 - 1) / 3)
    assert stats["clip_fraction"] == 0.0 and stats["ratio_mean"] == pytest.approx(1.0)


def test_surrogate_clipping_by_sign_of_advantage():
    """Ratio e^0.5 = 1.6487 > 1.2: with A=+1 the term is clipped to 1.2 (no gradient); with A=-1 it
    is unclipped (-1.6487, gradient -ratio * A = 1.6487 through the loss)."""
    old = t([[0.0], [0.0]])
    new = t([[0.5], [0.5]], requires_grad=True)
    loss, stats = clipped_surrogate_loss(new, old, t([1.0, -1.0]), t([[1], [1]]), aggregation="seq-mean-token-sum")
    ratio = math.exp(0.5)
    assert loss.item() == pytest.approx((-1.2 + ratio) / 2)
    loss.backward()
    assert new.grad[0, 0].item() == 0.0
    assert new.grad[1, 0].item() == pytest.approx(ratio / 2)
    assert stats["clip_fraction"] == 0.5


def test_surrogate_has_no_dual_clip():
    """A negative advantage at ratio 4: here (the paper, TRL) the loss is -A * 4 with gradient 4 through the token;
    verl's dual clip (`clip_ratio_c` 3, kept by `algos.aepo.balanced_clip_losses`) caps it at -A * 3, flat."""
    from course_lib.algos.aepo import balanced_clip_losses

    old = t([[0.0]])
    new = t([[math.log(4.0)]], requires_grad=True)
    loss, _ = clipped_surrogate_loss(new, old, t([-1.0]), t([[1]]))
    loss.backward()
    assert loss.item() == pytest.approx(4.0) and new.grad.item() == pytest.approx(4.0)
    capped = new.detach().clone().requires_grad_()
    dual, _ = balanced_clip_losses(capped, old, t([-1.0]), balanced=False)
    dual.sum().backward()
    assert dual.item() == pytest.approx(3.0) and capped.grad.item() == 0.0


def test_surrogate_clip_fraction_and_clip_high():
    """Ratios [2.0, 1.25, 0.5] with A=+1 and eps_low=0.2, eps_high=0.3: only 2.0 is clipped."""
    old = torch.zeros(1, 4)
    new = torch.log(t([[2.0, 1.25, 0.5, 9.0]]))
    loss, stats = clipped_surrogate_loss(new, old, t([1.0]), t([[1, 1, 1, 0]]), clip_low=0.2, clip_high=0.3)
    assert stats["clip_fraction"] == pytest.approx(1 / 3)
    assert loss.item() == pytest.approx(-(1.3 + 1.25 + 0.5) / 3)


def test_surrogate_accepts_per_token_advantages():
    """Advantages [B, T] weight each token separately."""
    logp = t([[-1.0, -1.0, -1.0]])
    adv = t([[1.0, -3.0, 100.0]])
    loss, _ = clipped_surrogate_loss(logp, logp.clone(), adv, t([[1, 1, 0]]))
    assert loss.item() == pytest.approx(-(1.0 - 3.0) / 2)


def test_surrogate_gradient_only_through_masked_tokens():
    """Tokens with mask 0 (prompt, observations, padding) get exactly zero gradient."""
    torch.manual_seed(0)
    old = -torch.rand(2, 5)
    new = (old + 0.1 * torch.randn(2, 5)).requires_grad_()
    mask = t([[0, 1, 1, 0, 1], [1, 0, 0, 1, 0]])
    loss, _ = clipped_surrogate_loss(new, old, t([1.0, -2.0]), mask)
    loss.backward()
    assert (new.grad[mask == 0] == 0).all()
    assert (new.grad[mask == 1] != 0).all()


def test_kl_estimators():
    """k1 = logp - ref; k3 = exp(ref - logp) - (ref - logp) - 1 (>= 0, 0 when equal)."""
    logp, ref = t([-1.0, -2.0, -0.5]), t([-1.5, -1.0, -0.5])
    assert kl_k1(logp, ref).tolist() == pytest.approx([0.5, -1.0, 0.0])
    d = [-0.5, 1.0, 0.0]
    assert kl_k3(logp, ref).tolist() == pytest.approx([math.exp(x) - x - 1 for x in d])
    assert kl_k3(logp, ref)[2].item() == 0.0
    assert (kl_k3(torch.randn(100), torch.randn(100)) >= 0).all()
