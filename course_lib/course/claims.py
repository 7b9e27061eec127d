"""Check and print a chapter's claims (every chapter's last section).

Each claim is a paper's headline finding restated for the miniature; the ids (`C0.1`, `C4.3a`, ...)
are stable and are the ones the course's list of claims uses (`docs/claims.md`). A chapter declares
its claims once, as `ClaimSpec`s in its module's `CLAIMS`: a check is a pure function of the flat
dictionary of numbers that the chapter's `claim_numbers(results)` extracts from a run, so a verdict
can be recomputed from recorded numbers alone (`course_lib.course.recorded`, `tests/course/test_recorded.py`).

Every claim has a kind (`KINDS`): a **finding** is a result a paper reports, tested in the miniature by a check that
could come out either way; a **hypothesis** is the course's own conjecture (when step credit helps, say), tested by
the same rule as a finding and tallied apart from the papers' findings; a **mechanism** check is exact or about the
implementation (an identity, a mask, a gradient equality, the course's own engine), and cannot fail by chance (its
`chance` says how likely it is to, computed from the recorded seeds: under 1%, or it is not a mechanism; an
integration check, that a real model trains through the course's engine, is one); a **design** check holds by how
the experiment is built (a planted signal, a count that cannot differ, a property of the warm start or of the
designed setting) and is shown, never counted; a **description** is a measurement that can come out either way by
chance and tests no paper's finding, shown with how often its check passed and never counted. A finding or
hypothesis that its deciding seeds cannot test (nothing to score, or a margin beyond the largest effect the
measurement can show) is **not testable**, with the reason computed from its numbers (`ClaimSpec.scored`,
`ClaimSpec.reach`), and counted neither way. A phenomenon that an inducer creates (a bonus, a planted base) is
`induced`.

A claim has two verdicts. This run's (`ClaimSpec.evaluate`) depends on the machine's floating-point kernels, since
training lands elsewhere when they differ; the course-level one (`lab.verdicts`) is decided on the recorded
seeds in `results/` and is the one the README, `docs/claims.md` and the notebooks' compared cells show. The claims
cell prints both (`report`; its output is not compared by nbval) and raises if a required claim fails this run,
which makes a chapter that stops reproducing its paper fail `pytest --nbval`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

CHECK_DECIMALS = 9
"""Checks see every number rounded to this many decimals. Success rates are multiples of 1/N and their
differences should compare exactly with a margin, but float subtraction leaves residues of about 1e-16
(0.905 - 0.855 = 0.05000000000000004, 0.85 - 0.80 = 0.04999999999999993), which would otherwise decide a
`>= 0.05` margin by rounding error. No check of the course uses a threshold finer than 1e-5."""


def settled(numbers: Mapping[str, float]) -> dict[str, float]:
    """`numbers` with every finite float rounded to `CHECK_DECIMALS` decimals (NaN, infinities and other values
    unchanged): what a claim's check sees."""
    return {
        key: round(value, CHECK_DECIMALS) if isinstance(value, float) and math.isfinite(value) else value
        for key, value in numbers.items()
    }


NOT_REPRODUCED = "not reproduced at this scale"
NOT_RUN_HERE = "not run here (its arms are read from results/)"
NOT_SUPPORTED = "not supported at this scale"
"""This run's status of a hypothesis whose check did not pass (the course's own conjecture is supported or not; it
reproduces no paper)."""
NOT_TESTABLE = "not testable"
"""The course-level status of a finding or hypothesis its deciding seeds cannot test (`lab.verdicts`), with the
reason."""
NOT_MET = "not met"
"""This run's status of a description whose check did not pass (a description reproduces nothing, so it cannot be
"not reproduced")."""
NOT_APPLICABLE = "not applicable"
"""The status of a claim that cannot apply to a run's setting (a fork on another environment), with the reason."""
KINDS = ("finding", "hypothesis", "mechanism", "design", "description")
"""What a claim is (see the module docstring); only findings are counted as a paper's results reproduced."""
TESTED_KINDS = ("finding", "hypothesis")
"""The kinds decided by the course's rule on their recorded seeds (paired effects, or every seed), and that can be
not testable."""
CHANCE_LIMIT = 0.01
"""A mechanism check may fail by chance (its `ClaimSpec.chance`, on the recorded seeds) with at most this
probability; above it, the check is a finding or a description, never a required mechanism."""
TOLERANCE = 1e-9
"""Slack of `at_least`: a margin met up to float rounding counts as met."""


