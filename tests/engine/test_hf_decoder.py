"""The generic decoder (`HFDecoder`: a model's own forward over a `DynamicCache`) gives the logits of a full forward
pass over each unpadded sequence, for families the lean `KVDecoder` does not cover; `make_decoder` picks the lean one
exactly where it applies."""

from __future__ import annotations

import re

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    GemmaConfig,
    GPT2Config,
    LlamaConfig,
    MistralConfig,
    PhiConfig,
    Qwen2Config,
    Qwen3Config,
)

from course_lib.engine.hf_decoder import HFDecoder, has_fast_path, left_pad, make_decoder
from course_lib.engine.kv_decoder import KVDecoder, causal_lm
from course_lib.models import add_lora

VOCAB = 100
ATOL = 1e-5  # float32; the decoders agree with a full forward to about 1e-7 on these models
LLAMA_LIKE = dict(
    vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=64,
)  # fmt: skip
CONFIGS = {
    "qwen3": lambda: Qwen3Config(**LLAMA_LIKE, head_dim=8),  # q/k RMSNorms inside attention
    "gpt2": lambda: GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=1, eos_token_id=1
    ),  # learned positions
    "gemma": lambda: GemmaConfig(**{**LLAMA_LIKE, "num_key_value_heads": 1}, head_dim=8),  # scaled embeddings, GeLU
    "phi": lambda: PhiConfig(**LLAMA_LIKE, partial_rotary_factor=0.5),  # LayerNorm, biases, parallel attention and MLP
    "llama": lambda: LlamaConfig(**LLAMA_LIKE),  # a fast-path family, forced through the generic path
    "qwen2": lambda: Qwen2Config(**LLAMA_LIKE),
    "mistral": lambda: MistralConfig(**LLAMA_LIKE),
}
# Random init at the models' usual scale (0.02) leaves logits nearly blind to positions and context; a larger one makes
# the checks below sensitive to both (test_the_checks_catch_wrong_positions_and_masks).
INIT = 0.2


def tiny(family: str, attn_implementation: str = "sdpa", seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = CONFIGS[family]()
    config.initializer_range = INIT
    return AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation).eval()


def full_forward(model, sequence: list[int]) -> torch.Tensor:
    """Last-position logits `[V]` of one unpadded sequence, no cache: the reference."""
    with torch.no_grad():
        return model(torch.tensor([sequence])).logits[0, -1]


def assert_matches(model, logits: torch.Tensor, sequences: list[list[int]]) -> float:
    """Every row of `logits` `[B, V]` equals a full forward of its sequence; returns the largest difference."""
    assert logits.shape == (len(sequences), VOCAB)
    worst = max((row - full_forward(model, seq)).abs().max().item() for row, seq in zip(logits, sequences))
    assert worst < ATOL
    return worst


def drive(decoder, model) -> list[list[int]]:
    """Prefill a left-padded batch of three lengths, then steps of single tokens, one padded single-token step,
    multi-token steps and `keep`s that drop and duplicate rows; check every step's logits. Returns the sequences."""
    gen = torch.Generator().manual_seed(1)
    sequences = [torch.randint(1, VOCAB, (n,), generator=gen).tolist() for n in (3, 9, 6)]
    width = max(map(len, sequences))
    ids = torch.tensor([[0] * (width - len(s)) + s for s in sequences])
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in sequences])
    assert_matches(model, decoder.prefill(ids, mask), sequences)
    assert decoder.length == width

    def step(new: torch.Tensor, attend: torch.Tensor | None = None) -> None:
        for index, tokens in enumerate(new.tolist()):
            if attend is None or attend[index]:
                sequences[index].extend(tokens if isinstance(tokens, list) else [tokens])
        logits = decoder.step(new) if attend is None else decoder.step(new, attend=attend)
        live = [i for i in range(len(sequences)) if attend is None or attend[i]]
        assert_matches(model, logits[live], [sequences[i] for i in live])

    step(torch.randint(1, VOCAB, (3,), generator=gen))
    step(torch.randint(1, VOCAB, (3, 4), generator=gen))  # an observation appended in one go
    rows = [2, 0, 0]  # drop row 1, copy row 0: the copies then diverge
    decoder.keep(torch.tensor(rows))
    sequences = [list(sequences[r]) for r in rows]
    step(torch.tensor([5, 6, 7]))
    step(torch.randint(1, VOCAB, (3,), generator=gen), attend=torch.tensor([True, False, True]))  # row 1 pads
    step(torch.randint(1, VOCAB, (3,), generator=gen))
    decoder.keep(torch.tensor([1, 2]))
    sequences = [sequences[1], sequences[2]]
    step(torch.randint(1, VOCAB, (2, 2), generator=gen))
    step(torch.randint(1, VOCAB, (2,), generator=gen))
    assert decoder.length == width + 1 + 4 + 1 + 1 + 1 + 2 + 1
    return sequences


