"""The student edition's implement-it functions: the library's signatures, the student's arithmetic.

Each bridge takes the arguments of the library function it stands in for (`implement_it`) and computes its result
with the student's function from `exercises/`, adapting the shapes between the two. What the exercise does not
cover is derived from the student's result where it can be (AEPO's hard clip is the balanced clip's value without
its gradient above the clip; a batch of GAE rows is the rows one by one), and otherwise refused with a message that
names the variant, never computed by a second copy of the reference. Tested in the instructor's edition: with each
exercise's reference standing in for the student's function, every bridge returns what the library returns
(tests/base/test_bridges.py).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import torch
from torch import Tensor

from course_lib.implement_it import student


def _not_covered(exercise: str, what: str) -> NotImplementedError:
    return NotImplementedError(
        f"the student edition computes this with your exercises/{exercise.split('.')[0]}.py ({exercise}), which "
        f"does not cover {what}; the instructor's edition of the course does"
    )


def group_advantages(rewards: Tensor, group_ids: Tensor, scale_by_std: bool = True, eps: float = 1e-6) -> Tensor:
    if rewards.shape != group_ids.shape or rewards.dim() != 1:
        raise ValueError("rewards and group_ids must be 1-D tensors of the same shape")
    return student("grpo.group_advantages")(rewards.float(), group_ids, scale_by_std, eps).float()


def clipped_surrogate_loss(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, loss_mask: Tensor,
                           clip_low: float = 0.2, clip_high: float = 0.2,
                           aggregation: str = "token-mean") -> tuple[Tensor, dict[str, float]]:  # fmt: skip
    if aggregation != "token-mean":
        raise _not_covered("grpo.clipped_surrogate_loss", f"aggregation {aggregation!r} (only token-mean)")
    loss = student("grpo.clipped_surrogate_loss")(logprobs, old_logprobs, advantages, loss_mask, clip_low, clip_high)
    with torch.no_grad():  # the statistics the trainer logs: which masked ratios sit outside the clip range
        per_token = advantages[:, None].expand_as(logprobs) if advantages.dim() == 1 else advantages
        ratio = torch.exp(logprobs - old_logprobs)
        mask = loss_mask.bool()
        bound = ((per_token > 0) & (ratio > 1 + clip_high)) | ((per_token < 0) & (ratio < 1 - clip_low))
        count = max(int(mask.sum()), 1)
        stats = {
            "clip_fraction": float((bound & mask).sum()) / count,
            "ratio_mean": float((ratio * mask).sum()) / count,
        }
    return loss, stats


def play_episode(engine, policy: Callable, env, seed: int, group_id: int = 0):
    trajectory = student("rollout.play_episode")(engine, policy, env, seed)
    trajectory.group_id = group_id
    return trajectory


def step_group_advantages(returns: Sequence[float], anchors: Sequence, group_ids: Sequence[Hashable],
                          scale_by_std: bool = True, eps: float = 1e-6) -> list[float]:  # fmt: skip
    """GiGPO's Eqs. 6-7 on flat returns: each row a one-step trajectory, whose Eq. 5 return is its reward."""
    if not len(returns) == len(anchors) == len(group_ids):
        raise ValueError(f"returns ({len(returns)}), anchors ({len(anchors)}) and group_ids differ in length")
    out = student("gigpo.step_group_advantages")(
        [[float(r)] for r in returns], [[a] for a in anchors], list(group_ids), 1.0, scale_by_std, eps
    )
    return [float(row[0]) for row in out]


