"""One sampled turn per prompt, with the entropy of each token's distribution: how chapter 16 reads a real model's
first turns (its premises, its exercises) without an environment.

Temperature 1 over the full vocabulary (or greedy), through the engine's decoder (`hf_decoder.make_decoder`, the KV
cache on a Llama), ending at the end-of-turn token, a stop tag or a token budget.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from course_lib.engine.hf_decoder import left_pad, make_decoder


@torch.no_grad()
def sample_turns(
    model, tokenizer, prefixes: Sequence[Sequence[int]], max_new: int, generator: torch.Generator,
    stop_tags: Sequence[str] = (), greedy: bool = False,
) -> list[tuple[list[int], list[float]]]:  # fmt: skip
    """One sampled turn after each prefix: temperature 1 over the full vocabulary (or, `greedy`, the most likely
    token each step), through the engine's decoder (`hf_decoder.make_decoder`), ending after the end-of-turn token, a
    stop tag in the decoded text, or `max_new` tokens. Returns per prefix the sampled ids and the full-vocabulary
    entropy (nats) of the distribution each was drawn from."""
    rows = len(prefixes)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids, mask = left_pad(prefixes, pad)
    decoder = make_decoder(model, rows, ids.shape[1] + max_new)
    logits = decoder.prefill(ids, mask)
    sampled: list[list[int]] = [[] for _ in range(rows)]
    entropies: list[list[float]] = [[] for _ in range(rows)]
    alive = torch.ones(rows, dtype=torch.bool)
    for _ in range(max_new):
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        entropy = -(logprobs.exp() * logprobs).sum(-1)
        if greedy:
            tokens = logprobs.argmax(-1)
        else:
            tokens = torch.multinomial(logprobs.exp(), 1, generator=generator).squeeze(-1)
        for row in alive.nonzero().flatten().tolist():
            token = int(tokens[row])
            sampled[row].append(token)
            entropies[row].append(float(entropy[row]))
            text = tokenizer.decode(sampled[row])
            if token == tokenizer.eos_token_id or any(tag in text for tag in stop_tags):
                alive[row] = False
        if not alive.any():
            break
        logits = decoder.step(torch.where(alive, tokens, torch.full_like(tokens, pad)), attend=alive)
    return list(zip(sampled, entropies, strict=True))


def turn_text(tokenizer, ids: Sequence[int]) -> str:
    """A sampled turn's text as the environment receives it: special tokens dropped."""
    return tokenizer.decode(list(ids), skip_special_tokens=True)
