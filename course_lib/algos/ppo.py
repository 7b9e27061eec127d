"""PPO's critic side: generalised advantage estimation and the value loss (chapters 09-10).

GAE (Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized Advantage Estimation",
arXiv 1506.02438, Eqs. 16-18) estimates the advantage of step t from a critic's values V:

    delta_t = r_t + gamma * V_{t+1} - V_t                    (the TD error; V_T = `last_value`)
    A_t     = delta_t + gamma * lam * A_{t+1}               (A_T = 0)
            = sum_{l >= 0} (gamma * lam)^l * delta_{t+l}

and the critic is trained towards the returns R_t = A_t + V_t. lam = 1 gives the Monte Carlo return minus
V_t; lam = 0 the one-step TD error. RAGEN's StarPO-PPO (arXiv 2504.20073) runs GAE with gamma = lam = 1 over
the response tokens, the episode's return on its last token, so that every token's advantage is that return
minus the token's value.

In an agent's sequence the environment's tokens are not actions. `masked_gae` runs the recursion over the
policy tokens only (mask 1), as if the masked tokens were not there: the next value of a policy token is that
of the next policy token, and rewards on masked positions are refused (they would be lost).

The value loss is verl's (`compute_value_loss`): half the squared error to the returns, and with `clip_range`
the larger of that and the error of the old value moved at most `clip_range` towards the new one (PPO's value
clipping), averaged over the mask.
"""

from __future__ import annotations

import torch

from course_lib import bridges
from course_lib.implement_it import implement_it


@implement_it("ppo.gae", bridges.gae)
def gae(
    rewards: torch.Tensor, values: torch.Tensor, gamma: float, lam: float, last_value: float | torch.Tensor = 0.0
) -> torch.Tensor:
    """Advantages of GAE, Eqs. 16-18.

    rewards, values: [T] or [B, T] (time on the last axis); `last_value`: V of the state after the last step
    (0 for an episode that ended), a float or a [B] tensor. Returns advantages of the same shape as `rewards`,
    in the dtype of `rewards`.
    """
    if rewards.shape != values.shape:
        raise ValueError(f"rewards {tuple(rewards.shape)} and values {tuple(values.shape)} differ in shape")
    if not 0.0 <= gamma <= 1.0 or not 0.0 <= lam <= 1.0:
        raise ValueError(f"gamma and lam must lie in [0, 1], got {gamma} and {lam}")
    values = values.to(rewards.dtype)
    next_value = torch.as_tensor(last_value, dtype=rewards.dtype).expand(rewards.shape[:-1]).clone()
    running = torch.zeros(rewards.shape[:-1], dtype=rewards.dtype)
    advantages = torch.empty_like(rewards)
    for t in reversed(range(rewards.shape[-1])):
        delta = rewards[..., t] + gamma * next_value - values[..., t]
        running = delta + gamma * lam * running
        advantages[..., t] = running
        next_value = values[..., t]
    return advantages


def masked_gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0, lam: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over the policy tokens of each row, skipping masked ones; the episode ends after the last policy token.

    rewards, values, mask: [B, T]; rewards must be 0 where mask is 0. Returns `(advantages, returns)`, both
    [B, T], 0 where mask is 0; returns = advantages + values on policy tokens (the critic's targets).
    """
    if not rewards.shape == values.shape == mask.shape or rewards.dim() != 2:
        raise ValueError(
            f"rewards, values and mask must all be [B, T], got {rewards.shape}, {values.shape}, {mask.shape}"
        )
    keep = mask.bool()
    if (rewards[~keep] != 0).any():
        raise ValueError("a reward sits on a masked token; put it on the last policy token of its turn")
    advantages = torch.zeros_like(rewards)
    returns = torch.zeros_like(rewards)
    for row in range(rewards.shape[0]):
        positions = keep[row].nonzero().squeeze(-1)
        if positions.numel():
            row_advantages = gae(rewards[row, positions], values[row, positions], gamma, lam)
            advantages[row, positions] = row_advantages
            returns[row, positions] = row_advantages + values[row, positions].to(rewards.dtype)
    return advantages, returns


def value_loss(
    values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    old_values: torch.Tensor | None = None,
    clip_range: float | None = None,
) -> torch.Tensor:
    """The critic's loss: 0.5 * (V - R)^2 averaged over the mask's tokens; with `old_values` and `clip_range`,
    0.5 * max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2) (PPO's value clipping, as verl).

    values, returns, mask (and old_values): [B, T]. Returns a scalar; a mask with no token is an error.
    """
    if not mask.any():
        raise ValueError("value_loss needs at least one token in the mask")
    mask = mask.to(values.dtype)
    errors = (values - returns) ** 2
    if clip_range is not None:
        if old_values is None:
            raise ValueError("value clipping needs old_values")
        clipped = old_values + (values - old_values).clamp(-clip_range, clip_range)
        errors = torch.maximum(errors, (clipped - returns) ** 2)
    return 0.5 * (errors * mask).sum() / mask.sum()