def at_least(value: float, margin: float, tolerance: float = TOLERANCE) -> bool:
    """`value >= margin` up to `tolerance`, so that a tie at the margin cannot flip on rounding (0.905 - 0.855 is
    0.05000000000000004 and 0.85 - 0.80 is 0.04999999999999993). NaN is never at least anything."""
    return value >= margin - tolerance


@dataclass(frozen=True)
class Chance:
    """How likely a check is to fail by chance when what it checks is true."""

    probability: float
    how: str
    """The computation, in words and numbers (shown in `docs/claims.md`)."""


@dataclass(frozen=True)
class Setting:
    """A chapter's designed setting outside its main run: its own results file and claims (ids with a `d` suffix),
    decided by the same rule as the chapter's own (`lab.verdicts`), and the pre-registration it follows. The
    chapter whose command records it declares it (`SETTINGS`); each claim is shown in the chapter its id names
    (`chapter_of`)."""

    results: str
    """`results/<results>.json`."""
    claims: tuple[ClaimSpec, ...]
    document: str
    """The pre-registration, e.g. `docs/experiments/ch03-rare-success.md`."""


def chapter_of(claim_id: str) -> str:
    """The chapter a claim belongs to, from its id: `C1.3d` -> `ch01`, `C17.12d` -> `ch17`."""
    number = claim_id.removeprefix("C").split(".")[0]
    if not number.isdigit():
        raise ValueError(f"not a claim id: {claim_id!r}")
    return f"ch{int(number):02d}"


class ClaimFailed(AssertionError):
    """A required claim did not hold."""


@dataclass(frozen=True)
class Claim:
    id: str
    """Stable id, e.g. `C0.1`."""
    name: str
    """Short statement of what is checked."""
    passed: bool
    """Outcome of the check, computed from measured numbers."""
    required: bool = True
    """False for a claim already documented as not reproduced at this scale."""
    kind: str = "finding"
    """One of `KINDS`."""
    measured: bool = True
    """False when this run did not train the arms its check reads (a notebook that runs a subset of a chapter's
    arms live, to fit its minutes): no verdict this run, the recorded one stands."""
    not_applicable: str = ""
    """Why the claim cannot apply to this run's setting (e.g. a chapter forked onto an environment without the
    view the claim needs); empty when it applies. Such a claim is not checked and never fails."""

    @property
    def status(self) -> str:
        if self.not_applicable:
            return f"{NOT_APPLICABLE}: {self.not_applicable}"
        if not self.measured:
            return NOT_RUN_HERE
        if self.passed:
            return "PASS"
        if self.kind == "description":
            return NOT_MET
        if self.required:
            return "FAIL"
        return NOT_SUPPORTED if self.kind == "hypothesis" else NOT_REPRODUCED


