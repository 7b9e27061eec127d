"""Designed settings: one pre-registered experiment per chapter where its paper's mechanism has room to act, decided
with the power to see it.

A chapter's main run uses the released settings at the miniature's scale, where some mechanisms have nothing to act
on (a branch rule that is a coin flip, chains too short to have consecutive uncertain steps). A design changes the
setting so that the mechanism can act, is written down in `docs/experiments/` before the seeds that decide it are
run, and is decided the way claims.md asks (after Agarwal et al., 2021, arXiv 2108.13264):

1. **Pilot.** Seeds that never decide (`Design.pilot_seeds`) estimate the spread `sd` of the paired difference
   (one value per seed: an arm minus the arm it is compared with, both from the same seed).
2. **Power.** The number of deciding seeds is the smallest n that detects the pre-registered effect (the paper's
   effect scaled to the miniature, `Design.scaled_effect`) with 80% power by a two-sided 5% test of the paired
   mean against its null boundary (0, or the margin when the claim is "at most m worse"): the smallest n with
   (t_{0.975, n-1} + t_{0.8, n-1}) sd / sqrt(n) <= effect - min(margin, 0), at least `min_seeds`, at most
   `max_seeds` (`seeds_needed`); when the cap binds, the power actually reached is reported. (The designs recorded
   before the course moved to t planned with the normal's quantiles, which ask for fewer seeds; `show` prints the
   t plan beside the seeds recorded, and `hindsight` the power those seeds had.) Four pilot seeds know `sd` only
   to a factor of about 1.7 (its 80% upper bound, `stats.sd_upper_bound`): the plan prints the seeds that bound
   would ask beside the pre-registered rule's, and after the decision `hindsight` compares the deciding seeds'
   spread with the pilot's and states the power they actually had.
3. **Decision.** Seeds 0 .. n-1 are run and recorded (`results/<chapter>_design.json`); the course-level verdict
   comes from `course_lib.lab.verdicts`: the 95% t-interval of the paired difference (with at least 5 seeds), and,
   describing it, the bootstrap interval, interquartile mean, probability of improvement, exact sign-flip p and the
   smallest effect those seeds could detect.

A chapter's design module (`chapters/chNN_design.py`) defines its `DESIGN`; `course_lib.lab.design_runs` finds it,
runs its pilot and deciding seeds and shows the decision.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from course_lib.course import recorded
from course_lib.course.claims import ClaimSpec
from course_lib.diagnostics import stats


@dataclass(frozen=True)
class Design:
    """A chapter's pre-registered designed setting."""

    chapter: str
    """Chapter key, e.g. `ch08`; its seeds go to `results/<chapter>_design.json`."""
    claim: ClaimSpec
    """The finding decided here (kind `finding`, id with a `d` suffix); its first `effects` entry is the paired
    difference `(key, margin)` the seeds are planned for."""
    scaled_effect: float
    """The paper's effect scaled to the miniature, as the pre-registration states: the power target."""
    run: Callable[[int], Mapping[str, float]]
    """`run(seed)`: every number of one seed, including the effect key."""
    document: str = ""
    """The pre-registration (committed before the pilot); default `docs/experiments/<chapter>-design.md`."""
    pilot_seeds: tuple[int, ...] = (100, 101, 102, 103)
    max_seeds: int = 20
    min_seeds: int = 6
    first_seed: int = 0
    """Deciding seeds are `first_seed` .. `first_seed + n - 1`: above 0 when a chapter's own records already ran
    seeds 0, 1, 2 of a nearby setting, so that no seed whose outcome was seen decides."""
    arms: tuple[tuple[str, str], ...] = ()
    """`(number key, label)` of each arm, plotted per seed beside the difference."""
    arms_measure: str = "held-out success"
    """What the arms' numbers measure (the y axis of `plot`'s left panel)."""

    @property
    def name(self) -> str:
        return f"{self.chapter}_design"

    @property
    def pilot_name(self) -> str:
        return f"{self.chapter}_design_pilot"

    @property
    def effect_key(self) -> str:
        return self.claim.effects[0][0]

    @property
    def margin(self) -> float:
        return self.claim.effects[0][1]

    def deciding_seeds(self, count: int) -> list[int]:
        return list(range(self.first_seed, self.first_seed + count))

    def __post_init__(self) -> None:
        if not self.document:
            object.__setattr__(self, "document", f"docs/experiments/{self.chapter}-design.md")
        if self.claim.kind != "finding" or not self.claim.effects:
            raise ValueError(f"design {self.chapter}: its claim must be a finding with effects, got {self.claim}")
        if self.scaled_effect <= min(self.margin, 0.0):
            raise ValueError(f"design {self.chapter}: scaled effect {self.scaled_effect} is not beyond the null")
        if set(self.pilot_seeds) & set(self.deciding_seeds(self.max_seeds)):
            raise ValueError(f"design {self.chapter}: pilot seeds {self.pilot_seeds} overlap deciding seeds")


