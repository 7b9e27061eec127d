"""Micro-batched updates (course_lib.rl.micro_batch): row ranges by a token budget, and a gradient equal to the whole
batch's for losses that are not sums over rows (a token-mean, AEPO's batch-standardised entropy, a KL term)."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from course_lib.algos.aepo import entropy_aware_advantages
from course_lib.algos.grpo import kl_k3, masked_aggregate
from course_lib.models import add_lora, build_model, reference_policy
from course_lib.rl import micro_batch, seams
from course_lib.rl.train import GRPOConfig
from course_lib.rl.warm_start import SFTConfig, supervised_warm_start
from course_lib.tokenizer import build_tokenizer


def mask_of(lengths: list[int], width: int) -> torch.Tensor:
    return torch.tensor([[1] * n + [0] * (width - n) for n in lengths])


def test_row_chunks_by_hand():
    mask = mask_of([3, 5, 2, 8], 8)
    # rows 0-1 pad to 5 tokens each (10 <= 10); adding row 2 would be 3 x 5 = 15; row 3 alone is 8
    assert micro_batch.row_chunks(mask, 10) == [slice(0, 2), slice(2, 3), slice(3, 4)]
    assert micro_batch.row_chunks(mask, 0) == [slice(0, 4)], "no budget: the whole batch"
    assert micro_batch.row_chunks(mask, 1000) == [slice(0, 4)]
    assert micro_batch.row_chunks(mask, 4) == [slice(0, 1), slice(1, 2), slice(2, 3), slice(3, 4)], (
        "a row longer than the budget is a range of its own"
    )
    assert micro_batch.widths(mask_of([3, 0], 4)) == [3, 1]


@pytest.fixture(scope="module")
def setting():
    """A LoRA-wrapped micro model and a right-padded batch of 6 rows with policy tokens and advantages."""
    tokenizer = build_tokenizer([f"w{k}" for k in range(20)])
    torch.manual_seed(0)
    model = add_lora(build_model(tokenizer, "micro", max_positions=32), rank=4)
    with torch.no_grad():  # a trained adapter, so that the policy differs from the reference (a KL with a gradient)
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.05)
    generator = torch.Generator().manual_seed(1)
    lengths = [12, 7, 16, 9, 3, 14]
    attention = mask_of(lengths, 16)
    ids = torch.randint(4, len(tokenizer), (6, 16), generator=generator) * attention
    loss_mask = attention.float().clone()
    loss_mask[:, :2] = 0  # the prompt
    old = -torch.rand(6, 16, generator=generator) * 3 * loss_mask
    advantages = torch.randn(6, generator=generator)[:, None].expand(6, 16) * loss_mask
    return model, ids, attention, loss_mask, old, advantages


def gradients(model, ids, attention, loss_of, budget) -> dict[str, torch.Tensor]:
    model = copy.deepcopy(model)
    model.train()
    model.zero_grad(set_to_none=True)
    micro_batch.backward(model, ids, attention, 1.0, loss_of, budget)
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad}


def one_graph_gradients(model, ids, attention, loss_of, budget) -> dict[str, torch.Tensor]:
    """The whole batch's gradient by one backward through every micro-batch's graph at once (what the two passes
    avoid keeping in memory): the same forwards, so any difference is the method's."""
    model = copy.deepcopy(model)
    model.train()
    model.zero_grad(set_to_none=True)
    loss, _ = loss_of(*micro_batch.logprobs_and_entropy(model, ids, attention, 1.0, budget))
    loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad}


def assert_same_gradient(whole: dict, micro: dict, relative: float = 1e-6) -> None:
    assert whole.keys() == micro.keys()
    flat_whole = torch.cat([g.flatten() for g in whole.values()])
    flat_micro = torch.cat([g.flatten() for g in micro.values()])
    assert flat_whole.norm() > 0
    assert (flat_whole - flat_micro).norm() <= relative * flat_whole.norm()


