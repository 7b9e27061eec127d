"""GRPO: group-relative advantages and the clipped surrogate (DeepSeekMath, arXiv 2402.03300).

Chapter 00 introduces it; every RL chapter reuses it.

For G sampled responses to the same prompt with rewards r_1..r_G, the advantage of response i is

    A_i = (r_i - mean(r)) / (std(r) + eps)          (DeepSeekMath section 4.1.2, outcome supervision)

with the unbiased standard deviation (as `torch.std`), and every token of response i gets A_i.
Groups whose rewards are all equal (or that hold one response) get A = 0: they carry no signal.
Dr. GRPO (arXiv 2503.20783) drops the division by std (`scale_by_std=False`).

The policy loss is PPO's clipped surrogate on token ratios rho_t = pi(a_t|s_t) / pi_old(a_t|s_t):

    L = - agg_t min(rho_t A_t, clip(rho_t, 1 - eps_low, 1 + eps_high) A_t)

where `agg` is one of the aggregation modes below, taken over policy tokens only (the loss mask).
eps_high > eps_low is DAPO's "clip-higher" (arXiv 2503.14476), used by RAGEN's StarPO-S.

This is the loss of the GRPO paper and of TRL's `GRPOTrainer` at its default (`delta=None`). It has no *dual clip*,
which verl's PPO loss applies by default (`compute_policy_loss_vanilla` in `verl/trainer/ppo/core_algos.py`,
`clip_ratio_c=3`, which the verl-based releases inherit; ARPO's and AEPO's configurations keep 3): for a
negative advantage verl caps the token's loss at -A * 3, so a token whose ratio has passed 3 contributes a constant
and no gradient, where here it keeps contributing -A rho_t with gradient -A rho_t grad log pi. The two agree
whenever every negative-advantage ratio stays at or below 3 (on a first update from fresh rollouts every ratio is
1). `algos.aepo.balanced_clip_losses` has the dual clip (`dual_clip`, default 3), as AEPO's code.
"""

from __future__ import annotations

import torch

from course_lib import bridges
from course_lib.implement_it import implement_it

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")


@implement_it("grpo.group_advantages", bridges.group_advantages)
def group_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, scale_by_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """GRPO advantages `[N]` of rewards `[N]` within groups given by integer `group_ids` `[N]`."""
    if rewards.shape != group_ids.shape or rewards.dim() != 1:
        raise ValueError("rewards and group_ids must be 1-D tensors of the same shape")
    rewards = rewards.float()
    advantages = torch.zeros_like(rewards)
    for group in torch.unique(group_ids):
        members = group_ids == group
        values = rewards[members]
        if values.numel() < 2 or torch.all(values == values[0]):
            continue
        centred = values - values.mean()
        advantages[members] = centred / (values.std() + eps) if scale_by_std else centred
    return advantages


def masked_aggregate(values: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean") -> torch.Tensor:
    """Aggregate per-token `values` `[B, T]` over tokens where `mask` `[B, T]` is 1.

    - `token-mean`: sum over all masked tokens / their count (DAPO; long responses weigh more).
    - `seq-mean-token-mean`: mean within each sequence, then over sequences (the original GRPO).
    - `seq-mean-token-sum`: sum within each sequence, then mean over sequences (Dr. GRPO style,
      without its constant normaliser).
    Sequences with no masked token are left out of sequence means; an all-zero mask gives 0.
    """
    mask = mask.to(values.dtype)
    if mode == "token-mean":
        return (values * mask).sum() / mask.sum().clamp(min=1.0)
    per_sequence = (values * mask).sum(-1)
    counts = mask.sum(-1)
    present = counts > 0
    if not present.any():
        return values.sum() * 0.0
    if mode == "seq-mean-token-mean":
        return (per_sequence[present] / counts[present]).mean()
    if mode == "seq-mean-token-sum":
        return per_sequence[present].mean()
    raise ValueError(f"unknown aggregation {mode!r}; choose from {AGGREGATIONS}")


@implement_it("grpo.clipped_surrogate_loss", bridges.clipped_surrogate_loss)
def clipped_surrogate_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    aggregation: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO/GRPO clipped policy loss and statistics.

    `logprobs`, `old_logprobs`, `loss_mask`: `[B, T]`; `advantages`: `[B]` (one per sequence,
    broadcast over its tokens) or `[B, T]` (per token, e.g. GiGPO). Returns the scalar loss and
    `clip_fraction` (share of masked tokens whose ratio was clipped) and `ratio_mean`.
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logprobs)
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    loss = masked_aggregate(-torch.minimum(unclipped, clipped), loss_mask, aggregation)
    with torch.no_grad():
        mask = loss_mask.bool()
        was_clipped = (clipped < unclipped) & mask
        count = max(int(mask.sum()), 1)
        stats = {
            "clip_fraction": float(was_clipped.sum()) / count,
            "ratio_mean": float((ratio * mask).sum()) / count,
        }
    return loss, stats


def kl_k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k1 estimate of KL(pi || pi_ref): log pi - log pi_ref (unbiased, can be negative)."""
    return logprobs - ref_logprobs


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate (Schulman 2020), used by GRPO: exp(d) - d - 1 with d = log pi_ref -
    log pi. Non-negative, unbiased for KL(pi || pi_ref) under samples from pi."""
    delta = ref_logprobs - logprobs
    return torch.exp(delta) - delta - 1.0
