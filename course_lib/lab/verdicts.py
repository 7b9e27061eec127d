"""Course-level verdicts: one status per claim, decided on the seeds recorded in `results/`.

A single run's verdict depends on the machine (training lands elsewhere when the floating-point kernels differ), so
the course states each claim's status from its recorded seeds, by one rule, and every place that shows a status (the
notebooks' compared cells and takeaways, `docs/claims.md`, the README's chapter map) is generated from here:

- a **finding that compares arms** (its `ClaimSpec.effects`) is decided on each paired difference over the recorded
  seeds: reproduced when its 95% Student-t interval (`stats.t_interval`, whose coverage is exact for normal data at
  any number of seeds) lies above zero (above the margin, for a margin below zero: "at most 2 points worse") and its
  mean reaches the margin the claim names, on at least `MIN_SEEDS` seeds. Beside it, describing and never deciding:
  the percentile bootstrap interval, the interquartile mean, the probability of improvement, the exact sign-flip p
  and the smallest effect those seeds detect with 80% power (Agarwal et al., 2021); a per-seed margin is shown too;
- any other finding is decided on its check passing on every recorded seed, again on at least `MIN_SEEDS` seeds
  (three passes in a row happen one time in eight for a coin). A seed that failed decides it at once: no further
  seed can make it pass on every seed;
- below `MIN_SEEDS` a finding is **undecided**, never reproduced;
- a finding its deciding seeds cannot test is **not testable**, counted neither reproduced nor not reproduced, with
  the reason computed from its numbers: nothing was scored on any deciding seed (its `scored` number is 0 on all,
  or its effect could not be measured on any), or its margin is out of reach by arithmetic (the mean over the
  seeds of the largest effect the measurement can show, its `reach`, lies below the margin);
- a **hypothesis** (the course's own conjecture, not a paper's result) is decided exactly as a finding, and its
  status is supported or not supported; it is tallied apart from the papers' findings;
- a **mechanism** check (required, and unable to fail by chance: its `chance` is computed from the recorded seeds
  and printed) holds when it passed on every recorded seed; a **design** check is shown and never counted; a
  **description** is shown with how often its check passed, and never counted.

The seeds of a chapter's confirmation (`results/<chapter>_confirmation.json`, fresh seeds run after a claim was
restated) count toward its verdicts; a designed setting (`claims.Setting`, `course.designs`) is decided on its own
file by the same rule. A record from a tree with uncommitted changes is flagged on its claim's line.

    python -m course_lib.lab.verdicts            # print every chapter's verdicts and the totals
    python -m course_lib.lab.verdicts --write    # regenerate docs/claims.md's tables, the README's findings cells
    python -m course_lib.lab.verdicts --check    # exit 1 if either has drifted from results/ (a test does this)

The generated documents are written by `course_lib.lab.verdict_docs`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from course_lib import chapters
from course_lib.course import designs, recorded
from course_lib.course.claims import (
    NOT_APPLICABLE,
    NOT_REPRODUCED,
    NOT_SUPPORTED,
    NOT_TESTABLE,
    TESTED_KINDS,
    TOLERANCE,
    Chance,
    ClaimSpec,
    Setting,
    at_least,
    chapter_of,
)
from course_lib.diagnostics import stats

ROOT = Path(__file__).resolve().parents[2]
MIN_SEEDS = 5
"""No finding is reproduced on fewer deciding seeds (claims.md)."""
APPENDICES = ("ch13", "ch14", "ch15")
"""Chapters that check the course's own engines and a trainer's pitfalls (TRL and verl, a model of your own, the
pitfalls lab): no paper's finding is theirs to reproduce, so their claims are mechanisms, designs and descriptions."""
UNDECIDED = "undecided"


def seed_count(n: int) -> str:
    """`1 seed`, `5 seeds`."""
    return f"{n} seed{'s' * (n != 1)}"


def mean_and_interval(mean: float, low: float, high: float, seeds: int) -> str:
    """`+0.061 [+0.032, +0.090]`: a mean and its 95% t-interval; `+0.312 on 1 seed, no interval yet` where there is
    one seed, since a t-interval needs two (one seed's number is shown alone, never as an interval)."""
    if seeds == 1:
        return f"{mean:+.3f} on 1 seed, no interval yet"
    return f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]"