def seeds_needed(sd: float, effect: float, margin: float = 0.0, minimum: int = 6, maximum: int = 20) -> int:
    """Deciding seeds for 80% power at `effect` with the two-sided 5% paired t-test, when paired differences have
    standard deviation `sd`: the smallest n with (t_{0.975, n-1} + t_{0.8, n-1}) sd / sqrt(n) <= effect - null
    (`stats.detectable_effect`'s rule), clipped to [`minimum`, `maximum`]. The null boundary is 0 for "better
    than", or a negative margin for "at most |m| worse". With the normal's quantiles in place of t's the same plan
    would ask for fewer seeds than the t-interval that decides needs (7.85 against 9.8 at sd = effect)."""
    distance = effect - min(margin, 0.0)
    if distance <= 0:
        raise ValueError(f"effect {effect} must lie beyond the null boundary {min(margin, 0.0)}")
    if not math.isfinite(sd) or sd < 0:
        raise ValueError(f"sd must be a finite non-negative number, got {sd}")
    if sd == 0:
        return int(max(minimum, 2))
    needed = 2
    while needed < maximum and _detectable(sd, needed) > distance + 1e-12:
        needed += 1
    return int(min(max(needed, minimum), maximum))


def _detectable(sd: float, seeds: int) -> float:
    """(t_{0.975, n-1} + t_{0.8, n-1}) sd / sqrt(n): the effect n seeds detect with 80% power."""
    return (stats.t_quantile(0.975, seeds - 1) + stats.t_quantile(0.8, seeds - 1)) * sd / math.sqrt(seeds)


def power(sd: float, effect: float, margin: float, seeds: int) -> float:
    """The power of the two-sided 5% paired t-test at `effect` with `seeds` seeds, in the shifted-t approximation:
    P(T_{n-1} <= distance sqrt(n) / sd - t_{0.975, n-1}) (exactly 0.8 where `seeds_needed`'s rule is an equality).
    1 when `sd` is 0."""
    distance = effect - min(margin, 0.0)
    if sd == 0:
        return 1.0
    return stats.t_cdf(distance * math.sqrt(seeds) / sd - stats.t_quantile(0.975, seeds - 1), seeds - 1)


