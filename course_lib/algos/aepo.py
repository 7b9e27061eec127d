"""AEPO: entropy-balanced rollout and update (Dong et al. 2025, "Agentic Entropy-Balanced Policy Optimization",
arXiv 2510.14545; released code `mowenruan/ARPO`, folder AEPO).

AEPO keeps ARPO's entropy-guided branching (`algos.arpo`) and fixes two ways it goes wrong.

**In the update.** PPO's clip zeroes the gradient of a positive-advantage token whose ratio r has passed
1 + eps_high, and those are often the high-entropy tokens where the policy is exploring. AEPO's
*entropy-balanced clipping* keeps the clipped value but lets the gradient through, rescaled: the upper bound
(1 + eps_high) is replaced by (1 + eps_high) * r / sg(r), whose value is 1 + eps_high and whose gradient is
(1 + eps_high) * grad log pi. The lower clip stays hard, and dual clip (c = 3) caps a negative-advantage token's
loss at -A * c, as in verl. Per region, with the token's loss l = max(-A r, -A clip(r)) and gradients in
terms of g = grad log pi:

| advantage | ratio | hard clip's gradient | balanced clip's gradient |
|---|---|---|---|
| A > 0 | r > 1 + eps_high | 0 | -A (1 + eps_high) g |
| A > 0 | r <= 1 + eps_high | -A r g | the same |
| A < 0 | 1 - eps_low <= r <= 3 | -A r g | the same |
| A < 0 | r < 1 - eps_low | 0 | 0 |
| A < 0 | r > 3 (dual clip) | 0 | 0 |

There is no entropy gate in the code: every token above the bound is treated this way.

*Entropy-aware advantage*: A * (1 + alpha * sg(z)), z the token entropy standardised over the batch's valid
tokens (unbiased std, 1 when it is 0), alpha = 0.2. In the released recipes it never runs: the actor computes
entropy only when the entropy coefficient is non-zero, and both released configurations set it to 0.
One departure: with a single valid token in the micro-batch the code's unbiased std is NaN, which its "std 0 -> 1"
guard does not catch (`compute_policy_loss_entropy_balanced_clipping` in AEPO's `core_algos.py`), so every
advantage, and the loss, is NaN; here the std is 1 then, the valid token's z is 0 and its advantage unchanged.

**In the rollout.** *Entropy pre-monitoring* splits a budget of k samples per prompt: with H_root the entropy at
the root and H_tool the mean entropy after tool calls (both from one pre-rollout),
m = int(k * sigmoid(0.5 * (H_root - H_tool))) + 1 global samples (clipped to [1, k]), the rest for branching;
at H_root = H_tool that is k / 2 + 1, not k / 2. The released scripts switch this off (a fixed k / 2 split).
The *consecutive-branch penalty*, always on in the AEPO sampler, damps a prompt's branching by
max(0, 1 - 0.05 l) after l consecutive rounds in which it gained a rollout: the code branches iff
(U + w dH) * max(0, 1 - 0.05 l) >= alpha with U ~ Uniform(0, 1), so

    P(branch) = clip(1 - alpha / (1 - 0.05 l) + w dH, 0, 1),   0 once 1 - 0.05 l <= 0,

which at l = 0 and alpha = 0.5 is ARPO's 0.5 + w dH.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from course_lib import bridges
from course_lib.implement_it import implement_it

DUAL_CLIP = 3.0
"""verl's `clip_ratio_c`: a negative-advantage token's loss is capped at -A * DUAL_CLIP."""
ADVANTAGE_ALPHA = 0.2
"""The code's weight of the standardised entropy in the entropy-aware advantage."""
SPLIT_TEMPERATURE = 0.5
"""The code's factor on H_root - H_tool inside the sigmoid of the pre-monitoring split (hard-coded)."""
PENALTY_SLOPE = 0.05
"""The code's per-round damping of a prompt's branch probability (hard-coded)."""


@implement_it("aepo.balanced_clip", bridges.balanced_clip_losses)
def balanced_clip_losses(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float = DUAL_CLIP,
    balanced: bool = True,
) -> tuple[Tensor, Tensor]:
    """Per-token losses `[B, T]` of AEPO's clipped surrogate (`balanced`) or PPO's hard clip, with dual clip, and
    a `[B, T]` bool of the tokens whose upper clip acted (r > 1 + clip_high with A > 0).

    logprobs, old_logprobs: `[B, T]`; advantages: `[B]` (one per row) or `[B, T]`."""
    if dual_clip <= 1.0:
        raise ValueError(f"dual_clip must exceed 1, got {dual_clip}")
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logprobs)
    ratio = torch.exp(logprobs - old_logprobs)
    upper = (1 + clip_high) * ratio / ratio.detach() if balanced else torch.full_like(ratio, 1 + clip_high)
    clipped = torch.where(ratio > 1 + clip_high, upper, torch.where(ratio < 1 - clip_low, 1 - clip_low, ratio))
    losses = torch.maximum(-advantages * ratio, -advantages * clipped)
    losses = torch.where(advantages < 0, torch.minimum(losses, -advantages * dual_clip), losses)
    return losses, (ratio > 1 + clip_high) & (advantages > 0)


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    loss_mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float = DUAL_CLIP,
) -> Tensor:
    """AEPO's entropy-balanced clipped policy loss, token-mean over `loss_mask` (`[B, T]`), a scalar.

    Its value equals PPO's hard-clipped loss with dual clip; its gradient differs only on positive-advantage
    tokens above the upper bound, where it is -A (1 + clip_high) grad log pi instead of 0 (module docstring)."""
    losses, _ = balanced_clip_losses(logprobs, old_logprobs, advantages, clip_low, clip_high, dual_clip)
    mask = loss_mask.to(losses.dtype)
    return (losses * mask).sum() / mask.sum().clamp_min(1.0)


