"""Chapter 13's C13.5 (`course_lib.integrations.trl_checks`): on the same episodes TRL's batch is the course's, and
the check counts a mismatch when TRL's advantages, kept rows or loss are not the course's (mutants)."""

from __future__ import annotations

import pytest
import torch

from course_lib import data
from course_lib.chapters import ch13_scale_out as ch13
from course_lib.course.claims import evaluate_all
from course_lib.integrations import trl_checks
from course_lib.integrations.trl_methods import CourseMethodTrainer
from course_lib.tasks import key_door_grid, two_hop_search

GRID, SEARCH = key_door_grid.tool_task(), two_hop_search.tool_task()
"""Chapters 07's and 08's tasks with their own methods (GiGPO in step mode, ARPO's tree)."""


@pytest.fixture(scope="module")
def bases():
    return {"07": data.load_base(GRID.base), "08": data.load_base(SEARCH.base)}


def test_every_method_matches_the_course_on_seed_0(bases):
    checks = {
        "gigpo_step": trl_checks.gigpo_check(GRID, 0, bases["07"]),
        "gigpo_trajectory": trl_checks.gigpo_check(SEARCH, 0, bases["08"]),
        "arpo_tree": trl_checks.tree_check("arpo", 0, bases["08"]),
        "starpo_s": trl_checks.filter_check("starpo_s", 0, bases["08"]),
    }
    assert all(check["mismatches"] == 0 for check in checks.values()), checks
    assert checks["gigpo_step"]["rows"] > 8  # step rows, not one per episode (2 prompts x 4 episodes)
    assert checks["arpo_tree"]["branches"] > 0 and checks["arpo_tree"]["rows"] == 4 * trl_checks.TREE_PROMPTS
    assert 0 < checks["starpo_s"]["kept"] < checks["starpo_s"]["rows"]  # the filter dropped and kept groups


def perturbed(monkeypatch, change):
    """Make `CourseMethodTrainer`'s batch differ from the course's by `change(output)`."""
    original = CourseMethodTrainer._generate_and_score_completions

    def wrong(self, inputs):
        output = original(self, inputs)
        change(output)
        return output

    monkeypatch.setattr(CourseMethodTrainer, "_generate_and_score_completions", wrong)


def test_a_shifted_advantage_is_a_mismatch(bases, monkeypatch):
    def shift(output):
        output["advantages"][0, 0] += 1e-3

    perturbed(monkeypatch, shift)
    assert trl_checks.gigpo_check(GRID, 0, bases["07"])["mismatches"] >= 1


def test_a_dropped_row_is_a_mismatch(bases, monkeypatch):
    def drop_first_kept(output):
        row = int(torch.nonzero(output["tool_mask"].bool().any(1))[0])
        output["tool_mask"][row] = 0

    perturbed(monkeypatch, drop_first_kept)
    assert trl_checks.filter_check("starpo_s", 0, bases["08"])["mismatches"] >= 1


def test_claim_13_5_fails_on_a_mismatch_or_a_tree_that_never_branched():
    numbers = {"methods_mismatches": 0.0, "methods_arpo_tree_branches": 1.0, "methods_aepo_tree_branches": 0.0}
    spec = next(spec for spec in ch13.CLAIMS if spec.id == "C13.5")
    assert evaluate_all([spec], numbers)[0].passed
    assert not evaluate_all([spec], numbers | {"methods_mismatches": 1.0})[0].passed
    assert not evaluate_all([spec], numbers | {"methods_arpo_tree_branches": 0.0})[0].passed
