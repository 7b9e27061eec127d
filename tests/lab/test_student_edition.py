"""The student edition (`python -m course_lib.lab.notebooks student-edition`): it leaves out the expected outcomes,
the concept questions' answers, the solution links and the pointers to reference solutions, keeps every code cell,
question and hint, and its checks grade a student's files: they fail on the stubs, pass on the library, and pass on
an update a student wrote by hand."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import tarfile
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
    edited = {new for new in student_edition.EDITION_README_LINES.values() if new}
    assert [line for line in kept if line not in original and line not in edited] == [replacement]
    assert not any("--impl library" in line for line in kept)
    assert not any("runs them and records" in line for line in kept)


def autograde(edition: Path, *args: str, module: str = "pytest") -> subprocess.CompletedProcess:
    """Run `python -m <module>` in the edition with its own library first on the path (as `pip install -e .` there
    would put it; the repository's editable install only finds `course_lib` after sys.path)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(edition)}
    env.pop("EXERCISES_IMPL", None)
    extra = ("-q", "-p", "no:cacheprovider") if module == "pytest" else ()
    command = [sys.executable, "-m", module, *extra, *args]
    return subprocess.run(command, cwd=edition, env=env, capture_output=True, text=True, timeout=600)


GROUP_ADVANTAGES_BY_HAND = """
def group_advantages(rewards, group_ids, scale_by_std=True, eps=1e-6):
    out = torch.zeros(len(rewards))
    for group in set(group_ids.tolist()):
        rows = group_ids == group
        values = rewards[rows].float()
        if len(values) > 1 and not bool((values == values[0]).all()):
            out[rows] = (values - values.mean()) / ((values.std() + eps) if scale_by_std else 1.0)
    return out


def clipped_surrogate_loss(logprobs, old_logprobs, advantages, loss_mask, clip_low=0.2, clip_high=0.2):
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    ratio = torch.exp(logprobs - old_logprobs)
    surrogate = torch.minimum(ratio * advantages, ratio.clamp(1 - clip_low, 1 + clip_high) * advantages)
    return -(surrogate * loss_mask).sum() / loss_mask.sum().clamp(min=1)
"""
"""GRPO's two functions as a student writes them from the stubs' docstrings (the library's are written otherwise)."""


def write_students_work(edition: Path) -> None:
    """Chapter 00's four exercises, written by hand into the edition's stub files: the advantages and the loss, the
    rollout (tests/project/test_rollout_exercise.py) and the update (tests/project/test_exercises.py)."""
    from tests.project.test_exercises import update_by_hand
    from tests.project.test_rollout_exercise import rollout_by_hand

    folder = edition / "exercises"
    (folder / "grpo.py").write_text("import torch\n\n" + GROUP_ADVANTAGES_BY_HAND, encoding="utf-8")
    rollout = inspect.getsource(rollout_by_hand).replace("def rollout_by_hand(", "def play_episode(", 1)
    imports = "from course_lib.engine.rollout import Trajectory\nfrom course_lib.tokenizer import decode, encode\n"
    (folder / "rollout.py").write_text(imports + "\n\n" + rollout, encoding="utf-8")
    update = inspect.getsource(update_by_hand).replace("def update_by_hand(", "def grpo_update(", 1)
    (folder / "loop.py").write_text("import torch\n\n\n" + update, encoding="utf-8")


@pytest.mark.slow
def test_a_student_with_only_the_edition_fails_the_stubs_then_passes_chapter_00s_four_exercises(tmp_path):
    """Issue 59's 'done when': the edition (its own library, without references) fails every stub; the student's
    GRPO, rollout and update pass their checks, graded against the recorded library values and the engine; `grade`
    prints the points; and `--impl library` says there is no reference to run."""
    edition = tmp_path / "course-student"
    student_edition.build(edition)
    total = sum(len(cases(name)) for name in exercises.NAMES)
    stubs = autograde(edition, "exercises/")
    assert stubs.returncode == 1 and f"{total} failed" in stubs.stdout, stubs.stdout[-2000:]
    assert "needs grpo.group_advantages first" in stubs.stdout or "loop.grpo_update: not implemented" in stubs.stdout
    library = autograde(edition, "exercises/test_grpo.py", "--impl", "library")
    assert library.returncode == 1 and "holds no reference implementations" in library.stdout, library.stdout[-2000:]
    write_students_work(edition)
    four = ("grpo.group_advantages", "grpo.clipped_surrogate_loss", "rollout.play_episode", "loop.grpo_update")
    mine = autograde(edition, "exercises/test_grpo.py", "exercises/test_rollout.py", "exercises/test_loop.py")
    passed = sum(len(cases(name)) for name in four)
    assert mine.returncode == 0 and f"{passed} passed" in mine.stdout, mine.stdout[-3000:]
    graded = autograde(edition, module="exercises.grade")
    assert graded.returncode == 0, graded.stderr[-2000:]
    assert "16 of 48" in graded.stdout, graded.stdout


def test_the_editions_library_holds_no_reference_body(edition):
    """Every `@implement_it` function of the edition's library is its signature, docstring and one raise; the edition
    says it is the student's; the checks' seeded cases are recorded for every exercise the library grades."""
    import ast

    import course_lib.diagnostics  # noqa: F401  (imported for the marks their modules make)
    import course_lib.engine.episode  # noqa: F401
    from course_lib.algos import aepo, arpo, filters, gigpo, grpo, ppo, tree_grpo  # noqa: F401  (imported: their marks)
    from course_lib.implement_it import MARKED

    bodies = {}
    for path in (edition / "course_lib").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and any("implement_it" in ast.unparse(d) for d in node.decorator_list):
                bodies[node.name] = [ast.unparse(s) for s in node.body[1:]]
    assert len(MARKED) == 11
    assert set(bodies) == {name.rsplit(".", 1)[1] for name in MARKED.values()}
    assert all(body == ["raise NotImplementedError('the student edition binds this name to course_lib.bridges')"]
               for body in bodies.values()), bodies  # fmt: skip
    assert 'EDITION = "student"' in (edition / "course_lib" / "implement_it.py").read_text(encoding="utf-8")
    recorded = json.loads((edition / "exercises" / "checks" / "recorded.json").read_text(encoding="utf-8"))
    assert {key.split("/")[0] for key in recorded} == set(exercises.NAMES) - set(student_edition.UNRECORDED) - {
        "tree_grpo.tree_advantages"  # its checks are all hand-computed values
    }


def test_the_outputs_that_answer_a_concept_question_are_cleared(edition):
    """A concept question says 'predict, then run the next cell': that cell's output is its answer, so the edition
    clears it, as it clears the cells that run a check (their output is the library's); every other output stays."""
    cleared = kept = 0
    for original in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        before = nbformat.read(original, as_version=4).cells
        after = nbformat.read(edition / "notebooks" / original.name, as_version=4).cells
        code_before = [c for c in before if c.cell_type == "code"]
        code_after = [c for c in after if c.cell_type == "code"]
        predicted = set()
        question = False
        for cell in before:
            if cell.cell_type == "markdown":
                question = "**Concept check.**" in cell.source
            elif question or "check(" in cell.source:
                predicted.add(id(cell))
        for old, new in zip(code_before, code_after, strict=True):
            if id(old) in predicted:
                assert new.outputs == [], f"{original.name}: an output that answers a concept question stays"
                cleared += bool(old.outputs)
            else:
                assert new.outputs == old.outputs
                kept += bool(old.outputs)
    assert cleared > 20 and kept > cleared


def test_the_archive_holds_the_project_a_student_installs(tmp_path):
    student_edition.build(tmp_path / "course-student", archive=True)
    with tarfile.open(tmp_path / "course-student.tar.gz") as packed:
        names = set(packed.getnames())
    for needed in ("pyproject.toml", "STUDENT.md", "LICENSE", "course_lib/bridges.py", "exercises/checks/recorded.json",
                   "notebooks/00_tool_agent_grpo.ipynb", "data/MANIFEST.json"):  # fmt: skip
        assert f"course-student/{needed}" in names, needed
    assert not any("/solutions/" in name or name.endswith("measure.py") or "__pycache__" in name for name in names)


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


def test_the_editions_checks_refuse_to_grade_without_their_recorded_values(monkeypatch, tmp_path):
    """Without `recorded.json`, the edition's library would compute the student's own values as the reference and
    every seeded check would pass: the check stops with a message instead, and blames the edition, not the code."""
    from exercises.checks import common, run_case

    monkeypatch.setattr("course_lib.implement_it.EDITION", "student")
    monkeypatch.setattr(common, "RECORDED", tmp_path / "recorded.json")
    monkeypatch.setattr(common, "_recorded", None)
    seeded = next(case for case in cases("grpo.group_advantages") if case.title == "random groups")
    with pytest.raises(common.RecordedValuesMissing, match="unpack the student edition again"):
        run_case(seeded, exercises.checks.exercise("grpo.group_advantages").library)
    (tmp_path / "recorded.json").write_text("{}", encoding="utf-8")
    with pytest.raises(common.RecordedValuesMissing, match="holds no value for the case"):
        run_case(seeded, exercises.checks.exercise("grpo.group_advantages").library)
