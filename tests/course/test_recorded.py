"""Recorded results: every chapter's `results/chNN.json` exists, covers its claims on seeds 0-2, and
each recorded verdict is what the claim's check gives on the recorded numbers (so a hand-edited
number or verdict fails here); plus unit tests of `course_lib.course.recorded` on a temporary folder.

The per-chapter files are written by each chapter's `--record` run; until they are, the first three
tests fail by design (the message names the command to run)."""

from __future__ import annotations

import json

import pytest

from course_lib import chapters
from course_lib.course import recorded
from course_lib.course.claims import NOT_REPRODUCED, ClaimSpec

CHAPTERS = sorted(chapters.modules())


def chapter_module(key: str):
    return chapters.module(key)


@pytest.mark.parametrize("key", CHAPTERS)
def test_recorded_file_covers_claims_and_seeds(key):
    loaded = recorded.load(key)
    seeds = {int(s) for s in loaded["seeds"]}
    assert {0, 1, 2} <= seeds, f"{key}: seeds {sorted(seeds)} recorded; run `{recorded.record_command(key)}`"
    ids = {spec.id for spec in chapter_module(key).CLAIMS}
    for seed, record in loaded["seeds"].items():
        assert set(record["verdicts"]) == ids, (key, seed)
        assert set(record["passed"]) == ids, (key, seed)
        assert {"git_commit", "cpu", "torch", "command"} <= set(record["provenance"]), (key, seed)


@pytest.mark.parametrize("key", CHAPTERS)
def test_recorded_verdicts_follow_from_recorded_numbers(key):
    for seed, record in recorded.load(key)["seeds"].items():
        for spec in chapter_module(key).CLAIMS:
            claim = spec.evaluate(record["numbers"])
            assert record["verdicts"][spec.id] == claim.status, (key, seed, spec.id)
            assert record["passed"][spec.id] == claim.passed, (key, seed, spec.id)


# Unit tests on a temporary results folder ---------------------------------------------------------
SPECS = (
    ClaimSpec("C9.1", "gain at least 0.1", "paper: +0.2", "gain", lambda n: n["gain"] >= 0.1),
    ClaimSpec("C9.2", "cost below 10", "paper: 5 | 6", "cost", lambda n: n["cost"] < 10, required=False),
)


