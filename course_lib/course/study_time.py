"""A chapter's study time, estimated from what the chapter holds: the one source for the README's chapter map and
`docs/teaching.md`.

A student's time on a chapter is reading its text and code, waiting for its cells, and doing its exercises. Each part
is computed from the committed notebook, with rates stated here so an instructor can change them:

- **reading**: the words of its Markdown cells at `WORDS_PER_MINUTE` (half a typical 200-250 words a minute for
  prose, as the text carries equations and tables) plus its code cells' lines at `CODE_LINES_PER_MINUTE`;
- **running**: the cells' minutes in CI's nbval run (`results/minutes.json`, 2 cores);
- **exercises**: each measured exercise's CPU minutes (from its expected outcome, one thread) plus
  `MINUTES_PER_MEASURED` to write and read it, and `MINUTES_PER_IMPLEMENT_IT` per implement-it exercise.

    python -m course_lib.course.study_time        # the table, in hours
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
MINUTES = ROOT / "results" / "minutes.json"

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


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    print(f"{'chapter':8}{'reading':>9}{'running':>9}{'exercises':>11}{'total':>8}   hours")
    for chapter in chapters():
        time = study_time(chapter)
        print(
            f"{chapter:8}{time.reading:9.0f}{time.running:9.1f}{time.exercises:11.0f}{time.total:8.0f}   "
            f"{hours_label(chapter)}"
        )
    print(f"{'all':8}{'':37}{sum(study_time(c).hours for c in chapters()):g} h")


if __name__ == "__main__":
    main()
