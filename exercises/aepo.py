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

    Dong et al. 2025, "Agentic Entropy-Balanced Policy Optimization" (arXiv 2510.14545), Eq. 10: PPO's clipped
    surrogate whose upper bound is a stop-gradient expression with the value 1 + clip_high and the gradient
    (1 + clip_high) grad log pi, so that a positive-advantage token whose ratio r = pi / pi_old has passed
    1 + clip_high keeps a bounded gradient instead of none (often the high-entropy tokens where the policy
    explores). The lower clip stays hard, and verl's dual clip caps a negative-advantage token's loss. Notebook 11's
    section 1 writes it and tabulates six tokens, one per region.

    Args:
        logprobs: `[B, T]` log pi of the sampled tokens under the policy being trained (requires grad).
        old_logprobs: `[B, T]` the same under the policy that sampled them.
        advantages: `[B]` (one per row, broadcast over its tokens) or `[B, T]`.
        clip_low, clip_high: the clip range [1 - clip_low, 1 + clip_high].
        dual_clip: the cap c > 1 on a negative-advantage token's loss (-A c; 3 in verl).

    Returns:
        `[B, T]` per-token losses connected to `logprobs` (the caller masks and averages them).

    Contract, per token (g = grad log pi of the token):
        - A > 0 and r > 1 + clip_high: value -A (1 + clip_high), gradient -A (1 + clip_high) g (PPO's: 0);
        - A < 0 and r < 1 - clip_low: value -A (1 - clip_low), gradient 0;
        - A < 0 and r > dual_clip: value -A * dual_clip, gradient 0;
        - everywhere else: value -A r, gradient -A r g, as PPO's;
        - every value equals the hard clip's: only that one gradient differs.
    """
    raise NotImplementedError("aepo.balanced_clip: implement me (see the docstring)")
