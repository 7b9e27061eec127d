"""ARPO's branching rule: branch a rollout where the policy grows uncertain after a tool call (Dong et al.
2025, "Agentic Reinforced Policy Optimization", arXiv 2507.19849).

ARPO's entropy-based adaptive rollout measures the policy's token entropy at the start of the answer
(`H_initial`) and again on the tokens it generates right after each tool response (`H_t`), both
normalised to [0, 1]. The paper's branch probability is

    dH_t = H_t - H_initial
    P_t  = alpha + beta * dH_t

and where it is high the rollout forks into partial samples that share the prefix so far. The
released code (`vllm_rollout_with_tools.py`) turns P_t into a random decision: it branches iff
`clip(U - beta * dH, 0, 1) <= alpha` with U ~ Uniform(0, 1). For alpha < 1 that holds iff
U <= alpha + beta * dH, so the probability of a branch is exactly

    P(branch) = clip(alpha + beta * dH, 0, 1)

which is what `branch_probability` returns; `should_branch` draws the decision from a seeded
generator so a sampler that uses it is reproducible. Defaults are the released script's:
alpha (`BRANCH_PROBABILITY`) 0.5, beta (`Entropy_weight`) 0.2. With entropies in [0, 1], dH lies in
[-1, 1] and P in [0.3, 0.7]: entropy tilts a coin that is fair when nothing changed.

How the entropy is measured differs. The official code asks the inference server for the top-10
log-probs at each of the first 20 positions of a segment and sums -p log p over all of them: a sum,
not a mean, over at most 200 truncated terms, so its scale grows with the segment's length (a
segment of 5 tokens scores about a quarter of one of 20 at equal uncertainty) and it is no per-token
entropy. The course instead uses `normalised_entropy`: the exact entropy of the full softmax over
the vocabulary, divided by log |V| so that it lies in [0, 1] whatever the vocabulary size, and
averaged over the segment's tokens by the caller.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from course_lib import bridges
from course_lib.implement_it import implement_it

ALPHA = 0.5
"""The released script's `BRANCH_PROBABILITY`: the branch probability when entropy did not change."""
BETA = 0.2
"""The released script's `Entropy_weight`: how much a change of normalised entropy tilts it."""


@implement_it("arpo.branch_decision", bridges.branch_probability)
def branch_probability(
    entropy_after: float | Tensor, initial_entropy: float | Tensor, alpha: float = ALPHA, beta: float = BETA
) -> float | Tensor:
    """P(branch) = clip(alpha + beta * (entropy_after - initial_entropy), 0, 1).

    Floats in, float out; if either entropy is a tensor, a tensor out (elementwise, broadcast).
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    if beta < 0.0:
        raise ValueError(f"beta must be >= 0 (more uncertainty, more branching), got {beta}")
    delta = entropy_after - initial_entropy
    if isinstance(delta, Tensor):
        return (alpha + beta * delta).clamp(0.0, 1.0)
    return min(1.0, max(0.0, alpha + beta * float(delta)))


def normalised_entropy(logits: Tensor) -> Tensor:
    """Entropy of softmax(logits) over the last dimension divided by log V: `[..., V]` -> `[...]`, in [0, 1].

    Exact over the whole vocabulary (no top-k truncation), computed from log-softmax for precision.
    A token of probability 0 (a logit of -inf, a masked token) contributes 0, not 0 * -inf = NaN.
    """
    size = logits.shape[-1]
    if size < 2:
        raise ValueError(f"need a vocabulary of at least 2 tokens to normalise by log V, got {size}")
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    log_probs = log_probs.clamp_min(torch.finfo(log_probs.dtype).min)  # -inf -> a finite number times p = 0
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    return entropy / math.log(size)


def should_branch(probability: float | Tensor, generator: torch.Generator) -> bool:
    """One Bernoulli(probability) draw from `generator`: True with probability `probability`.

    Always draws one uniform (even at probability 0 or 1), so the generator's stream, and hence every
    later decision of a seeded sampler, does not depend on the values of earlier probabilities.
    """
    p = float(probability)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"probability must lie in [0, 1], got {p}")
    u = torch.rand((), generator=generator).item()  # in [0, 1): u < 1 always, u < 0 never
    return u < p
