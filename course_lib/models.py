"""Tiny causal language models built from `transformers` configs (all chapters).

Models are Llama-family decoders created with `from_config` (no hub download), saved and loaded
with `save_pretrained` / `from_pretrained`, so a chapter's code is the same code that would load a
real checkpoint. LoRA adapters come from `peft`; with the adapter disabled, the frozen base is the
reference policy for KL penalties (chapter 05 and later).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, PreTrainedModel
from transformers.utils import logging as transformers_logging

# Loading a 1 MB checkpoint needs no progress bar; keep notebook outputs clean.
transformers_logging.disable_progress_bar()

# Parameters without the (tied) embedding, which adds vocabulary size x hidden size on top: chapter
# 03's 305-word vocabulary makes tiny 465,664 and tiny_wide 1,017,984 in all.
MODEL_PRESETS: dict[str, dict[str, int]] = {
    # 100,224 parameters + embedding: chapter 07's step-mode policy (one action word from a short observation)
    "micro": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=192),
    # 426,624 parameters + embedding: the cpu preset of most chapters
    "tiny": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=384),
    # 959,424 + embedding: the larger of chapter 03's two cpu-preset policies (2.25x tiny's compute per token)
    "tiny_wide": dict(hidden_size=192, num_hidden_layers=2, num_attention_heads=6, intermediate_size=576),
    # 1,918,656 + embedding: the gpu preset's default
    "small": dict(hidden_size=192, num_hidden_layers=4, num_attention_heads=6, intermediate_size=576),
    # 6,294,784 + embedding: gpu preset
    "medium": dict(hidden_size=256, num_hidden_layers=6, num_attention_heads=8, intermediate_size=1024),
}


def build_model(tokenizer, preset: str = "tiny", max_positions: int = 256, **overrides) -> PreTrainedModel:
    """A freshly initialised Llama-style causal LM sized by `MODEL_PRESETS[preset]`."""
    if preset not in MODEL_PRESETS:
        raise KeyError(f"unknown model preset {preset!r}; choose from {sorted(MODEL_PRESETS)}")
    sizes = {**MODEL_PRESETS[preset], **overrides}
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **sizes,
    )
    return AutoModelForCausalLM.from_config(config)


def preset_of(config) -> str:
    """The `MODEL_PRESETS` name whose sizes a model's config has (`"custom"` when none matches): what a loaded
    checkpoint is, read from the checkpoint itself."""
    for name, sizes in MODEL_PRESETS.items():
        if all(getattr(config, key, None) == value for key, value in sizes.items()):
            return name
    return "custom"


def count_parameters(model: torch.nn.Module, trainable_only: bool = False) -> int:
    """Number of (trainable) parameters, counting tied weights once."""
    seen: set[int] = set()
    total = 0
    for param in model.parameters():
        if id(param) in seen or (trainable_only and not param.requires_grad):
            continue
        seen.add(id(param))
        total += param.numel()
    return total


def save(model: PreTrainedModel, tokenizer, path: str | Path) -> None:
    """Save model and tokenizer with `save_pretrained` into one folder."""
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)


def load(path: str | Path, device: torch.device | str = "cpu"):
    """Load `(model, tokenizer)` saved by `save`, with `from_pretrained`, in eval mode."""
    model = AutoModelForCausalLM.from_pretrained(path).to(device)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model.eval()
    return model, tokenizer


def add_lora(model: PreTrainedModel, rank: int = 8, alpha: int = 16, dropout: float = 0.0) -> PeftModel:
    """Wrap `model` with a LoRA adapter on every attention and MLP projection; the base is frozen."""
    config = LoraConfig(
        r=rank,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        task_type="CAUSAL_LM",
    )
    with warnings.catch_warnings():
        # peft 0.21 calls a transformers 5.x API that is deprecated; the warning is not about this model.
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return get_peft_model(model, config)


@contextmanager
def reference_policy(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Inside this block `model` computes the reference policy: the adapter-disabled base for a
    `PeftModel`. A plain model has no reference of its own, so asking for one is an error."""
    if not isinstance(model, PeftModel):
        raise TypeError("reference_policy needs a PeftModel; keep a frozen copy for full fine-tuning")
    with model.disable_adapter():
        yield model


def token_logprobs(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of each token given its prefix, and the full-vocabulary entropy there: what every loss, score and
    check of the course reads from a model (the update, search, diagnostics), so it lives beside the models.

    Inputs `[B, T]` right-padded; outputs `[B, T]`, aligned with the tokens (position 0, which has
    no prefix, is 0).
    """
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]
    logits = logits if logits.dtype == torch.float64 else logits.float()  # bf16/fp16 scored in float32
    if temperature > 0:
        logits = logits / temperature
    log_probs = torch.log_softmax(logits, dim=-1)
    chosen = log_probs.gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    zeros = torch.zeros_like(chosen[:, :1])
    return torch.cat([zeros, chosen], dim=1), torch.cat([zeros, entropy], dim=1)
