"""The supervised warm start: a base that sometimes succeeds before any RL (chapter 00; every RL chapter's base).

`supervised_warm_start` fits a model to demonstration token sequences with a loss mask, so that only the tokens a
policy would generate are learned (observations and tool responses are masked out, exactly as in RL rollouts).
`demonstration_examples` lays `(prompt, completion)` demonstrations out as those sequences, from text or from the
environment's own turns; `warm_start_and_save` builds a base checkpoint reproducibly (the order of seeding, model,
examples and training is fixed, so the data manifest's hashes hold). Micro-batched by a token budget
(`course_lib.rl.micro_batch`) with the whole batch's gradient, so a real vocabulary fits in memory.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from course_lib import course_config
from course_lib.algos.grpo import masked_aggregate
from course_lib.models import build_model, save
from course_lib.rl import micro_batch
from course_lib.tokenizer import encode, encode_with_offsets
from course_lib.validation import at_least, one_of


@dataclass
class SFTConfig:
    """Supervised warm start."""

    steps: int = 1000
    """Optimizer steps."""
    batch_size: int = 64
    """Sequences per step, sampled with replacement from the demonstrations."""
    learning_rate: float = 3e-3
    """AdamW learning rate (constant after a linear warm-up)."""
    warmup_steps: int = 50
    """Linear warm-up length."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    micro_batch_tokens: int = 0
    """Padded tokens per forward (`course_lib.rl.micro_batch`): 0 runs each step's batch at once; a budget splits its
    rows into micro-batches with the same gradient, so that a real vocabulary's logits fit in memory."""
    gradient_checkpointing: bool = False
    """Recompute a layer's activations in the backward instead of keeping them (`micro_batch.memory_options`): for
    a real model on a GPU; the same gradient."""
    autocast: str = "none"
    """`none` (float32) or `bf16` (matrix products under bfloat16 autocast, logits scored in float32)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Refuse impossible settings when they are made, not minutes into a run (a ValueError naming the field)."""
        one_of("SFTConfig.autocast", self.autocast, micro_batch.AUTOCAST)
        at_least("SFTConfig.steps", self.steps, 0)
        at_least("SFTConfig.micro_batch_tokens", self.micro_batch_tokens, 0)
        at_least("SFTConfig.batch_size", self.batch_size, 1)
        at_least("SFTConfig.learning_rate", self.learning_rate, 0.0, strict=True)
        at_least("SFTConfig.warmup_steps", self.warmup_steps, 1)  # the warm-up divides by it
        at_least("SFTConfig.weight_decay", self.weight_decay, 0.0)


def supervised_warm_start(
    model: torch.nn.Module,
    examples: Sequence[tuple[list[int], list[int]]],
    pad_id: int,
    config: SFTConfig,
    generator: torch.Generator,
    progress: bool = False,
) -> list[dict[str, float]]:
    """Train on `examples`, each `(token_ids, loss_mask)`; the mask marks tokens to learn.

    Returns a history of `{"step", "loss"}` every 10 steps.
    """
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / config.warmup_steps))
    model.train()
    history = []
    for step in tqdm(range(config.steps), disable=not progress, desc="warm start"):
        picks = torch.randint(len(examples), (config.batch_size,), generator=generator).tolist()
        width = max(len(examples[i][0]) for i in picks)
        ids = torch.full((len(picks), width), pad_id, dtype=torch.long)
        attention = torch.zeros(len(picks), width, dtype=torch.long)
        mask = torch.zeros(len(picks), width)
        for row, i in enumerate(picks):
            tokens, target = examples[i]
            ids[row, : len(tokens)] = torch.tensor(tokens)
            attention[row, : len(tokens)] = 1  # by length: a checkpoint whose pad is its EOS has EOS inside turns
            mask[row, : len(target)] = torch.tensor(target, dtype=torch.float)
        ids, mask = ids.to(device), mask.to(device)
        optimizer.zero_grad(set_to_none=True)
        with micro_batch.memory_options(model, config.gradient_checkpointing, config.autocast):
            loss, _ = micro_batch.backward(
                model, ids, attention.to(device), 1.0,
                lambda logprobs, _entropy, mask=mask: (masked_aggregate(-logprobs, mask, "token-mean"), {}),
                config.micro_batch_tokens,
            )  # fmt: skip
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 10 == 0 or step == config.steps - 1:
            history.append({"step": step, "loss": loss.item()})
    model.eval()
    return history


