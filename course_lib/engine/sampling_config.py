"""How the policy is sampled during a rollout (`SamplingConfig`), checked when it is made.

Kept apart from the engine (`engine.rollout`, which re-exports it) so that the setting and what it refuses read on
their own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from course_lib.engine.prompt_format import FORMATS, is_name

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}  # SamplingConfig.precision -> the decoder's dtype


@dataclass
class SamplingConfig:
    """How the policy is sampled during a rollout."""

    temperature: float = 1.0
    """Softmax temperature; 0 means greedy decoding (log-probs are then taken at temperature 1)."""
    max_turn_tokens: int = 16
    """A turn that has not produced a stop tag after this many tokens is sent to the env as is."""
    max_total_tokens: int = 128
    """Hard cap on a sequence's length, prompt and observations included (then `truncated`)."""
    stop_tags: tuple[str, ...] = ("</tool_call>", "</answer>")
    """Strings that end a turn. A word-level tokenizer must have each as one token (a `KeyError` names the pieces
    otherwise); any other tokenizer matches them on the turn's decoded text."""
    end_at_eos: bool | None = None
    """Whether EOS ends a turn. None: yes for a checkpoint's tokenizer (a chat model ends its message with it), no
    for the course's word-level ones, whose bases never saw EOS in a demonstration (so the course's runs do not
    depend on whether a sample ever hits it)."""
    snapshot_envs: bool = False
    """Keep a copy of the environment after every step, which `branch` needs."""
    prompt_format: str = "plain"
    """How the prompt and observations become ids (`course_lib.engine.prompt_format.FORMATS`): `plain` for the course's
    bases, `chat` for a checkpoint with a chat template (`chat:user` and the like: observations in that role's turns,
    for a template without a `tool` role)."""
    precision: str = "fp32"
    """The sampler's precision (`PRECISIONS`): `fp32`, the model's own; `bf16`, a bfloat16 copy of its weights, LoRA
    merged (`kv_decoder`), for speed. Its log-probs are then not the update's (`GRPOConfig.old_logprobs`)."""

    def __post_init__(self) -> None:
        """Refuse a configuration that cannot mean what it says, when it is made (also by `dataclasses.replace`),
        rather than minutes into a run: a zero token budget truncates every turn, a typo in `prompt_format` would
        only fail when the engine is built, `stop_tags=("</answer>")` (no comma) is a string whose every
        character would end a turn, and no stop tags at all (`--set sampling.stop_tags=`) leave only the token budget
        to end one."""
        for name in ("max_turn_tokens", "max_total_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SamplingConfig.{name} must be an int >= 1 (tokens), got {value!r}")
        temperature = self.temperature
        if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not math.isfinite(temperature):
            raise ValueError(f"SamplingConfig.temperature must be a finite number, got {temperature!r}")
        if temperature < 0:
            raise ValueError(
                f"SamplingConfig.temperature must be > 0 (sampling) or 0 (greedy decoding), got {temperature!r}"
            )
        if isinstance(self.stop_tags, str) or not all(isinstance(tag, str) and tag for tag in self.stop_tags):
            raise ValueError(
                f"SamplingConfig.stop_tags must be a tuple of non-empty strings, e.g. ('</answer>',), "
                f"got {self.stop_tags!r}"
            )
        if not self.stop_tags and self.end_at_eos is not True:
            raise ValueError(
                "SamplingConfig.stop_tags is empty, so a turn would end only at max_turn_tokens (runaway turns, the "
                "tool never called in time); name the environment's tags, e.g. ('</answer>',), or set "
                "end_at_eos=True for a chat model whose turns end at EOS"
            )
        if self.precision not in PRECISIONS:
            raise ValueError(f"SamplingConfig.precision must be one of {sorted(PRECISIONS)}, got {self.precision!r}")
        if self.end_at_eos not in (None, True, False):
            raise ValueError(f"SamplingConfig.end_at_eos must be None, True or False, got {self.end_at_eos!r}")
        # A format object (as `RolloutEngine(prompt_format=...)` takes) is used as is; a name must be a known one.
        if isinstance(self.prompt_format, str) and not is_name(self.prompt_format):
            raise ValueError(
                f"SamplingConfig.prompt_format must be one of {sorted(FORMATS)}, got {self.prompt_format!r} (or "
                "chat:<role>, a chat template's observations in that role's turns, e.g. chat:user)"
            )
