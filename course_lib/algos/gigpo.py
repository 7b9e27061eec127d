"""GiGPO: group-in-group advantages for multi-step agents (Feng et al. 2025, "Group-in-Group Policy
Optimization for LLM Agent Training", arXiv 2505.10978).

Training data are step rows: one row per environment step, with its trajectory id, its episode group
id (the trajectories of a group all start from the same task), its step index t, its reward r_t,
whether its action was valid, and an *anchor*: a hashable key of the state s_t seen before acting.

    R_t = r_t + gamma * R_{t+1}                                  (Eq. 5, discounted step return)
    G^S(s) = {rows of one episode group whose anchor is s}        (Eq. 6, step groups)
    A^S_t = (R_t - mean_{G^S}(R)) / (std_{G^S}(R) + eps)          (Eq. 7, step advantage)
    A^E   = (R(tau) - mean(R)) / (std(R) + eps)                   (Eq. 3, episode advantage)
    A_t   = A^E + omega * A^S_t                                   (Eq. 8)

std is the unbiased (n - 1) one, as `torch.std`; `scale_by_std=False` keeps only the centring
("mean_norm" in the official code). Groups with one member or with all-equal values get 0.

Two details follow the official verl-agent code rather than the printed equations:
- The invalid-action penalty (coef 0.1) is subtracted *after* discounting and only from the row of
  the invalid action: from its return R_t and from its episode score R(tau).
- By default (`pooled=True`, the setting behind the paper's numbers) the episode mean and std are
  taken over every step row of the group, so long trajectories weigh more; an episode group holding
  a single row then uses mean 0 and std 1 (its advantage is its score). `pooled=False` is Eq. 3 as
  printed: one score per trajectory (that of its first step).

Plain Python lists in and out (one value per row, rows in any order). `token_advantages` is the
combination step every trainer shares (the course's loop and verl's estimator): the step table's
A^E and A^S spread over each step's action tokens by the caller's `spread`, then Eq. 8 per token.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

import torch

from course_lib import bridges
from course_lib.algos.step_rows import check_gamma, check_lengths, episode_rows
from course_lib.implement_it import implement_it
from course_lib.validation import one_of, within


def discounted_returns(step_rewards: Sequence[float], gamma: float) -> list[float]:
    """Eq. 5 for one trajectory: returns `[T]` of rewards `[T]` in step order, computed backwards."""
    check_gamma(gamma)
    returns = [0.0] * len(step_rewards)
    running = 0.0
    for t in reversed(range(len(step_rewards))):
        running = float(step_rewards[t]) + gamma * running
        returns[t] = running
    return returns


def to_hashable(obs) -> Hashable:
    """A hashable key of an observation, so that equal states land in the same step group.

    str/int/float/bool pass through; numpy scalars become Python scalars; arrays become the tuple
    of their flattened items; lists/tuples become tuples and dicts tuples of sorted (key, value)
    pairs, recursively; a dataclass instance becomes its class name and its fields. Anything else
    raises TypeError (a silent `id()` would never group).
    """
    if hasattr(obs, "ndim") and hasattr(obs, "tolist"):  # numpy array or scalar, checked first
        if obs.ndim == 0:  # because np.float64 is also a float, yet np.int64 is no int
            return obs.item()
        return tuple(to_hashable(item) for item in obs.reshape(-1).tolist())
    if isinstance(obs, (str, int, float, bool)):
        return obs
    if isinstance(obs, (list, tuple)):
        return tuple(to_hashable(item) for item in obs)
    if isinstance(obs, dict):
        return tuple(sorted((key, to_hashable(value)) for key, value in obs.items()))
    if dataclasses.is_dataclass(obs) and not isinstance(obs, type):  # e.g. two_hop_qa's Question
        return (type(obs).__name__, to_hashable(dataclasses.astuple(obs)))
    raise TypeError(
        f"cannot turn an anchor of type {type(obs).__name__} into a step-group key; "
        "use str, numbers, lists, tuples, dicts or numpy arrays"
    )


def _step_keys(anchors: Sequence, group_ids: Sequence[Hashable]) -> list[tuple]:
    check_lengths(anchors=anchors, group_ids=group_ids)
    # The group id is part of the key: the same state in two tasks must not share a baseline.
    return [(group, to_hashable(anchor)) for anchor, group in zip(anchors, group_ids)]


def step_group_ids(anchors: Sequence, group_ids: Sequence[Hashable]) -> list[int]:
    """Eq. 6: dense step-group ids `[N]` (0..K-1, in order of first appearance) of rows `[N]`."""
    dense: dict[tuple, int] = {}
    return [dense.setdefault(key, len(dense)) for key in _step_keys(anchors, group_ids)]


def step_group_sizes(anchors: Sequence, group_ids: Sequence[Hashable]) -> list[int]:
    """For each row `[N]`, how many rows share its step group (for a histogram of group sizes)."""
    keys = _step_keys(anchors, group_ids)
    counts = Counter(keys)
    return [counts[key] for key in keys]


def _moments(sample: list[float]) -> tuple[float, float]:
    """Mean and unbiased (n - 1) standard deviation of `sample` (>= 2 values), as `torch.std` computes
    them; computed once per group, not once per row (`statistics.stdev` is exact but slow)."""
    mean = math.fsum(sample) / len(sample)
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in sample) / (len(sample) - 1))


def _normalise(value: float, moments: tuple[float, float], scale_by_std: bool, eps: float) -> float:
    """(value - mean) / (std + eps), or value - mean without the std."""
    mean, std = moments
    return (value - mean) / (std + eps) if scale_by_std else value - mean


def _no_signal(sample: list[float]) -> bool:
    # Exact zero rather than rounding noise divided by eps.
    return len(sample) < 2 or all(v == sample[0] for v in sample)


@implement_it("gigpo.step_group_advantages", bridges.step_group_advantages)
def step_group_advantages(
    returns: Sequence[float],
    anchors: Sequence,
    group_ids: Sequence[Hashable],
    scale_by_std: bool = True,
    eps: float = 1e-6,
) -> list[float]:
    """Eqs. 6-7: step advantages `[N]` of returns `[N]`, normalised within (group, anchor) groups.

    A singleton step group gets 0 (its mean is itself), as does a group of equal returns.
    """
    check_lengths(returns=returns, anchors=anchors)
    ids = step_group_ids(anchors, group_ids)
    members: dict[int, list[float]] = defaultdict(list)
    for sid, value in zip(ids, returns):
        members[sid].append(float(value))
    moments = {sid: _moments(sample) for sid, sample in members.items() if not _no_signal(sample)}
    return [
        _normalise(float(value), moments[sid], scale_by_std, eps) if sid in moments else 0.0
        for sid, value in zip(ids, returns)
    ]


def episode_advantages(
    scores: Sequence[float],
    group_ids: Sequence[Hashable],
    traj_ids: Sequence[Hashable],
    step_index: Sequence[int],
    pooled: bool = True,
    scale_by_std: bool = True,
    eps: float = 1e-6,
) -> list[float]:
    """Episode advantages `[N]` of per-row episode scores `[N]` (R(tau), minus that row's penalty).

    `pooled=True`: mean/std over every row of the episode group (official code); a group with one
    row uses mean 0, std 1. `pooled=False` (Eq. 3): mean/std over one score per trajectory (its
    first step's), applied to each row's own score; a group with a single trajectory gets 0, our
    choice, since there is nothing to compare it with (the code would pass its raw score through).
    """
    n = check_lengths(scores=scores, group_ids=group_ids, traj_ids=traj_ids, step_index=step_index)
    samples: dict[Hashable, list[float]] = defaultdict(list)
    if pooled:
        for group, score in zip(group_ids, scores):
            samples[group].append(float(score))
    else:
        first: dict[Hashable, int] = {}  # trajectory -> row of its earliest step
        for row in range(n):
            if traj_ids[row] not in first or step_index[row] < step_index[first[traj_ids[row]]]:
                first[traj_ids[row]] = row
        for row in first.values():
            samples[group_ids[row]].append(float(scores[row]))
    moments = {group: _moments(sample) for group, sample in samples.items() if not _no_signal(sample)}
    advantages = []
    for group, score in zip(group_ids, scores):
        sample = samples[group]
        if pooled and len(sample) == 1:
            advantages.append(float(score) / (1.0 + eps) if scale_by_std else float(score))
        elif _no_signal(sample):
            # Also for pooled=False with equal trajectory scores: a penalised row would otherwise
            # get (-coef) / eps, a huge advantage; the step advantage still carries the penalty.
            advantages.append(0.0)
        else:
            advantages.append(_normalise(float(score), moments[group], scale_by_std, eps))
    return advantages


def apply_invalid_action_penalty(values: Sequence[float], valid: Sequence[bool], coef: float = 0.1) -> list[float]:
    """Subtract `coef` from each value `[N]` whose action was invalid; step-local, never discounted."""
    check_lengths(values=values, valid=valid)
    return [float(v) - coef * (0.0 if ok else 1.0) for v, ok in zip(values, valid)]


@dataclass
class GiGPOAdvantages:
    """Per-row outputs `[N]` of `gigpo_advantages`, in the order of its input rows."""

    advantages: list[float]  # A = A^E + omega * A^S, what the policy loss uses
    episode: list[float]  # A^E
    step: list[float]  # A^S
    returns: list[float]  # R_t after the penalty
    scores: list[float]  # R(tau) after the penalty
    step_group_size: list[int]


def gigpo_advantages(
    rewards: Sequence[float],
    valid: Sequence[bool],
    anchors: Sequence,
    group_ids: Sequence[Hashable],
    traj_ids: Sequence[Hashable],
    step_index: Sequence[int],
    gamma: float = 0.95,
    omega: float = 1.0,
    scale_by_std: bool = True,
    pooled: bool = True,
    invalid_penalty: float = 0.1,
    eps: float = 1e-6,
) -> GiGPOAdvantages:
    """GiGPO advantages of `N` step rows given as flat per-row lists, in any order (Eqs. 3-8).

    Each trajectory's rows are sorted by `step_index` to discount its rewards; its episode score is
    the sum of its rewards. `invalid_penalty=0` turns the penalty off.
    """
    n = check_lengths(
        rewards=rewards, valid=valid, anchors=anchors, group_ids=group_ids, traj_ids=traj_ids, step_index=step_index
    )
    check_gamma(gamma)
    returns = [0.0] * n
    scores = [0.0] * n
    for rows in episode_rows(traj_ids, step_index, group_ids).values():
        traj_returns = discounted_returns([rewards[row] for row in rows], gamma)
        total = math.fsum(float(rewards[row]) for row in rows)
        for row, value in zip(rows, traj_returns):
            returns[row] = value
            scores[row] = total
    # After discounting, so an invalid action costs only its own step, not its predecessors.
    returns = apply_invalid_action_penalty(returns, valid, invalid_penalty)
    scores = apply_invalid_action_penalty(scores, valid, invalid_penalty)
    step = step_group_advantages(returns, anchors, group_ids, scale_by_std, eps)
    episode = episode_advantages(scores, group_ids, traj_ids, step_index, pooled, scale_by_std, eps)
    return GiGPOAdvantages(
        advantages=[e + omega * s for e, s in zip(episode, step)],
        episode=episode,
        step=step,
        returns=returns,
        scores=scores,
        step_group_size=step_group_sizes(anchors, group_ids),
    )


def step_group_stats(sizes: Sequence[int]) -> dict[str, float]:
    """The share of steps whose step group holds only themselves (no state recurred: A^S = 0 there) and the
    mean step-group size, over the steps of a batch."""
    return {
        "step_group_singleton_share": sum(size == 1 for size in sizes) / max(len(sizes), 1),
        "step_group_size_mean": sum(sizes) / max(len(sizes), 1),
    }


EPISODE_BASELINES = ("pooled", "trajectory")
"""`GiGPOConfig.episode_baseline` (`seams.gigpo` tests for "pooled" and reads anything else as "trajectory")."""


@dataclass
class GiGPOConfig:
    """GiGPO's settings in the loop's config (`GRPOConfig.gigpo`); defaults from verl-agent's GiGPO scripts."""

    gamma: float = 0.95
    """Discount of the step returns (Eq. 5). With 1 and a terminal-only reward every step of an episode
    has the same return, so the step advantage only re-ranks whole episodes."""
    step_weight: float = 1.0
    """omega in A = A^E + omega * A^S (Eq. 8)."""
    episode_baseline: str = "pooled"
    """`pooled`: the episode advantage's mean and std over every step row of the group (the official code's
    default, with which the paper's numbers were produced); `trajectory`: over one score per episode (Eq. 3)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Refuse an unknown baseline (it would silently mean `trajectory`) and a discount outside [0, 1]."""
        one_of("GiGPOConfig.episode_baseline", self.episode_baseline, EPISODE_BASELINES)
        within("GiGPOConfig.gamma", self.gamma, 0.0, 1.0)


@dataclass(frozen=True)
class GiGPOSettings:
    """What `token_advantages` reads: `GiGPOConfig`'s fields plus the two `GRPOConfig` fields GiGPO uses
    (`scale_by_std`, `invalid_penalty`). verl's estimator builds them from its `algorithm` config
    (`integrations.verl_gigpo`)."""

    gamma: float = 0.95
    step_weight: float = 1.0
    """omega in Eq. 8."""
    episode_baseline: str = "pooled"
    """`pooled` (every step row of the group, the code's) or `trajectory` (Eq. 3 as printed)."""
    scale_by_std: bool = True
    invalid_penalty: float = 0.1

    @classmethod
    def from_course(cls, config) -> GiGPOSettings:
        """From a course `GRPOConfig` (its `gigpo`, `scale_by_std` and `invalid_penalty`)."""
        g = config.gigpo
        return cls(g.gamma, g.step_weight, g.episode_baseline, config.scale_by_std, config.invalid_penalty)


def token_advantages(
    table: Mapping[str, Sequence],
    spread: Callable[[torch.Tensor], torch.Tensor],
    settings: GiGPOSettings,
    episode_tokens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GiGPO's per-token advantages A = A^E + omega * A^S (Eq. 8) from a step table of K steps, and
    `step_group_stats`.

    `table` holds `gigpo_advantages`' six columns (`rewards`, `valid`, `anchors`, `group_ids`, `traj_ids`,
    `step_index`). `spread(values)` maps per-step values `[K]` (float32) to the tokens of each step's action,
    `[B, T]` (0 elsewhere): the caller's layout, e.g. `rollout.broadcast_steps` or verl's action spans.
    `episode_tokens` `[B, T]`, when given, replaces the spread A^E (step mode with the pooled baseline: GRPO's own
    group advantage on the step rows, so that with no recurring state the update is GRPO's bit for bit)."""
    omega = settings.step_weight
    result = gigpo_advantages(
        **table, gamma=settings.gamma, omega=omega, scale_by_std=settings.scale_by_std,
        pooled=settings.episode_baseline == "pooled", invalid_penalty=settings.invalid_penalty,
    )  # fmt: skip
    episode = spread(torch.tensor(result.episode, dtype=torch.float)) if episode_tokens is None else episode_tokens
    step = spread(torch.tensor(result.step, dtype=torch.float))
    return episode + omega * step, step_group_stats(result.step_group_size)
