"""Pitfalls 7 and 8, watched over a run: entropy that blows up, and data that has gone off-policy.

7. Entropy blow-ups. A learning rate too large for the model (or updates dominated by negative advantages, which push
   probability away from the sampled tokens onto every other one) makes the policy's entropy jump within a few
   updates; on the course's models it as often collapses right after (the policy locks onto one wrong output), and
   success falls to 0 either way (AEPO, arXiv 2510.14545, and EPO, arXiv 2509.22576, study entropy in agent RL).
   `check_entropy` compares a history's early entropy with its first value, both ways.
8. Stale off-policy data. Reusing a batch for many updates, or training on rollouts from an older policy (AReaL,
   arXiv 2505.24298), moves the current policy away from the behaviour policy that sampled the tokens: the ratio
   pi/pi_old drifts from 1, more of it lands outside PPO's clip range, and the KL grows with staleness.
   `ratio_stats` measures it against the behaviour log-probs; `check_staleness` flags it.

Shapes: log-probs and masks `[B, T]`; a history is a list of records (dicts), as `train.train_grpo` returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from course_lib.course.pitfalls.report import PitfallReport, finish


def check_entropy(
    history: Sequence[Mapping[str, float]],
    key: str = "entropy",
    max_rise: float = 1.0,
    max_fall: float = 0.8,
    window: int = 8,
    on_flag: str = "warn",
) -> PitfallReport:
    """Flag a run whose `key` (mean policy-token entropy, nats) moves too fast early on: within its first `window`
    records holding `key`, it rises above (1 + `max_rise`) times its first value (a blow-up) or falls below
    (1 - `max_fall`) times it (a collapse onto one output). RL does lower entropy, slowly: chapter 00's recorded
    healthy runs stay within 1.14x and 0.37x of their start over their first 8 iterations, so the defaults (2x,
    0.2x) leave room; judge later iterations with a larger `window` and your own run's spread. Numbers: `first`,
    `peak`, `low`, `rise` (peak / first - 1), `fall` (1 - low / first), `records`. Lower the learning rate."""
    values = [float(r[key]) for r in history if key in r][:window]
    if not values:
        raise ValueError(f"no record of the history holds {key!r}")
    first, peak, low = values[0], max(values), min(values)
    rise = peak / first - 1 if first > 0 else float("inf")
    fall = 1 - low / first if first > 0 else 0.0
    blew_up, collapsed = rise > max_rise, fall > max_fall
    advice = " (blow-up: lower the learning rate)" if blew_up else " (collapse: lower the learning rate)"
    message = f"{key} {first:.3f} at the start, between {low:.3f} and {peak:.3f} over {len(values)} records" + (
        advice if blew_up or collapsed else ""
    )
    numbers = {"first": first, "peak": peak, "low": low, "rise": rise, "fall": fall, "records": float(len(values))}
    return finish(PitfallReport("entropy instability", blew_up or collapsed, numbers, message), on_flag)


def ratio_stats(
    logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, mask: torch.Tensor, clip: float = 0.2
) -> dict[str, float]:
    """The importance ratio r = exp(logprobs - behaviour_logprobs) on the masked tokens (`[B, T]` each): `ratio_mean`,
    `max_log_ratio` (largest |log r|), `outside_clip` (share with |r - 1| > `clip`, the tokens PPO's clip can cut
    off) and `kl` (the k3 estimate of KL(behaviour || current), mean of r - 1 - log r, Schulman's estimator)."""
    m = mask > 0
    log_ratio = (logprobs - behaviour_logprobs)[m].double()
    if log_ratio.numel() == 0:
        raise ValueError("the mask selects no token")
    ratio = log_ratio.exp()
    return {
        "ratio_mean": float(ratio.mean()),
        "max_log_ratio": float(log_ratio.abs().max()),
        "outside_clip": float(((ratio - 1).abs() > clip).double().mean()),
        "kl": float((ratio - 1 - log_ratio).mean()),
    }


def check_staleness(
    logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    mask: torch.Tensor,
    clip: float = 0.2,
    max_outside: float = 0.05,
    on_flag: str = "warn",
) -> PitfallReport:
    """Flag data the current policy has moved away from: more than `max_outside` of the masked tokens have a ratio
    outside [1 - clip, 1 + clip] against the log-probs that sampled them (`ratio_stats`). On fresh on-policy data the
    share is 0 (the ratio is 1 up to rounding): a share above 0 at the first update means the trainer scores other
    tokens or another model than the sampler did (pitfall 1). Reuse a batch for fewer updates, refresh rollouts, or
    correct for the staleness (decoupled PPO, as AReaL does)."""
    stats = ratio_stats(logprobs, behaviour_logprobs, mask, clip)
    flagged = stats["outside_clip"] > max_outside
    message = (
        f"{stats['outside_clip']:.1%} of tokens outside the clip range, mean ratio {stats['ratio_mean']:.3f}, "
        f"KL {stats['kl']:.4f}" + (" (stale or mismatched data: fewer reuses, fresher rollouts)" if flagged else "")
    )
    return finish(PitfallReport("off-policy ratio", flagged, stats, message), on_flag)