@pytest.mark.parametrize("budget", [16, 40, 64])
def test_the_update_loss_gets_the_whole_batchs_gradient(setting, budget):
    """Clipped surrogate with a token-mean, AEPO's entropy-aware advantages (entropy standardised over the whole
    batch), an entropy bonus and a k3 KL to the adapter-free reference: none is a sum over rows. In float64 the
    two-pass gradient equals one backward through every micro-batch's graph to 1e-10 relative, and the whole batch's
    single forward to 1e-5. The second gap is not the method's: transformers' attention over a padded batch rounds
    differently from the same rows padded less (log-probs 1e-7 apart even in float64), and AEPO's standardisation of
    nearly equal entropies amplifies that; the float32 test below holds the plain losses to 1e-6."""
    model, ids, attention, loss_mask, old, advantages = setting
    model, old, advantages, loss_mask = (
        copy.deepcopy(model).double(),
        old.double(),
        advantages.double(),
        loss_mask.double(),
    )
    config = GRPOConfig(clip_high=0.28)

    def loss_of(logprobs, entropy):
        weighted = entropy_aware_advantages(advantages, entropy, loss_mask, 0.2)
        loss, stats = seams.clipped(logprobs, old, weighted, loss_mask, config)
        loss = loss - 0.01 * masked_aggregate(entropy, loss_mask, "token-mean")
        with torch.no_grad(), reference_policy(model) as reference:
            ref, _ = micro_batch.logprobs_and_entropy(reference, ids, attention, 1.0, budget)
        return loss + 0.05 * masked_aggregate(kl_k3(logprobs, ref), loss_mask, "token-mean"), stats

    assert len(micro_batch.row_chunks(attention, budget)) > 1, "the budget splits the batch"
    micro = gradients(model, ids, attention, loss_of, budget)
    assert_same_gradient(one_graph_gradients(model, ids, attention, loss_of, budget), micro, relative=1e-10)
    assert_same_gradient(gradients(model, ids, attention, loss_of, 0), micro, relative=1e-5)


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean"])
def test_float32_micro_batches_round_within_1e6(setting, aggregation):
    """The course's own dtype: the clipped surrogate's gradient, micro-batched, within 1e-6 of the whole batch's."""
    model, ids, attention, loss_mask, old, advantages = setting
    config = GRPOConfig(aggregation=aggregation)

    def loss_of(logprobs, entropy):
        return seams.clipped(logprobs, old, advantages, loss_mask, config)

    assert_same_gradient(gradients(model, ids, attention, loss_of, 0), gradients(model, ids, attention, loss_of, 20))


def test_a_budget_that_holds_the_batch_is_the_single_pass_bit_for_bit(setting):
    model, ids, attention, loss_mask, old, advantages = setting

    def loss_of(logprobs, entropy):
        return masked_aggregate(-logprobs, loss_mask, "token-mean"), {}

    whole = gradients(model, ids, attention, loss_of, 0)
    roomy = gradients(model, ids, attention, loss_of, 6 * 16)
    assert all(torch.equal(whole[name], roomy[name]) for name in whole)


def test_the_warm_start_takes_the_same_steps_micro_batched(setting):
    model, ids, attention, loss_mask, _, _ = setting
    examples = [(row[: int(n)].tolist(), mask[: int(n)].int().tolist())
                for row, n, mask in zip(ids, attention.sum(1), loss_mask)]  # fmt: skip
    trained = {}
    for budget in (0, 24):
        copy_ = copy.deepcopy(model).double()  # float64: Adam's first steps magnify float32 rounding in tiny gradients
        config = dataclasses.replace(SFTConfig(steps=3, batch_size=6, warmup_steps=1), micro_batch_tokens=budget)
        supervised_warm_start(copy_, examples, 0, config, torch.Generator().manual_seed(0))
        trained[budget] = torch.cat([p.detach().flatten() for p in copy_.parameters() if p.requires_grad])
    assert torch.allclose(trained[0], trained[24], rtol=0, atol=1e-6)


def test_a_negative_budget_is_refused():
    with pytest.raises(ValueError, match="micro_batch_tokens"):
        GRPOConfig(micro_batch_tokens=-1)
    with pytest.raises(ValueError, match="micro_batch_tokens"):
        SFTConfig(micro_batch_tokens=-5)