@dataclass(frozen=True)
class Effect:
    """One paired difference over the recorded seeds."""

    key: str
    margin: float
    seeds: int
    mean: float
    low: float
    high: float
    """The 95% Student-t interval: what decides."""
    bootstrap_low: float
    bootstrap_high: float
    iqm: float
    improvement: float
    """Probability of improvement: the share of seeds with a positive difference (ties half)."""
    sign_flip: float
    """The exact two-sided sign-flip p-value of a zero mean (`stats.sign_flip_p`)."""
    detectable: float
    """The smallest mean difference these seeds detect with 80% power (`stats.detectable_effect`, with t)."""
    unmeasured: int = 0
    """Recorded seeds on which the difference could not be measured (NaN: e.g. a premise with nothing to score)."""

    @property
    def decided(self) -> bool:
        """On at least `MIN_SEEDS` measured seeds, or unmeasurable on at least as many (then it does not hold)."""
        return self.seeds >= MIN_SEEDS or (self.seeds == 0 and self.unmeasured >= MIN_SEEDS)

    @property
    def holds(self) -> bool:
        return (
            self.seeds >= MIN_SEEDS
            and self.low > min(self.margin, 0.0) + TOLERANCE
            and at_least(self.mean, self.margin)
        )

    def bracket(self) -> str:
        """`+0.061 [+0.032, +0.090]`, or `+0.312 on 1 seed, no interval yet` (`mean_and_interval`)."""
        return mean_and_interval(self.mean, self.low, self.high, self.seeds)

    def interval_text(self) -> str:
        """`+0.061 [+0.032, +0.090] over 20 seeds`: the mean and its 95% t-interval."""
        if self.seeds == 0 and self.unmeasured:
            return f"not measurable on any of {self.unmeasured} seeds"
        unmeasured = f" ({self.unmeasured} more not measurable)" if self.unmeasured else ""
        over = "" if self.seeds == 1 else f" over {self.seeds} seeds"
        return f"{self.bracket()}{over}{unmeasured}"

    def text(self) -> str:
        if (self.seeds == 0 and self.unmeasured) or self.seeds == 1:
            return f"{self.key} {self.interval_text()} (margin {self.margin:+.3f})"
        return (
            f"{self.key} {self.interval_text()} (95% t-interval; margin {self.margin:+.3f}; described by: bootstrap "
            f"[{self.bootstrap_low:+.3f}, {self.bootstrap_high:+.3f}], IQM {self.iqm:+.3f}, P(improvement) "
            f"{self.improvement:.2f}, sign-flip p {self.sign_flip:.3g}, detectable {self.detectable:.3f})"
        )


def effect(key: str, margin: float, values: Sequence[float]) -> Effect:
    """`values`' paired difference decided and described (`Effect`); NaN values (seeds on which it could not be
    measured) are counted apart and left out of every statistic."""
    unmeasured = sum(math.isnan(v) for v in values)
    values = [v for v in values if not math.isnan(v)]
    if not values:
        nan = float("nan")
        return Effect(key, margin, 0, nan, nan, nan, nan, nan, nan, nan, 1.0, nan, unmeasured)
    mean, low, high = stats.t_interval(values)
    _, boot_low, boot_high = stats.bootstrap_interval(values)
    return Effect(key, margin, len(values), mean, low, high, boot_low, boot_high, stats.interquartile_mean(values),
                  stats.probability_of_improvement(values), stats.sign_flip_p(values),
                  stats.detectable_effect(values), unmeasured)  # fmt: skip