@dataclass(frozen=True)
class ClaimSpec:
    """A claim as data: what the paper found, what the miniature checks, and the check itself."""

    id: str
    """Stable id, e.g. `C4.3a`."""
    statement: str
    """The miniature's test and its margin: exactly what `check` computes."""
    paper: str
    """The paper's own number or finding, with its source (short)."""
    value: str
    """Key, in the chapter's `claim_numbers`, of the claim's headline quantity (shown in tables)."""
    check: Callable[[Mapping[str, float]], bool]
    """Verdict from the chapter's numbers alone (no access to models or trajectories)."""
    required: bool = True
    """True only for a claim that holds on every recorded seed and on any machine (a mechanism check, or a finding
    with room to spare): the claims cell raises when it fails. The others report instead of failing."""
    kind: str = "finding"
    """`finding`, `hypothesis`, `mechanism`, `design` or `description` (`KINDS`)."""
    induced: bool = False
    """True when the phenomenon is created by an inducer of the experiment (a bonus, a planted signal)."""
    effects: tuple[tuple[str, float], ...] = ()
    """For a finding that compares arms: `(number key, margin)` of each paired difference (one per seed) that the
    course-level verdict is decided on, over the recorded seeds (`course_lib.lab.verdicts`). Empty: decided on the
    check passing on every recorded seed."""
    shown: tuple[tuple[str, str], ...] = ()
    """`(number key, label)` of numbers shown beside the verdict (mean and 95% t-interval over its seeds), deciding
    nothing: what an effect is made of, where a reader could mistake the effect for something else."""
    chance: Callable[[Sequence[Mapping[str, float]]], Chance] | None = None
    """For a mechanism check: the probability that its check fails by chance although what it checks is true,
    computed from the recorded seeds' numbers, with the computation in words (`course.chance`). Every mechanism
    declares it; under `CHANCE_LIMIT`, or the check is not a mechanism."""
    scored: str = ""
    """For a finding or hypothesis: the number (a count or a share) of what its check scores on a seed, e.g. the
    share of answers written in the tags that success reads. 0 on every deciding seed: nothing was scored, and the
    claim is not testable there (`lab.verdicts`)."""
    reach: Callable[[Mapping[str, float]], float] | None = None
    """For a finding or hypothesis decided on a paired effect with a margin above 0: numbers -> the largest effect
    the measurement can show on that seed (e.g. 1 minus a reference share). When its mean over the deciding seeds
    is below the margin, no result could meet the margin, and the claim is not testable (`lab.verdicts`)."""

    @property
    def label(self) -> str:
        """`finding`, `mechanism` or `design`, with `, induced` where the phenomenon is induced."""
        return self.kind + (", induced" if self.induced else "")

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"claim {self.id}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == "mechanism" and self.chance is None:
            raise ValueError(f"claim {self.id}: a mechanism says how likely its check is to fail by chance (`chance`)")
        if self.kind not in TESTED_KINDS and (self.effects or self.scored or self.reach):
            raise ValueError(f"claim {self.id}: only a finding or a hypothesis is decided on paired effects")

    def evaluate(self, numbers: Mapping[str, float], measured: bool = True) -> Claim:
        """Today's `Claim`: run the check on `numbers`, rounded first (`settled`). With `measured` False (a run that
        did not train the arms the claim compares: a notebook's live subset) the check is not run and the claim
        has no verdict this run; the recorded one stands."""
        if not measured:
            return Claim(self.id, self.statement, False, self.required, self.kind, measured=False)
        return Claim(self.id, self.statement, bool(self.check(settled(numbers))), self.required, self.kind)


ON_AVERAGE = " on average over the seeds (95% t-interval above 0)"
"""What "at least X" means in a statement decided on a paired difference (`lab.verdicts`): a mean over the recorded
seeds of at least X, and a 95% t-interval above 0 (not a lower bound at X)."""


def effect_at_least(claim_id: str, statement: str, paper: str, key: str, margin: float, **fields) -> ClaimSpec:
    """A finding decided on one paired difference, its margin written once: the check `key >= margin` on a seed
    (`at_least`), and the course-level verdict on the effect `(key, margin)` over the recorded seeds (a mean of at
    least `margin`, its 95% t-interval above 0). The statement gets `ON_AVERAGE` appended, unless it already says
    where its interval lies. `fields`: the other `ClaimSpec` fields (`required`, `induced`, `shown`, `kind`,
    `scored`, `reach`)."""
    said = statement if "95%" in statement else statement + ON_AVERAGE
    return ClaimSpec(claim_id, said, paper, key, lambda n: at_least(n[key], margin), effects=((key, margin),), **fields)


