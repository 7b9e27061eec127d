"""Lessons without leftovers, and exercises that ask for derivation (issue 45): no notebook argues with an earlier
version of itself or with a prediction its task never asked for; every research chapter poses concept questions
with collapsed answers; every implement-it exercise has a collapsed hint, and its stub's docstring is a contract
(paper, equation, arguments, result), not a recipe.

Fast and model-free: the committed notebooks and the stubs, read as text."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
RESEARCH = [path for path in NOTEBOOKS if 1 <= int(path.name[:2]) <= 12 or int(path.name[:2]) >= 17]
STUBS = sorted(
    path
    for path in (ROOT / "exercises").glob("*.py")
    if path.name not in ("__init__.py", "conftest.py", "measure.py", "grade.py") and not path.name.startswith("test_")
)


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def markdown(cell: dict | None) -> str:
    """The text of a Markdown cell; "" for a code cell or none."""
    return source(cell) if cell is not None and cell["cell_type"] == "markdown" else ""


# -- (a) no leftovers -------------------------------------------------------------------------------------------

LEFTOVER = re.compile(
    r"\bold text\b|\breplaces the old\b|\bearlier version of this exercise\b"
    r"|\bthe old\b(?! (?:policy|policies|ones|log-?probs?|ratios?)\b)",
    re.IGNORECASE,
)
"""Words of a lesson that argues with an earlier version of itself. "The old policy" (and its log-probs) is PPO's
pi_old, not a leftover."""


def test_the_leftover_pattern_tells_a_leftover_from_pi_old():
    for leftover in ("unlike the old text", "This replaces the old exercise", "The old claim said",
                     "an earlier version of this exercise"):  # fmt: skip
        assert LEFTOVER.search(leftover), leftover
    for fine in ("one the old policy was unsure of", "its log-probs are the old ones", "a bold text", "the older"):
        assert not LEFTOVER.search(fine), fine


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_lesson_mentions_an_earlier_version_of_itself(path):
    found = [
        f"cell {index}: {match.group(0)!r}"
        for index, cell in enumerate(cells(path))
        if (match := LEFTOVER.search(markdown(cell)))
    ]
    assert not found, f"{path.stem} argues with an earlier version of itself: {found}"


# -- (b) a prediction the task asked for -------------------------------------------------------------------------

OUTCOME = "<details><summary>Expected outcome"
PREDICTION = re.compile(r"\bpredict(?:ion|ions|ed)\b", re.IGNORECASE)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_an_expected_outcome_argues_only_with_a_prediction_its_task_asked_for(path):
    """An expected outcome that speaks of "the prediction" or what was "predicted" answers a task cell that asks
    the student to predict first."""
    notebook = cells(path)
    for index, cell in enumerate(notebook):
        text = markdown(cell)
        if not text.startswith(OUTCOME) or not PREDICTION.search(text):
            continue
        task = next((markdown(c) for c in reversed(notebook[:index]) if markdown(c).startswith("### ")), "")
        assert "Predict" in task, (
            f"{path.stem} cell {index} argues with a prediction ({PREDICTION.search(text).group(0)!r}) that its task "
            f"cell {task.splitlines()[0] if task else '(none)'!r} never asks for: add 'Predict first: ...' to the task"
        )


# -- (c) concept questions ---------------------------------------------------------------------------------------

CONCEPT = "**Concept check.**"
ANSWER = "<details><summary>Answer</summary>"


def concept_checks(notebook: list[dict]) -> list[tuple[int, str, dict | None]]:
    """(index, question and answer text, the cell after them) for every concept check: the answer is collapsed in
    the question's cell or in the Markdown cell right after it."""
    found = []
    for index, cell in enumerate(notebook):
        text = markdown(cell)
        if not text.startswith(CONCEPT):
            continue
        following = notebook[index + 1] if index + 1 < len(notebook) else None
        if ANSWER not in text and markdown(following).startswith(ANSWER):
            text += "\n" + markdown(following)
            following = notebook[index + 2] if index + 2 < len(notebook) else None
        found.append((index, text, following))
    return found


