"""Course-level verdicts: one status per claim, decided on the seeds recorded in `results/`.

A single run's verdict depends on the machine (training lands elsewhere when the floating-point kernels differ), so
the course states each claim's status from its recorded seeds, by one rule, and every place that shows a status (the
notebooks' compared cells, `docs/claims.md`, the README's chapter map) is generated from here:

- a **finding that compares arms** (its `ClaimSpec.effects`) is decided on each paired difference over the recorded
  seeds: its 95% bootstrap interval (`stats.bootstrap_interval`) lies above zero (above the margin, for a margin
  below zero: "at most 2 points worse") and its mean reaches the margin the claim names. The interquartile mean, the
  probability of improvement and the smallest effect the seeds could detect with 80% power are shown beside it
  (Agarwal et al., 2021); a per-seed margin is shown, never used to decide;
- any other claim is decided on its check passing on every recorded seed;
- a **design** check is shown and never counted; a **mechanism** check is counted apart from the findings.

    python -m course_lib.verdicts            # print every chapter's verdicts and the totals
    python -m course_lib.verdicts --write    # regenerate docs/claims.md's tables and the README's claims column
    python -m course_lib.verdicts --check    # exit 1 if either has drifted from results/ (a test does this)
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from course_lib import designs, stats
from course_lib import results as recorded
from course_lib.claims import NOT_REPRODUCED, TOLERANCE, ClaimSpec, at_least

ROOT = Path(__file__).resolve().parent.parent
CLAIMS_DOC = ROOT / "docs" / "claims.md"
README = ROOT / "README.md"


@dataclass(frozen=True)
class Effect:
    """One paired difference over the recorded seeds."""

    key: str
    margin: float
    seeds: int
    mean: float
    low: float
    high: float
    iqm: float
    improvement: float
    """Probability of improvement: the share of seeds with a positive difference (ties half)."""
    detectable: float
    """The smallest mean difference these seeds detect with 80% power (`stats.detectable_effect`)."""

    @property
    def holds(self) -> bool:
        return self.seeds >= 2 and self.low > min(self.margin, 0.0) + TOLERANCE and at_least(self.mean, self.margin)

    def text(self) -> str:
        return (
            f"{self.key} {self.mean:+.3f} [{self.low:+.3f}, {self.high:+.3f}] over {self.seeds} seeds "
            f"(margin {self.margin:+.3f}; IQM {self.iqm:+.3f}, P(improvement) {self.improvement:.2f}, "
            f"detectable {self.detectable:.3f})"
        )


def effect(key: str, margin: float, values: Sequence[float]) -> Effect:
    mean, low, high = stats.bootstrap_interval(values)
    return Effect(key, margin, len(values), mean, low, high, stats.interquartile_mean(values),
                  stats.probability_of_improvement(values), stats.detectable_effect(values))  # fmt: skip


@dataclass(frozen=True)
class CourseVerdict:
    """A claim's status for the course, from its recorded seeds."""

    spec: ClaimSpec
    seeds: int
    passed: int
    """Recorded seeds on which the claim's own check passed."""
    effects: tuple[Effect, ...]

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def holds(self) -> bool:
        if self.effects:
            return all(e.holds for e in self.effects)
        return self.seeds > 0 and self.passed == self.seeds

    @property
    def status(self) -> str:
        if self.kind == "finding":
            return "reproduced" if self.holds else NOT_REPRODUCED
        if self.kind == "mechanism":
            return "holds" if self.holds else "fails"
        return "holds by design" if self.holds else "design not met"

    def short(self) -> str:
        """`recorded 2 of 3 seeds: not reproduced at this scale` (what the claims cell prints beside this run)."""
        return f"recorded {self.passed} of {self.seeds} seeds: {self.status}"

    def line(self) -> str:
        """One deterministic line: id, kind, status, seeds, and the effects it was decided on."""
        decided = "; ".join(e.text() for e in self.effects) if self.effects else "its check on every recorded seed"
        passed = f"check passed on {self.passed} of {self.seeds} seeds"
        return f"{self.id:<6} {self.spec.label:<18} {self.status} ({passed}; decided on {decided})"


