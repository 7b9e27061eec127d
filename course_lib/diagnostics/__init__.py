"""Measurements of rollouts and of the policy (all RL chapters).

Summaries of a list of trajectories (success, reward, tool use, length, entropy) and of a batch
of groups (within-group reward spread), the numbers the chapters plot and their claims test; and
RAGEN-2's test of whether reasoning still depends on the input (chapter 10).

**Mutual information between input and reasoning** (RAGEN-2, arXiv 2604.06268; code
`collapse_metrics.py`). Entropy says how varied the reasoning z is; it cannot say whether z still
depends on the prompt x. A policy can write diverse text that is the same for every input ("template
collapse"). RAGEN-2 scores every sampled z_i under every prompt x_j of the batch, l[i, j] = log p(z_i | x_j),
and estimates, with x uniform over the P prompts,

    I(x; z) ~ mean_i ( l[i, own(i)] - log (1/P) sum_j exp l[i, j] )

which is 0 when z is independent of x and log P when z identifies its prompt. Retrieval accuracy, the
share of z whose best-scoring prompt is their own, is its discrete cousin (chance 1/P). The code's headline
uses the per-token mean log-probability of z (length-normalised); the sequence sum is its
`mi_seq_estimate`. `teacher_forced_logp` builds l by teacher forcing.
"""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence

import numpy as np
import torch

from course_lib import bridges
from course_lib.bridges import cross_scored_rows
from course_lib.engine.rollout import Trajectory
from course_lib.implement_it import implement_it