@pytest.mark.parametrize(
    "family, attention",
    [("qwen3", "sdpa"), ("gpt2", "sdpa"), ("gpt2", "eager"), ("gemma", "sdpa"), ("phi", "sdpa"), ("llama", "sdpa")],
)
def test_generic_decoder_matches_full_forward(family, attention):
    model = tiny(family, attention)
    decoder = make_decoder(model, 3, 40, generic=True)
    assert isinstance(decoder, HFDecoder)
    drive(decoder, model)


class CountsSlots(HFDecoder):
    """A broken decoder: positions count cache slots, padding included (what a model left to itself does)."""

    def _forward(self, input_ids, valid):
        self.next_position = torch.full_like(self.next_position, self.length)
        return super()._forward(input_ids, valid)


class SeesPadding(HFDecoder):
    """A broken decoder: after the prefill, padded slots are visible to later tokens."""

    def _forward(self, input_ids, valid):
        self.key_valid = torch.ones_like(self.key_valid)
        return super()._forward(input_ids, valid)


@pytest.mark.parametrize("broken", [CountsSlots, SeesPadding])
def test_the_checks_catch_wrong_positions_and_masks(broken):
    """The checks of `drive` are sensitive enough to fail for a decoder that gets positions or the padding mask
    wrong, in every family (rotary ones included, where only relative positions matter)."""
    for family in ("qwen3", "gpt2", "gemma", "phi", "llama"):
        model = tiny(family)
        with pytest.raises(AssertionError):
            drive(broken(model, 3, 40), model)


def test_generic_and_lean_decoders_agree_on_llama():
    """The same script through `KVDecoder` and `HFDecoder` on one llama model: both equal the full forward."""
    model = tiny("llama")
    lean, generic = make_decoder(model, 3, 40), make_decoder(model, 3, 40, generic=True)
    assert isinstance(lean, KVDecoder) and isinstance(generic, HFDecoder)
    assert drive(lean, model) == drive(generic, model)


@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_generic_decoder_runs_a_lora_wrapped_model(family):
    """A peft LoRA wrapper is called as given: the adapter's (non-zero) update is in the decoder's logits."""
    model = add_lora(tiny(family), rank=4)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.5)
    model.eval()
    decoder = make_decoder(model, 3, 40, generic=True)
    assert isinstance(decoder, HFDecoder)
    final = drive(decoder, model)
    with torch.no_grad(), model.disable_adapter():
        base = full_forward(model, final[0])
    assert (base - full_forward(model, final[0])).abs().max() > 100 * ATOL  # the adapter does change the logits


def test_cache_overflow_raises_and_leaves_the_state():
    model = tiny("qwen3")
    decoder = make_decoder(model, 2, 6)
    decoder.prefill(torch.tensor([[0, 4, 5], [6, 7, 8]]), torch.tensor([[0, 1, 1], [1, 1, 1]]))
    decoder.step(torch.tensor([[1, 2], [3, 4]]))
    with pytest.raises(RuntimeError, match="KV cache full: 7 positions > max_len=6"):
        decoder.step(torch.tensor([[1, 2], [3, 4]]))
    assert decoder.length == 5
    logits = decoder.step(torch.tensor([9, 10]))  # the last slot is still usable
    assert decoder.length == 6
    assert_matches(model, logits, [[4, 5, 1, 2, 9], [6, 7, 8, 3, 4, 10]])


def test_factory_chooses_the_lean_decoder_exactly_where_it_applies():
    for family in ("llama", "qwen2", "mistral"):
        model = tiny(family)
        assert has_fast_path(model) and isinstance(make_decoder(model, 2, 8), KVDecoder)
        assert isinstance(make_decoder(add_lora(model, rank=2), 2, 8), KVDecoder)
        assert isinstance(make_decoder(model, 2, 8, generic=True), HFDecoder)
    for family in ("qwen3", "gpt2", "gemma", "phi"):
        model = tiny(family)
        assert not has_fast_path(model) and isinstance(make_decoder(model, 2, 8), HFDecoder)
        with pytest.raises(NotImplementedError, match=repr(family)):
            causal_lm(model)  # callers that need the lean path still get its error


def test_decoder_benchmark_prints_its_measurements(capsys):
    """`python -m course_lib.lab.bench decoder` runs end to end (its numbers are measurements, never asserted)."""
    from course_lib.lab import bench

    assert bench.main(["decoder", "--batch", "4", "--steps", "3", "--repeats", "2"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"  KVDecoder \(lean\): prefill \d+\.\d\d ms, decode step \d+\.\d\d ms", lines[1])
    assert re.fullmatch(r"  HFDecoder \(generic\): prefill \d+\.\d\d ms, decode step \d+\.\d\d ms", lines[2])
    assert re.fullmatch(r"generic_step_slowdown=\d+\.\d\d", lines[-1])


def test_left_pad_right_aligns_each_sequence_after_the_pad():
    ids, mask = left_pad([[5, 6, 7], [8], [9, 10]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8], [0, 9, 10]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1], [0, 1, 1]]
    assert ids.dtype == mask.dtype == torch.long
