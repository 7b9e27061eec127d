"""IGPO: turn rewards from the policy's own information gain (Wang et al. 2025, "Information Gain-based Policy
Optimization", arXiv 2510.14967, ICLR 2026; official code GuoqingWang1/IGPO).

An outcome reward gives every turn of an episode the same credit, and a group whose outcomes are all equal gives
none at all ("advantage collapse": GRPO's advantage is 0 there). IGPO rewards each tool-call turn by how much more
the policy believes the gold answer after it. With a the gold answer's L tokens and o_{<=t} the first t turns with
their tool responses,

    p_t  = exp( (1/L) sum_j log pi(a_j | q, o_{<=t}, a_{<j}) )     the geometric-mean probability of a, teacher-forced
    IG_t = p_t - p_{t-1}   for the turns t = 1 .. T-1 before the last (p_0: the prompt alone)
    r    = (IG_1, ..., IG_{T-1}, R_outcome)                        the last turn earns the outcome reward

p is read from the policy that sampled the batch (no gradient flows through it). The turn rewards of a group are
normalised together, every turn of every episode in one pool, then summed backwards:

    r~ = (r - mean_group r) / (std_group r + eps)       population std (ddof 0), one pool per group ("joint")
    A_t = r~_t + gamma * A_{t+1}                         gamma = 1 in the paper's runs; every token of turn t gets A_t

The raw gains telescope: sum_t IG_t = p_{T-1} - p_0, the rise of the gold answer's probability over the episode's
tool calls (`log_gain` variant: the same for mean log-probabilities). After normalisation they do not.

What follows the official code where the paper is silent (the Feb-2026 release, `core_algos.py`'s `joint` mode and
`generation.py`'s `prob_diff`): the population std with 1e-8 under the root and 1e-6 added, a one-member pool's std
taken as 1; `separate` normalises gains and outcomes in two pools (the option its example script uses). The first
release subtracted a per-position group mean from raw returns instead; the course follows the later, paper-like one.
The outcome here is the environment's reward (exact match, 0 or 1), where IGPO scores token-set F1.

Where a turn ends, disclosed: the library discounts every turn and pools every turn's reward. The official code
finds a turn's end by a non-zero reward at its last token: the normalised reward in `_compute_turn_level_advantage`
called alone, the raw reward in the release read last (commit 49a8c4e, `turn_boundary_mask`). A turn whose reward
there is exactly 0 is folded into the next: its tokens get the next turn's advantage, so with gamma < 1 one discount
step is skipped (with gamma = 1 and the normalised rule the two agree, since the folded turn adds 0); under the raw
rule a gain of exactly 0 also leaves the pool. The two agree whenever no such reward is exactly 0; a gain is 0 only
when a turn leaves the gold answer's probability unchanged to the last bit (`tests/algos/test_igpo.py` shows both).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from course_lib.algos.step_rows import check_gamma, check_lengths, episode_rows
from course_lib.validation import one_of, within

NORMALISATIONS = ("joint", "separate")
GAINS = ("prob", "log_prob")


@dataclass
class IGPOConfig:
    """IGPO's settings in the loop's config (`GRPOConfig.igpo`: this module's turn rewards and `rl.info_gain`'s
    gains): the paper's defaults."""

    gamma: float = 1.0
    """Discount of the turn reward-to-go, A_t = r~_t + gamma A_{t+1} (1 in the paper's runs)."""
    gain: str = "prob"
    """`prob`: IG_t = p_t - p_{t-1} (the paper's); `log_prob`: the difference of mean log-probabilities."""
    normalisation: str = "joint"
    """`joint`: one pool of every turn reward of a group (the paper's); `separate`: gains and outcomes apart."""
    answer_template: str = "<answer> {answer} </answer>"
    """The action that states the gold answer, teacher-forced after each turn (only `{answer}`'s tokens scored)."""
    answer_key: str = "answer"
    """The key of the environment's `info` that holds the gold answer."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Refuse an unknown gain or normalisation, a discount outside [0, 1] and a template without `{answer}`."""
        one_of("IGPOConfig.gain", self.gain, GAINS)
        one_of("IGPOConfig.normalisation", self.normalisation, NORMALISATIONS)
        within("IGPOConfig.gamma", self.gamma, 0.0, 1.0)
        if self.answer_template.count("{answer}") != 1:
            raise ValueError(f"IGPOConfig.answer_template must hold {{answer}} once, got {self.answer_template!r}")