def test_the_lean_log_probs_and_entropy_are_the_log_softmaxs_with_their_gradient():
    """`LogprobAndEntropy` against `log_softmax` (values, and the gradient by autograd's numerical check, float64),
    at temperature 1 and 0.7, over more positions than one slice."""
    generator = torch.Generator().manual_seed(3)
    for temperature in (1.0, 0.7):
        logits = torch.randn(micro_batch.ROWS_PER_SLICE + 5, 11, generator=generator, dtype=torch.float64) * 3
        ids = torch.randint(11, (logits.shape[0],), generator=generator)
        chosen, entropy = micro_batch.LogprobAndEntropy.apply(logits, ids, temperature)
        log_probs = torch.log_softmax(logits / temperature, dim=-1)
        torch.testing.assert_close(chosen, log_probs.gather(-1, ids[:, None]).squeeze(-1), rtol=0, atol=1e-12)
        torch.testing.assert_close(entropy, -(log_probs.exp() * log_probs).sum(-1), rtol=0, atol=1e-12)
        small = logits[:7].clone().requires_grad_(True)
        first, t = ids[:7], temperature
        assert torch.autograd.gradcheck(
            lambda z, first=first, t=t: micro_batch.LogprobAndEntropy.apply(z, first, t), small
        )


def test_lean_token_logprobs_equal_the_courses(setting):
    from course_lib.models import token_logprobs

    model, ids, attention, *_ = setting
    with torch.no_grad():
        for temperature in (1.0, 0.0, 0.8):
            lean = micro_batch.lean_token_logprobs(model, ids, attention, temperature)
            course = token_logprobs(model, ids, attention, temperature)
            for a, b in zip(lean, course, strict=True):
                torch.testing.assert_close(a, b, rtol=0, atol=2e-6)


def test_a_checkpoints_budget_bounds_its_logits_not_a_small_vocabularys_batch():
    from course_lib.rl import checkpoint

    assert checkpoint.micro_batch_tokens(49_152) == 512, "SmolLM2: the budget measured by bench update"
    assert checkpoint.micro_batch_tokens(600) > 64 * 250, "a stand-in: chapter 00's whole batch in one pass"
    assert checkpoint.micro_batch_tokens(10**9) == 1
    assert checkpoint.micro_batch_tokens(49_152, "cuda") == 512 * checkpoint.GPU_LOGITS_FACTOR
    assert checkpoint.micro_batch_tokens(49_152, "cuda:0") == checkpoint.micro_batch_tokens(49_152, "cuda")
    assert checkpoint.micro_batch_tokens(49_152, "cpu") == 512


def option_gradients(model, ids, attention, loss_of, budget, checkpointing, autocast) -> dict[str, torch.Tensor]:
    """`gradients` inside `micro_batch.memory_options`."""
    model = copy.deepcopy(model)
    model.train()
    model.zero_grad(set_to_none=True)
    with micro_batch.memory_options(model, checkpointing, autocast):
        assert model.is_activation_checkpointing == checkpointing
        micro_batch.backward(model, ids, attention, 1.0, loss_of, budget)
    assert not model.is_activation_checkpointing, "checkpointing is switched off after the block"
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("budget", [0, 20])
def test_gradient_checkpointing_gives_the_same_gradient(setting, budget):
    """Recomputing each layer's activations in the backward is the same arithmetic: within 1e-6, whole batch or
    micro-batched."""
    model, ids, attention, loss_mask, old, advantages = setting

    def loss_of(logprobs, entropy):
        return seams.clipped(logprobs, old, advantages, loss_mask, GRPOConfig())

    plain = gradients(model, ids, attention, loss_of, budget)
    assert_same_gradient(plain, option_gradients(model, ids, attention, loss_of, budget, True, "none"))


def test_bf16_autocast_points_the_gradient_the_same_way(setting):
    """Matrix products in bfloat16 round (8 bits of mantissa): not equal, but the same direction (cosine above
    0.99) and a relative error under 10%; the logits are scored in float32, so the log-probs stay finite."""
    model, ids, attention, loss_mask, old, advantages = setting

    def loss_of(logprobs, entropy):
        assert logprobs.dtype == torch.float32, "bf16 logits are scored in float32"
        return seams.clipped(logprobs, old, advantages, loss_mask, GRPOConfig())

    plain = torch.cat([g.flatten() for g in gradients(model, ids, attention, loss_of, 0).values()])
    mixed = torch.cat(
        [g.flatten() for g in option_gradients(model, ids, attention, loss_of, 0, False, "bf16").values()]
    )
    assert torch.isfinite(mixed).all()
    assert torch.nn.functional.cosine_similarity(plain, mixed, dim=0) > 0.99
    assert (plain - mixed).norm() < 0.1 * plain.norm()


def test_an_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="GRPOConfig.autocast"):
        GRPOConfig(autocast="fp8")
    with pytest.raises(ValueError, match="SFTConfig.autocast"):
        SFTConfig(autocast="fp16")
