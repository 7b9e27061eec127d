"""IGPO's information gain, read from the policy: the gold answer's probability before and after each turn.

For every episode, the gold answer is teacher-forced after its prompt and after each turn's tool response, all
in one batched forward pass of the policy that sampled the batch (no gradient), and the mean log-probability of
the answer's own tokens is read (`algos.igpo`: p_t is its exponential). `annotate` writes each turn's reward into
its `info["turn_reward"]`, which the batch carries in `step_extras["turn_reward"]`: the information gain IG_t for
every turn but the last, the outcome for the last. The `igpo` sampler (`rl.seams`) calls it after sampling.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from course_lib.algos.igpo import episode_turn_rewards, information_gains
from course_lib.engine.rollout import Trajectory
from course_lib.models import token_logprobs
from course_lib.tokenizer import encode_with_offsets

CHUNK = 64
"""Sequences per forward pass."""


def gold_tokens(tokenizer, template: str, answer: str) -> tuple[list[int], list[bool]]:
    """The template with the answer filled in as token ids, and which of them belong to the answer itself (by the
    tokenizer's character offsets, so that any tokenizer marks the right ones)."""
    before = template.split("{answer}")[0]
    text = template.replace("{answer}", answer)
    start, end = len(before), len(before) + len(answer)
    ids, offsets = encode_with_offsets(tokenizer, text)
    scored = [low < end and high > start for low, high in offsets]
    if not any(scored):
        raise ValueError(f"no token of {text!r} covers the answer {answer!r}")
    return ids, scored


def prefix_lengths(trajectory: Trajectory) -> list[int]:
    """Tokens before the first turn and after each turn but the last (its tool response included): the contexts
    p_0 .. p_{T-1} are read in. T = the episode's steps (`len(rewards)`)."""
    turns = list(trajectory.turn_ids)
    return [sum(1 for turn in turns if turn <= last) for last in range(-1, len(trajectory.rewards) - 1)]


def gold_mean_logprobs(model, tokenizer, contexts: Sequence[Sequence[int]], gold: Sequence[tuple[list, list]]):
    """The mean log-probability of each gold answer's scored tokens after its context, `[len(contexts)]`, in
    batched forward passes of `model` (right-padded; `CHUNK` sequences at a time)."""
    out: list[float] = []
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    device = next(model.parameters()).device
    with torch.no_grad():
        for first in range(0, len(contexts), CHUNK):
            rows = [list(c) + list(g[0]) for c, g in zip(contexts[first : first + CHUNK], gold[first : first + CHUNK])]
            length = max(len(row) for row in rows)
            ids = torch.tensor([row + [pad] * (length - len(row)) for row in rows], device=device)
            mask = torch.tensor([[1] * len(row) + [0] * (length - len(row)) for row in rows], device=device)
            logprobs, _ = token_logprobs(model, ids, mask)
            for row, context, (_, scored) in zip(range(len(rows)), contexts[first:], gold[first:]):
                picked = [logprobs[row, len(context) + k] for k, keep in enumerate(scored) if keep]
                out.append(float(torch.stack(picked).mean()))
    return out


def gold_answer(trajectory: Trajectory, answer_key: str) -> str:
    """The episode's gold answer: `info[answer_key]` of the first step whose info has it, or "" when none does.

    The environment's contract (`envs.contract.INFO_KEYS`): every valid step's info names the answer. An invalid
    step's info is the base class's (`valid`, `error`), so an episode that opens with one finds it further on; one
    whose every step was invalid has none."""
    return next((str(info[answer_key]) for info in trajectory.infos if info.get(answer_key)), "")


def episode_logprobs(model, tokenizer, trajectories: Sequence[Trajectory], template: str, answer_key: str):
    """Per episode, the gold answer's mean log-probability before its first turn and after each turn but the last
    (`[T]` each; empty for an episode with no step, or with no step naming its answer: `gold_answer`), read in
    batched passes over every episode's contexts."""
    contexts, gold, owners = [], [], []
    for index, trajectory in enumerate(trajectories):
        if not trajectory.rewards:  # no step was sent (cut at once): no turn to reward
            continue
        answer = gold_answer(trajectory, answer_key)
        if not answer:  # every step invalid: no information to measure (`annotate` gives its turns a gain of 0)
            continue
        tokens = gold_tokens(tokenizer, template, answer)
        for length in prefix_lengths(trajectory):
            contexts.append(trajectory.token_ids[:length])
            gold.append(tokens)
            owners.append(index)
    flat = gold_mean_logprobs(model, tokenizer, contexts, gold)
    per_episode: list[list[float]] = [[] for _ in trajectories]
    for owner, value in zip(owners, flat):
        per_episode[owner].append(value)
    return per_episode


def annotate(model, tokenizer, trajectories: Sequence[Trajectory], config) -> list[list[float]]:
    """Write IGPO's turn rewards into each step's `info["turn_reward"]` (`config`: an `algos.igpo.IGPOConfig`) and
    return each episode's gold mean log-probabilities (`episode_logprobs`). An episode none of whose steps named its
    answer (all invalid) gets a gain of 0 on every turn but the last, which earns the outcome as always."""
    logprobs = episode_logprobs(model, tokenizer, trajectories, config.answer_template, config.answer_key)
    for trajectory, values in zip(trajectories, logprobs):
        if not trajectory.rewards:
            continue
        gains = information_gains(values, config.gain) if values else [0.0] * (len(trajectory.rewards) - 1)
        rewards = episode_turn_rewards(gains, trajectory.total_reward, len(trajectory.rewards))
        for info, reward in zip(trajectory.infos, rewards):
            info["turn_reward"] = reward
    return logprobs