def rollout_stats(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Success rate, mean reward, tool-use rate, tool error rate, invalid-action rate, turns,
    policy tokens per trajectory and mean token entropy (nats) over policy tokens."""
    if not trajectories:
        raise ValueError("rollout_stats needs at least one trajectory")
    tool_calls = [sum("tool_result" in info for info in t.infos) for t in trajectories]
    tool_errors = [sum(info.get("tool_result") == "error" for info in t.infos) for t in trajectories]
    steps = sum(t.num_turns for t in trajectories)
    policy_tokens = [sum(t.loss_mask) for t in trajectories]
    entropy_sum = sum(e for t in trajectories for e, m in zip(t.entropies, t.loss_mask, strict=True) if m)
    return {
        "success": float(np.mean([t.success for t in trajectories])),
        "reward": float(np.mean([t.total_reward for t in trajectories])),
        "tool_use": float(np.mean([c > 0 for c in tool_calls])),
        "tool_error_rate": sum(tool_errors) / max(sum(tool_calls), 1),
        "invalid_rate": sum(not info.get("valid", True) for t in trajectories for info in t.infos) / max(steps, 1),
        "turns": steps / len(trajectories),
        "policy_tokens": float(np.mean(policy_tokens)),
        "entropy": entropy_sum / max(sum(policy_tokens), 1),
    }


def group_reward_std(trajectories: Sequence[Trajectory]) -> float:
    """Mean over groups of the (unbiased) standard deviation of total reward within the group."""
    groups: dict[int, list[float]] = defaultdict(list)
    for t in trajectories:
        groups[t.group_id].append(t.total_reward)
    spreads = [np.std(r, ddof=1) for r in groups.values() if len(r) > 1]
    return float(np.mean(spreads)) if spreads else 0.0


@implement_it("mi.cross_scoring", bridges.mutual_information)
def mutual_information(
    logp: torch.Tensor, prompt_index: Sequence[int] | torch.Tensor, prompt_keys: Sequence | None = None
) -> dict[str, float]:
    """RAGEN-2's input-reasoning mutual information from cross-scored log-probabilities.

    logp: [Z, P], logp[i, j] = log p(z_i | x_j); prompt_index: [Z], the prompt that produced z_i. With
    `prompt_keys` ([P]), prompts with equal keys are the same input, and retrieving a twin of one's own prompt
    counts as correct (as the code does). Returns, in nats:

    - `mi`: mean_i (logp[i, own] - logsumexp_j logp[i, j] + log P), in [0, log P] up to sampling noise;
    - `retrieval_accuracy`: the share of rows whose argmax over j is their own prompt (ties to the lowest j);
    - `conditional_entropy`: -mean_i logp[i, own], an estimate of H(z | x);
    - `marginal_entropy`: -mean_i (logsumexp_j logp[i, j] - log P), an estimate of H(z);
    - `mi_zscore`: mean_i of (matched - marginal) / (std_i(marginal) + 1e-3), the population std, as the code;
    - `chance`: 1 / P, the retrieval accuracy of a policy whose z ignores x; `prompts`: P.
    """
    own = cross_scored_rows(logp, prompt_index)
    rows, prompts = logp.shape
    logp = logp.double()
    matched = logp[torch.arange(rows), own]
    marginal = torch.logsumexp(logp, dim=1) - math.log(prompts)
    best = logp.argmax(dim=1)
    if prompt_keys is None:
        correct = best == own
    else:
        if len(prompt_keys) != prompts:
            raise ValueError(f"{len(prompt_keys)} prompt keys for {prompts} prompts")
        correct = torch.tensor([prompt_keys[b] == prompt_keys[o] for b, o in zip(best.tolist(), own.tolist())])
    spread = marginal.std(unbiased=False) if rows > 1 else torch.tensor(0.0, dtype=torch.float64)
    return {
        "mi": float((matched - marginal).mean()),
        "retrieval_accuracy": float(correct.double().mean()),
        "conditional_entropy": float(-matched.mean()),
        "marginal_entropy": float(-marginal.mean()),
        "mi_zscore": float(((matched - marginal) / (spread + 1e-3)).mean()),
        "chance": 1.0 / prompts,
        "prompts": float(prompts),
    }


@torch.no_grad()
def teacher_forced_logp(
    model,
    prompts: Sequence[Sequence[int]],
    reasonings: Sequence[Sequence[int]],
    aggregate: str = "mean",
    batch_size: int = 256,
    reuse_prompts: bool = False,
) -> torch.Tensor:
    """logp[i, j] = log p(z_i | x_j): every reasoning scored under every prompt by teacher forcing.

    prompts: P token lists (everything before the reasoning, e.g. the observation and the opening `<think>` tag);
    reasonings: Z token lists (the reasoning's content only, tags excluded), each non-empty. `aggregate`: `mean`
    (per-token mean, RAGEN-2's headline) or `sum` (the sequence's log-probability). Returns [Z, P], float64.

    By default every (reasoning, prompt) pair is one row of a batched forward, `batch_size` rows at a time, with a
    float64 log-softmax over `[rows, tokens, vocabulary]`: cheap for the course's word-level vocabularies. With
    `reuse_prompts` (a real vocabulary, a prompt far longer than a reasoning), each prompt runs once and its key/value
    cache is repeated for all reasonings, and only the reasonings' logits are normalised (float32): the same scores
    to float32 rounding at about 1/Z of the prompt compute and without the `[pairs, tokens, vocabulary]` tensor.
    """  # fmt: skip
    if aggregate not in ("mean", "sum"):
        raise ValueError(f"aggregate must be 'mean' or 'sum', got {aggregate!r}")
    if not prompts or not reasonings or any(not z for z in reasonings) or any(not x for x in prompts):
        raise ValueError("teacher_forced_logp needs non-empty prompts and reasonings")
    if reuse_prompts:
        return _logp_over_prompt_caches(model, prompts, reasonings, aggregate)
    pairs = [(i, j) for i in range(len(reasonings)) for j in range(len(prompts))]
    out = torch.empty(len(reasonings), len(prompts), dtype=torch.float64)
    device = next(model.parameters()).device
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        sequences = [list(prompts[j]) + list(reasonings[i]) for i, j in chunk]
        width = max(len(s) for s in sequences)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        attention = torch.zeros(len(chunk), width, dtype=torch.long)
        for row, sequence in enumerate(sequences):  # right padding: positions are those of an unpadded forward
            ids[row, : len(sequence)] = torch.tensor(sequence)
            attention[row, : len(sequence)] = 1
        logits = model(input_ids=ids.to(device), attention_mask=attention.to(device)).logits.double().cpu()
        logprobs = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        for row, (i, j) in enumerate(chunk):
            first = len(prompts[j]) - 1  # the logit at position p predicts token p + 1
            scores = logprobs[row, first : first + len(reasonings[i])]
            out[i, j] = scores.mean() if aggregate == "mean" else scores.sum()
    return out


def _logp_over_prompt_caches(
    model, prompts: Sequence[Sequence[int]], reasonings: Sequence[Sequence[int]], aggregate: str
) -> torch.Tensor:
    """`teacher_forced_logp(..., reuse_prompts=True)`: one forward per prompt, its cache repeated over the
    reasonings (right-padded after it). Returns [Z, P], float64."""
    device = next(model.parameters()).device
    longest = max(map(len, reasonings))
    ids = torch.zeros(len(reasonings), longest, dtype=torch.long)
    valid = torch.zeros(len(reasonings), longest, dtype=torch.bool)
    for row, z in enumerate(reasonings):
        ids[row, : len(z)] = torch.tensor(list(z))
        valid[row, : len(z)] = True
    ids, valid = ids.to(device), valid.to(device)
    out = torch.empty(len(reasonings), len(prompts), dtype=torch.float64)
    for j, x in enumerate(prompts):
        prefix = model(input_ids=torch.tensor([list(x)], device=device), use_cache=True)
        cache = prefix.past_key_values
        cache.batch_repeat_interleave(len(reasonings))
        attention = torch.cat([torch.ones(len(reasonings), len(x), dtype=torch.long, device=device), valid.long()], 1)
        logits = model(input_ids=ids, attention_mask=attention, cache=cache).logits
        # reasoning token t is predicted by the prompt's last logit (t = 0) or by reasoning position t - 1
        first = prefix.logits[:, -1:].expand(len(reasonings), 1, -1)
        predicting = torch.cat([first, logits[:, :-1]], dim=1).float()
        scores = torch.log_softmax(predicting, dim=-1).gather(-1, ids[..., None]).squeeze(-1).double() * valid
        total = scores.sum(1)
        out[:, j] = (total / valid.sum(1) if aggregate == "mean" else total).cpu()
    return out


def first_turn_reasoning(
    trajectory: Trajectory, think_id: int, end_think_id: int
) -> tuple[list[int], list[int]] | None:
    """`(x, z)` token lists of a trajectory's first turn: x is everything before the reasoning (the prompt and the
    `<think>` tag), z the reasoning's content (tags excluded). None if the first turn has no `<think> ... </think>`
    with at least one token inside (RAGEN-2 samples only valid, non-empty reasoning)."""
    first = [k for k, turn in enumerate(trajectory.turn_ids) if turn == 0 and trajectory.loss_mask[k]]
    tokens = [trajectory.token_ids[k] for k in first]
    if think_id not in tokens or end_think_id not in tokens:
        return None
    opening = tokens.index(think_id)
    closing = tokens.index(end_think_id)
    if closing <= opening + 1:
        return None
    return trajectory.token_ids[: first[opening] + 1], tokens[opening + 1 : closing]


def reasoning_span(tokenizer, ids: Sequence[int]) -> tuple[int, int] | None:
    """`(start, end)`: the positions in a sampled turn's `ids` of its reasoning, the tokens after the one that
    completes `<think>` up to the last one that ends before `</think>` begins, found in the decoded text (a BPE
    tokenizer spells the tags in pieces; `first_turn_reasoning` matches a word-level tokenizer's tag ids); None without
    a non-empty closed reasoning."""
    text = tokenizer.decode(list(ids))
    opening, closing = text.find("<think>"), text.find("</think>")
    if opening < 0 or closing < 0 or closing < opening:
        return None
    ends = [len(tokenizer.decode(list(ids[: k + 1]))) for k in range(len(ids))]
    start = next(k for k, end in enumerate(ends) if end >= opening + len("<think>")) + 1
    stop = sum(1 for end in ends if end <= closing)
    return (start, stop) if stop > start else None


def first_turn_action(trajectory: Trajectory) -> tuple[list[int], list[int]] | None:
    """`(x, z)` token lists of a trajectory's first turn when it has no reasoning channel: x the prompt, z every
    policy token of the first turn (the first action). None if the first turn wrote nothing."""
    first = [k for k, turn in enumerate(trajectory.turn_ids) if turn == 0 and trajectory.loss_mask[k]]
    if not first:
        return None
    return trajectory.token_ids[: first[0]], [trajectory.token_ids[k] for k in first]


def reasoning_mutual_information(
    model,
    tokenizer,
    trajectories: Sequence[Trajectory],
    samples: int = 64,
    aggregate: str = "mean",
    generator: torch.Generator | None = None,
    span: str = "reasoning",
    prompt_keys: Mapping[int, Hashable] | None = None,
) -> dict[str, float]:
    """RAGEN-2's first-turn estimate on a batch: up to `samples` first-turn reasonings drawn uniformly without
    replacement from the valid ones, each scored under the prompt of every group of the batch that has valid
    reasoning (one representative prompt per group: a group's episodes share their task), then
    `mutual_information` (its keys, plus `samples`, the pairs used). `span`: `reasoning` (`first_turn_reasoning`)
    or `action` (`first_turn_action`, the whole first turn, for tasks without a `<think>` channel).
    `prompt_keys` maps each group id to its prompt's identity (e.g. the task's seed): groups with equal keys pose
    the same input, so a reasoning whose best-scoring group is a twin of its own counts as retrieved, as in
    RAGEN-2's code. Without it every group is its own prompt, which undercounts retrieval when two groups share a
    prompt (a tie between twins goes to the first). Every group with valid reasoning needs a key.
    Returns NaNs with `samples` 0 when fewer than two groups have valid reasoning (MI needs two inputs)."""  # fmt: skip
    if span not in ("reasoning", "action"):
        raise ValueError(f"span must be 'reasoning' or 'action', got {span!r}")
    think, end_think = tokenizer.convert_tokens_to_ids("<think>"), tokenizer.convert_tokens_to_ids("</think>")

    def extract(t: Trajectory):
        return first_turn_reasoning(t, think, end_think) if span == "reasoning" else first_turn_action(t)

    pairs = [(t.group_id, found) for t in trajectories if (found := extract(t))]
    groups = sorted({group for group, _ in pairs})
    if len(groups) < 2:
        keys = ("mi", "retrieval_accuracy", "conditional_entropy", "marginal_entropy", "mi_zscore", "chance", "prompts")
        return {**dict.fromkeys(keys, float("nan")), "samples": 0.0}
    order = torch.randperm(len(pairs), generator=generator)[:samples].tolist()
    chosen = [pairs[k] for k in sorted(order)]
    prompts = {group: x for group, (x, _) in reversed(pairs)}  # the group's first valid prompt
    columns = {group: j for j, group in enumerate(groups)}
    keys = None
    if prompt_keys is not None:
        if missing := [g for g in groups if g not in prompt_keys]:
            raise ValueError(f"prompt_keys has no key for groups {missing}")
        keys = [prompt_keys[g] for g in groups]
    logp = teacher_forced_logp(model, [prompts[g] for g in groups], [z for _, (_, z) in chosen], aggregate)
    return {**mutual_information(logp, [columns[g] for g, _ in chosen], keys), "samples": float(len(chosen))}


def reward_std_buckets(rewards: torch.Tensor, group_ids: torch.Tensor, edges: Sequence[float]) -> torch.Tensor:
    """[B] bucket index of each row: that of its group's within-group reward std (unbiased; 0 for a group of one)
    among the half-open intervals set by the ascending `edges` (bucket k holds edges[k-1] <= std < edges[k];
    `len(edges) + 1` buckets). RAGEN-2 bins groups this way to compare gradient terms at low and high reward
    variance."""
    from course_lib.algos.filters import group_reward_std

    order, stds = group_reward_std(rewards, group_ids)
    bucket_of = {group: int(torch.bucketize(std, torch.tensor(list(edges), dtype=stds.dtype), right=True))
                 for group, std in zip(order, stds, strict=True)}  # fmt: skip
    return torch.tensor([bucket_of[int(g)] for g in group_ids.tolist()])


def term_gradient_norms(
    model, batch, advantages: torch.Tensor, reference=None, temperature: float = 1.0
) -> dict[str, float]:
    """Norms of the gradients of the loss's three terms on `batch` at the current parameters: `task` (the policy
    gradient term, token-mean of -A * log pi over policy tokens, its gradient at ratio 1), `entropy` (token-mean
    entropy over policy tokens) and `kl` (token-mean k3 estimate of KL to `reference`, a frozen model; NaN
    without one). Gradients are not applied; the model's `.grad` is left as it was. RAGEN-2 (C10.4) compares them
    per reward-variance bucket: when a bucket's rewards hardly vary, the task term's gradient is small and the
    regularisers' dominate."""
    from course_lib.algos.grpo import kl_k3, masked_aggregate
    from course_lib.models import token_logprobs

    parameters = [p for p in model.parameters() if p.requires_grad]
    mask = batch.loss_mask
    per_token = advantages if advantages.dim() == 2 else advantages[:, None].expand_as(mask)

    def norm(loss: torch.Tensor) -> float:
        grads = torch.autograd.grad(loss, parameters, retain_graph=True, allow_unused=True)
        return float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads if g is not None)))

    logprobs, entropy = token_logprobs(model, batch.input_ids, batch.attention_mask, temperature)
    out = {
        "task": norm(masked_aggregate(-per_token * logprobs, mask, "token-mean")),
        "entropy": norm(masked_aggregate(entropy, mask, "token-mean")),
        "kl": float("nan"),
    }
    if reference is not None:
        with torch.no_grad():
            ref_logprobs, _ = token_logprobs(reference, batch.input_ids, batch.attention_mask, temperature)
        out["kl"] = norm(masked_aggregate(kl_k3(logprobs, ref_logprobs), mask, "token-mean"))
    return out


class MIStop:
    """RAGEN-2's MI as an early stop with rollback (chapter 12's gate, and TRL's and verl's monitors): training
    stops once the monitor MI falls below `(1 - drop) * base_mi`. `check(record)` is `train_grpo`'s `stop` (it reads
    `eval_monitor_mi`); `remember(model, mi)` keeps the last state whose monitor MI passed; `restore(model)` puts
    it back after a stop."""

    def __init__(self, base_mi: float, drop: float):
        self.threshold = (1 - drop) * base_mi
        self.state: dict | None = None
        self.stopped_at: int | None = None

    def remember(self, model, mi: float) -> None:
        if mi >= self.threshold:
            self.state = copy.deepcopy(model.state_dict())

    def check(self, record: Mapping[str, float]) -> bool:
        if record["eval_monitor_mi"] < self.threshold:
            self.stopped_at = int(record["iteration"])
            return True
        return False

    def restore(self, model) -> None:
        if self.stopped_at is not None and self.state is not None:
            model.load_state_dict(self.state)
