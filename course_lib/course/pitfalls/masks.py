"""Pitfalls 3 and 4: the loss acts on tokens the policy did not choose.

3. Advantages on the wrong tokens (SkyRL PR 1507). Logits at position t predict token t + 1; a loop that builds its
   loss mask or per-token advantages on one indexing and its log-probs on the other moves every advantage one token
   over: the first token of each action gets none, and the token after the action (the first of the observation, or
   padding) gets one. `check_advantage_alignment` asks that every position carrying an advantage be an action token.
4. Environment tokens inside the loss (the course's `GRPOConfig.mask_observations`). Tool responses and observations
   are written by the environment, not sampled; training on them fits the policy to predict the environment, with
   advantages that reward or punish text the policy never chose. `check_observation_share` measures the share of
   loss tokens that are not action tokens.

Shapes: `[B, T]` masks and advantages, right-padded, aligned with the tokens (position k is token k, as
`models.token_logprobs` returns log-probs).
"""

from __future__ import annotations

import torch

from course_lib.course.pitfalls.report import PitfallReport, finish


def shifted_right(mask: torch.Tensor, steps: int = 1) -> torch.Tensor:
    """`mask` (`[B, T]`) moved `steps` positions later in each row, zeros entering at the start: the off-by-one a
    loop makes when it indexes its mask by the logits' positions (t predicts t + 1) and its log-probs by tokens."""
    out = torch.zeros_like(mask)
    out[:, steps:] = mask[:, :-steps]
    return out


def check_advantage_alignment(
    advantages: torch.Tensor, loss_mask: torch.Tensor, action_mask: torch.Tensor, on_flag: str = "warn"
) -> PitfallReport:
    """Flag advantage-carrying positions that are not action tokens, and action tokens left without one.

    `advantages`: `[B, T]` per token, or `[B]` (broadcast over the row); `loss_mask`: `[B, T]` where the loss acts;
    `action_mask`: `[B, T]` 1 on the tokens the policy sampled (the engine's `loss_mask`). A position carries an
    advantage when the loss acts there and its advantage is nonzero. Numbers: `carrying`, `off_action` (carrying
    but not an action token), `action_tokens`, `missed` (action tokens, in rows with a nonzero advantage, that the
    loss skips)."""
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(loss_mask)
    carrying = (loss_mask > 0) & (advantages != 0)
    action = action_mask > 0
    live_rows = (advantages != 0).any(dim=1, keepdim=True)
    numbers = {
        "carrying": float(carrying.sum()),
        "off_action": float((carrying & ~action).sum()),
        "action_tokens": float(action.sum()),
        "missed": float((action & live_rows & ~(loss_mask > 0)).sum()),
    }
    flagged = numbers["off_action"] > 0 or numbers["missed"] > 0
    message = (
        f"{numbers['off_action']:.0f} of {numbers['carrying']:.0f} advantage-carrying positions are not action tokens, "
        f"{numbers['missed']:.0f} action tokens get no loss"
        + (" (align the loss mask with the tokens the log-probs score)" if flagged else "")
    )
    return finish(PitfallReport("advantages on the wrong tokens", flagged, numbers, message), on_flag)


def check_observation_share(
    loss_mask: torch.Tensor, action_mask: torch.Tensor, max_share: float = 0.0, on_flag: str = "warn"
) -> PitfallReport:
    """Flag a loss whose tokens are more than `max_share` environment tokens: `loss_mask` and `action_mask` `[B, T]`
    (the latter 1 on sampled tokens). Numbers: `loss_tokens`, `environment_tokens`, `share`. Mask observations
    (`GRPOConfig.mask_observations=True`)."""
    loss, action = loss_mask > 0, action_mask > 0
    environment = float((loss & ~action).sum())
    total = float(loss.sum())
    share = environment / max(total, 1.0)
    flagged = share > max_share
    message = f"{share:.1%} of {total:.0f} loss tokens come from the environment" + (
        " (mask observations out of the loss)" if flagged else ""
    )
    numbers = {"loss_tokens": total, "environment_tokens": environment, "share": share}
    return finish(PitfallReport("environment tokens in the loss", flagged, numbers, message), on_flag)
