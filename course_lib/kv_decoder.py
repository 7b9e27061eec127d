"""An incremental forward pass with a preallocated KV cache, for fast batched rollouts.

`transformers`' `generate()` and its model forward are general; for a 2-layer model on a CPU their
per-step Python overhead costs more than the matrix work. This module runs the *same* modules of a
Llama-family model (embeddings, norms, projections, MLPs, rotary tables; LoRA-wrapped projections
too) in a lean loop over a static cache. `tests/test_kv_decoder.py` checks that its logits equal
the model's own forward pass, so nothing here changes what the model computes, only how fast.

Shapes: B sequences, L new positions, S cache slots, H heads, D head size, V vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

SUPPORTED = ("llama", "qwen2", "mistral")


def causal_lm(model: torch.nn.Module) -> torch.nn.Module:
    """The `*ForCausalLM` module inside `model` (unwrapping a peft `PeftModel`)."""
    inner = model
    if hasattr(inner, "get_base_model"):
        inner = inner.get_base_model()
    if getattr(inner.config, "model_type", None) not in SUPPORTED:
        raise NotImplementedError(f"KVDecoder supports {SUPPORTED}, not {inner.config.model_type!r}")
    return inner


class KVDecoder:
    """Prefill a left-padded batch, then decode one token per sequence per call.

    The cache is allocated once for `max_len` positions per sequence. Rows can be dropped with
    `keep(rows)` when their sequences finish, so later steps compute only on live sequences.
    """

    def __init__(self, model: torch.nn.Module, batch_size: int, max_len: int):
        self.lm = causal_lm(model)
        config = self.lm.config
        self.layers = self.lm.model.layers
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.groups = config.num_attention_heads // self.kv_heads
        param = next(self.lm.parameters())
        shape = (batch_size, self.kv_heads, max_len, self.head_dim)
        self.keys = [torch.zeros(shape, dtype=param.dtype, device=param.device) for _ in self.layers]
        self.values = [torch.zeros(shape, dtype=param.dtype, device=param.device) for _ in self.layers]
        self.key_valid = torch.zeros(batch_size, max_len, dtype=torch.bool, device=param.device)
        self.next_position = torch.zeros(batch_size, dtype=torch.long, device=param.device)
        self.length = 0
        self.max_len = max_len

    @torch.no_grad()
    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Run left-padded prompts `[B, L]` through the model; return last-position logits `[B, V]`."""
        valid = attention_mask.bool()
        positions = (valid.long().cumsum(-1) - 1).clamp(min=0)
        self.next_position = valid.sum(-1)
        length = input_ids.shape[1]
        causal = torch.ones(length, length, dtype=torch.bool, device=input_ids.device).tril()
        # Pad queries attend to themselves only, which keeps every softmax row finite.
        mask = (causal & valid[:, None, :]) | torch.eye(length, dtype=torch.bool, device=input_ids.device)
        return self._forward(input_ids, positions, valid, mask[:, None])

    @torch.no_grad()
    def step(self, token_ids: torch.Tensor, attend: torch.Tensor) -> torch.Tensor:
        """Append one token per sequence (`[B]`); `attend[b]` False marks padding. Returns `[B, V]`."""
        positions = self.next_position[:, None]
        self.next_position = self.next_position + attend.long()
        valid = attend[:, None]
        mask = torch.cat([self.key_valid[:, : self.length], torch.ones_like(valid)], dim=1)
        return self._forward(token_ids[:, None], positions, valid, mask[:, None, None, :])

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only the sequences at indices `rows` (1-D long tensor), in that order."""
        self.keys = [k.index_select(0, rows) for k in self.keys]
        self.values = [v.index_select(0, rows) for v in self.values]
        self.key_valid = self.key_valid.index_select(0, rows)
        self.next_position = self.next_position.index_select(0, rows)

    def _forward(self, input_ids, positions, valid, mask) -> torch.Tensor:
        start, new = self.length, input_ids.shape[1]
        if start + new > self.max_len:
            raise RuntimeError(f"KV cache full: {start + new} positions > max_len={self.max_len}")
        self.key_valid[:, start : start + new] = valid
        hidden = self.lm.model.embed_tokens(input_ids)
        cos, sin = self.lm.model.rotary_emb(hidden, positions)
        batch = hidden.shape[0]
        for index, layer in enumerate(self.layers):
            attn = layer.self_attn
            normed = layer.input_layernorm(hidden)
            q = attn.q_proj(normed).view(batch, new, -1, self.head_dim).transpose(1, 2)
            k = attn.k_proj(normed).view(batch, new, -1, self.head_dim).transpose(1, 2)
            v = attn.v_proj(normed).view(batch, new, -1, self.head_dim).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            self.keys[index][:, :, start : start + new] = k
            self.values[index][:, :, start : start + new] = v
            keys = self.keys[index][:, :, : start + new]
            values = self.values[index][:, :, : start + new]
            if self.groups > 1:
                keys = keys.repeat_interleave(self.groups, dim=1)
                values = values.repeat_interleave(self.groups, dim=1)
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
            hidden = hidden + attn.o_proj(out.transpose(1, 2).reshape(batch, new, -1))
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        self.length = start + new
        last = self.lm.model.norm(hidden[:, -1])
        return self.lm.lm_head(last)