@dataclass(frozen=True)
class CourseVerdict:
    """A claim's status for the course, from its recorded seeds."""

    spec: ClaimSpec
    seeds: int
    passed: int
    """Recorded seeds on which the claim's own check passed."""
    effects: tuple[Effect, ...]
    chance: Chance | None = None
    """For a mechanism: how likely its check is to fail by chance, computed from the recorded seeds."""
    dirty: int = 0
    """Recorded seeds whose code had uncommitted changes (their provenance's `git_dirty`)."""
    files: tuple[str, ...] = ()
    """The results files the seeds came from, e.g. `("ch07", "ch07_confirmation")`."""
    shown: tuple[tuple[str, str], ...] = ()
    """`(label, "mean [low, high] over n seeds")` of the spec's `shown` numbers, beside the verdict: deciding
    nothing."""
    untestable: str = ""
    """Why its deciding seeds cannot test it (`untestable`), computed from their numbers; empty when they can."""
    not_applicable: str = ""
    """Why it does not apply, when every recorded seed said so (a fork's record: `not_applicable_reasons`)."""

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def source(self) -> str:
        """`ch07.json + ch07_confirmation.json`."""
        return " + ".join(f"{name}.json" for name in self.files)

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def every_seed(self) -> bool:
        return self.seeds > 0 and self.passed == self.seeds

    @property
    def tested(self) -> bool:
        """A finding or hypothesis its deciding seeds can test (counted in its kind's tally)."""
        return self.kind in TESTED_KINDS and not self.untestable and not self.not_applicable

    @property
    def decided(self) -> bool:
        """Whether a finding's status is settled: on at least `MIN_SEEDS` seeds, or (decided on every seed) by a
        seed that failed, which no further seed can undo. A claim found not testable, or not applicable, is settled
        as such."""
        if self.untestable or self.not_applicable:
            return True
        if self.effects:
            return all(e.decided for e in self.effects)
        return self.seeds >= MIN_SEEDS or (self.seeds > 0 and not self.every_seed)

    @property
    def holds(self) -> bool:
        """Reproduced (a finding), supported (a hypothesis), holds (a mechanism or design); a description never
        counts, nor does a claim that is not testable or not applicable."""
        if self.not_applicable:
            return False
        if self.kind in TESTED_KINDS:
            if not self.decided or self.untestable:
                return False
            return all(e.holds for e in self.effects) if self.effects else self.every_seed
        return self.every_seed and self.kind != "description"

    @property
    def status(self) -> str:
        if self.not_applicable:
            return NOT_APPLICABLE
        if self.kind in TESTED_KINDS:
            if self.untestable:
                return NOT_TESTABLE
            if not self.decided:
                return f"{UNDECIDED} ({seed_count(self.seeds)})"
            if self.kind == "hypothesis":
                return "supported" if self.holds else NOT_SUPPORTED
            return "reproduced" if self.holds else NOT_REPRODUCED
        if self.kind == "mechanism":
            return "holds" if self.holds else "fails"
        if self.kind == "design":
            return "holds by design" if self.holds else "design not met"
        return "shown"

    def short(self) -> str:
        """`recorded 2 of 3 seeds: not reproduced at this scale` (what the claims cell prints beside this run)."""
        return f"recorded {self.passed} of {seed_count(self.seeds)}: {self.status}"

    def basis(self) -> str:
        """What the status was decided on, in one line (without the id and status)."""
        if self.not_applicable:
            return f"on all {self.seeds} recorded seeds: {self.not_applicable}"
        passed = f"check passed on {self.passed} of {seed_count(self.seeds)}"
        if self.dirty:
            passed += f", {self.dirty} of them recorded from uncommitted code"
        beside = "".join(f"; shown: {label} {text}" for label, text in self.shown)
        if self.untestable:
            passed += f"; {self.untestable}"
        if self.effects:
            return f"{passed}; decided on " + "; ".join(e.text() for e in self.effects) + beside
        if self.kind in TESTED_KINDS:
            return f"{passed}; decided on its check on every recorded seed (at least {MIN_SEEDS})"
        if self.chance is not None:
            return f"{passed}; P(fails by chance) {self.chance.probability:.2g}: {self.chance.how}{beside}"
        return passed + beside

    def line(self, statistics: bool = True) -> str:
        """One deterministic line: id, kind, status, seeds, and the basis of the decision; without `statistics`, only
        the checks passed and what decided it (the mean, its interval and the margin), as a first lesson shows it."""
        if statistics:
            return f"{self.id:<6} {self.spec.label:<18} {self.status} ({self.basis()})"
        basis = f"check passed on {self.passed} of {seed_count(self.seeds)}"
        if self.effects:
            basis += "; " + "; ".join(f"{e.key} {e.interval_text()}, margin {e.margin:+.3f}" for e in self.effects)
        return f"{self.id:<6} {self.spec.label:<18} {self.status} ({basis})"

    def phrase(self) -> str:
        """The status in a sentence of a takeaway: `**C7.1: reproduced** (gigpo_minus_grpo +0.061 [+0.032, +0.090]
        over 20 seeds, 95% t-interval)`."""
        if self.effects:
            detail = "; ".join(
                f"{e.key} {e.interval_text()}" + (", 95% t-interval" if e.seeds > 1 else "") for e in self.effects
            )
        else:
            detail = f"its check passed on {self.passed} of {seed_count(self.seeds)}"
        detail += "".join(f"; beside it, {label} {text}" for label, text in self.shown)
        if self.untestable:
            detail = f"{self.untestable}; {detail}"
        return f"**{self.id}: {self.status}** ({detail})"