def positive_effects(claim_id: str, statement: str, paper: str, *keys: str, **fields) -> ClaimSpec:
    """A finding in the paper's direction with no margin: every paired difference of `keys` above 0 on a seed, and the
    course-level verdict on each effect `(key, 0.0)` over the recorded seeds; its headline number is the first key.
    `fields`: the other `ClaimSpec` fields (`required`, `induced`, `shown`)."""
    return ClaimSpec(
        claim_id, statement, paper, keys[0], lambda n: all(n[key] > 0 for key in keys),
        effects=tuple((key, 0.0) for key in keys), **fields,
    )  # fmt: skip


def hypothesis(claim_id: str, statement: str, paper: str, *keys: str, **fields) -> ClaimSpec:
    """The course's own conjecture, in the direction it predicts: `positive_effects` of kind `hypothesis` (tallied
    apart from the papers' findings), never required."""
    return positive_effects(claim_id, statement, paper, *keys, kind="hypothesis", required=False, **fields)


NONTRIVIAL_BASE = (0.05, 0.80)
"""The band of held-out success a base must lie in before any RL: below it most groups have equal (zero) rewards and
GRPO has no signal; above it there is little left to learn."""


def nontrivial_base(claim_id: str, subject: str = "the warm-started base", paper: str | None = None) -> ClaimSpec:
    """The design claim every RL chapter starts from: `subject` has non-trivial held-out success (`NONTRIVIAL_BASE`),
    read from the number `base_success`."""
    low, high = NONTRIVIAL_BASE
    return ClaimSpec(
        claim_id,
        f"{subject} has non-trivial held-out success ({low:.0%} to {high:.0%})",
        paper or "no paper: RL needs a base that sometimes succeeds (a group with equal rewards has no GRPO signal)",
        "base_success",
        lambda n: low <= n["base_success"] <= high,
        kind="design",
    )


def evaluate_all(
    specs: Sequence[ClaimSpec],
    numbers: Mapping[str, float],
    unmeasured: Collection[str] = (),
    not_applicable: Mapping[str, str] | None = None,
) -> list[Claim]:
    """Every spec evaluated on the same numbers, in order; the ids in `unmeasured` get no verdict this run (a
    chapter's `unmeasured_claims(results)` says which: those whose arms the run did not train), and the ids of
    `not_applicable` (id -> reason) are not checked at all: their setting is not this run's."""
    reasons = not_applicable or {}
    return [
        Claim(spec.id, spec.statement, False, spec.required, spec.kind, measured=False, not_applicable=reasons[spec.id])
        if spec.id in reasons
        else spec.evaluate(numbers, spec.id not in unmeasured)
        for spec in specs
    ]


def report(claims: list[Claim], course: Mapping[str, str] | None = None, origin: str | None = None) -> None:
    """Print `ID  kind  this run STATUS  name` per claim, with `course[id]` (the course-level verdict, e.g.
    `recorded 2 of 3 seeds: not reproduced at this scale`, from `verdicts.course_lines`) beside this run's
    result, after `origin` (`results.origin`: whether this run's machine is the one its seed was recorded on); raise
    `ClaimFailed` if a required claim failed this run."""
    if origin:
        print(origin)
    for claim in claims:
        beside = f"; {course[claim.id]}" if course and claim.id in course else ""
        if claim.not_applicable:  # the reason in parentheses, apart from the statement
            print(f"{claim.id:<6} {claim.kind:<9} this run {NOT_APPLICABLE} ({claim.not_applicable}){beside}: "
                  f"{claim.name}")  # fmt: skip
            continue
        print(f"{claim.id:<6} {claim.kind:<9} this run {claim.status}{beside}  {claim.name}")
    failed = [claim.id for claim in claims if claim.required and claim.measured and not claim.passed]
    if failed:
        raise ClaimFailed(f"required claims failed: {', '.join(failed)}")