@pytest.fixture
def tmp_results(tmp_path, monkeypatch):
    """A results folder of the test's own, with a recording run begun (provenance captured) for it."""
    monkeypatch.setattr(recorded, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.setattr(recorded, "_run_provenance", None)
    recorded.begin()
    return tmp_path / "results"


def test_write_merges_by_seed_and_load_reads_back(tmp_results):
    first = recorded.make_record(0, SPECS, {"gain": 0.05, "cost": 12.0}, 1.5)
    assert first["verdicts"] == {"C9.1": "FAIL", "C9.2": NOT_REPRODUCED}
    assert first["passed"] == {"C9.1": False, "C9.2": False}
    path = recorded.write("ch09", [first, recorded.make_record(1, SPECS, {"gain": 0.2, "cost": 3.0}, 1.0)])
    assert path == tmp_results / "ch09.json"
    # a later record for seed 0 replaces the earlier one; seed 1 is kept; seeds stay in numeric order
    recorded.write("ch09", [recorded.make_record(0, SPECS, {"gain": 0.15, "cost": 4.0}, 2.0)])
    recorded.write("ch09", [recorded.make_record(10, SPECS, {"gain": 0.3, "cost": 4.0}, 2.0)])
    loaded = recorded.load("ch09")
    assert list(loaded["seeds"]) == ["0", "1", "10"]
    assert loaded["seeds"]["0"]["numbers"] == {"gain": 0.15, "cost": 4.0}
    assert loaded["seeds"]["0"]["verdicts"] == {"C9.1": "PASS", "C9.2": "PASS"}
    assert loaded["seeds"]["1"]["minutes"] == 1.0
    provenance = loaded["seeds"]["0"]["provenance"]
    assert len(provenance["git_commit"]) == 40 and isinstance(provenance["git_dirty"], bool)
    assert {"python", "torch", "transformers", "peft", "datasets", "numpy", "cpu", "torch_threads"} <= set(provenance)
    assert not list(tmp_results.glob("*.tmp"))


def test_load_names_the_command_when_missing_or_corrupt(tmp_results):
    with pytest.raises(recorded.ResultsMissing, match="python -m course_lib.chapters ch04 --seeds 0 1 2 3 4 --record"):
        recorded.load("ch04")
    tmp_results.mkdir()
    (tmp_results / "ch04.json").write_text('{"seeds": {"0": ')
    with pytest.raises(recorded.ResultsMissing, match="not readable JSON.*chapters ch04"):
        recorded.load("ch04")
    (tmp_results / "ch04.json").write_text(json.dumps({"chapter": "ch04"}))
    with pytest.raises(recorded.ResultsMissing, match="no `seeds`"):
        recorded.load("ch04")


def test_seed_range(tmp_results):
    recorded.write("ch09", [recorded.make_record(s, SPECS, {"gain": g, "cost": 1.0}, 1.0)
                           for s, g in ((0, 0.12), (1, 0.2), (2, 0.16))])  # fmt: skip
    assert recorded.seed_range("ch09", "gain") == (0.12, 0.2, 3)
    with pytest.raises(KeyError, match="nothing"):
        recorded.seed_range("ch09", "nothing")


def test_format_number():
    assert [recorded.format_number(x) for x in (0.7604, 48.0, 35.512, 3.2e12, float("inf"), 0.0)] == [
        "0.760", "48", "35.512", "3.2e+12", "∞", "0",
    ]  # fmt: skip
    assert recorded.format_number(-9.25e-18) == "0"  # zero up to rounding, not "-9.25e-18"
    assert recorded.format_number(2e-4) == "0.0002"


def test_claims_table(tmp_results):
    recorded.write("ch09", [recorded.make_record(s, SPECS, {"gain": g, "cost": 5.0}, 1.0)
                           for s, g in ((0, 0.12), (1, 0.2), (2, 0.16))])  # fmt: skip
    table = recorded.claims_table(SPECS, {"gain": 0.05, "cost": 7.25}, recorded.load("ch09"))
    lines = table.splitlines()
    assert lines[0] == (
        "| claim | kind | paper | miniature's test (margin) | this run | recorded seeds | this run's verdict |"
    )
    row = "| C9.1 | finding | paper: +0.2 | gain at least 0.1 [`gain`] | 0.050 | 0.120 to 0.200 (seeds 0-2) | FAIL |"
    assert lines[2] == row
    # a `|` inside a cell is escaped so the row keeps seven columns
    row = "| C9.2 | finding | paper: 5 \\| 6 | cost below 10 [`cost`] | 7.250 | 5 on every seed (seeds 0-2) | PASS |"
    assert lines[3] == row
    assert "not recorded" in recorded.claims_table(SPECS, {"gain": 0.2, "cost": 1.0}, None)


def test_curves_are_recorded_per_seed_and_loaded_back(tmp_results):
    curves = {"masked/eval_success": [(0, 0.1), (10, 0.4)], "masked/loss": [(0, 2.0)]}
    made = recorded.make_record(0, SPECS, {"gain": 0.2, "cost": 1.0}, 1.0, curves=curves)
    assert made["curves"] == {"masked/eval_success": [[0.0, 0.1], [10.0, 0.4]], "masked/loss": [[0.0, 2.0]]}
    assert "curves" not in recorded.make_record(1, SPECS, {"gain": 0.2, "cost": 1.0}, 1.0)
    recorded.write("ch09", [made, recorded.make_record(1, SPECS, {"gain": 0.2, "cost": 1.0}, 1.0)])
    recorded.write("ch09", [recorded.make_record(2, SPECS, {"gain": 0.2, "cost": 1.0}, 1.0,
                                               curves={"masked/eval_success": [(0, 0.3), (10, 0.5)]})])  # fmt: skip
    # seed 1 has no curves and is left out; x and y come back as float tuples, seeds as ints in order
    assert recorded.load_curves("ch09", "masked/eval_success") == {
        0: [(0.0, 0.1), (10.0, 0.4)],
        2: [(0.0, 0.3), (10.0, 0.5)],
    }
    assert recorded.load_curves("ch09", "masked/loss") == {0: [(0.0, 2.0)]}
    with pytest.raises(KeyError, match="no recorded seed of ch09 has the curve 'plain/loss'"):
        recorded.load_curves("ch09", "plain/loss")


def test_history_curves_skips_absent_keys():
    histories = {"masked": [{"iteration": 0, "loss": 1.0, "eval": 0.2}, {"iteration": 1, "loss": 0.5}],
                 "plain": [{"iteration": 0, "loss": 3.0}]}  # fmt: skip
    assert recorded.history_curves(histories, ["loss", "eval"]) == {
        "masked/loss": [(0.0, 1.0), (1.0, 0.5)], "masked/eval": [(0.0, 0.2)], "plain/loss": [(0.0, 3.0)],
    }  # fmt: skip


def test_seed_table_rows_and_mean(tmp_results):
    recorded.write("ch09", [recorded.make_record(0, SPECS, {"gain": 0.1, "cost": 4.0}, 1.0),
                           recorded.make_record(1, SPECS, {"gain": 0.3, "cost": 8.0}, 1.0),
                           recorded.make_record(2, SPECS[:1], {"gain": 0.2}, 1.0)])  # fmt: skip
    table = recorded.seed_table("ch09", [("gain", "gain (a|b)"), ("cost", "cost")])
    assert table.splitlines() == [
        "| seed | gain (a\\|b) | cost |",
        "|---|---|---|",
        "| 0 | 0.100 | 4 |",
        "| 1 | 0.300 | 8 |",
        "| 2 | 0.200 | - |",
        "| mean of 3 | 0.200 | 6 |",
    ]


def test_verdict_table(tmp_results):
    recorded.write("ch09", [recorded.make_record(0, SPECS, {"gain": 0.2, "cost": 4.0}, 1.0),
                           recorded.make_record(3, SPECS, {"gain": 0.05, "cost": 40.0}, 1.0)])  # fmt: skip
    assert recorded.verdict_table("ch09").splitlines() == [
        "| seed | C9.1 | C9.2 |",
        "|---|---|---|",
        "| 0 | PASS | PASS |",
        "| 3 | FAIL | not reproduced at this scale |",
        "| passed | 1 of 2 | 1 of 2 |",
    ]


def test_recorded_numbers_follow_numeric_seed_order_and_skip_missing():
    loaded = {"seeds": {"10": {"numbers": {"gain": 0.3}}, "2": {"numbers": {"gain": 0.1}}, "3": {"numbers": {}}}}
    assert recorded.recorded_numbers(loaded, "gain") == [0.1, 0.3]
    assert recorded.recorded_numbers(loaded, "cost") == []


def test_own_numbers_drop_pooled_ones_in_seed_order():
    from course_lib.course.recorded import own_numbers

    loaded = {"seeds": {"10": {"numbers": {"a": 3.0, "p_x": 9.0}}, "2": {"numbers": {"a": 1.0, "p_x": 9.0}}}}
    assert own_numbers(loaded, "p_") == [{"a": 1.0}, {"a": 3.0}]
    assert recorded.seed_numbers(loaded) == [{"a": 1.0, "p_x": 9.0}, {"a": 3.0, "p_x": 9.0}]  # seed 2 before 10


def test_a_gpu_run_records_beside_the_cpu_records_never_over_them(tmp_results, monkeypatch):
    cpu_target = recorded.write("ch09", [recorded.make_record(0, SPECS, {"gain": 0.2, "cost": 1.0}, 1.0)])
    before = cpu_target.read_text()
    monkeypatch.setenv("COURSE_SCALE", "gpu")
    gpu_target = recorded.record("ch09", 0, SPECS, {"gain": 0.3, "cost": 2.0}, 5.0)
    assert gpu_target == tmp_results / "gpu" / "ch09.json" and cpu_target.read_text() == before
    assert recorded.load("ch09")["seeds"]["0"]["numbers"]["gain"] == 0.2  # notebooks read the cpu records
    loaded = recorded.load("ch09", "gpu")["seeds"]["0"]
    assert loaded["numbers"]["gain"] == 0.3 and loaded["provenance"]["scale"] == "gpu"
    with pytest.raises(recorded.ResultsMissing, match="COURSE_SCALE=gpu python -m course_lib.chapters ch04"):
        recorded.load("ch04", "gpu")


def test_provenance_is_stamped_when_the_run_begins_not_when_a_seed_is_written(tmp_path, monkeypatch):
    """A commit made (or a file edited) while seeds run must not change what they say they ran on: the process runs
    the code it loaded, so every seed carries the snapshot `begin` took before the first one."""
    monkeypatch.setattr(recorded, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(recorded, "_run_provenance", None)
    monkeypatch.setattr(recorded, "_git", lambda *args: "a" * 40 if args[0] == "rev-parse" else "")
    recorded.begin()
    recorded.record("ch09", 0, SPECS, {"gain": 0.2, "cost": 1.0}, 1.0)
    monkeypatch.setattr(recorded, "_git", lambda *args: "b" * 40 if args[0] == "rev-parse" else " M course_lib/x.py")
    recorded.record("ch09", 1, SPECS, {"gain": 0.2, "cost": 1.0}, 1.0)
    seeds = recorded.load("ch09")["seeds"]
    assert {seeds[s]["provenance"]["git_commit"] for s in seeds} == {"a" * 40}
    assert not any(seeds[s]["provenance"]["git_dirty"] for s in seeds)


def test_a_record_needs_a_begun_run(tmp_path, monkeypatch):
    monkeypatch.setattr(recorded, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(recorded, "_run_provenance", None)
    with pytest.raises(RuntimeError, match=r"begin\(\) must run before the first seed"):
        recorded.record("ch09", 0, SPECS, {"gain": 0.2, "cost": 1.0}, 1.0)


def test_recording_into_the_course_results_refuses_a_dirty_tree(tmp_path, monkeypatch):
    monkeypatch.setattr(recorded, "_run_provenance", None)
    monkeypatch.setattr(recorded, "_git", lambda *args: "a" * 40 if args[0] == "rev-parse" else " M course_lib/x.py")
    with pytest.raises(recorded.DirtyTree, match="uncommitted changes"):
        recorded.begin()  # RESULTS_DIR is the course's own results/
    monkeypatch.setattr(recorded, "RESULTS_DIR", tmp_path)  # a fork's or a test's folder records, flagged dirty
    assert recorded.begin()["git_dirty"] is True


def test_origin_says_whether_this_run_can_equal_its_recorded_seed(tmp_results, monkeypatch):
    import torch

    from course_lib.machine import cpu_description

    record = recorded.make_record(0, SPECS, {"gain": 0.2, "cost": 1.0}, 1.0)
    here = {"cpu": cpu_description(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_threads": torch.get_num_threads()}  # fmt: skip
    recorded.write("ch09", [{**record, "provenance": here}])
    assert "the machine and threads results/ch09.json recorded it on" in recorded.origin("ch09", 0)
    # on that machine it checks the numbers: timings aside, this run's equal the recorded seed's
    same = recorded.origin("ch09", 0, {"gain": 0.2, "cost": 1.0, "grpo_seconds_per_iteration": 9.0})
    assert same.endswith("2 of 2 numbers equal the recorded seed's")
    assert recorded.origin("ch09", 0, {"gain": 0.3, "cost": 1.0}).endswith(
        "1 of 2 numbers equal the recorded seed's; 1 differ (this run, recorded, difference):\n"
        "  gain: this run 0.300, recorded 0.200 (+0.1)"
    )
    elsewhere = {**here, "cpu": "Another CPU (family 1, model 2)"}
    recorded.write("ch09", [{**record, "provenance": elsewhere}])
    line = recorded.origin("ch09", 0)
    assert "recorded it on Another CPU" in line and "the numbers marked 'this run' are this machine's" in line
    # elsewhere too, this run is compared with the record: which numbers differ, and by how much
    moved = recorded.origin("ch09", 0, {"gain": 0.25, "cost": 1.5})
    assert moved.splitlines()[1:] == [
        "0 of 2 numbers equal the recorded seed's; 2 differ (this run, recorded, difference):",
        "  cost: this run 1.500, recorded 1 (+0.5)",
        "  gain: this run 0.250, recorded 0.200 (+0.05)",
    ]
    assert recorded.origin("ch09", 0, {"gain": 0.2, "cost": 1.0}).endswith("2 of 2 numbers equal the recorded seed's")
    other_threads = {**here, "torch_threads": here["torch_threads"] + 1}
    recorded.write("ch09", [{**record, "provenance": other_threads}])
    assert "this machine's" in recorded.origin("ch09", 0)
    assert "has no seed 5" in recorded.origin("ch09", 5)