def branch_probability(entropy_after: float | Tensor, initial_entropy: float | Tensor, alpha: float = 0.5,
                       beta: float = 0.2) -> float | Tensor:  # fmt: skip
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    if beta < 0.0:
        raise ValueError(f"beta must be >= 0 (more uncertainty, more branching), got {beta}")
    decide = student("arpo.branch_decision")
    if isinstance(entropy_after, torch.Tensor) or isinstance(initial_entropy, torch.Tensor):
        after, initial = torch.broadcast_tensors(torch.as_tensor(entropy_after), torch.as_tensor(initial_entropy))
        values = [decide(float(a), float(i), torch.Generator(), alpha, beta)[0]
                  for a, i in zip(after.reshape(-1).tolist(), initial.reshape(-1).tolist())]  # fmt: skip
        return torch.tensor(values, dtype=torch.result_type(after, initial)).reshape(after.shape)
    return float(decide(float(entropy_after), float(initial_entropy), torch.Generator(), alpha, beta)[0])


def gae(rewards: Tensor, values: Tensor, gamma: float, lam: float, last_value: float | Tensor = 0.0) -> Tensor:
    """GAE on `[T]` or `[B, T]`: row by row, with no episode ending inside a row (its end bootstraps from
    `last_value`)."""
    if rewards.shape != values.shape:
        raise ValueError(f"rewards {tuple(rewards.shape)} and values {tuple(values.shape)} differ in shape")
    if not 0.0 <= gamma <= 1.0 or not 0.0 <= lam <= 1.0:
        raise ValueError(f"gamma and lam must lie in [0, 1], got {gamma} and {lam}")
    fn = student("ppo.gae")
    values = values.to(rewards.dtype)
    if rewards.dim() == 1:
        return fn(rewards, values, torch.zeros_like(rewards), gamma, lam, float(last_value)).to(rewards.dtype)
    last = torch.as_tensor(last_value, dtype=rewards.dtype).expand(rewards.shape[:-1]).reshape(-1)
    flat_rewards, flat_values = rewards.reshape(-1, rewards.shape[-1]), values.reshape(-1, rewards.shape[-1])
    rows = [fn(r, v, torch.zeros_like(r), gamma, lam, float(b)) for r, v, b in zip(flat_rewards, flat_values, last)]
    return torch.stack(rows).to(rewards.dtype).reshape(rewards.shape)


def top_groups_by_reward_std(rewards: Tensor, group_ids: Sequence[int] | Tensor, keep_fraction: float = 0.25) -> Tensor:
    if not 0.0 <= keep_fraction <= 1.0:
        raise ValueError(f"keep_fraction must lie in [0, 1], got {keep_fraction}")
    return student("filters.starpo_s")(rewards, torch.as_tensor(group_ids), keep_fraction).bool()


def top_p_groups_by_reward_std(rewards: Tensor, group_ids: Sequence[int] | Tensor, top_p: float = 0.9,
                               mode: str = "linear", include_zero: bool = False,
                               eps: float = 0.01) -> Tensor:  # fmt: skip
    """Linear mode is the exercise's; with `include_zero` it keeps the same groups (the prefix stops at the first
    zero std, and zeros add nothing to the sum)."""
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must lie in (0, 1], got {top_p}")
    if mode != "linear":
        raise _not_covered("filters.snr", f"mode {mode!r} (only linear)")
    return student("filters.snr")(rewards, torch.as_tensor(group_ids), top_p, eps).bool()


def cross_scored_rows(logp: Tensor, prompt_index: Sequence[int] | Tensor) -> Tensor:
    """`prompt_index` as a `[Z]` long tensor, after checking it against `logp` `[Z, P]` (the cross-scoring estimate's
    inputs, here and in `diagnostics.mutual_information`)."""
    if logp.dim() != 2:
        raise ValueError(f"logp must be [Z, P], got shape {tuple(logp.shape)}")
    own = torch.as_tensor(prompt_index, dtype=torch.long)
    rows, prompts = logp.shape
    if own.shape != (rows,) or rows == 0:
        raise ValueError(f"prompt_index must hold one prompt per row of logp ({rows}), got {tuple(own.shape)}")
    if own.min() < 0 or own.max() >= prompts:
        raise ValueError(f"prompt_index must lie in [0, {prompts})")
    return own


