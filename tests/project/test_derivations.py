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
    assert CHAPTERS == [f"ch{n:02d}" for n in (*range(13), 17)]  # every chapter that reproduces papers


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


def test_the_search_solutions_are_the_librarys_arithmetic():
    from course_lib.search.mcts import suffix_means, uct

    rap = (SOLUTIONS / "ch01.md").read_text(encoding="utf-8")
    scores = [uct(0.6, 10, 6, 1.0, 0.0), uct(0.4, 10, 3, 1.0, 0.0), uct(0.0, 10, 0, 1.0, 0.2)]
    assert [round(s, 4) for s in scores] == [1.2195, 1.2761, 1.7174]
    assert all(f"{s:.4f}" in rap for s in scores)
    assert [round(v, 4) for v in suffix_means([0.2, 0.4, 0.9])] == [0.5, 0.65, 0.9]


def test_the_reward_and_tree_solutions_are_the_librarys_arithmetic():
    from course_lib.algos.grpo import group_advantages
    from course_lib.algos.tree_grpo import tree_advantages
    from course_lib.envs.toolrl_reward import correctness, parse_calls, render_call

    def text(*calls) -> str:
        return "<think> x </think> <tool_call> " + " ".join(render_call(n, a) for n, a in calls) + " </tool_call>"

    truth = parse_calls(text(("get_weather", {"city": "paris", "day": "monday"})))
    near = text(("get_weather", {"city": "paris", "day": "tuesday"}))
    assert (correctness(truth, near), correctness(truth, near, coarse=True)) == (1.5, -3.0)
    assert correctness(truth, text(("get_forecast", {"city": "paris", "day": "monday"}))) == -3.0
    extra = text(("get_weather", {"city": "paris", "day": "monday"}), ("get_time", {"city": "paris"}))
    assert correctness(truth, extra) == 2.25
    rewards, prompt = torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.zeros(4, dtype=torch.long)
    two_trees = tree_advantages(rewards, prompt, torch.tensor([0, 0, 1, 1]))
    assert [round(v, 4) for v in two_trees.tolist()] == [2.2071, -1.2071, -0.5, -0.5]
    chains = tree_advantages(rewards, prompt, torch.arange(4))
    raw = tree_advantages(rewards, prompt, torch.arange(4), singleton="raw")
    assert [round(v, 4) for v in chains.tolist()] == [1.5, -0.5, -0.5, -0.5]
    assert [round(v, 4) for v in raw.tolist()] == [2.5, -0.5, -0.5, -0.5]
    group = torch.tensor([1.0, 0.0, 0.0, 1.0])
    assert torch.allclose(group_advantages(group, prompt), group_advantages(2 * group - 1, prompt))
    assert group_advantages(2 * group - 1, prompt, False).tolist() == [1.0, -1.0, -1.0, 1.0]


def test_the_planner_artist_and_design_solutions_are_the_librarys_arithmetic():
    import math

    from course_lib.algos.grpo import group_advantages
    from course_lib.course import designs
    from course_lib.envs.planner_reward import TERMS, staged_reward

    plan_a = dict(zip(TERMS, (1.0, 5 / 6, 0.0, 2 / 3, 0.0, 0.0), strict=True))
    plan_b = dict(zip(TERMS, (1.0, 1.0, 1.0, 2 / 3, 0.0, 0.0), strict=True))
    assert [round(staged_reward(plan_a, stage), 3) for stage in (1, 2, 3)] == [2.5, 0.0, 0.0]
    assert [round(staged_reward(plan_b, stage), 3) for stage in (1, 2, 3)] == [3.667, 1.0, 0.0]
    rewards = torch.tensor([1 + 0.1 + 0.2 * 2 / 3, 1.3, 0.3, 0.1])
    advantages = group_advantages(rewards, torch.zeros(4, dtype=torch.long))
    assert [round(v, 3) for v in advantages.tolist()] == [0.804, 0.911, -0.697, -1.019]
    paired, unpaired = math.sqrt(2 * 0.01 * 0.4), math.sqrt(0.02)
    assert designs.seeds_needed(paired, 0.10, 0.05, minimum=2, maximum=100) == 9
    assert designs.seeds_needed(unpaired, 0.10, 0.05, minimum=2, maximum=100) == 18
