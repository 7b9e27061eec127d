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

    DeepSeekMath (Shao et al. 2024, arXiv 2402.03300), section 4.1.2, outcome supervision: for the G responses of
    one group with rewards r_1..r_G,

        A_i = (r_i - mean(r)) / (std(r) + eps)

    where std is the unbiased (n - 1) standard deviation, as `torch.std` computes it. Dr. GRPO (arXiv 2503.20783)
    drops the division: with `scale_by_std=False`, A_i = r_i - mean(r).

    Args:
        rewards: `[N]` float, one reward per response.
        group_ids: `[N]` integers; responses with the same id answer the same prompt. The rows of a group need not
            be adjacent (ids `[0, 1, 0, 1]` are two groups of two).
        scale_by_std: divide by the group's std (GRPO) or not (Dr. GRPO).
        eps: added to the std so that the division is safe.

    Returns:
        `[N]` float advantages, in the order of `rewards`.

    Edge cases:
        - a group of one response has no baseline to compare with: its advantage is 0 (`torch.std` of one value
          is NaN, so test for it before dividing);
        - a group whose rewards are all equal carries no signal: its advantages are exactly 0 (do not divide
          rounding noise of the mean by eps: test for equal values).
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
    """PPO's clipped surrogate as GRPO uses it, averaged over the response tokens of the whole batch.

    With the token ratio rho_t = pi(a_t | s_t) / pi_old(a_t | s_t) = exp(logprobs_t - old_logprobs_t) and every
    token of response b getting its response's advantage A_b (PPO, arXiv 1707.06347, Eq. 7; GRPO Eq. 3):

        L = - sum_{b,t} mask_bt * min(rho_bt A_b, clip(rho_bt, 1 - clip_low, 1 + clip_high) A_b) / sum_{b,t} mask_bt

    The `min` is the pessimistic bound: for A > 0 the ratio earns nothing above 1 + clip_high, for A < 0 nothing
    below 1 - clip_low. clip_high > clip_low is DAPO's "clip-higher" (arXiv 2503.14476). The average is a
    token-mean (DAPO): over every response token of the batch at once, so a long response weighs more than a short
    one (the original GRPO averaged each sequence first).

    Args:
        logprobs: `[B, T]` log pi(a_t | s_t) under the policy being trained (requires grad).
        old_logprobs: `[B, T]` the same under the policy that sampled the batch (no grad).
        advantages: `[B]`, one per response, broadcast over its tokens.
        loss_mask: `[B, T]`, 1 on the response tokens the policy generated, 0 on the prompt, on environment
            tokens and on padding.
        clip_low, clip_high: the clip range [1 - clip_low, 1 + clip_high].

    Returns:
        A scalar tensor connected to `logprobs` (no `.item()`): training calls `.backward()` on it.

    Edge cases:
        - a mask with no token at all gives 0 (divide by max(count, 1)), not NaN.
    """
    raise NotImplementedError("grpo.clipped_surrogate_loss: implement me (see the docstring)")
