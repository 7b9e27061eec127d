"""An incremental forward pass with a preallocated KV cache, for fast batched rollouts.

`transformers`' `generate()` and its model forward are general; for a 2-layer model on a CPU their
per-step Python overhead costs more than the matrix work. This module runs the *same* modules of a
Llama-family model (embeddings, norms, projections, MLPs, rotary tables; LoRA-wrapped projections
too) in a lean loop over a static cache. `tests/engine/test_rollout.py` checks that its logits equal
the model's own forward pass, so nothing here changes what the model computes, only how fast.

With `dtype` (bfloat16 for sampling at a real model's speed), the decoder runs on its own copy of the weights in
that precision, each LoRA adapter merged into its projection (W + scale B A, peft's `get_delta_weight`), taken when
the decoder is built (once per rollout, so it follows every update); norms and the softmax's logits stay float32.
That is a sampler's precision, not the model's: the log-probs it stores are not what a float32 forward computes, so
an update must score its ratio against old log-probs of its own forward (`GRPOConfig.old_logprobs`).

Shapes: B sequences, L new positions, S cache slots, H heads, D head size, V vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course_lib.machine import cpu_attention

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

    def __init__(self, model: torch.nn.Module, batch_size: int, max_len: int, dtype: torch.dtype | None = None):
        self.lm = causal_lm(model)
        config = self.lm.config
        self.layers = self.lm.model.layers
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.groups = config.num_attention_heads // self.kv_heads
        param = next(self.lm.parameters())
        self.dtype = dtype or param.dtype
        shape = (batch_size, self.kv_heads, max_len, self.head_dim)
        self.keys = [torch.zeros(shape, dtype=self.dtype, device=param.device) for _ in self.layers]
        self.values = [torch.zeros(shape, dtype=self.dtype, device=param.device) for _ in self.layers]
        self.key_valid = torch.zeros(batch_size, max_len, dtype=torch.bool, device=param.device)
        self.next_position = torch.zeros(batch_size, dtype=torch.long, device=param.device)
        self.length = 0
        self.max_len = max_len
        if dtype is None:  # the model's own modules and weights
            self.fused = [_fuse(layer) for layer in self.layers]
            self.embedding = self.head = None
        else:  # a merged copy in `dtype`
            self.fused = [_FusedWeights(layer, dtype) for layer in self.layers]
            self.embedding = _weight(self.lm.model.embed_tokens, dtype)
            head = self.lm.lm_head
            self.head = self.embedding if head.weight is self.lm.model.embed_tokens.weight else _weight(head, dtype)
        table_positions = torch.arange(max(max_len, config.max_position_embeddings), device=param.device)[None]
        cos, sin = self.lm.model.rotary_emb(self.keys[0].float(), table_positions)
        self.cos_table, self.sin_table = cos[0].to(self.dtype), sin[0].to(self.dtype)  # [P, D]

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
    def step(self, token_ids: torch.Tensor, attend: torch.Tensor | None = None) -> torch.Tensor:
        """Append tokens and return the logits `[B, V]` after the last one.

        `token_ids` is `[B]` (one token per sequence; `attend[b]` False marks padding) or `[B, L]`
        (L real tokens per sequence, e.g. an observation appended in one go).
        """
        if token_ids.dim() == 1:
            attend = torch.ones_like(token_ids, dtype=torch.bool) if attend is None else attend
            positions = self.next_position[:, None]
            self.next_position = self.next_position + attend.long()
            return self._forward(token_ids[:, None], positions, attend[:, None], None)
        new = token_ids.shape[1]
        offsets = torch.arange(new, device=token_ids.device)
        positions = self.next_position[:, None] + offsets
        self.next_position = self.next_position + new
        causal = offsets[None, :] <= offsets[:, None]  # [new, new]
        history = self.key_valid[:, None, : self.length].expand(-1, new, -1)
        mask = torch.cat([history, causal.expand(token_ids.shape[0], -1, -1)], dim=-1)
        return self._forward(token_ids, positions, torch.ones_like(token_ids, dtype=torch.bool), mask[:, None])

    def keep(self, rows: torch.Tensor) -> None:
        """Keep the sequences at indices `rows` (1-D long tensor), in that order.

        An index may repeat: the sequence is then copied, which is how one prefilled prefix
        serves several continuations."""
        self.keys = [_take_rows(k, rows, self.length) for k in self.keys]
        self.values = [_take_rows(v, rows, self.length) for v in self.values]
        self.key_valid = self.key_valid.index_select(0, rows)
        self.next_position = self.next_position.index_select(0, rows)

    def _forward(self, input_ids, positions, valid, mask) -> torch.Tensor:
        """One forward over `new` positions; `mask` `[B, 1, new, S]`, or None for one decode step."""
        start, new = self.length, input_ids.shape[1]
        end = start + new
        if end > self.max_len:
            raise RuntimeError(f"KV cache full: {end} positions > max_len={self.max_len}")
        self.key_valid[:, start:end] = valid
        if mask is None:
            mask = self.key_valid[:, None, None, :end]
        hidden = (
            self.lm.model.embed_tokens(input_ids) if self.embedding is None else F.embedding(input_ids, self.embedding)
        )
        # Rotary tables are looked up by position rather than recomputed each step.
        cos, sin = self.cos_table[positions], self.sin_table[positions]  # [B, new, D]
        batch, heads = hidden.shape[0], self.kv_heads * self.groups
        for index, (layer, fused) in enumerate(zip(self.layers, self.fused, strict=True)):
            attn = layer.self_attn
            normed = _rms_norm(layer.input_layernorm, hidden)
            if fused is None:
                q, k, v = attn.q_proj(normed), attn.k_proj(normed), attn.v_proj(normed)
                qkv = torch.cat([q, k, v], dim=-1)
            else:
                qkv = F.linear(normed, fused.qkv_weight, fused.qkv_bias)
            qkv = qkv.view(batch, new, heads + 2 * self.kv_heads, self.head_dim)
            qk = _rotate(qkv[:, :, : heads + self.kv_heads], cos[:, :, None], sin[:, :, None])
            q = qk[:, :, :heads].transpose(1, 2)
            self.keys[index][:, :, start:end] = qk[:, :, heads:].transpose(1, 2)
            self.values[index][:, :, start:end] = qkv[:, :, heads + self.kv_heads :].transpose(1, 2)
            keys, values = self.keys[index][:, :, :end], self.values[index][:, :, :end]
            if self.groups > 1:
                keys = keys.repeat_interleave(self.groups, dim=1)
                values = values.repeat_interleave(self.groups, dim=1)
            with cpu_attention(q.device.type, q.dtype):
                out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
            out = out.transpose(1, 2).reshape(batch, new, -1)
            hidden = hidden + (attn.o_proj(out) if fused is None else F.linear(out, fused.o_weight))
            normed = _rms_norm(layer.post_attention_layernorm, hidden)
            if fused is None:
                hidden = hidden + layer.mlp(normed)
            else:
                gate, up = F.linear(normed, fused.gate_up_weight).chunk(2, dim=-1)
                hidden = hidden + F.linear(F.silu(gate) * up, fused.down_weight)
        self.length = end
        last = _rms_norm(self.lm.model.norm, hidden[:, -1])
        return self.lm.lm_head(last) if self.head is None else F.linear(last, self.head).float()


def _take_rows(cache: torch.Tensor, rows: torch.Tensor, used: int) -> torch.Tensor:
    """`cache[rows]` for a `[B, H, S, D]` cache, copying only the `used` positions written so far
    (the rest is written before it is ever read, so it may hold anything)."""
    taken = cache.new_empty((rows.shape[0], *cache.shape[1:]))
    taken[:, :, :used] = cache[:, :, :used].index_select(0, rows)
    return taken


def _rms_norm(norm: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """The model's RMSNorm as one fused op (same formula: x / rms(x) * weight, in float32), returned in the hidden
    state's precision (a low-precision decoder normalises in float32, as transformers' Llama does)."""
    if hidden.dtype == norm.weight.dtype:
        return F.rms_norm(hidden, norm.weight.shape, norm.weight, norm.variance_epsilon)
    normed = F.rms_norm(hidden.float(), norm.weight.shape, norm.weight.float(), norm.variance_epsilon)
    return normed.to(hidden.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding (RoFormer, arXiv 2104.09864) in the half-split layout of Llama."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-second, first], dim=-1) * sin


class _FusedWeights:
    """Concatenated q/k/v and gate/up weights of one layer (fewer, larger matrix products), and its
    o/down weights, applied with `F.linear` directly (no `nn.Module` call on the hot path).

    Without `dtype`, the model's own weights of plain, bias-free projections (`_fuse` checks). With `dtype`, a copy
    in that precision of every projection's effective weight, a LoRA adapter merged (`_weight`), and q/k/v's biases
    where the family has them (qwen2)."""

    def __init__(self, layer: torch.nn.Module, dtype: torch.dtype | None = None):
        attn, mlp = layer.self_attn, layer.mlp
        if dtype is not None and mlp.act_fn.__class__.__name__ not in ("SiLU", "SiLUActivation"):
            raise NotImplementedError(f"a {dtype} decoder needs SiLU MLPs, not {mlp.act_fn.__class__.__name__}")
        if any(_bias(m) is not None for m in (attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj)):
            raise NotImplementedError("a merged decoder takes biases on q/k/v only (llama's, qwen2's layouts)")
        projections = [attn.q_proj, attn.k_proj, attn.v_proj]
        weights = [_weight(p, dtype) for p in projections]
        self.qkv_weight = torch.cat(weights)
        biases = [_bias(p) for p in projections]
        self.qkv_bias = None  # a missing bias of the three is zeros, so one fused product serves all
        if any(b is not None for b in biases):
            zeros = [w.new_zeros(w.shape[0]) for w in weights]
            self.qkv_bias = torch.cat([z if b is None else b.to(z.dtype) for b, z in zip(biases, zeros, strict=True)])
        self.gate_up_weight = torch.cat([_weight(mlp.gate_proj, dtype), _weight(mlp.up_proj, dtype)])
        self.o_weight = _weight(attn.o_proj, dtype)
        self.down_weight = _weight(mlp.down_proj, dtype)


def _weight(module: torch.nn.Module, dtype: torch.dtype | None = None) -> torch.Tensor:
    """`module`'s effective weight, detached: a plain layer's own, or a peft LoRA layer's base weight plus each active
    adapter's delta (W + scale B A), cast to `dtype` when given."""
    base = getattr(module, "base_layer", module)
    weight = base.weight.detach()
    if hasattr(module, "lora_A") and not module.disable_adapters and not module.merged:
        deltas = [module.get_delta_weight(name) for name in module.active_adapters if name in module.lora_A]
        weight = weight + sum(deltas).detach() if deltas else weight
    return weight if dtype is None else weight.to(dtype)


def _bias(module: torch.nn.Module) -> torch.Tensor | None:
    """`module`'s bias (a LoRA layer's base bias), detached, or None."""
    bias = getattr(getattr(module, "base_layer", module), "bias", None)
    return None if bias is None else bias.detach()


def _fuse(layer: torch.nn.Module) -> _FusedWeights | None:
    """Fused weights when every projection is a plain bias-free `nn.Linear` (not LoRA-wrapped),
    else None.

    The copies are taken when the decoder is built (once per rollout), so they always match the
    current weights; a LoRA-wrapped layer keeps calling its modules.
    """
    attn, mlp = layer.self_attn, layer.mlp
    modules = [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj]
    plain = all(type(m) is torch.nn.Linear and m.bias is None for m in modules)
    if not plain or getattr(mlp, "act_fn", None).__class__.__name__ not in ("SiLU", "SiLUActivation"):
        return None
    return _FusedWeights(layer)