@dataclass(frozen=True)
class Plan:
    """What the pilot says: the spread of the paired difference and the deciding seeds it asks for."""

    pilot_seeds: tuple[int, ...]
    pilot_mean: float
    sd: float
    uncapped: int
    """Seeds for 80% power with no cap (before clipping to [min_seeds, max_seeds])."""
    seeds: int
    """Number of deciding seeds (`Design.deciding_seeds`)."""
    power: float
    """Power at the scaled effect with `seeds` seeds."""
    sd_upper: float
    """The 80% upper confidence bound of `sd` (`stats.sd_upper_bound`): a sturdier spread to plan on, shown beside
    the plan (the pre-registered rule plans on `sd`)."""
    uncapped_upper: int
    """Seeds for 80% power had the plan used `sd_upper` (no cap)."""

    def text(self, design: Design) -> str:
        capped = f", capped at {design.max_seeds} (power {self.power:.2f})" if self.uncapped > self.seeds else ""
        return (
            f"pilot seeds {', '.join(map(str, self.pilot_seeds))}: {design.effect_key} mean {self.pilot_mean:+.3f}, "
            f"sd {self.sd:.3f}; 80% power at the pre-registered effect {design.scaled_effect:+.3f} "
            f"(null {min(design.margin, 0.0):+.3f}, paired t-test) needs {self.uncapped} seeds -> seeds "
            f"{design.first_seed}-{design.first_seed + self.seeds - 1}{capped}\n"
            f"  sturdier: the sd's 80% upper bound from {len(self.pilot_seeds)} pilot seeds is {self.sd_upper:.3f}, "
            f"which would need {self.uncapped_upper} seeds"
        )


def differences(chapter_file: str, key: str) -> tuple[list[int], list[float]]:
    """Seeds and values of `key` in `results/<chapter_file>.json`, in seed order."""
    loaded = recorded.load(chapter_file)
    pairs = sorted((int(seed), rec["numbers"][key]) for seed, rec in loaded["seeds"].items() if key in rec["numbers"])
    return [seed for seed, _ in pairs], [value for _, value in pairs]


def plan(design: Design) -> Plan:
    """The plan from the recorded pilot (`results/<chapter>_design_pilot.json`)."""
    seeds, values = differences(design.pilot_name, design.effect_key)
    if len(values) < 2:
        raise recorded.ResultsMissing(
            f"{design.pilot_name} has {len(values)} pilot seed(s): run "
            f"`python -m course_lib.lab.design_runs {design.chapter} --pilot --record`"
        )
    return plan_from(seeds, values, design.scaled_effect, design.margin, design.min_seeds, design.max_seeds)


def plan_from(
    seeds: Sequence[int], values: Sequence[float], effect: float, margin: float, min_seeds: int, max_seeds: int
) -> Plan:
    """The plan from pilot `values` of one paired difference (at least two seeds): its spread, the seeds for 80%
    power at `effect` (`seeds_needed`, uncapped and clipped to [`min_seeds`, `max_seeds`]) and the power reached."""
    sd = float(np.std(values, ddof=1))
    uncapped = seeds_needed(sd, effect, margin, minimum=min_seeds, maximum=10**6)
    chosen = min(uncapped, max_seeds)
    upper = stats.sd_upper_bound(sd, len(values))
    uncapped_upper = seeds_needed(upper, effect, margin, minimum=min_seeds, maximum=10**6)
    return Plan(tuple(seeds), float(np.mean(values)), sd, uncapped, chosen, power(sd, effect, margin, chosen), upper,
                uncapped_upper)  # fmt: skip


def hindsight(design: Design, pilot: Plan, numbers: Sequence[Mapping[str, float]]) -> str:
    """How the pilot's spread compared with the deciding seeds' (`numbers`), and the power those seeds had at the
    pre-registered effect given the spread they showed: whether a "not reproduced" could have seen the effect."""
    values = [n[design.effect_key] for n in numbers if design.effect_key in n]
    if len(values) < 2:
        return f"  hindsight: {len(values)} deciding seed(s), no spread to compare"
    sd = float(np.std(values, ddof=1))
    reached = power(sd, design.scaled_effect, design.margin, len(values))
    ratio = f" ({sd / pilot.sd:.1f}x the pilot's)" if pilot.sd > 0 else ""
    return (
        f"  hindsight: the {len(values)} deciding seeds' sd is {sd:.3f}{ratio}; with it, the power at "
        f"{design.scaled_effect:+.3f} was {reached:.2f}"
    )


def recorded_design_seeds(design: Design) -> list[dict[str, float]]:
    """The deciding seeds' numbers (seed order); empty when none are recorded."""
    if not recorded.path(design.name).exists():
        return []
    return recorded.seed_numbers(recorded.load(design.name))
