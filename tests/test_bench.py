"""The rollout benchmark runs end to end (its numbers are measurements, never asserted)."""

from __future__ import annotations

import re

from course_lib import bench


def test_rollout_benchmark_prints_its_measurements(capsys):
    status = bench.main(["rollout", "--batch", "8", "--group", "4", "--repeats", "2", "--tasks", "ch00", "ch05"])
    out = capsys.readouterr().out
    assert status == 0
    assert "8 distinct tasks:" in out and "2 tasks x 4 samples" in out
    assert re.search(r"engine time: model \d+%, sampling \d+%, env \d+%", out)
    assert re.search(
        r"speedup \d+\.\d\d \(range \d+\.\d\d-\d+\.\d\d over 2 pairs\); at most \d+\.\d\d with zero engine "
        r"overhead, \d+\.\d\d if sampling is kept",
        out,
    )
    assert re.search(
        r"function_calling \(ch05, [\d,]+ parameters, 1\.0 turns and \d+ policy tokens per sequence\): speedup "
        r"\d+\.\d\d .*; at most \d+\.\d\d with zero engine overhead",  # every task prints its bound
        out,
    )
    assert "mini_travel" not in out  # only the tasks asked for
    assert re.fullmatch(r"speedup_vs_generate=\d+\.\d\d", out.strip().splitlines()[-1])


def test_interleaved_runs_pair_up_and_give_a_median_speedup():
    """Each pair's speedup is engine over generate() tokens per second; the headline is their median."""

    def run(tokens: int, seconds: float) -> bench.Run:
        return bench.Run(tokens=tokens, seconds=seconds, turns=1.0, split={})

    result = bench.Comparison(engine=[run(100, 1.0), run(100, 2.0), run(300, 1.0)], generate=[run(50, 1.0)] * 3)
    assert result.speedups == [2.0, 1.0, 6.0]
    assert result.speedup == 2.0
    assert result.describe() == "speedup 2.00 (range 1.00-6.00 over 3 pairs)"
