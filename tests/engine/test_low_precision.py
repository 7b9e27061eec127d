"""The sampler in a low precision (`SamplingConfig.precision`): the decoder's merged copy of the weights computes
what the model computes (exactly in float32, to bf16's rounding in bfloat16), LoRA adapters included; the engine
samples with it; and `add_adapter` puts LoRA on the chosen blocks only."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

from course_lib import envs
from course_lib.engine.hf_decoder import left_pad, make_decoder
from course_lib.engine.rollout import RolloutEngine, SamplingConfig
from course_lib.models import add_lora, token_logprobs
from course_lib.rl import checkpoint

LLAMA_LIKE = dict(
    vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=64, initializer_range=0.2,
)  # fmt: skip


def tiny(config) -> torch.nn.Module:
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).eval()


def with_trained_lora(model: torch.nn.Module) -> torch.nn.Module:
    """A LoRA adapter whose B is not zero (a fresh adapter is the identity and would hide a merge that drops it)."""
    model = add_lora(model, rank=4)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.3, generator=torch.Generator().manual_seed(len(name)))
    return model.eval()


def decode_logits(model, dtype, generic=False) -> torch.Tensor:
    """Prefill three left-padded prompts, then two single-token steps: the logits of every call `[3, B, V]`."""
    sequences = [[5, 9, 3], [7, 2, 8, 4, 6, 1], [3, 3]]
    ids, mask = left_pad(sequences, 0)
    decoder = make_decoder(model, 3, 12, generic=generic, dtype=dtype)
    outputs = [decoder.prefill(ids, mask)]
    for token in (11, 12):
        outputs.append(decoder.step(torch.full((3,), token)))
    return torch.stack(outputs)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_the_merged_float32_copy_computes_the_models_logits(family):
    """dtype=float32 takes the merged path (LoRA folded into each projection, qwen2's q/k/v biases fused) and must give
    the model's own logits, LoRA modules called one by one, to float rounding."""
    config = (LlamaConfig if family == "llama" else Qwen2Config)(**LLAMA_LIKE)
    model = with_trained_lora(tiny(config))
    own = decode_logits(model, None)
    merged = decode_logits(model, torch.float32)
    assert (merged - own).abs().max() < 1e-4
    without_adapter = decode_logits(tiny(config), None)
    assert (without_adapter - own).abs().max() > 0.1  # the adapter changed the logits: the merge carried it


def test_bf16_sampling_is_the_model_to_bf16_rounding():
    """The bf16 copy's log-probs differ from float32's by bf16's rounding, not more: small on average, never large;
    and the generic decoder under autocast lands as close."""
    model = with_trained_lora(tiny(LlamaConfig(**LLAMA_LIKE)))
    full = torch.log_softmax(decode_logits(model, None), -1)
    for generic in (False, True):
        low = torch.log_softmax(decode_logits(model, torch.bfloat16, generic=generic), -1)
        assert low.dtype == torch.float32
        difference = (low - full).abs()
        assert 0 < difference.mean() < 0.05 and difference.max() < 0.5


def test_the_engine_samples_in_bf16_and_stores_its_own_log_probs(warm_model, tokenizer):
    """A bf16 rollout of the warm tiny model: valid episodes, and stored log-probs near a float32 forward's but not
    equal to them (why the update must not take them as its old log-probs under bf16)."""
    sampling = SamplingConfig(max_turn_tokens=8, max_total_tokens=40, precision="bf16")
    engine = RolloutEngine(warm_model, tokenizer, sampling)
    trajectories = engine.rollout([envs.make("tool_arithmetic") for _ in range(6)], list(range(6)),
                                  generator=torch.Generator().manual_seed(0))  # fmt: skip
    assert all(t.terminated or t.truncated for t in trajectories)
    gaps = []
    for t in trajectories:
        ids = torch.tensor([t.token_ids])
        recomputed, _ = token_logprobs(warm_model, ids, torch.ones_like(ids))
        policy = [k for k, m in enumerate(t.loss_mask) if m]
        gaps += (torch.tensor([t.logprobs[k] for k in policy]) - recomputed[0, policy]).abs().tolist()
    assert 0 < sum(gaps) / len(gaps) < 0.05


def test_an_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="SamplingConfig.precision must be one of"):
        SamplingConfig(precision="fp16")


def test_lora_on_the_top_blocks_only():
    """`top_layers=1` on a two-block model adapts block 1's seven projections and nothing in block 0; asking for
    more blocks than the model has is refused."""
    model = checkpoint.add_adapter(tiny(LlamaConfig(**LLAMA_LIKE)), rank=4, top_layers=1)
    adapted = {name.split(".lora_A")[0] for name, _ in model.named_parameters() if "lora_A" in name}
    assert len(adapted) == 7 and all(".layers.1." in name for name in adapted)
    with pytest.raises(ValueError, match="top_layers=3, but the model has 2 decoder blocks"):
        checkpoint.add_adapter(tiny(LlamaConfig(**LLAMA_LIKE)), top_layers=3)
