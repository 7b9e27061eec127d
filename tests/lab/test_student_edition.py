"""The student edition (`python -m course_lib.lab.notebooks student-edition`): it leaves out the expected outcomes,
the concept questions' answers, the solution links and the pointers to reference solutions, keeps every code cell,
question and hint, and its checks grade a student's files: they fail on the stubs, pass on the library, and pass on
an update a student wrote by hand."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import exercises
from course_lib.lab import student_edition
from exercises.checks import cases

ROOT = Path(__file__).resolve().parents[2]
HIDDEN = ("<summary>Expected outcome", "<summary>Answer</summary>", "exercises/solutions/", "The reference solution is")


@pytest.fixture(scope="module")
def edition(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("edition")
    student_edition.build(out)
    return out


def markdown(path: Path) -> list[str]:
    return [cell.source for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "markdown"]


def test_the_notebooks_hide_the_answers_and_keep_the_code_questions_and_hints(edition):
    originals = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert sorted(p.name for p in (edition / "notebooks").iterdir()) == [p.name for p in originals]
    hidden_before = 0
    for original in originals:
        copy = edition / "notebooks" / original.name
        text = "\n".join(markdown(copy))
        for hidden in HIDDEN:
            assert hidden not in text, f"{copy.name} still shows {hidden!r}"
        before = "\n".join(markdown(original))
        hidden_before += sum(before.count(hidden) for hidden in HIDDEN)
        for kept in ("<details><summary>Hint", "**Concept check.**", "### Exercise", "### Implement it"):
            assert text.count(kept) == before.count(kept), f"{copy.name}: {kept!r} must stay"

        def code(path):
            return [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]

        assert code(copy) == code(original), f"{copy.name}: every code cell stays as it is"
    assert hidden_before > 50, "the committed notebooks hold answers for the edition to hide"


def test_the_exercises_folder_has_no_solutions_and_its_modules_still_import(edition):
    folder = edition / "exercises"
    assert not (folder / "solutions").exists() and not (folder / "measure.py").exists()
    for path in folder.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        compile(text, str(path), "exec")
        assert "exercises/solutions/" not in text and "The reference solution is" not in text, path
    assert "Reference solution" not in (folder / "README.md").read_text(encoding="utf-8")


def test_the_exercises_readme_leaves_out_whole_items_never_half_a_sentence(edition):
    """Issue 59: the measured exercises' item lost its middle line (the one naming the solutions) and kept the rest,
    a broken sentence. Now a list item or paragraph that names the solutions goes whole, and the item is replaced by
    one that names no solution."""
    original = (ROOT / "exercises" / "README.md").read_text(encoding="utf-8").splitlines()
    kept = [line for line in (edition / "exercises" / "README.md").read_text(encoding="utf-8").splitlines()
            if not line.startswith("|")]  # fmt: skip
    replacement = (
        "- **Measured exercises**: the exercises in the last section of each notebook: predict, then run, then report."
    )
    assert replacement in kept
    assert [line for line in kept if line not in original] == [replacement]
    assert not any("runs them and records" in line for line in kept)


def autograde(edition: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(edition)}
    env.pop("EXERCISES_IMPL", None)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    return subprocess.run(command, cwd=edition, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_autograder_fails_the_stubs_passes_the_library_and_grades_a_students_file(edition):
    total = sum(len(cases(name)) for name in exercises.NAMES)
    stubs = autograde(edition, "exercises/")
    assert stubs.returncode == 1 and f"{total} failed" in stubs.stdout, stubs.stdout[-2000:]
    library = autograde(edition, "exercises/", "--impl", "library")
    assert library.returncode == 0 and f"{total} passed" in library.stdout, library.stdout[-2000:]
    # a student's own update, written by hand into the edition's stub file, is graded by the same checks
    from tests.project.test_exercises import update_by_hand

    source = inspect.getsource(update_by_hand).replace("def update_by_hand(", "def grpo_update(", 1)
    (edition / "exercises" / "loop.py").write_text("import torch\n\n\n" + source, encoding="utf-8")
    mine = autograde(edition, "exercises/test_loop.py")
    assert mine.returncode == 0 and f"{len(cases('loop.grpo_update'))} passed" in mine.stdout, mine.stdout[-2000:]


def test_the_submission_template_ships_and_names_the_rubrics_points(edition):
    """Issue 59: measured exercises are handed in on `exercises/SUBMISSION.md` (prediction, run, numbers,
    interpretation); the points it names are the measured rubric's in docs/teaching.md."""
    template = (edition / "exercises" / "SUBMISSION.md").read_text(encoding="utf-8")
    assert [line for line in template.splitlines() if line.startswith("## ")] == [
        "## 1 · Prediction (written before the first run)", "## 2 · The run",
        "## 3 · The numbers, as the script printed them", "## 4 · Interpretation"]  # fmt: skip
    teaching = (ROOT / "docs" / "teaching.md").read_text(encoding="utf-8")
    rubric = teaching[teaching.index("**Measured exercises** (out of 10)") :].split("\n\n")[1]
    points = {row.split("|")[1].strip(): int(row.split("|")[2]) for row in rubric.splitlines()[2:]}
    assert sum(points.values()) == 10
    named = dict(zip(("prediction first", "the run reproduces", "interpretation with the noise", "honesty"),
                     (2, 2, 3, 3), strict=True))  # fmt: skip
    assert points == named
    assert "the prediction 2 points, the run 2, the interpretation 3, honesty 3" in template