TOOL_RESPONSE = re.compile(r"<tool_response>.*?(?:</tool_response>|\Z)", re.DOTALL)
"""A tool response in a demonstration's text, tags included (an unclosed one runs to the end)."""


Turns = Sequence[tuple[str, str]]
"""A demonstration's completion as the environment's own turns: `(action, observation that answered it)` per step
(`TextEnv.demonstration`), the last observation empty when the episode ended there."""


def completion_text(completion: str | Turns) -> str:
    """A completion (text, or turns) as one text, actions and observations joined by spaces as the chapters write
    them (for counting its words)."""
    if isinstance(completion, str):
        return completion
    return " ".join(part for turn in completion for part in turn if part)


def demonstration_examples(tokenizer, texts: Sequence[tuple[str, str | Turns]]) -> list[tuple[list[int], list[int]]]:
    """Token ids and loss masks of `(prompt, completion)` demonstrations, BOS and the prompt first.

    A completion given as turns (`Turns`, e.g. `env.demonstration()`) is laid out as the rollout engine
    lays out an episode: each action's ids (mask 1), then its observation's ids (mask 0), whatever the observation's
    text. A completion given as one text is a tool-using episode's: the mask is 1 on the tokens the policy writes and
    0 on everything inside `<tool_response> ... </tool_response>`, exactly as in RL rollouts (the only observations a
    text can show; another environment's observations need turns). The responses are found in the text and each
    token's character span (the tokenizer's offsets) says whether it overlaps one, so the mask is right for a
    tokenizer that splits the tags into pieces as well as for the course's, where each tag is one token.
    """
    bos = [] if tokenizer.bos_token_id is None else [tokenizer.bos_token_id]
    examples = []
    for prompt, completion in texts:
        ids = [*bos, *encode(tokenizer, prompt)]
        mask = [0] * len(ids)
        if not isinstance(completion, str):
            for action, observation in _turns(completion):
                action_ids, observation_ids = encode(tokenizer, action), encode(tokenizer, observation)
                ids += action_ids + observation_ids
                mask += [1] * len(action_ids) + [0] * len(observation_ids)
            examples.append((ids, mask))
            continue
        spans = [match.span() for match in TOOL_RESPONSE.finditer(completion)]
        completion_ids, offsets = encode_with_offsets(tokenizer, completion)
        for token, (start, end) in zip(completion_ids, offsets, strict=True):
            inside = any(start < span_end and end > span_start for span_start, span_end in spans)
            ids.append(token)
            mask.append(0 if inside else 1)
        examples.append((ids, mask))
    return examples


def _turns(completion: Turns) -> list[tuple[str, str]]:
    """`completion`'s turns as a list, refused (ValueError naming the turn) unless each is two strings."""
    turns = list(completion)
    for number, turn in enumerate(turns):
        if not (isinstance(turn, (tuple, list)) and len(turn) == 2 and all(isinstance(p, str) for p in turn)):
            raise ValueError(f"turn {number} of a demonstration is {turn!r:.60}, not (action, observation) strings")
    return [tuple(turn) for turn in turns]


def warm_start_and_save(
    out_dir: str | Path,
    tokenizer,
    model_preset: str,
    max_positions: int,
    make_examples: Callable[[], Sequence[tuple[list[int], list[int]]]],
    sft: SFTConfig,
    seed: int,
    progress: bool = False,
) -> list[dict[str, float]]:
    """Build a base checkpoint: seed, create a fresh model, fit `make_examples()`, save both.

    The order (seed, model, examples, training) is fixed so that a rebuild with the same seed writes
    byte-identical files, which is what the data manifest's hashes rely on.
    """
    generator = course_config.seed_everything(seed)
    model = build_model(tokenizer, model_preset, max_positions=max_positions).to(course_config.device())
    history = supervised_warm_start(model, make_examples(), tokenizer.pad_token_id, sft, generator, progress)
    save(model.to("cpu"), tokenizer, out_dir)
    return history
