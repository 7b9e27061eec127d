"""The student edition: the notebooks and the exercises without what an assignment hides.

    python -m course_lib.lab.notebooks student-edition --out DIR
    python -m course_lib.lab.student_edition --out DIR          # the same

`DIR/notebooks/` holds every chapter with its expected outcomes, its concept questions' answers, its solution links
and its pointers to reference solutions taken out (the questions, the hints and the checks stay); `DIR/exercises/`
holds the implement-it stubs and their checks, without the measured solutions (`exercises/solutions/`,
`exercises/measure.py`) and without the stubs' pointers to their reference solutions. The checks are the
autograder: in `DIR`, `pytest exercises/` runs them on the student's files and `pytest exercises/ --impl library`
on the library's.

What it does not hide: the course runs on `course_lib`, which holds the reference implementations the checks compare
with, so a student can still read them. The edition takes the answers out of the student's path; it is not a secure
exam.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]

HIDDEN_CELL = re.compile(r"^\s*<details><summary>Expected outcome")
"""A measured exercise's expected outcome: the whole cell goes."""
ANSWER = re.compile(r"<details><summary>Answer</summary>.*?</details>\s*", re.DOTALL)
"""A concept question's collapsed answer: the block goes, the question stays."""
SOLUTIONS = "exercises/solutions/"
"""A paragraph that names it links or describes the measured solutions."""
EXERCISES_INTRO = (
    "The measured exercises below: write down your prediction, then write and run the experiment; your instructor "
    "has the expected outcomes. The implement-it exercises are checked by the `check(...)` cells and by "
    "`pytest exercises/`."
)
"""What replaces a section 8 introduction that describes the solutions."""
REFERENCE_SENTENCE = re.compile(r"\s*The\s+reference\s+solutions?\s+(is|are)\b.*?\.(?=\s|$)", re.IGNORECASE | re.DOTALL)
"""A sentence that names where the reference solution is."""
EXERCISE_FILES_LEFT_OUT = ("solutions", "measure.py", "__pycache__")


def student_markdown(source: str) -> str:
    """A Markdown cell's text without answers, solution links and reference-solution sentences."""
    paragraphs = []
    for paragraph in ANSWER.sub("", source).split("\n\n"):
        if SOLUTIONS in paragraph:
            if paragraph.startswith("**Solution:**"):
                continue
            paragraph = EXERCISES_INTRO
        paragraphs.append(paragraph)
    return REFERENCE_SENTENCE.sub("", "\n\n".join(paragraphs)).strip()


def student_notebook(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of `notebook` for students: hidden cells dropped, the rest of the Markdown cleaned."""
    cells = []
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            if HIDDEN_CELL.match(cell.source):
                continue
            cell = nbformat.from_dict({**cell, "source": student_markdown(cell.source)})
            if not cell.source:
                continue
        cells.append(cell)
    return nbformat.from_dict({**notebook, "cells": cells})


def student_python(source: str) -> str:
    """A stub module's text without the sentences that point to its reference solution or the measured solutions."""
    kept = []
    for paragraph in source.split("\n\n"):
        if SOLUTIONS in paragraph:  # dropped, all but a docstring's closing quotes
            paragraph = "\n".join(line for line in paragraph.splitlines() if '"""' in line)
        if paragraph:
            kept.append(paragraph)
    text = REFERENCE_SENTENCE.sub("", "\n\n".join(kept))
    ast.parse(text)  # what the edition leaves out must never break a module
    return text


def student_exercises_readme(text: str) -> str:
    """The exercises' README without the reference-solution column and the measured solutions: a list item that
    names them is left out whole (its continuation lines too, so no sentence is cut), and a paragraph likewise."""
    prose = re.compile(r"^[^-|#`\s]")  # a line of a plain paragraph (not a list, table, heading, fence or indent)
    blocks: list[list[str]] = []
    for line in text.splitlines():
        item_goes_on = blocks and blocks[-1][0].startswith("- ") and line.startswith("  ")
        paragraph_goes_on = blocks and prose.match(blocks[-1][-1]) and prose.match(line)
        if item_goes_on or paragraph_goes_on:
            blocks[-1].append(line)
        else:
            blocks.append([line])
    lines = []
    for block in blocks:
        if any("exercises/solutions/" in line or "exercises.measure" in line for line in block):
            if block[0].startswith("- **Measured exercises**"):
                lines.append(
                    "- **Measured exercises**: the exercises in the last section of each notebook: predict, "
                    "then run, then report."
                )
            continue
        for line in block:
            if line.startswith("|"):
                line = "|".join(line.split("|")[:-2]) + "|"  # the last column names the reference solution
            lines.append(line)
    return REFERENCE_SENTENCE.sub("", "\n".join(lines)) + "\n"


def build(out: Path) -> list[Path]:
    """Write the student edition into `out` (created; an existing edition there is replaced); returns its files."""
    out = Path(out)
    for part in ("notebooks", "exercises"):
        shutil.rmtree(out / part, ignore_errors=True)
    (out / "notebooks").mkdir(parents=True)
    written = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        target = out / "notebooks" / path.name
        nbformat.write(student_notebook(nbformat.read(path, as_version=4)), target)
        written.append(target)
    source = ROOT / "exercises"
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if path.is_dir() or relative.parts[0] in EXERCISE_FILES_LEFT_OUT or "__pycache__" in relative.parts:
            continue
        target = out / "exercises" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        text = path.read_text(encoding="utf-8")
        if relative == Path("README.md"):
            text = student_exercises_readme(text)
        elif len(relative.parts) == 1 and path.suffix == ".py" and not path.name.startswith("test_"):
            text = student_python(text)
        target.write_text(text, encoding="utf-8")
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the folder to write the edition into")
    args = parser.parse_args(argv)
    files = build(args.out)
    print(f"student edition: {len(files)} files in {args.out} (notebooks/, exercises/); "
          f"autograder: cd {args.out} && pytest exercises/")  # fmt: skip


if __name__ == "__main__":
    main()