def information_gains(mean_logprobs: Sequence[float], gain: str = "prob") -> list[float]:
    """IG_1 .. IG_k `[k]` from the gold answer's mean token log-probability before any turn and after each of k
    turns, `[k + 1]`: differences of p = exp(mean log-prob) (`prob`, the paper's) or of the mean log-probs
    themselves (`log_prob`, the official example script's)."""
    if gain not in GAINS:
        raise ValueError(f"gain must be one of {GAINS}, got {gain!r}")
    if len(mean_logprobs) < 1:
        raise ValueError("need the probability before the first turn")
    values = [math.exp(v) if gain == "prob" else float(v) for v in mean_logprobs]
    return [after - before for before, after in zip(values, values[1:])]


def episode_turn_rewards(gains: Sequence[float], outcome: float, turns: int) -> list[float]:
    """The reward of each of an episode's `turns` turns `[turns]`: IG_t for every turn but the last, which earns
    `outcome`. `gains` must hold one value per turn before the last (more are ignored: the gain after the last
    turn is never used)."""
    if turns < 1:
        raise ValueError(f"an episode has at least one turn, got {turns}")
    if len(gains) < turns - 1:
        raise ValueError(f"{turns} turns need {turns - 1} information gains, got {len(gains)}")
    return [float(g) for g in gains[: turns - 1]] + [float(outcome)]


def _pool_moments(values: list[float]) -> tuple[float, float]:
    """Mean and population std of a pool, as the official code: sqrt(var + 1e-8); 1 for a pool of one."""
    mean = math.fsum(values) / len(values)
    if len(values) <= 1:
        return mean, 1.0
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values) + 1e-8)


def igpo_advantages(
    turn_rewards: Sequence[float],
    is_outcome: Sequence[bool],
    group_ids: Sequence[Hashable],
    traj_ids: Sequence[Hashable],
    step_index: Sequence[int],
    gamma: float = 1.0,
    normalisation: str = "joint",
    scale_by_std: bool = True,
    eps: float = 1e-6,
) -> list[float]:
    """IGPO's turn advantages `[N]` of turn rewards `[N]` (one row per turn, rows in any order): normalised within
    each group (one pool, or gains and outcomes apart with `separate`), then A_t = r~_t + gamma * A_{t+1} along each
    episode. `is_outcome` `[N]` marks the rows whose reward is the outcome (each episode's last turn)."""
    check_lengths(turn_rewards=turn_rewards, is_outcome=is_outcome, group_ids=group_ids, traj_ids=traj_ids,
                  step_index=step_index)  # fmt: skip
    if normalisation not in NORMALISATIONS:
        raise ValueError(f"normalisation must be one of {NORMALISATIONS}, got {normalisation!r}")
    check_gamma(gamma)
    pools: dict[tuple, list[float]] = defaultdict(list)

    def pool(row: int) -> tuple:
        return (group_ids[row], bool(is_outcome[row]) if normalisation == "separate" else None)

    for row, reward in enumerate(turn_rewards):
        pools[pool(row)].append(float(reward))
    moments = {key: _pool_moments(values) for key, values in pools.items()}
    normalised = []
    for row, reward in enumerate(turn_rewards):
        mean, std = moments[pool(row)]
        normalised.append((float(reward) - mean) / (std + eps) if scale_by_std else float(reward) - mean)
    advantages = [0.0] * len(normalised)
    for rows in episode_rows(traj_ids, step_index, group_ids).values():
        running = 0.0
        for row in reversed(rows):
            running = normalised[row] + gamma * running
            advantages[row] = running
    return advantages
