"""Issue 59: written derivation problems in the research chapters, with worked solutions that only the instructor's
edition holds (`exercises/solutions/derivations/`, which the student edition leaves out)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from course_lib.lab import student_edition

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "exercises" / "solutions" / "derivations"
CHAPTERS = sorted(path.stem for path in SOLUTIONS.glob("ch*.md"))


def derive_cell(chapter: str) -> str:
    notebook = next((ROOT / "notebooks").glob(f"{chapter[2:]}_*.ipynb"))
    cells = ["".join(cell["source"]) for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]]
    found = [cell for cell in cells if cell.startswith("### Derive it")]
    assert len(found) == 1, f"{notebook.name}: one '### Derive it' cell"
    return found[0]


def test_the_chapters_with_derivations():
    assert CHAPTERS == ["ch00", "ch07", "ch08", "ch09", "ch10", "ch11"]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_each_problem_has_its_worked_solution_and_the_edition_drops_the_link(chapter):
    cell = derive_cell(chapter)
    problems = re.findall(r"^(\d)\. \*\*(.+?)\.\*\*", cell, re.M)
    assert len(problems) >= 2 and [int(n) for n, _ in problems] == list(range(1, len(problems) + 1))
    solutions = (SOLUTIONS / f"{chapter}.md").read_text(encoding="utf-8")
    titles = re.findall(r"^## Problem (\d) · (.+)$", solutions, re.M)
    assert [(int(n), title) for n, title in titles] == [(int(n), title) for n, title in problems], chapter
    assert f"exercises/solutions/derivations/{chapter}.md" in cell
    student = student_edition.student_markdown(cell)
    assert "exercises/solutions" not in student and all(title in student for _, title in problems)


def test_the_student_edition_leaves_the_worked_solutions_out(tmp_path):
    student_edition.build(tmp_path)
    assert not (tmp_path / "exercises" / "solutions").exists()


def test_the_gae_solution_is_the_librarys_arithmetic():
    from course_lib.algos.ppo import gae

    solution = (SOLUTIONS / "ch09.md").read_text(encoding="utf-8")
    rewards, values = torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0.5, 0.6, 0.8])
    assert [round(v, 4) for v in gae(rewards, values, 1.0, 0.95).tolist()] == [0.4705, 0.39, 0.2]
    assert "0.4705" in solution and "0.39" in solution and "(0.5, 0.4, 0.2)" in solution
    assert [round(v, 4) for v in gae(rewards, values, 1.0, 1.0).tolist()] == [0.5, 0.4, 0.2]


def test_the_aepo_solution_is_the_librarys_arithmetic():
    from course_lib.algos import aepo

    solution = (SOLUTIONS / "ch11.md").read_text(encoding="utf-8")
    assert [aepo.global_samples(16, difference, 0.0) for difference in (0.0, 2.0, -2.0)] == [9, 12, 5]
    assert [aepo.branch_probability(0.0, 0.0, rounds) for rounds in (0, 4, 10)] == [0.5, 0.375, 0.0]
    assert "m = 8 + 1 = 9" in solution and "= 0.375" in solution
