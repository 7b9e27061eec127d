"""A chapter's study time, estimated from what the chapter holds: the one source for the README's chapter map and
`docs/teaching.md`.

A student's time on a chapter is reading its text and code, waiting for its cells, and doing its exercises. Each part
is computed from the committed notebook, with rates stated here so an instructor can change them:

- **reading**: the words of its Markdown cells at `WORDS_PER_MINUTE` (half a typical 200-250 words a minute for
  prose, as the text carries equations and tables) plus its code cells' lines at `CODE_LINES_PER_MINUTE`;
- **running**: the cells' minutes in CI's nbval run (`results/minutes.json`, 2 cores);
- **exercises**: each measured exercise's CPU minutes (from its expected outcome, one thread) plus
  `MINUTES_PER_MEASURED` to write and read it, and `MINUTES_PER_IMPLEMENT_IT` per implement-it exercise.

The README's chapter map and `docs/teaching.md` show these hours: every Markdown table of theirs with a "study time"
column gets, in each row, the hours of the chapters its "#" or "chapters" cell names (`fill_column`, which the README's
other generated columns use too); `docs/teaching.md`'s table of the parts and the README's total sentence are
written between markers.

    python -m course_lib.lab.study_time            # the table, in hours
    python -m course_lib.lab.study_time --sync     # write the README's and docs/teaching.md's study times
    python -m course_lib.lab.study_time --check    # exit 1 if either has drifted from the notebooks (a test does)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
MINUTES = ROOT / "results" / "minutes.json"
README = ROOT / "README.md"
TEACHING = ROOT / "docs" / "teaching.md"

WORDS_PER_MINUTE = 100
CODE_LINES_PER_MINUTE = 10
MINUTES_PER_MEASURED = 20
MINUTES_PER_IMPLEMENT_IT = 45

MEASURED = re.compile(r"<summary>Expected outcome \(measured: ([\d.]+) CPU-minutes")
IMPLEMENT_IT = re.compile(r"^### Implement it\b", re.MULTILINE)


@dataclass(frozen=True)
class StudyTime:
    """One chapter's study time in minutes, by part."""

    reading: float
    running: float
    exercises: float

    @property
    def total(self) -> float:
        return self.reading + self.running + self.exercises

    @property
    def hours(self) -> float:
        """The total in hours, to the nearest half hour (at least half an hour)."""
        return max(0.5, round(self.total / 30) / 2)


def notebook_path(chapter: str) -> Path:
    """The notebook of chapter "NN" (two digits)."""
    matches = sorted(NOTEBOOKS.glob(f"{chapter}_*.ipynb"))
    if len(matches) != 1:
        raise FileNotFoundError(f"no single notebook for chapter {chapter!r} in {NOTEBOOKS}")
    return matches[0]


def study_time(chapter: str) -> StudyTime:
    """Chapter "NN"'s study time from its committed notebook and its recorded nbval minutes."""
    cells = json.loads(notebook_path(chapter).read_text(encoding="utf-8"))["cells"]
    words = code_lines = 0
    measured: list[float] = []
    implement_it = 0
    for cell in cells:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            words += len(source.split())
            measured += [float(minutes) for minutes in MEASURED.findall(source)]
            implement_it += len(IMPLEMENT_IT.findall(source))
        elif cell["cell_type"] == "code":
            code_lines += sum(1 for line in source.splitlines() if line.strip())
    running = json.loads(MINUTES.read_text(encoding="utf-8"))["minutes"][chapter]
    return StudyTime(
        reading=words / WORDS_PER_MINUTE + code_lines / CODE_LINES_PER_MINUTE,
        running=running,
        exercises=sum(minutes + MINUTES_PER_MEASURED for minutes in measured) + MINUTES_PER_IMPLEMENT_IT * implement_it,
    )


