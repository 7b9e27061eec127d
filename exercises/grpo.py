"""Implement it (chapter 00): GRPO's group-relative advantages and its clipped surrogate loss.

Fill in the two functions below, then run `pytest exercises/test_grpo.py`, or in notebook 00
`check("grpo.group_advantages", use="mine")`. The reference solution is `course_lib/algos/grpo.py`.
"""

from __future__ import annotations

import torch


def group_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, scale_by_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """GRPO's advantage of each response relative to the other responses to the same prompt.

    DeepSeekMath (Shao et al. 2024, arXiv 2402.03300), section 4.1.2, outcome supervision: each response's reward
    normalised by the mean and the standard deviation of its group's rewards (notebook 00's section 1 writes the
    equation). With `scale_by_std=False` it is Dr. GRPO's advantage (Liu et al. 2025, arXiv 2503.20783): the reward
    minus the group mean, not divided.

    Args:
        rewards: `[N]` float, one reward per response.
        group_ids: `[N]` integers; responses with the same id answer the same prompt. The rows of a group need not
            be adjacent (ids `[0, 1, 0, 1]` are two groups of two).
        scale_by_std: divide by the group's std (GRPO) or not (Dr. GRPO).
        eps: added to the std in the denominator, `std + eps`.

    Returns:
        `[N]` float advantages, in the order of `rewards`.

    Contract:
        - the std is the unbiased (n - 1) standard deviation, as `torch.std` computes it;
        - each group is normalised on its own, never against the whole batch;
        - a group of one response has no baseline: its advantage is exactly 0;
        - a group whose rewards are all equal carries no signal: its advantages are exactly 0 (not rounding noise
          divided by eps).
    """
    raise NotImplementedError("grpo.group_advantages: implement me (see the docstring)")


def clipped_surrogate_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> torch.Tensor:
    """PPO's clipped surrogate as GRPO uses it: a loss averaged over every response token of the batch.

    The clipped surrogate objective L^CLIP of PPO (Schulman et al. 2017, arXiv 1707.06347, Eq. 7), in GRPO's
    per-token form (arXiv 2402.03300, Eq. 3) without its KL term, negated so that it is minimised, with two of
    DAPO's choices (arXiv 2503.14476): decoupled clip bounds ("Clip-Higher") and the token-level mean over every
    response token of the batch ("Token-Level Policy Gradient Loss"), so a long response weighs more than a short
    one. Notebook 00's section 1 writes the loss. Every token of response b carries its response's advantage A_b;
    the token ratio is pi / pi_old, from the two log-probabilities.

    Args:
        logprobs: `[B, T]` log pi(a_t | s_t) under the policy being trained (requires grad).
        old_logprobs: `[B, T]` the same under the policy that sampled the batch (no grad).
        advantages: `[B]`, one per response, broadcast over its tokens.
        loss_mask: `[B, T]`, 1 on the response tokens the policy generated, 0 on the prompt, on environment
            tokens and on padding.
        clip_low, clip_high: the ratio's clip range is [1 - clip_low, 1 + clip_high].

    Returns:
        A scalar tensor connected to `logprobs` (not a Python number): training calls `.backward()` on it.

    Contract:
        - PPO's pessimistic bound: for A > 0 a ratio above 1 + clip_high earns nothing more, for A < 0 a ratio
          below 1 - clip_low earns nothing more;
        - tokens with mask 0 count neither in the sum nor in the number of tokens it is divided by;
        - a mask with no token at all gives 0, not NaN.
    """
    raise NotImplementedError("grpo.clipped_surrogate_loss: implement me (see the docstring)")
