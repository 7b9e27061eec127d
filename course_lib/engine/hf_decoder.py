"""Incremental decoding for any causal LM: the model's own forward pass over a `transformers` `DynamicCache`.

`kv_decoder.KVDecoder` re-implements the Llama family's forward (llama, qwen2, mistral) in a lean loop, which is
what makes the course's CPU rollouts fast. Every other family (qwen3's q/k norms, gpt2's learned absolute positions,
gemma's scaled embeddings, ...) would need a re-implementation of its own, each one a chance to compute something
other than the model. `HFDecoder` calls the model's forward instead, and spells out the three things a left-padded,
lock-step batch needs from it:

- `position_ids` counted over real tokens only, so a padded sequence sees exactly the positions it would see
  unpadded (rotary and learned absolute positions alike; a model left to count cache slots would shift them);
- a 2-D attention mask over every cache slot written so far, so padding and skipped steps stay invisible;
- cache rows selected by index for `keep` (indices may repeat: a prefix copied for several continuations).

`make_decoder` returns the fast `KVDecoder` where it exists and `HFDecoder` otherwise; both have the same interface
(`prefill`, `step`, `keep`, `length`, `max_len`), so the rollout engine need not know which one it drives.

Shapes: B sequences, L new positions, S cache slots, V vocabulary.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch
from transformers import DynamicCache

from course_lib.engine.kv_decoder import KVDecoder, causal_lm
from course_lib.machine import cpu_attention


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The `*ForCausalLM` inside a peft `PeftModel` (or `model` itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


class HFDecoder:
    """Prefill a left-padded batch, then append tokens, through the model's own forward and a `DynamicCache`.

    The interface and its semantics are `KVDecoder`'s: `length` counts the cache slots written so far (padding
    included, the same for every row); writing past `max_len` slots raises `RuntimeError`. The cache grows by
    concatenation rather than being preallocated, so `batch_size` only checks the prefill's batch. With `dtype`
    (bfloat16), the forwards run under autocast in that precision and return float32 logits: the same numbers a
    low-precision sampler gives, without `KVDecoder`'s merged copy, so without its speed.
    """

    def __init__(self, model: torch.nn.Module, batch_size: int, max_len: int, dtype: torch.dtype | None = None):
        self.model = model  # called as given, so a peft wrapper's adapters take part
        self.lm = _unwrap(model)
        device = next(model.parameters()).device
        # With the config, the cache has the layer kinds the model would build for itself (sliding-window layers).
        self.cache = DynamicCache(config=self.lm.config)
        self.batch_size = batch_size
        self.key_valid = torch.zeros(batch_size, 0, dtype=torch.long, device=device)  # [B, S] 1 = a real token
        self.next_position = torch.zeros(batch_size, dtype=torch.long, device=device)  # [B] real tokens so far
        self.length = 0
        self.max_len = max_len
        self.dtype = dtype
        # Only the last position's logits are needed: skip the output projection of the others where the model can.
        keep_last = "logits_to_keep" in inspect.signature(self.lm.forward).parameters
        self.extra = {"logits_to_keep": 1} if keep_last else {}

    @torch.no_grad()
    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Run left-padded prompts `[B, L]` (mask `[B, L]`, 1 = real token) through the model; return the
        last-position logits `[B, V]`."""
        if self.length:
            raise RuntimeError("prefill starts the cache: build a new decoder for a new batch")
        if input_ids.shape[0] != self.batch_size:
            raise ValueError(f"prefill got {input_ids.shape[0]} sequences, the decoder was built for {self.batch_size}")
        return self._forward(input_ids, attention_mask.long())

    @torch.no_grad()
    def step(self, token_ids: torch.Tensor, attend: torch.Tensor | None = None) -> torch.Tensor:
        """Append tokens and return the logits `[B, V]` after the last one.

        `token_ids` is `[B]` (one token per sequence; `attend[b]` False marks padding: it takes no position and no
        later token sees it) or `[B, L]` (L real tokens per sequence, e.g. an observation appended in one go).
        """
        if token_ids.dim() == 1:
            valid = torch.ones_like(token_ids) if attend is None else attend.long()
            return self._forward(token_ids[:, None], valid[:, None])
        return self._forward(token_ids, torch.ones_like(token_ids))

    def keep(self, rows: torch.Tensor) -> None:
        """Keep the sequences at indices `rows` (1-D long tensor), in that order; an index may repeat (the
        sequence is copied)."""
        # `reorder_cache` is the cache's own row selection (beam search's): an index_select, so repeats copy.
        self.cache.reorder_cache(rows)
        self.key_valid = self.key_valid.index_select(0, rows)
        self.next_position = self.next_position.index_select(0, rows)

    def _forward(self, input_ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """One forward over `L` new slots, `valid` `[B, L]` (1 = real token); state changes only if it succeeds."""
        end = self.length + input_ids.shape[1]
        if end > self.max_len:
            raise RuntimeError(f"KV cache full: {end} positions > max_len={self.max_len}")
        # A real token's position is the number of real tokens before it; padding repeats its neighbour's
        # position (any value would do: no query sees it).
        positions = self.next_position[:, None] + valid.cumsum(-1) - valid
        mask = torch.cat([self.key_valid, valid], dim=-1)  # [B, S + L]: the mask of every slot, past and new
        device = input_ids.device.type
        with (
            torch.autocast(device, dtype=self.dtype or torch.bfloat16, enabled=self.dtype is not None),
            cpu_attention(device, self.dtype),
        ):
            out = self.model(
                input_ids=input_ids, attention_mask=mask, position_ids=positions, cache=self.cache, use_cache=True,
                **self.extra,
            )  # fmt: skip
        self.key_valid, self.length = mask, end
        self.next_position = self.next_position + valid.sum(-1)
        return out.logits[:, -1].float() if self.dtype is not None else out.logits[:, -1]


def has_fast_path(model: torch.nn.Module) -> bool:
    """Whether `KVDecoder` supports `model`'s family (llama, qwen2, mistral; peft-wrapped or not)."""
    try:
        causal_lm(model)
    except NotImplementedError:
        return False
    return True


def left_pad(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`(ids, mask)`, each `[B, L]` (L the longest sequence): every sequence right-aligned after `pad_id`, mask 1 on
    its real tokens. The layout both decoders' `prefill` and `generate()` take for a decoder-only model."""
    width = max(map(len, sequences))
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, sequence in enumerate(sequences):
        ids[row, width - len(sequence) :] = torch.tensor(list(sequence), dtype=torch.long)
        mask[row, width - len(sequence) :] = 1
    return ids, mask


def make_decoder(
    model: torch.nn.Module, batch_size: int, max_len: int, generic: bool = False, dtype: torch.dtype | None = None
) -> KVDecoder | HFDecoder:
    """The decoder for `model`: the lean `KVDecoder` for the families it supports, `HFDecoder` for any other
    causal LM (or for every model when `generic` is True: tests and benchmarks compare the two); with `dtype`, in
    that precision (`SamplingConfig.precision`)."""
    if not generic and has_fast_path(model):
        return KVDecoder(model, batch_size, max_len, dtype)
    return HFDecoder(model, batch_size, max_len, dtype)