def decide(
    spec: ClaimSpec,
    seed_numbers: Sequence[Mapping[str, float]],
    dirty: int = 0,
    files: Sequence[str] = (),
    not_applicable: str = "",
) -> CourseVerdict:
    """`spec`'s course-level verdict from each recorded seed's numbers (in seed order); `not_applicable`, the reason
    every seed gave for not checking it (a fork's record), makes it not applicable rather than failed."""
    if not_applicable:
        return CourseVerdict(spec, len(seed_numbers), 0, (), None, dirty, tuple(files), (), "", not_applicable)
    passed = sum(spec.evaluate(numbers).passed for numbers in seed_numbers)
    effects = tuple(
        effect(key, margin, [numbers[key] for numbers in seed_numbers if key in numbers])
        for key, margin in spec.effects
    )
    chance = spec.chance(seed_numbers) if spec.chance is not None and seed_numbers else None
    shown = tuple((label, interval_text([n[key] for n in seed_numbers if key in n])) for key, label in spec.shown)
    reason = untestable(spec, seed_numbers, effects)
    return CourseVerdict(spec, len(seed_numbers), passed, effects, chance, dirty, tuple(files), shown, reason)


def untestable(spec: ClaimSpec, seed_numbers: Sequence[Mapping[str, float]], effects: Sequence[Effect]) -> str:
    """Why `spec`'s deciding seeds cannot test it, computed from their numbers, or "" when they can (and for a
    mechanism, design or description, or below `MIN_SEEDS` seeds, where the question does not arise): nothing
    scored (its `scored` number is 0 on every seed, or no effect could be measured on any), or a margin out of
    reach (the mean of its `reach` over the seeds, the largest effect the measurement can show, is below it)."""
    n = len(seed_numbers)
    if spec.kind not in TESTED_KINDS or n < MIN_SEEDS:
        return ""
    if spec.scored and all(numbers.get(spec.scored, 0.0) == 0 for numbers in seed_numbers):
        return f"nothing to score: {spec.scored} is 0 on all {n} seeds"
    unmeasurable = [e.key for e in effects if e.seeds == 0]
    if effects and len(unmeasurable) == len(effects):
        return f"nothing to score: {', '.join(unmeasurable)} could not be measured on any of {n} seeds"
    if spec.reach is not None:
        largest = sum(spec.reach(numbers) for numbers in seed_numbers) / n
        beyond = [e for e in effects if e.margin > 0 and not at_least(largest, e.margin)]
        if beyond:
            return (f"margin out of reach: the largest effect the measurement can show is {largest:+.3f} on average "
                    f"over {n} seeds, below the margin {beyond[0].margin:+.3f}")  # fmt: skip
    return ""


def interval_text(values: Sequence[float]) -> str:
    """`+0.061 [+0.032, +0.090] over 20 seeds` (mean and 95% t-interval), or `not recorded`."""
    if not values:
        return "not recorded"
    over = "" if len(values) == 1 else f" over {len(values)} seeds"
    return mean_and_interval(*stats.t_interval(values), len(values)) + over