def chapters() -> list[str]:
    """Every chapter with a notebook, as "NN"."""
    return sorted(path.name[:2] for path in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def hours_label(chapter: str) -> str:
    """The README's and docs/teaching.md's study-time cell, e.g. "3.5 h"."""
    return f"{study_time(chapter).hours:g} h"


# The Markdown tables that show these hours -----------------------------------------------------------------------


def row_cells(line: str) -> list[str]:
    """The cells of a Markdown table row (`|` escaped as `\\|` stays inside its cell)."""
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def is_separator(line: str) -> bool:
    """Whether `line` is a table's header separator, `|---|:---:|`."""
    return bool(re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", line.strip()))


def tables(text: str) -> list[list[dict[str, str]]]:
    """Every Markdown table of `text`, as its body rows, each a mapping from column header to cell."""
    lines = text.split("\n")
    found = []
    for i in range(len(lines) - 1):
        if lines[i].startswith("|") and is_separator(lines[i + 1]):
            header, rows = row_cells(lines[i]), []
            for line in lines[i + 2 :]:
                if not line.startswith("|"):
                    break
                rows.append(dict(zip(header, row_cells(line), strict=False)))
            found.append(rows)
    return found


def fill_column(text: str, header: str, cell: Callable[[dict[str, str]], str | None]) -> str:
    """`text` with the column headed `header` of each of its Markdown tables rewritten: each body row's cell becomes
    `cell(row)` (`row` maps each header to its cell), or stays as it is where `cell` returns None. A table without
    such a column is left alone. The README's chapter map finds its generated columns this way (study time here, CPU
    minutes in `notebooks.readme_minutes`, findings reproduced in `verdict_docs.readme_claims`), never by position."""
    lines = text.split("\n")
    columns: list[str] | None = None
    for i, line in enumerate(lines):
        if not line.startswith("|"):
            columns = None
        elif columns is None:
            if i + 1 < len(lines) and is_separator(lines[i + 1]):
                columns = row_cells(line)
        elif header in columns and not is_separator(line):
            cells = row_cells(line)
            new = cell(dict(zip(columns, cells, strict=False)))
            if new is not None and len(cells) == len(columns):
                cells[columns.index(header)] = new
                lines[i] = "| " + " | ".join(cells) + " |"
    return "\n".join(lines)


STUDY_TIME = "study time"
"""The header of a study-time column."""
TABLE_START, TABLE_END = "<!-- study-time: table -->", "<!-- /study-time: table -->"
TOTAL_START, TOTAL_END = "<!-- study-time: total -->", "<!-- /study-time: total -->"


def named_chapters(row: dict[str, str]) -> list[str]:
    """The chapters a table row names in its "#" or "chapters" cell (two-digit numbers: "00", "07, 08")."""
    return re.findall(r"\b\d\d\b", row.get("#", row.get("chapters", "")))


def chapter_title(chapter: str) -> str:
    """The title of chapter "NN", from its notebook's first line (`# 00 · A tiny ...`)."""
    cells = json.loads(notebook_path(chapter).read_text(encoding="utf-8"))["cells"]
    first = "".join(cells[0]["source"]).splitlines()[0]
    return first.lstrip("# ").split(" · ", 1)[-1]


def parts_table(times: dict[str, StudyTime]) -> str:
    """`docs/teaching.md`'s block: the rates, then each chapter's study time by part, in minutes, and in hours."""
    lines = [
        f"- **reading**: the Markdown cells' words at {WORDS_PER_MINUTE} words a minute, plus the code cells' lines at "
        f"{CODE_LINES_PER_MINUTE} lines a minute;",
        "- **running**: the cells' minutes in CI's nbval run on 2 cores (`results/minutes.json`);",
        "- **exercises**: each measured exercise's CPU minutes (its expected outcome, one thread) plus "
        f"{MINUTES_PER_MEASURED} minutes to write and read it, and {MINUTES_PER_IMPLEMENT_IT} minutes per implement-it "
        "exercise.",
        "",
        "The study time is their sum in hours, to the nearest half hour.",
        "",
        f"| # | chapter | reading (min) | running (min) | exercises (min) | {STUDY_TIME} |",
        "|---|---|---|---|---|---|",
    ]
    for chapter, time in times.items():
        link = f"[{chapter_title(chapter)}](../{notebook_path(chapter).relative_to(ROOT).as_posix()})"
        lines.append(
            f"| {chapter} | {link} | {time.reading:.0f} | {time.running:.1f} | {time.exercises:.0f} | "
            f"{time.hours:g} h |"
        )
    total = sum(time.hours for time in times.values())
    lines.append(f"| all |  |  |  |  | {total:g} h |")
    return "\n".join(lines)


def total_sentence(times: dict[str, StudyTime]) -> str:
    """The README's study-time plan: the total and the hours a week at two paces."""
    total = sum(time.hours for time in times.values())
    six, twelve = round(total / 6), round(total / 12)
    return f"About {total:g} hours in all: about {six} hours a week over 6 weeks, {twelve} over 12."


def synced(text: str, times: dict[str, StudyTime] | None = None) -> str:
    """`text` (the README or `docs/teaching.md`) with every study-time column, and the blocks between the study-time
    markers, written from the notebooks."""
    times = {chapter: study_time(chapter) for chapter in chapters()} if times is None else times

    def hours(row: dict[str, str]) -> str | None:
        named = named_chapters(row)
        return f"{sum(times[chapter].hours for chapter in named):g} h" if named else None

    text = fill_column(text, STUDY_TIME, hours)
    for start, end, block in ((TABLE_START, TABLE_END, parts_table), (TOTAL_START, TOTAL_END, total_sentence)):
        if start in text:
            new = f"{start}\n{block(times)}\n{end}"
            text = re.sub(re.escape(start) + ".*?" + re.escape(end), lambda _, new=new: new, text, flags=re.S)
    return text


def drift() -> list[Path]:
    """The files whose study times differ from what the notebooks give now."""
    return [path for path in (README, TEACHING) if synced(text := path.read_text(encoding="utf-8")) != text]


def shown(path: Path) -> str:
    """`path` as printed: relative to the repository where it lies in it."""
    return str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.lab.study_time", description=__doc__.splitlines()[0])
    parser.add_argument("--sync", action="store_true", help="write the README's and docs/teaching.md's study times")
    parser.add_argument("--check", action="store_true", help="exit 1 if the README or docs/teaching.md has drifted")
    args = parser.parse_args(argv)
    if args.sync:
        for path in (README, TEACHING):
            text = path.read_text(encoding="utf-8")
            if (new := synced(text)) != text:
                path.write_text(new, encoding="utf-8")
                print(f"wrote {shown(path)}")
        return 0
    if args.check:
        stale = drift()
        for path in stale:
            command = "python -m course_lib.lab.study_time --sync"
            print(f"{shown(path)} differs from the notebooks: run `{command}`")
        return 1 if stale else 0
    print(f"{'chapter':8}{'reading':>9}{'running':>9}{'exercises':>11}{'total':>8}   hours")
    for chapter in chapters():
        time = study_time(chapter)
        print(
            f"{chapter:8}{time.reading:9.0f}{time.running:9.1f}{time.exercises:11.0f}{time.total:8.0f}   "
            f"{hours_label(chapter)}"
        )
    print(f"{'all':8}{'':37}{sum(study_time(c).hours for c in chapters()):g} h")
    return 0


if __name__ == "__main__":
    sys.exit(main())