def decide(spec: ClaimSpec, seed_numbers: Sequence[Mapping[str, float]]) -> CourseVerdict:
    """`spec`'s course-level verdict from each recorded seed's numbers (in seed order)."""
    passed = sum(spec.evaluate(numbers).passed for numbers in seed_numbers)
    effects = tuple(
        effect(key, margin, [numbers[key] for numbers in seed_numbers if key in numbers])
        for key, margin in spec.effects
    )
    return CourseVerdict(spec, len(seed_numbers), passed, effects)


def recorded_design(chapter: str) -> designs.Design | None:
    """`chapter`'s designed setting when it has one with deciding seeds recorded (`course_lib.designs`)."""
    design = designs.find(chapter)
    return design if design is not None and designs.recorded_design_seeds(design) else None


def chapter_specs(chapter: str) -> tuple[ClaimSpec, ...]:
    """The chapter's `CLAIMS`, then its designed setting's claim once deciding seeds are recorded."""
    specs = tuple(importlib.import_module(f"course_lib.chapters.{recorded.MODULES[chapter]}").CLAIMS)
    design = recorded_design(chapter)
    return specs + ((design.claim,) if design else ())


def chapter_verdicts(chapter: str, specs: Sequence[ClaimSpec] | None = None) -> list[CourseVerdict]:
    """Every claim of `chapter`, decided on `results/<chapter>.json`; its designed setting's claim (unless `specs`
    are given) on `results/<chapter>_design.json`."""
    seed_numbers = recorded.seed_numbers(recorded.load(chapter))
    if specs:
        return [decide(spec, seed_numbers) for spec in specs]
    design = recorded_design(chapter)
    main = [decide(spec, seed_numbers) for spec in chapter_specs(chapter) if not design or spec is not design.claim]
    return main + ([decide(design.claim, designs.recorded_design_seeds(design))] if design else [])


def course_lines(chapter: str, specs: Sequence[ClaimSpec] | None = None) -> dict[str, str]:
    """`{claim id: "recorded k of n seeds: status"}`, for `claims.report` beside this run's verdicts."""
    return {v.id: v.short() for v in chapter_verdicts(chapter, specs)}


def tally(verdicts: Sequence[CourseVerdict]) -> str:
    """`findings reproduced 1 of 3 (C7.1b); mechanism checks 2 of 2 hold; design (shown, not counted): C8.1`."""
    findings = [v for v in verdicts if v.kind == "finding"]
    reproduced = [v.id for v in findings if v.holds]
    mechanisms = [v for v in verdicts if v.kind == "mechanism"]
    designs = [v.id for v in verdicts if v.kind == "design"]
    parts = [f"findings reproduced {len(reproduced)} of {len(findings)}"
             + (f" ({', '.join(reproduced)})" if reproduced else "")]  # fmt: skip
    if mechanisms:
        parts.append(f"mechanism checks {sum(v.holds for v in mechanisms)} of {len(mechanisms)} hold")
    if designs:
        parts.append(f"design (shown, not counted): {', '.join(designs)}")
    return "; ".join(parts)


def print_chapter(chapter: str, specs: Sequence[ClaimSpec] | None = None) -> None:
    """The notebooks' compared cell: the course-level verdicts (deterministic: read from `results/`) and the tally."""
    verdicts = chapter_verdicts(chapter, specs)
    design = None if specs else recorded_design(chapter)
    sources = f"results/{chapter}.json" + (f" and results/{design.name}.json ({design.claim.id})" if design else "")
    print(f"course-level verdicts, from {sources}:")
    for verdict in verdicts:
        print(verdict.line())
    print(tally(verdicts))


