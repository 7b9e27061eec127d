"""The student edition: the course without the answers, installable without the clone.

    python -m course_lib.lab.student_edition --out DIR [--archive]
    python -m course_lib.lab.notebooks student-edition --out DIR     # the same, without the archive

`DIR` is a project of its own (`pyproject.toml`, `course_lib/`, `exercises/`, `notebooks/`, `data/`, `results/`,
`docs/`); `--archive` also packs it as `DIR.tar.gz`, the file an instructor hands out. A student unpacks it and runs
`pip install -e ".[dev]"` there: no clone, no git. What it leaves out:

- **The reference implementations.** The edition's `course_lib` holds no body for the functions marked
  `@implement_it` (`course_lib.implement_it`): their source is cut out, and the name is bound to a bridge that calls
  the student's `exercises/<module>.py`. Chapters train with the student's advantages, losses and rollout.
- **The checks' reference values.** A check that compared seeded random inputs with the library reads the library's
  values, recorded when the edition is built (`exercises/checks/recorded.json`), since the edition's library would
  only compute the student's own. `--impl library` and `grade --use library` say the edition has no reference.
- **The answers in the notebooks**: the expected outcomes of measured exercises, the concept questions' answers,
  the solution links, the pointers to reference solutions, and the outputs of the cells a concept question asks the
  student to predict and of the cells that run a check (the questions, the hints, the code and every other output
  stay).
- **The solutions**: `exercises/solutions/` (measured exercises and derivations) and `exercises/measure.py`.

What it does not hide: `loop.grpo_update`'s reference is the update of `rl.train.policy_iteration`, which every
chapter runs with other advantages and losses too, so it stays (built from the student's parts); the batched
`RolloutEngine`, which the rollout exercise is graded against token by token, stays; the papers' equations are in
the docstrings. It is a course edition, not a secure exam.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import tarfile
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
CONCEPT_CHECK = "**Concept check.**"
"""A concept question: the code cells after it show its answer when run."""
CHECK_CALL = re.compile(r"\bcheck\(")
"""A cell that runs an exercise's checks: its committed output is the library's, which the edition does not have."""
COPIED = ("data", "results", "docs", "LICENSE")
"""What the edition takes from the repository unchanged, beside the library, the notebooks and the exercises."""


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
    """A copy of `notebook` for students: hidden cells dropped, the rest of the Markdown cleaned, and the outputs of
    the code cells after a concept question (up to the next Markdown cell) cleared, since they show its answer, with
    those of the cells that run an exercise's checks (the library's result, which the edition does not have)."""
    cells, predicting = [], False
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            predicting = CONCEPT_CHECK in cell.source
            if HIDDEN_CELL.match(cell.source):
                continue
            cell = nbformat.from_dict({**cell, "source": student_markdown(cell.source)})
            if not cell.source:
                continue
        elif cell.cell_type == "code" and (predicting or CHECK_CALL.search(cell.source)):
            cell = nbformat.from_dict({**cell, "outputs": [], "execution_count": None})
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


EDITION_README_LINES: dict[str, str | None] = {
    "pytest exercises/ --impl library      # the same checks on the library's implementation (they pass)": None,
    "`EXERCISES_IMPL=library pytest exercises/` does the same as `--impl library`. A failing check prints what it": (
        "   A failing check prints what it"
    ),
    'check("gigpo.step_group_advantages")  # the library\'s implementation: passes N checks': None,
    "Read the stub's docstring before the library's code: the exercise is to get from the equation to the tensors.": (
        "Read the stub's docstring first: the exercise is to get from the equation to the tensors."
    ),
}  # fmt: skip
"""Lines of the exercises' README (stripped) that name the library's implementations, which the edition does not
run: left out (None) or replaced."""


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
        block = [EDITION_README_LINES.get(line.strip(), line) for line in block]
        block = [line for line in block if line is not None]
        if not block:
            continue
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


def without_references(source: str) -> str:
    """A library module's text with the body of every `@implement_it` function cut out (its signature and docstring
    stay; the name is bound to the bridge when the edition imports it)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    marked = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
              and any(isinstance(d, ast.Call) and getattr(d.func, "id", None) == "implement_it"
                      for d in node.decorator_list)]  # fmt: skip
    for node in sorted(marked, key=lambda n: n.lineno, reverse=True):
        body = node.body[1:] if ast.get_docstring(node) is not None else node.body
        if not body:
            continue
        indent = " " * body[0].col_offset
        stub = f'{indent}raise NotImplementedError("the student edition binds this name to course_lib.bridges")\n'
        lines[body[0].lineno - 1 : node.end_lineno] = [stub]
    text = "".join(lines)
    ast.parse(text)
    return text