@pytest.mark.parametrize("path", RESEARCH, ids=lambda p: p.stem)
def test_every_research_chapter_asks_two_concept_questions_with_collapsed_answers(path):
    """Predict, then run: each question sits right before the code cell whose output answers it, and its answer is
    collapsed (`<details><summary>Answer</summary>` ... `</details>`)."""
    checks = concept_checks(cells(path))
    assert len(checks) >= 2, f"{path.stem}: {len(checks)} concept checks (at least 2, each starting {CONCEPT!r})"
    for index, text, following in checks:
        answer = text.find(ANSWER)
        assert answer > len(CONCEPT), f"{path.stem} cell {index}: the question needs a collapsed {ANSWER!r}"
        assert "</details>" in text[answer:], f"{path.stem} cell {index}: the answer's <details> is never closed"
        assert text[len(CONCEPT) : answer].strip(), f"{path.stem} cell {index}: no question before the answer"
        assert following is not None and following["cell_type"] == "code" and following["outputs"], (
            f"{path.stem} cell {index}: a concept check comes right before the code cell whose output answers it"
        )


# -- (d) hints for the implement-it exercises --------------------------------------------------------------------

IMPLEMENT = re.compile(r"^### Implement it · ", re.MULTILINE)
HINT = "<details><summary>Hint"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_implement_it_exercise_has_a_collapsed_hint_before_its_check(path):
    """The stub's docstring is the contract; the steps are in a collapsed hint cell between the task and the cell
    that runs the checks."""
    notebook = cells(path)
    for index, cell in enumerate(notebook):
        if not IMPLEMENT.search(markdown(cell)):
            continue
        hint = markdown(notebook[index + 1]) if index + 1 < len(notebook) else ""
        assert hint.startswith(HINT) and "</details>" in hint, (
            f"{path.stem} cell {index + 1}: the cell after {markdown(cell).splitlines()[0]!r} is a collapsed hint "
            f"starting {HINT!r}"
        )
        check = notebook[index + 2] if index + 2 < len(notebook) else None
        assert check is not None and check["cell_type"] == "code" and "check(" in source(check), (
            f"{path.stem} cell {index + 2}: the hint is followed by the cell that runs the checks"
        )


# -- (e) stub docstrings are contracts ---------------------------------------------------------------------------

PAPER = re.compile(r"arXiv \d{4}\.\d{4,5}|\bEqs?\. \d+")
RECIPE = re.compile(r"\b(?:first|then) (?:compute|calculate|sort|walk|loop|take|subtract|divide)\b", re.IGNORECASE)


def stubs() -> list[tuple[str, str, str]]:
    """(file, function, docstring) of every function of the implement-it modules."""
    found = []
    for path in STUBS:
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                found.append((path.name, node.name, ast.get_docstring(node) or ""))
    return found


def test_the_stub_modules_are_the_exercises():
    import exercises

    assert {f"{file[:-3]}.{function}" for file, function, _ in stubs()} == set(exercises.NAMES)


@pytest.mark.parametrize(("file", "function", "doc"), stubs(), ids=[f"{f[:-3]}.{name}" for f, name, _ in stubs()])
def test_every_stub_docstring_is_a_contract(file, function, doc):
    """It names the paper (arXiv id) or the equation, and states the arguments and the result; it does not walk
    through the steps, which are in the notebook's hint cell."""
    where = f"exercises/{file}::{function}"
    assert PAPER.search(doc), f"{where}: the docstring names the paper (arXiv id) or the equation (Eq. N)"
    assert re.search(r"^Args:$", doc, re.MULTILINE), f"{where}: the docstring has an 'Args:' section"
    assert re.search(r"^Returns:$", doc, re.MULTILINE), f"{where}: the docstring has a 'Returns:' section"
    recipe = RECIPE.search(doc)
    assert not recipe, f"{where}: the docstring gives a step ({recipe.group(0)!r}); steps go in the hint cell"
