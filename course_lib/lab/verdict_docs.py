"""The documents generated from the course-level verdicts (`lab.verdicts`): `docs/claims.md`'s tables and tally
lines, and the README chapter map's findings column with the course total under it.

    python -m course_lib.lab.verdicts --write    # regenerate both from results/
    python -m course_lib.lab.verdicts --check    # exit 1 if either has drifted (a test does this)
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from course_lib.course import recorded
from course_lib.course.claims import TESTED_KINDS
from course_lib.lab.verdicts import MIN_SEEDS, ROOT, CourseVerdict, chapter_specs, chapter_verdicts, seed_count, tally

CLAIMS_DOC = ROOT / "docs" / "claims.md"
README = ROOT / "README.md"


def _row_cells(line: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


TABLE_HEADER = "| id | kind | finding | check | status (recorded seeds; paired mean [95% t-interval]) |"


def status_cell(verdict: CourseVerdict) -> str:
    """The status column of `docs/claims.md`: status, seeds, why it is not testable (if so), effects, and a
    mechanism's chance of failing."""
    text = f"{verdict.status} (check passed on {verdict.passed} of {seed_count(verdict.seeds)}"
    if verdict.dirty:
        text += f", {verdict.dirty} recorded from uncommitted code"
    if verdict.untestable:
        text += f"; {verdict.untestable}"
    text += "".join(f"; {e.key} {e.bracket()}" for e in verdict.effects if e.seeds)
    text += "".join(f"; shown: {label} {value}" for label, value in verdict.shown)
    if verdict.chance is not None:
        text += f"; P(fails by chance) {verdict.chance.probability:.2g}"
    return text + ")"


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
            cells = (spec.id, spec.label, findings.get(spec.id, spec.paper), spec.statement, status_cell(verdict))
            out.append("| " + " | ".join(recorded.table_cell(c) for c in cells) + " |")
    return "\n".join(out)


TOTAL_START, TOTAL_END = "<!-- verdicts: total -->", "<!-- /verdicts -->"


FINDINGS_COLUMN = "findings reproduced"
"""The header of the README chapter map's column that `readme_claims` writes."""


def findings_cell(verdicts: Sequence[CourseVerdict]) -> str:
    """The README chapter map's short cell: `2 of 2`, `0 of 5 (1 undecided)`, `0 of 1 (3 not testable)`, with the
    course's own hypotheses apart (`1 of 3; hypotheses 2 of 3 supported`), or for a chapter that tests no finding
    `none tested (mechanism checks 5 of 5 hold)`; `docs/claims.md`'s tally line gives the ids."""
    findings = [v for v in verdicts if v.kind == "finding"]
    tested = [v for v in findings if v.tested]
    hypotheses = [v for v in verdicts if v.kind == "hypothesis" and v.tested]
    apart = f"; hypotheses {sum(v.holds for v in hypotheses)} of {len(hypotheses)} supported" if hypotheses else ""
    if findings:
        undecided, untestable = sum(not v.decided for v in tested), len(findings) - len(tested)
        notes = [f"{undecided} undecided"] * bool(undecided) + [f"{untestable} not testable"] * bool(untestable)
        return f"{sum(v.holds for v in tested)} of {len(tested)}" + (f" ({', '.join(notes)})" if notes else "") + apart
    mechanisms = [v for v in verdicts if v.kind == "mechanism"]
    return f"none tested (mechanism checks {sum(v.holds for v in mechanisms)} of {len(mechanisms)} hold)" + apart


def readme_claims(text: str) -> str:
    """The README with its chapter map's findings column (`FINDINGS_COLUMN`, found by its header) and the course
    total regenerated from `results/`."""
    from course_lib.lab.study_time import fill_column

    # per kind: [holds, counted, undecided, not testable]
    totals = {kind: [0, 0, 0, 0] for kind in ("finding", "hypothesis", "mechanism")}

    def cell(row: dict[str, str]) -> str | None:
        chapter = f"ch{row.get('#', '')}"
        if not (ROOT / "results" / f"{chapter}.json").exists():
            return None
        verdicts = chapter_verdicts(chapter)
        for v in verdicts:
            if v.kind in totals:
                count = totals[v.kind]
                count[3] += bool(v.untestable)
                if not v.untestable:
                    count[0] += v.holds
                    count[1] += 1
                    count[2] += v.kind in TESTED_KINDS and not v.decided
        return findings_cell(verdicts)

    text = fill_column(text, FINDINGS_COLUMN, cell)
    findings, hypotheses, mechanisms = totals["finding"], totals["hypothesis"], totals["mechanism"]
    notes = [f"{findings[2]} undecided on fewer than {MIN_SEEDS} seeds"] if findings[2] else []
    notes += [f"{findings[3]} more not testable, counted neither way"] if findings[3] else []
    aside = f" ({'; '.join(notes)})" if notes else ""
    total = (
        f"{TOTAL_START}\n**Findings reproduced over the course: {findings[0]} of the {findings[1]} papers' findings "
        f"tested**{aside}; apart from them, the course's own hypotheses: "
        f"{hypotheses[0]} of {hypotheses[1]} supported; {mechanisms[0]} of {mechanisms[1]} mechanism checks hold "
        f"(generated by `python -m course_lib.lab.verdicts --write` from `results/`: a finding is reproduced when, "
        f"over at least {MIN_SEEDS} seeds, the mean of its paired difference reaches its margin and its 95% "
        f"t-interval lies above zero).\n{TOTAL_END}"
    )
    if TOTAL_START in text:
        return re.sub(re.escape(TOTAL_START) + ".*?" + re.escape(TOTAL_END), lambda _: total, text, flags=re.S)
    raise ValueError(f"README.md has no {TOTAL_START} ... {TOTAL_END} block for the course total")


def drift() -> list[str]:
    """The generated files that differ from what `results/` gives now."""
    stale = []
    for path, make in GENERATED:
        text = path.read_text()
        if make(text) != text:
            stale.append(str(path.relative_to(ROOT)))
    return stale


GENERATED = ((CLAIMS_DOC, claims_doc), (README, readme_claims))
"""Each generated file and the function that regenerates it from its text."""