def mutual_information(logp: Tensor, prompt_index: Sequence[int] | Tensor,
                       prompt_keys: Sequence | None = None) -> dict[str, float]:  # fmt: skip
    """The cross-scoring estimate from the student's `cross_scoring`: the whole batch gives `mi` and the retrieval;
    each row alone gives that row's matched-minus-marginal term, from which the other estimates follow."""
    own = cross_scored_rows(logp, prompt_index)
    rows, prompts = logp.shape
    fn = student("mi.cross_scoring")
    logp = logp.double()
    whole = fn(logp, own)
    terms = torch.tensor([fn(logp[i : i + 1], own[i : i + 1])["mi"] for i in range(rows)], dtype=torch.float64)
    matched = logp[torch.arange(rows), own]
    marginal = matched - terms
    accuracy = float(whole["retrieval_accuracy"])
    if prompt_keys is not None:  # a twin of one's own prompt counts as retrieved
        if len(prompt_keys) != prompts:
            raise ValueError(f"{len(prompt_keys)} prompt keys for {prompts} prompts")
        best = logp.argmax(dim=1).tolist()
        accuracy = sum(prompt_keys[b] == prompt_keys[o] for b, o in zip(best, own.tolist())) / rows
    spread = marginal.std(unbiased=False) if rows > 1 else torch.tensor(0.0, dtype=torch.float64)
    return {
        "mi": float(whole["mi"]),
        "retrieval_accuracy": accuracy,
        "conditional_entropy": float(-matched.mean()),
        "marginal_entropy": float(-marginal.mean()),
        "mi_zscore": float((terms / (spread + 1e-3)).mean()),
        "chance": 1.0 / prompts,
        "prompts": float(prompts),
    }


def balanced_clip_losses(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, clip_low: float = 0.2,
                         clip_high: float = 0.2, dual_clip: float = 3.0,
                         balanced: bool = True) -> tuple[Tensor, Tensor]:  # fmt: skip
    """AEPO's balanced clip from the student's; PPO's hard clip (`balanced=False`) has the same values and no
    gradient where the upper clip acts."""
    if dual_clip <= 1.0:
        raise ValueError(f"dual_clip must exceed 1, got {dual_clip}")
    per_token = advantages[:, None].expand_as(logprobs) if advantages.dim() == 1 else advantages
    losses = student("aepo.balanced_clip")(logprobs, old_logprobs, per_token, clip_low, clip_high, dual_clip)
    above = (torch.exp(logprobs - old_logprobs) > 1 + clip_high) & (per_token > 0)
    if not balanced:
        losses = torch.where(above, losses.detach(), losses)
    return losses, above


def tree_advantages(rewards: Tensor, prompt_ids: Tensor, tree_ids: Tensor, scale_by_std: bool = True,
                    singleton: str = "zero", eps: float = 1e-6) -> Tensor:  # fmt: skip
    """Tree-GRPO's advantages from the student's (`singleton` "zero"); the official code's "raw" rule gives a
    one-leaf tree its raw reward as the intra term, where the paper's gives 0."""
    if singleton not in ("zero", "raw"):
        raise ValueError(f"singleton must be one of ('zero', 'raw'), got {singleton!r}")
    if not scale_by_std:
        raise _not_covered("tree_grpo.tree_advantages", "scale_by_std=False")
    if not (rewards.shape == prompt_ids.shape == tree_ids.shape) or rewards.dim() != 1:
        raise ValueError("rewards, prompt_ids and tree_ids must be 1-D tensors of the same shape")
    out = torch.tensor(
        student("tree_grpo.tree_advantages")(rewards.float().tolist(), prompt_ids.tolist(), tree_ids.tolist(), eps),
        dtype=torch.float32,
    )
    if singleton == "raw":
        _, inverse, counts = torch.unique(tree_ids, return_inverse=True, return_counts=True)
        out = torch.where(counts[inverse] == 1, out + rewards.float() / (1.0 + eps), out)
    return out