def edition_library(out: Path) -> list[Path]:
    """The library without its references, its edition set to "student"."""
    written = []
    for path in sorted((ROOT / "course_lib").rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        target = out / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        text = path.read_text(encoding="utf-8")
        if "@implement_it(" in text:
            text = without_references(text)
        if path.name == "implement_it.py":
            text = text.replace('\nEDITION = "instructor"\n', '\nEDITION = "student"\n')
            if '\nEDITION = "student"\n' not in text:
                raise RuntimeError("course_lib/implement_it.py no longer sets EDITION: update the edition's build")
        target.write_text(text, encoding="utf-8")
        written.append(target)
    return written


def recorded_values() -> dict:
    """The library's value of every seeded case the checks compare with it (`exercises.checks.common.reference`)."""
    import exercises
    from exercises.checks import cases, implementation, run_case
    from exercises.checks.common import recording

    def run_all() -> None:
        for name in exercises.NAMES:
            for case in cases(name):
                if name not in UNRECORDED and (message := run_case(case, implementation(name, "library"))):
                    raise RuntimeError(f"the library fails its own check: {message}")

    return recording(run_all)


UNRECORDED = ("rollout.play_episode", "loop.grpo_update")
"""Exercises graded against the engine and the loop, which the edition keeps: their checks record nothing."""


def project_files(out: Path) -> list[Path]:
    """The copies (`COPIED`), the edition's `STUDENT.md` and its `pyproject.toml`: the course's, with that page as its
    readme and the exercises as its tests."""
    written = []
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, out / name, ignore=shutil.ignore_patterns("__pycache__"))
            written += [p for p in (out / name).rglob("*") if p.is_file()]
        else:
            shutil.copy2(source, out / name)
            written.append(out / name)
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    text = text.replace('readme = "README.md"', 'readme = "STUDENT.md"')
    text = text.replace('testpaths = ["tests", "notebooks"]', 'testpaths = ["exercises"]')
    (out / "pyproject.toml").write_text(text, encoding="utf-8")
    (out / "STUDENT.md").write_text(STUDENT_README, encoding="utf-8")
    return [*written, out / "pyproject.toml", out / "STUDENT.md"]


STUDENT_README = """# The course on agentic RL: student edition

Install (Python 3.11 or newer; a CPU is enough), in this folder:

    pip install -e ".[dev]"   # the course's library, its dependencies and pytest
    pytest exercises/         # the autograder: every check fails until you fill in the stubs
    python -m exercises.grade # your points for the checks, exercise by exercise
    jupyter lab notebooks/    # the chapters

The library's implement-it functions call your files in `exercises/`: chapter 00 trains with your GRPO advantages,
your clipped loss and your rollout once you have written them. `exercises/README.md` lists the twelve exercises and
the chapter each belongs to; `exercises/SUBMISSION.md` is the form for the measured exercises.
"""


def build(out: Path, archive: bool = False) -> list[Path]:
    """Write the student edition into `out` (created; an existing edition there is replaced); returns its files.
    With `archive`, also `out` packed as `<out>.tar.gz`."""
    out = Path(out)
    for part in ("notebooks", "exercises", "course_lib", *COPIED):
        if (out / part).is_dir():
            shutil.rmtree(out / part)
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
    recorded = out / "exercises" / "checks" / "recorded.json"
    recorded.write_text(json.dumps(recorded_values(), indent=1) + "\n", encoding="utf-8")
    written += [recorded, *edition_library(out), *project_files(out)]
    if archive:
        with tarfile.open(out.with_name(out.name + ".tar.gz"), "w:gz") as packed:
            packed.add(out, arcname=out.name, filter=lambda info: None if "__pycache__" in info.name else info)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the folder to write the edition into")
    parser.add_argument("--archive", action="store_true", help="also pack it as OUT.tar.gz, the file to hand out")
    args = parser.parse_args(argv)
    files = build(args.out, args.archive)
    packed = f"; packed as {args.out}.tar.gz" if args.archive else ""
    print(f"student edition: {len(files)} files in {args.out}{packed}; a student installs it with "
          f"`pip install -e \".[dev]\"` there, then runs pytest exercises/")  # fmt: skip


if __name__ == "__main__":
    main()
