"""The project stays `ruff` clean, notebooks included: lint rules and formatting; and its files stay short."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff_is_clean(command):
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "course_lib", "tests", "notebooks", "exercises"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


MODULE_LINES = 600
LONG_MODULES = {
    "course_lib/lab/bench.py": "five benchmarks behind one command (rollout, trl, decoder, roofline, update), each "
    "a section of its own; a package per benchmark is the next split",
    "course_lib/chapters/ch08_arpo.py": "a chapter reads top to bottom beside its notebook: ARPO's settings, arms, "
    "tree statistics, claims and its leakage audit; chapters 11 and 12 reuse its setting and helpers",
    "course_lib/chapters/ch03_planner_r1.py": "a chapter reads top to bottom beside its notebook: Planner-R1's two "
    "model sizes, reward shapes, failure categories and its leakage audit",
    "course_lib/chapters/ch05_toolrl.py": "a chapter reads top to bottom beside its notebook: ToolRL's four reward "
    "arms, its novel-tool split and its leakage audit (held-out tool triples)",
    "course_lib/chapters/ch10_ragen2.py": "a chapter reads top to bottom beside its notebook: RAGEN-2's filter arms, "
    "the MI buckets and its leakage audit",
    "course_lib/chapters/ch17_what_came_next.py": "a chapter reads top to bottom beside its notebook: three methods "
    "on two chapters' tasks, their mechanism checks, the sweep of when step credit helps, its pre-registered plan and "
    "its leakage audit; splitting it would spread one pre-registration over several files",
}
"""Modules over `MODULE_LINES` lines, each with the reason it stays whole (issue 44: CI fails on any other)."""
TEST_LINES = 800


def test_no_module_passes_600_lines_unless_listed_with_a_reason():
    lengths = {
        path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
        for path in (ROOT / "course_lib").rglob("*.py")
    }
    too_long = {path: n for path, n in lengths.items() if n > MODULE_LINES and path not in LONG_MODULES}
    assert too_long == {}, f"split these modules, or list them in LONG_MODULES with a reason: {too_long}"
    stale = [path for path in LONG_MODULES if lengths.get(path, 0) <= MODULE_LINES]
    assert stale == [], f"no longer over {MODULE_LINES} lines (or gone): take them off LONG_MODULES: {stale}"


def test_no_test_file_passes_800_lines():
    long = {
        path.relative_to(ROOT).as_posix(): n
        for folder in ("tests", "tests_verl", "exercises")
        for path in (ROOT / folder).rglob("*.py")
        if (n := len(path.read_text().splitlines())) > TEST_LINES
    }
    assert long == {}, f"split these test files by what they test: {long}"