def recorded_design(chapter: str) -> designs.Design | None:
    """`chapter`'s designed setting when it has one with deciding seeds recorded (`chapters.design`)."""
    design = chapters.design(chapter)
    return design if design is not None and designs.recorded_design_seeds(design) else None


def settings(chapter: str) -> list[Setting]:
    """`chapter`'s designed settings with recorded seeds: the `SETTINGS` of every chapter module (the chapter whose
    command records a setting declares it) narrowed to the claims whose ids name `chapter` (`claims.chapter_of`), and
    its `course_lib.course.designs` design."""
    found = []
    for key in chapters.modules():
        for setting in getattr(chapters.module(key), "SETTINGS", ()):
            own = tuple(spec for spec in setting.claims if chapter_of(spec.id) == chapter)
            if own and recorded.path(setting.results).exists():
                found.append(dataclasses.replace(setting, claims=own))
    design = recorded_design(chapter)
    if design is not None:
        found.append(Setting(design.name, (design.claim,), design.document))
    return found


def chapter_specs(chapter: str) -> tuple[ClaimSpec, ...]:
    """The chapter's `CLAIMS`, then its designed settings' claims once their seeds are recorded."""
    specs = tuple(chapters.module(chapter).CLAIMS)
    return specs + tuple(spec for setting in settings(chapter) for spec in setting.claims)


def confirmation(chapter: str) -> str | None:
    """`<chapter>_confirmation` when the chapter has a confirmation on fresh seeds recorded, else None."""
    name = f"{chapter}_confirmation"
    return name if name in recorded.CONFIRMATIONS and recorded.path(name).exists() else None


def recorded_seeds(*names: str) -> tuple[list[dict[str, float]], int]:
    """Every recorded seed's numbers of the results files `names` (each file's seeds in seed order, files in turn),
    and how many of them were recorded from uncommitted code."""
    numbers, dirty = [], 0
    for name in names:
        loaded = recorded.load(name)
        for _, record in sorted(loaded["seeds"].items(), key=lambda item: int(item[0])):
            numbers.append(dict(record["numbers"]))
            dirty += bool(record.get("provenance", {}).get("git_dirty"))
    return numbers, dirty


def not_applicable_reasons(*names: str) -> dict[str, str]:
    """`{claim id: reason}` for the claims that every recorded seed of the results files `names` marked not
    applicable (a fork's record: `recorded.make_record`'s `not_applicable`), the first seed's reason."""
    marked = [
        dict(record.get("not_applicable", {})) for name in names for record in recorded.load(name)["seeds"].values()
    ]
    if not marked:
        return {}
    common = set(marked[0]).intersection(*marked[1:])
    return {claim: marked[0][claim] for claim in marked[0] if claim in common}


def chapter_verdicts(chapter: str, specs: Sequence[ClaimSpec] | None = None) -> list[CourseVerdict]:
    """Every claim of `chapter`: its own on `results/<chapter>.json` plus its confirmation's seeds (not applicable
    where every seed said so: a fork's record); each designed setting's (unless `specs` are given) on that setting's
    file."""
    names = (chapter,) + ((confirmation(chapter),) if confirmation(chapter) else ())
    numbers, dirty = recorded_seeds(*names)
    own = specs if specs else chapters.module(chapter).CLAIMS
    reasons = not_applicable_reasons(*names)
    verdicts = [decide(spec, numbers, dirty, names, reasons.get(spec.id, "")) for spec in own]
    for setting in () if specs else settings(chapter):
        numbers, dirty = recorded_seeds(setting.results)
        verdicts += [decide(spec, numbers, dirty, (setting.results,)) for spec in setting.claims]
    return verdicts


def deciding_numbers(chapter: str, claim_id: str) -> list[dict[str, float]]:
    """The recorded numbers of every seed that decides `claim_id` of `chapter` (its results files, seeds in order):
    what a figure of that claim plots, so that the figure's seeds are the verdict's."""
    verdict = next((v for v in chapter_verdicts(chapter) if v.id == claim_id), None)
    if verdict is None:
        raise KeyError(f"{chapter} has no claim {claim_id}")
    return recorded_seeds(*verdict.files)[0]