def entropy_aware_advantages(
    advantages: Tensor, entropies: Tensor, loss_mask: Tensor, alpha: float = ADVANTAGE_ALPHA
) -> Tensor:
    """A * (1 + alpha * sg(z)) per token, `[B, T]`: z = (H - mean) / std over the valid tokens of `entropies`
    (`[B, T]`, masked by `loss_mask`), std unbiased as `torch.std` and 1 when it is 0 or when there is one valid
    token (where AEPO's code takes `torch.std` of one value, NaN, and returns NaN advantages: module docstring).
    advantages: `[B]` or `[B, T]`. Tokens outside the mask get their standardised entropy too (the loss ignores
    them), as in the code. No valid token: the advantages, expanded, unchanged."""
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(entropies)
    valid = entropies.detach()[loss_mask.bool()]
    if valid.numel() == 0:
        return advantages.clone()
    std = valid.std() if valid.numel() > 1 else torch.tensor(0.0)
    std = std if float(std) != 0.0 else torch.tensor(1.0, dtype=valid.dtype)
    z = (entropies.detach() - valid.mean()) / std
    return advantages * (1 + alpha * z)


def global_samples(
    budget: int, root_entropy: float, tool_entropy: float, temperature: float = SPLIT_TEMPERATURE
) -> int:
    """Entropy pre-monitoring (the code's form): m = int(k * sigmoid(temperature * (H_root - H_tool))) + 1, clipped
    to [1, k], of a budget of k samples per prompt; the remaining k - m are for branching. More uncertainty at the
    root than after tool calls: more global samples; the reverse: more branches."""
    if budget < 1:
        raise ValueError(f"budget must be at least 1, got {budget}")
    sigmoid = 1.0 / (1.0 + math.exp(-temperature * (root_entropy - tool_entropy)))
    return min(budget, max(1, int(budget * sigmoid) + 1))


def branch_probability(
    entropy_after: float,
    initial_entropy: float,
    consecutive: int = 0,
    alpha: float = 0.5,
    beta: float = 0.2,
    slope: float = PENALTY_SLOPE,
) -> float:
    """P(branch) = clip(1 - alpha / f + beta * (entropy_after - initial_entropy), 0, 1), f = 1 - slope * consecutive,
    and 0 once f <= 0 (the code's draw `(U + beta dH) * max(0, f) >= alpha` never passes then, for alpha > 0)."""
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"alpha must lie in (0, 1], got {alpha}")
    if consecutive < 0:
        raise ValueError(f"consecutive must be >= 0, got {consecutive}")
    factor = 1.0 - slope * consecutive
    if factor <= 0.0:
        return 0.0
    return min(1.0, max(0.0, 1.0 - alpha / factor + beta * (entropy_after - initial_entropy)))


def top_branch_share(parents: Sequence[int | None], groups: Sequence[int], top: int = 3) -> float:
    """C11.1's measure of concentration: over the groups that branched, the mean share of a group's branches that
    descend from its `top` most-branched global samples (a branch of a branch counts for the global sample at the
    root of its chain). parents: per trajectory, the index of the trajectory it branched from (None for a global
    sample, parents before children); groups: per trajectory, its group. NaN if nothing branched."""
    if len(parents) != len(groups):
        raise ValueError(f"{len(parents)} parents for {len(groups)} trajectories")
    roots: list[int] = []
    per_group: dict[int, Counter] = {}
    for index, (parent, group) in enumerate(zip(parents, groups, strict=True)):
        if parent is not None and parent >= index:
            raise ValueError(f"trajectory {index} branches from a later one ({parent})")
        roots.append(index if parent is None else roots[parent])
        if parent is not None:
            per_group.setdefault(group, Counter())[roots[index]] += 1
    if not per_group:
        return float("nan")
    shares = [sum(n for _, n in counts.most_common(top)) / sum(counts.values()) for counts in per_group.values()]
    return sum(shares) / len(shares)


def uniform_top_share(branches: Sequence[int], roots: Sequence[int], top: int, seed: int, draws: int = 400) -> float:
    """The top-`top` branch share if each of a group's `branches[g]` branches had its root drawn uniformly from its
    `roots[g]` global samples: the mean over groups (with a branch) of a Monte Carlo estimate."""
    rng = np.random.default_rng(seed)
    shares = []
    for b, r in zip(branches, roots, strict=True):
        if b == 0:
            continue
        counts = np.stack([np.bincount(rng.integers(0, r, b), minlength=r) for _ in range(draws)])
        shares.append(float(np.mean(np.sort(counts, axis=1)[:, ::-1][:, :top].sum(axis=1) / b)))
    return float(np.mean(shares)) if shares else float("nan")
