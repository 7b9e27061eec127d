"""Implement it (chapter 11): AEPO's entropy-balanced clip, which keeps the gradient PPO's clip throws away.

Fill in `balanced_clip`, then run `pytest exercises/test_aepo.py`, or in notebook 11
`check("aepo.balanced_clip", use="mine")`. The reference solution is
`course_lib/algos/aepo.py::balanced_clip_losses` (with `balanced=True`).
"""

from __future__ import annotations

import torch


def balanced_clip(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float = 3.0,
) -> torch.Tensor:
    """Per-token losses of AEPO's entropy-balanced clipped surrogate, with verl's dual clip.

    Dong et al. 2025, "Agentic Entropy-Balanced Policy Optimization" (arXiv 2510.14545). PPO's clip gives a
    positive-advantage token whose ratio r = exp(logprobs - old_logprobs) has passed 1 + clip_high no gradient at
    all, and those are often the high-entropy tokens where the policy explores. AEPO replaces the upper bound by

        (1 + clip_high) * r / sg(r)          (sg = stop-gradient, `.detach()`)

    whose value is 1 + clip_high and whose gradient is (1 + clip_high) * grad log pi. Then, per token,

        clipped = (1 + clip_high) r / sg(r)   if r > 1 + clip_high
                  1 - clip_low               if r < 1 - clip_low
                  r                          otherwise
        loss    = max(-A r, -A clipped)
        loss    = min(loss, -A * dual_clip)  where A < 0     (verl's dual clip: a bounded loss, no gradient)

    Per region (g = grad log pi): A > 0 and r > 1 + clip_high: value -A (1 + clip_high), gradient
    -A (1 + clip_high) g (PPO: 0); A < 0 and r < 1 - clip_low: value -A (1 - clip_low), gradient 0; A < 0 and
    r > dual_clip: value -A * dual_clip, gradient 0; elsewhere value -A r, gradient -A r g.

    Args:
        logprobs: `[B, T]` log pi of the sampled tokens under the policy being trained (requires grad).
        old_logprobs: `[B, T]` the same under the policy that sampled them.
        advantages: `[B]` (one per row, broadcast over its tokens) or `[B, T]`.
        clip_low, clip_high: the clip range [1 - clip_low, 1 + clip_high].
        dual_clip: the cap c > 1 on a negative-advantage token's loss (-A c; 3 in verl).

    Returns:
        `[B, T]` per-token losses connected to `logprobs` (the caller masks and averages them).
    """
    raise NotImplementedError("aepo.balanced_clip: implement me (see the docstring)")