def course_lines(chapter: str, specs: Sequence[ClaimSpec] | None = None) -> dict[str, str]:
    """`{claim id: "recorded k of n seeds: status"}`, for `claims.report` beside this run's verdicts."""
    return {v.id: v.short() for v in chapter_verdicts(chapter, specs)}


def tally(verdicts: Sequence[CourseVerdict]) -> str:
    """`findings reproduced 1 of 3 (C7.1); undecided C8.2 (3 seeds); not testable: C16.4; the course's hypotheses
    supported 1 of 2 (C17.12d); mechanism checks 2 of 2 hold; design (shown, not counted): C8.1; described (not
    counted): C14.4`. A claim that is not testable is left out of its kind's count."""
    findings = [v for v in verdicts if v.kind == "finding" and v.tested]
    reproduced = [v.id for v in findings if v.holds]
    parts = [f"findings reproduced {len(reproduced)} of {len(findings)}"
             + (f" ({', '.join(reproduced)})" if reproduced else "")]  # fmt: skip
    undecided = [f"{v.id} ({seed_count(v.seeds)})" for v in verdicts if v.tested and not v.decided]
    if undecided:
        parts.append(f"undecided: {', '.join(undecided)}")
    untestable = [v.id for v in verdicts if v.untestable]
    if untestable:
        parts.append(f"not testable (counted neither way): {', '.join(untestable)}")
    inapplicable = [v.id for v in verdicts if v.not_applicable]
    if inapplicable:
        parts.append(f"not applicable (counted neither way): {', '.join(inapplicable)}")
    hypotheses = [v for v in verdicts if v.kind == "hypothesis" and v.tested]
    if hypotheses:
        supported = [v.id for v in hypotheses if v.holds]
        parts.append(f"the course's hypotheses supported {len(supported)} of {len(hypotheses)}"
                     + (f" ({', '.join(supported)})" if supported else ""))  # fmt: skip
    mechanisms = [v for v in verdicts if v.kind == "mechanism" and not v.not_applicable]
    if mechanisms:
        parts.append(f"mechanism checks {sum(v.holds for v in mechanisms)} of {len(mechanisms)} hold")
    for kind, label in (("design", "design (shown, not counted)"), ("description", "described (not counted)")):
        ids = [v.id for v in verdicts if v.kind == kind]
        if ids:
            parts.append(f"{label}: {', '.join(ids)}")
    return "; ".join(parts)


def print_chapter(chapter: str, specs: Sequence[ClaimSpec] | None = None, statistics: bool = True) -> None:
    """The notebooks' compared cell: the course-level verdicts (deterministic: read from `results/`) and the tally.
    `statistics=False` leaves out what describes a decision beyond its interval and margin (bootstrap, IQM,
    probability of improvement, sign-flip p, detectable effect, chance of a failed check): chapter 00 explains them in
    a collapsed box instead of opening with them."""
    verdicts = chapter_verdicts(chapter, specs)
    sources = list(dict.fromkeys(v.source for v in verdicts))
    folder = recorded.RESULTS_DIR  # a fork's folder while `recorded.recording_into` it, else the course's results/
    shown = folder.relative_to(recorded.ROOT) if folder.resolve().is_relative_to(recorded.ROOT.resolve()) else folder
    print(f"course-level verdicts (95% t-interval, at least {MIN_SEEDS} seeds), from {shown}/ {', '.join(sources)}:")
    for verdict in verdicts:
        print(verdict.line(statistics))
    print(tally(verdicts))


