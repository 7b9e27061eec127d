"""`python -m course_lib compare A B` and `plot RUN` (`lab.compare_runs`), on records files and a run folder written
here: the paired difference is computed over the seeds both recorded, by hand."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from course_lib.lab import compare_runs


def records(path, numbers_by_seed, curve=True):
    seeds = {
        str(seed): {"numbers": numbers, **({"curves": {"grpo/eval_success": [[0, 0.1 * seed], [5, 0.2 + 0.1 * seed]]}}
                                            if curve else {})}
        for seed, numbers in numbers_by_seed.items()
    }  # fmt: skip
    path.write_text(json.dumps({"chapter": "ch99", "seeds": seeds}))
    return path


def test_compare_pairs_the_seeds_both_recorded(tmp_path):
    a = records(tmp_path / "a.json", {0: {"x": 0.5, "only_a": 1.0}, 1: {"x": 0.6}, 2: {"x": 0.7}})
    b = records(tmp_path / "b.json", {0: {"x": 0.6}, 1: {"x": 0.9}, 3: {"x": 0.0}})
    lines = compare_runs.compare(a, b, tmp_path / "c.png")
    [row] = [line for line in lines if line.startswith("| x |")]
    # A's mean over its three seeds 0.600; B's over its three 0.500; B - A over seeds 0 and 1: +0.1 and +0.3, mean
    # +0.2, t(0.975, 1) = 12.706 times s / sqrt(2) = 0.1: [-1.071, +1.471]
    assert row == "| x | 0.600 (3 seeds) | 0.500 (3 seeds) | +0.200 [-1.071, +1.471] over 2 paired seeds |"
    assert not any("only_a" in line for line in lines), "a number only one side holds is not compared"
    assert (tmp_path / "c.png").stat().st_size > 0 and "1 common curves" in lines[-1]


def test_plot_reads_a_records_file_and_a_run_folder(tmp_path):
    assert compare_runs.plot(records(tmp_path / "a.json", {0: {}, 1: {}}), tmp_path / "p.png").stat().st_size > 0
    folder = tmp_path / "ch07-seed0"
    folder.mkdir()
    rows = [{"run": "1-grpo", "method": "grpo", "iteration": i, "success": 0.1 * i} for i in range(3)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert compare_runs.load_run(folder)["seeds"]["0"]["curves"]["1-grpo/success"][2] == [2.0, 0.2]
    assert compare_runs.plot(folder, tmp_path / "q.png").stat().st_size > 0
    with pytest.raises(ValueError, match="holds no curves"):
        compare_runs.plot(records(tmp_path / "n.json", {0: {}}, curve=False), tmp_path / "n.png")


def test_the_command_line_names_what_is_missing(tmp_path):
    done = subprocess.run([sys.executable, "-m", "course_lib", "compare", str(tmp_path / "no.json"), "x"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2 and "does not exist: give a records file" in done.stderr
    a = records(tmp_path / "a.json", {0: {"x": 1.0}})
    done = subprocess.run([sys.executable, "-m", "course_lib", "compare", str(a), str(a), "--png",
                           str(tmp_path / "c.png")], capture_output=True, text=True)  # fmt: skip
    assert (
        done.returncode == 0 and "| x | 1.000 (1 seeds) | 1.000 (1 seeds) | 1 paired seed: no interval |" in done.stdout
    )
