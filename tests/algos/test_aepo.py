"""AEPO (arXiv 2510.14545): the entropy-balanced clip's value and gradient in every region against hand values,
the entropy-aware advantage, the pre-monitoring split and the consecutive-branch penalty."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.algos import aepo

# One token per row: (advantage, ratio) in each region of the table in `aepo`'s docstring.
REGIONS = [  # advantage, ratio, loss value, balanced gradient d loss / d log pi, hard clip's gradient
    (1.0, 1.5, -1.2, -1.2, 0.0),  # A > 0 above the upper bound: value clipped, gradient (1 + eps) A kept
    (1.0, 1.1, -1.1, -1.1, -1.1),  # A > 0 inside the bounds
    (1.0, 0.5, -0.5, -0.5, -0.5),  # A > 0 below the lower bound: unclipped
    (-1.0, 0.5, 0.8, 0.0, 0.0),  # A < 0 below the lower bound: hard clip
    (-1.0, 1.5, 1.5, 1.5, 1.5),  # A < 0 above the upper bound: unclipped
    (-1.0, 4.0, 3.0, 0.0, 0.0),  # A < 0 beyond the dual clip (c = 3)
    (-2.0, 1.0, 2.0, 2.0, 2.0),  # at ratio 1
]


def region_inputs(balanced: bool):
    advantages = torch.tensor([[a] for a, *_ in REGIONS], dtype=torch.float64)
    old = torch.zeros(len(REGIONS), 1, dtype=torch.float64)
    logprobs = torch.tensor([[math.log(r)] for _, r, *_ in REGIONS], dtype=torch.float64, requires_grad=True)
    losses, above = aepo.balanced_clip_losses(logprobs, old, advantages, 0.2, 0.2, balanced=balanced)
    losses.sum().backward()
    return losses.detach().flatten(), logprobs.grad.flatten(), above.flatten()


@pytest.mark.parametrize("balanced", [True, False])
def test_loss_value_and_gradient_in_every_region(balanced):
    losses, grads, above = region_inputs(balanced)
    assert losses.tolist() == pytest.approx([value for _, _, value, _, _ in REGIONS])
    expected = [g if balanced else hard for *_, g, hard in REGIONS]
    assert grads.tolist() == pytest.approx(expected)
    assert above.tolist() == [True, False, False, False, False, False, False]


def test_policy_loss_is_a_token_mean_whose_value_equals_the_hard_clips():
    generator = torch.Generator().manual_seed(0)
    logprobs = (torch.randn(4, 6, generator=generator, dtype=torch.float64) * 0.4).requires_grad_()
    old = torch.zeros(4, 6, dtype=torch.float64)
    advantages = torch.tensor([1.5, -0.5, 2.0, -3.0], dtype=torch.float64)
    mask = torch.ones(4, 6)
    mask[1, 3:] = 0
    mask[3, :] = 0
    loss = aepo.policy_loss(logprobs, old, advantages, mask)
    hard, _ = aepo.balanced_clip_losses(logprobs, old, advantages, balanced=False)
    assert loss.item() == pytest.approx(((hard * mask).sum() / mask.sum()).item())
    loss.backward()
    assert torch.all(logprobs.grad[3] == 0) and torch.all(logprobs.grad[1, 3:] == 0), "masked tokens get no gradient"
    empty = aepo.policy_loss(logprobs, old, advantages, torch.zeros(4, 6))
    assert empty.item() == 0.0, "an empty mask gives 0, not NaN"


def test_dual_clip_must_exceed_one():
    with pytest.raises(ValueError, match="dual_clip"):
        aepo.balanced_clip_losses(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1), dual_clip=1.0)


def test_entropy_aware_advantages_by_hand():
    advantages = torch.tensor([1.0, -1.0])
    entropies = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    out = aepo.entropy_aware_advantages(advantages, entropies, mask)
    std = math.sqrt(5 / 3)  # valid entropies 1, 2, 3, 4: mean 2.5, unbiased variance 5/3
    expected_row0 = [1 + 0.2 * (h - 2.5) / std for h in (1, 2, 3)]
    assert out[0].tolist() == pytest.approx(expected_row0, abs=1e-6)
    assert float(out[1, 0]) == pytest.approx(-(1 + 0.2 * 1.5 / std), abs=1e-6)
    assert float(out[1, 1]) == pytest.approx(-(1 + 0.2 * -2.5 / std), abs=1e-6), "masked tokens are standardised too"
    assert not out.requires_grad, "the entropy enters through a stop-gradient"


def test_entropy_aware_advantages_edge_cases():
    advantages = torch.tensor([[0.5, 0.5], [-1.0, -1.0]])
    flat = torch.full((2, 2), 0.7)
    mask = torch.ones(2, 2)
    assert torch.equal(aepo.entropy_aware_advantages(advantages, flat, mask), advantages), "std 0 -> z = 0"
    assert torch.equal(aepo.entropy_aware_advantages(advantages, torch.rand(2, 2), torch.zeros(2, 2)), advantages)


def test_entropy_aware_advantages_with_one_valid_token():
    """One valid token: its std is taken as 1 (AEPO's code gets `torch.std` of one value, NaN, and NaN advantages),
    so z = H - H_valid, 0 on the valid token, and the masked tokens are shifted by it."""
    advantages = torch.tensor([[0.5, 0.5], [-1.0, -1.0]])
    entropies = torch.tensor([[0.3, 1.3], [0.8, 0.3]])
    one = torch.tensor([[1, 0], [0, 0]])
    out = aepo.entropy_aware_advantages(advantages, entropies, one)
    z = entropies - 0.3
    assert torch.allclose(out, advantages * (1 + 0.2 * z), atol=0, rtol=1e-6) and out[0, 0] == advantages[0, 0]
    assert bool(torch.isfinite(out).all())
    with pytest.warns(UserWarning, match="degrees of freedom"):
        code_std = float(entropies[one.bool()].std())
    assert math.isnan(code_std), "the unbiased std the code would divide by"


def test_global_samples_split():
    assert aepo.global_samples(12, 0.3, 0.3) == 7, "at equal entropy k / 2 + 1, not k / 2"
    assert aepo.global_samples(16, 0.3, 0.3) == 9
    assert aepo.global_samples(8, 1.0, 0.0) == 5  # int(8 * sigmoid(0.5)) + 1 = int(4.98) + 1
    assert aepo.global_samples(8, 0.0, 1.0) == 4  # int(8 * sigmoid(-0.5)) + 1 = int(3.02) + 1
    assert aepo.global_samples(12, 10.0, 0.0) == 12, "clipped to the budget"
    assert aepo.global_samples(12, 0.0, 10.0) == 1, "at least one global sample"
    with pytest.raises(ValueError):
        aepo.global_samples(0, 0.0, 0.0)


def test_branch_probability_with_the_penalty_by_hand():
    assert aepo.branch_probability(0.4, 0.4) == pytest.approx(0.5), "l = 0: ARPO's coin"
    assert aepo.branch_probability(0.9, 0.4) == pytest.approx(0.6)
    assert aepo.branch_probability(0.4, 0.4, consecutive=4) == pytest.approx(1 - 0.5 / 0.8)
    assert aepo.branch_probability(0.9, 0.4, consecutive=10) == pytest.approx(0.1), "1 - 0.5/0.5 + 0.2 * 0.5"
    assert aepo.branch_probability(1.0, 0.0, consecutive=20) == 0.0, "factor 0: never"
    assert aepo.branch_probability(0.0, 1.0, consecutive=9) == 0.0, "clipped at 0"
    with pytest.raises(ValueError):
        aepo.branch_probability(0.5, 0.5, consecutive=-1)


@pytest.mark.parametrize("consecutive, delta", [(0, 0.3), (4, -0.2), (10, 0.5), (15, 0.9)])
def test_branch_probability_matches_the_codes_draw(consecutive, delta):
    """The code branches iff (U + w dH) * max(0, 1 - 0.05 l) >= alpha, U ~ Uniform(0, 1)."""
    u = torch.rand(400_000, generator=torch.Generator().manual_seed(consecutive), dtype=torch.float64)
    drawn = float((((u + 0.2 * delta) * max(0.0, 1 - 0.05 * consecutive)).clamp(0, 1) >= 0.5).double().mean())
    assert drawn == pytest.approx(aepo.branch_probability(delta, 0.0, consecutive), abs=0.004)


def test_top_branch_share_by_hand():
    # group 0: globals 0-4; branches 5 <- 0, 6 <- 5 (root 0), 7 <- 1, 8 <- 2, 9 <- 3; group 1: globals 10, 11, 12 <- 10
    parents = [None] * 5 + [0, 5, 1, 2, 3] + [None, None, 10]
    groups = [0] * 10 + [1] * 3
    assert aepo.top_branch_share(parents, groups, top=3) == pytest.approx((4 / 5 + 1.0) / 2)
    assert aepo.top_branch_share(parents, groups, top=1) == pytest.approx((2 / 5 + 1.0) / 2)
    assert math.isnan(aepo.top_branch_share([None, None], [0, 0]))
    with pytest.raises(ValueError, match="later"):
        aepo.top_branch_share([None, 2, None], [0, 0, 0])


def test_the_loss_seam_matches_the_hard_clip_in_value():
    from course_lib.rl import seams
    from course_lib.rl.train import GRPOConfig

    generator = torch.Generator().manual_seed(1)
    logprobs, old = torch.randn(3, 5, generator=generator) * 0.4, torch.zeros(3, 5)
    advantages, mask = torch.tensor([1.0, -1.0, 0.5]), torch.ones(3, 5)
    config = GRPOConfig(clip_low=0.2, clip_high=0.28)
    balanced, stats = seams.resolve("policy_loss", "entropy_balanced")(logprobs, old, advantages, mask, config)
    hard, hard_stats = seams.resolve("policy_loss", "clipped")(logprobs, old, advantages, mask, config)
    assert balanced.item() == pytest.approx(hard.item(), abs=1e-6), "no dual clip acts at these ratios"
    above = (torch.exp(logprobs) > 1.28) & (advantages[:, None] > 0)
    below = (torch.exp(logprobs) < 0.8) & (advantages[:, None] < 0)
    assert above.any() and below.any(), "both bounds act in this batch"
    assert stats["upper_clip_fraction"] == pytest.approx(float(above.float().mean()))
    assert stats["clip_fraction"] == pytest.approx(float((above | below).float().mean()))
    assert stats["clip_fraction"] == pytest.approx(hard_stats["clip_fraction"]), "the same definition as the hard clip"


def test_training_with_aepos_loss_and_entropy_aware_advantage(warm_model, tokenizer):
    from course_lib import envs
    from course_lib.engine.rollout import SamplingConfig
    from course_lib.rl.train import GRPOConfig, train_grpo

    config = GRPOConfig(iterations=2, prompts_per_iteration=2, group_size=4, policy_loss="entropy_balanced",
                        entropy_advantage=0.2, updates_per_batch=2)  # fmt: skip
    history = train_grpo(warm_model, tokenizer, lambda: envs.make("tool_arithmetic"), SamplingConfig(), config, 0)
    assert all(math.isfinite(r["loss"]) for r in history if "loss" in r)
    assert "clip_fraction_update_1" in history[0]


def test_on_a_real_model_the_two_clips_differ_exactly_by_the_kept_gradient(make_model):
    """C11.2's exact check on a model's parameters: grad(balanced) - grad(hard) equals the gradient of
    -(1 + eps_high) * A * log pi, token-mean, over the positive-advantage tokens above the upper bound only."""
    model = make_model(seed=3).double()
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 60, (4, 9), generator=generator)
    logits = model(input_ids=ids).logits[:, :-1]  # float64 throughout (the loop's token_logprobs uses float32)
    chosen = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    logprobs = torch.cat([torch.zeros_like(chosen[:, :1]), chosen], dim=1)
    old = logprobs.detach() + torch.randn(logprobs.shape, generator=generator, dtype=torch.float64) * 0.3
    advantages = torch.tensor([1.0, -0.5, 2.0, -1.5], dtype=torch.float64)
    mask = torch.ones_like(logprobs)
    mask[:, 0] = 0  # the first position has no log-prob
    parameters = [p for p in model.parameters() if p.requires_grad]

    def gradient(loss):
        return torch.cat([g.flatten() for g in torch.autograd.grad(loss, parameters, retain_graph=True)])

    balanced = aepo.policy_loss(logprobs, old, advantages, mask)
    hard_losses, above = aepo.balanced_clip_losses(logprobs, old, advantages, balanced=False)
    hard = (hard_losses * mask).sum() / mask.sum()
    kept = (-(1.2) * advantages[:, None] * logprobs * (above & mask.bool())).sum() / mask.sum()
    assert above.any() and not above.all(), "some tokens above the bound, some not"
    difference = gradient(balanced) - gradient(hard)
    # float64 losses, but parts of the model (rotary tables) stay float32: agreement to 1e-6 of the gradient's size
    scale = float(difference.abs().max())
    assert scale > 1e-3 and float((difference - gradient(kept)).abs().max()) <= 1e-6 * scale
    assert balanced.item() == pytest.approx(hard.item(), abs=1e-12)


def test_uniform_top_share_by_hand():
    # 3 branches over 3 roots: the top 3 always hold them all; 4 branches on 4 roots: all but the smallest count
    assert aepo.uniform_top_share([3], [3], 3, seed=0) == 1.0
    assert aepo.uniform_top_share([0, 2], [4, 2], 3, seed=0) == 1.0, "groups without a branch are left out"
    # 4 branches, 4 roots: the top 3 miss a branch only when all four roots got one (4!/4^4 = 0.09375)
    expected = 1 - 0.09375 / 4
    assert aepo.uniform_top_share([4], [4], 3, seed=0, draws=20_000) == pytest.approx(expected, abs=0.005)
    assert math.isnan(aepo.uniform_top_share([0], [8], 3, seed=0))