def beside(rows: Sequence[Sequence[str]], headers: Sequence[str], gated: Mapping[str, str] | None = None) -> str:
    """A Markdown table of claims' statuses side by side: each row a label and claim ids (each read in the chapter
    its id names, `claims.chapter_of`; "" for none), each cell its status and what decided it in short (a
    comparison's mean and interval); a claim whose setting has no recorded seeds yet says so, with the command that
    records it. `gated` maps a claim that is run only where another holds (a comparison and its premise) to that
    other: where the first has no recorded seeds and the second is decided and does not hold, the cell says it is not
    run, and why, instead of giving the command."""
    found: dict[str, dict[str, CourseVerdict]] = {}

    def verdicts_of(claim_id: str) -> dict[str, CourseVerdict]:
        chapter = chapter_of(claim_id)
        return found.setdefault(chapter, {v.id: v for v in chapter_verdicts(chapter)})

    def cell(claim_id: str) -> str:
        if not claim_id:
            return "-"
        known = verdicts_of(claim_id)
        if claim_id not in known:
            gate = (gated or {}).get(claim_id)
            premise = verdicts_of(gate).get(gate) if gate else None
            if premise is not None and premise.decided and not premise.holds:
                return f"{claim_id}: not run, since {gate} does not hold ({premise.status})"
            setting = next((s for key in chapters.modules() for s in getattr(chapters.module(key), "SETTINGS", ())
                            if any(spec.id == claim_id for spec in s.claims)), None)  # fmt: skip
            run = f": `{recorded.record_command(setting.results)}`" if setting else ""
            return f"{claim_id}: not recorded yet{run}"
        verdict = known[claim_id]
        detail = "; ".join(e.interval_text() for e in verdict.effects)
        return f"{claim_id}: {verdict.status}" + (f" ({detail})" if detail else "")

    lines = ["| " + " | ".join(headers) + " |", "|---" * len(headers) + "|"]
    lines += ["| " + " | ".join([row[0], *(cell(claim_id) for claim_id in row[1:])]) + " |" for row in rows]
    return "\n".join(lines)


# Takeaways: a notebook's prose with every status and multi-seed number filled in from here ------------------------
PLACEHOLDER = re.compile(r"\{(C\d+\.\d+[a-z]?)(?::([A-Za-z0-9_]+))?(?::(range|mean))?\}")


def fill(chapter: str, template: str) -> str:
    """`template` with `{C7.1}` replaced by the claim's status phrase (`CourseVerdict.phrase`), `{C7.1:key}` by the
    mean and 95% t-interval of the number `key` over the seeds that decide C7.1, `{C7.1:key:range}` by its range
    over them (`0.510 to 0.517`, or `0 on every seed`) and `{C7.1:key:mean}` by its mean alone. A KeyError names an
    id the chapter does not have or a number its seeds did not record."""
    by_id = {v.id: v for v in chapter_verdicts(chapter)}

    def replace(match: re.Match) -> str:
        claim, key, form = match.group(1), match.group(2), match.group(3)
        if claim not in by_id:
            raise KeyError(f"{chapter} has no claim {claim}; its claims: {', '.join(by_id)}")
        if key is None:
            return by_id[claim].phrase()
        values = [n[key] for n in recorded_seeds(*by_id[claim].files)[0] if key in n]
        if not values:
            raise KeyError(f"no seed deciding {claim} recorded the number {key!r}")
        if form == "range":
            low, high = recorded.format_number(min(values)), recorded.format_number(max(values))
            return f"{low} on every seed" if low == high else f"{low} to {high}"
        if form == "mean":
            return recorded.format_number(sum(values) / len(values))
        return interval_text(values)

    return PLACEHOLDER.sub(replace, template)


def takeaways(chapter: str, template: str):
    """A notebook's key takeaways as Markdown, with each `{C7.1}` and `{C7.1:key}` filled from `results/` (`fill`):
    no status or multi-seed number in a lesson is typed by hand, and nbval compares the rendered text."""
    from IPython.display import Markdown

    return Markdown(fill(chapter, template.strip()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Course-level verdicts of every claim, from results/.")
    parser.add_argument(
        "--write", action="store_true", help="regenerate docs/claims.md and the README's findings column"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/claims.md or the README has drifted")
    args = parser.parse_args(argv)
    from course_lib.lab import verdict_docs  # the documents are generated from this module's verdicts

    if args.write:
        for path, make in verdict_docs.GENERATED:
            path.write_text(make(path.read_text()))
            print(f"wrote {path.relative_to(ROOT)}")
        return 0
    if args.check:
        stale = verdict_docs.drift()
        for name in stale:
            print(f"{name} differs from results/: run `python -m course_lib.lab.verdicts --write`")
        return 1 if stale else 0
    for chapter in chapters.modules():
        print_chapter(chapter)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
