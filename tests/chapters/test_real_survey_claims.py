"""Chapter 16's second half, the survey on a real model: its settings' claims read the numbers `lab.real_survey`
records and are decided by the course's rule, "not testable" where the pre-registration says so."""

from __future__ import annotations

import shutil

import pytest

from course_lib.chapters import ch16_real_model as ch16
from course_lib.course import recorded
from course_lib.lab import verdicts
from course_lib.tasks import real_model

COURSE_RESULTS = recorded.RESULTS_DIR


def premise_numbers(seed: int, **changes: float) -> dict[str, float]:
    """A warm-start seed's record as `real_survey warm-start --premises` writes it, with `changes`."""
    numbers = {f"{task}_{key}": 0.5 for task in ("calculator", "key_door", "two_hop", "lake")
               for key in ("success", "valid_rate")}  # fmt: skip
    numbers |= {
        "two_hop_entropy_after_result_minus_first": 0.3 + 0.01 * seed,
        "two_hop_entropy_scored": 40.0,
        "calculator_calculator_on_minus_off": 0.2 + 0.01 * seed,
        "calculator_calculator_reach": 0.9,
        "lake_reasoning_retrieval_minus_chance": 0.0,
        "lake_reasoning_scored": 0.0,
        "two_hop_branching_top3_over_uniform": 0.1,
        "two_hop_branching_scored": 30.0,
        "two_hop_branching_reach": 0.02,
    }
    return numbers | changes


@pytest.fixture
def results(tmp_path):
    """A results folder holding chapter 16's own record (its first half) and nothing of the survey's."""
    shutil.copy(recorded.path("ch16"), tmp_path)
    with recorded.recording_into(tmp_path):
        recorded.begin()
        yield tmp_path


def status(claim_id: str, chapter: str = "ch16") -> verdicts.CourseVerdict:
    return next(v for v in verdicts.chapter_verdicts(chapter) if v.id == claim_id)


def record_warm_starts(seed: int, numbers: dict[str, float]) -> None:
    """A seed of every survey task's warm start, each in its own file, as `real_survey warm-start` writes them."""
    for task in ch16.SURVEY_TASKS:
        own = {key: value for key, value in numbers.items() if key.startswith(task)}
        recorded.record(real_model.warm_start_results(task), seed, (), own, 1.0)


def test_the_settings_appear_as_their_files_are_recorded(results):
    assert verdicts.settings("ch16") == []
    for seed in range(5):
        record_warm_starts(seed, premise_numbers(seed, key_door_success=0.0))
    assert [s.results for s in verdicts.settings("ch16")] == [real_model.warm_start_results(task)
                                                              for task in ch16.SURVEY_TASKS]  # fmt: skip
    assert status("C16.13d").holds and status("C16.14d").holds  # a rise above 0; 10 points with room to show it
    assert status("C16.15d").untestable and "scored" in status("C16.15d").untestable  # no closed reasoning
    assert status("C16.16d").untestable  # a margin of 0.05 beyond a reach of 0.02
    assert status("C16.9d").passed == 5 and status("C16.10d").passed == 5  # valid actions, success within reach
    record_warm_starts(5, premise_numbers(5, calculator_success=0.9))
    assert status("C16.9d").passed == 5 and status("C16.9d").seeds == 6  # no room for RL left on seed 5
    assert "| 5 | 0.9 |" in ch16.warm_start_tables().replace("0.900", "0.9")


@pytest.mark.parametrize(
    ("differences", "comparable", "expected"),
    [
        ([0.10, 0.12, 0.08, 0.11, 0.09], 1.0, "holds"),
        ([0.10, -0.12, 0.08, 0.01, 0.09], 1.0, "not"),
        ([0.0] * 5, 0.0, "untestable"),  # neither arm reached 5% on any seed: nothing compared
    ],
)
def test_a_comparison_is_decided_on_its_paired_differences(results, differences, comparable, expected):
    for seed, difference in enumerate(differences):
        numbers = {"grpo_success": 0.2, "gigpo_success": 0.2 + difference, "difference": difference,
                   "comparable": comparable}  # fmt: skip
        recorded.record(real_model.comparison_results("gigpo"), seed, (), numbers, 1.0)
    verdict = status("C16.17d")
    assert verdict.decided
    assert {"holds": verdict.holds, "not": not verdict.holds and not verdict.untestable,
            "untestable": bool(verdict.untestable)}[expected]  # fmt: skip


def test_every_comparison_has_its_claim_and_a_seed_below_5_percent_compares_nothing():
    assert set(ch16.COMPARISON_CLAIMS) == set(real_model.COMPARISONS)
    assert real_model.COMPARABLE_SUCCESS == 0.05


def test_the_methods_are_shown_beside_the_course_models_verdicts(results):
    for file in (*COURSE_RESULTS.glob("ch0[789]*.json"), *COURSE_RESULTS.glob("ch11*.json")):
        shutil.copy(file, results)
    table = verdicts.beside(ch16.BESIDE, ch16.BESIDE_HEADERS).splitlines()
    assert table[0] == "| " + " | ".join(ch16.BESIDE_HEADERS) + " |" and len(table) == 2 + len(ch16.BESIDE)
    gigpo = next(line for line in table if line.startswith("| GiGPO"))
    assert "C16.17d: not recorded yet: `python -m course_lib.lab.real_survey compare gigpo" in gigpo
    assert f"C7.1: {status('C7.1', 'ch07').status} (" in gigpo  # read in chapter 07, with its interval
    assert gigpo.count("| - ") == 2  # no premise of GiGPO's is measured: it holds by construction


def test_a_comparison_whose_premise_failed_is_shown_as_not_run(results):
    """Section 3's rule: ARPO's comparison is not run where its premise (C16.13d) was decided and failed; StarPO-S's
    is still to run where its premise (C16.15d) held; without the premises' records every one gives its command."""
    for file in (*COURSE_RESULTS.glob("ch0[789]*.json"), *COURSE_RESULTS.glob("ch11*.json")):
        shutil.copy(file, results)
    cells = {line.split(" | ")[0]: line for line in verdicts.beside(ch16.BESIDE, ch16.BESIDE_HEADERS,
                                                                     ch16.TRAINED_IF).splitlines()}  # fmt: skip
    assert "C16.18d: not recorded yet: `" in cells["| ARPO: entropy after a tool's response; ARPO against GRPO"]
    for task in ("two_hop", "lake"):
        shutil.copy(COURSE_RESULTS / f"ch16_warm_start_{task}.json", results)
    table = verdicts.beside(ch16.BESIDE, ch16.BESIDE_HEADERS, ch16.TRAINED_IF)
    arpo, aepo, starpo = (next(line for line in table.splitlines() if line.startswith(f"| {name}"))
                          for name in ("ARPO", "AEPO", "RAGEN-2"))  # fmt: skip
    assert "C16.18d: not run, since C16.13d does not hold (not reproduced at this scale)" in arpo
    assert "C16.19d: not run, since C16.16d does not hold (not reproduced at this scale)" in aepo
    assert "C16.20d: not recorded yet: `python -m course_lib.lab.real_survey compare starpo_s" in starpo