# Generated documents -----------------------------------------------------------------------------------------
def _row_cells(line: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


TABLE_HEADER = "| id | kind | finding | check | status (recorded seeds; paired mean [95% interval]) |"


def claims_doc(text: str) -> str:
    """`docs/claims.md` with each chapter's claims table and tally line regenerated from `results/`. The prose, and
    each claim's "finding" cell (the paper's result in the course's words), are kept; kind, check, status and tally
    come from the chapter's `CLAIMS` and its recorded seeds."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        heading = re.match(r"## (\d\d) ", line)
        out.append(line)
        i += 1
        if not heading:
            continue
        chapter = f"ch{heading.group(1)}"
        # copy prose up to the table (dropping an earlier tally line), then rebuild tally and table
        while i < len(lines) and not lines[i].startswith("| id |"):
            if not lines[i].startswith("**Tally:**"):
                out.append(lines[i])
            i += 1
        findings: dict[str, str] = {}
        i += 2  # header and separator
        while i < len(lines) and lines[i].startswith("|"):
            cells = _row_cells(lines[i])
            findings[cells[0]] = cells[2] if len(cells) == 5 else cells[1]
            i += 1
        verdicts = {v.id: v for v in chapter_verdicts(chapter)}
        while out and out[-1] == "":
            out.pop()
        tallied = f"**Tally:** {tally(list(verdicts.values()))}."
        out += ["", tallied, "", TABLE_HEADER, "|---|---|---|---|---|"]
        for spec in chapter_specs(chapter):
            verdict = verdicts[spec.id]
            status = f"{verdict.status} (check passed on {verdict.passed} of {verdict.seeds} seeds"
            status += "".join(f"; {e.key} {e.mean:+.3f} [{e.low:+.3f}, {e.high:+.3f}]" for e in verdict.effects) + ")"
            cells = (spec.id, spec.label, findings.get(spec.id, spec.paper), spec.statement, status)
            out.append("| " + " | ".join(recorded.table_cell(c) for c in cells) + " |")
    return "\n".join(out)


TOTAL_START, TOTAL_END = "<!-- verdicts: total -->", "<!-- /verdicts -->"


def readme_claims(text: str) -> str:
    """The README with its chapter map's last column (claims) and the course total regenerated from `results/`."""
    totals = {"finding": [0, 0], "mechanism": [0, 0]}
    out = []
    for line in text.split("\n"):
        row = re.match(r"\| (\d\d) \|", line)
        if row and (ROOT / "results" / f"ch{row.group(1)}.json").exists():
            verdicts = chapter_verdicts(f"ch{row.group(1)}")
            for v in verdicts:
                if v.kind in totals:
                    totals[v.kind][0] += v.holds
                    totals[v.kind][1] += 1
            cells = _row_cells(line)
            design = recorded_design(f"ch{row.group(1)}")
            main = [v for v in verdicts if not design or v.spec is not design.claim]
            ids = main[0].id if len(main) == 1 else f"{main[0].id}-{main[-1].id}"
            ids += f", {design.claim.id}" if design else ""
            cells[-1] = f"{ids}: {tally(verdicts)}"
            line = "| " + " | ".join(cells) + " |"
        out.append(line)
    text = "\n".join(out)
    total = (
        f"{TOTAL_START}\n**Findings reproduced over the course: {totals['finding'][0]} of the {totals['finding'][1]} "
        f"papers' findings tested**; apart from them, {totals['mechanism'][0]} of {totals['mechanism'][1]} mechanism "
        f"checks hold (generated by `python -m course_lib.verdicts --write` from `results/`).\n{TOTAL_END}"
    )
    if TOTAL_START in text:
        return re.sub(re.escape(TOTAL_START) + ".*?" + re.escape(TOTAL_END), lambda _: total, text, flags=re.S)
    raise ValueError(f"README.md has no {TOTAL_START} ... {TOTAL_END} block for the course total")


def drift() -> list[str]:
    """The generated files that differ from what `results/` gives now."""
    stale = []
    for path, make in ((CLAIMS_DOC, claims_doc), (README, readme_claims)):
        text = path.read_text()
        if make(text) != text:
            stale.append(str(path.relative_to(ROOT)))
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Course-level verdicts of every claim, from results/.")
    parser.add_argument("--write", action="store_true", help="regenerate docs/claims.md and the README's claims column")
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/claims.md or the README has drifted")
    args = parser.parse_args(argv)
    if args.write:
        for path, make in ((CLAIMS_DOC, claims_doc), (README, readme_claims)):
            path.write_text(make(path.read_text()))
            print(f"wrote {path.relative_to(ROOT)}")
        return 0
    if args.check:
        stale = drift()
        for name in stale:
            print(f"{name} differs from results/: run `python -m course_lib.verdicts --write`")
        return 1 if stale else 0
    for chapter in recorded.MODULES:
        print_chapter(chapter)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
