"""The rollout benchmark runs end to end (its numbers are measurements, never asserted)."""

from __future__ import annotations

import re

from course_lib import bench


def test_rollout_benchmark_prints_its_measurements(capsys):
    status = bench.main(["rollout", "--batch", "8", "--group", "4", "--repeats", "1"])
    out = capsys.readouterr().out
    assert status == 0
    assert "8 distinct tasks:" in out and "2 tasks x 4 samples" in out
    assert re.search(r"engine time: model \d+%, sampling \d+%, env \d+%", out)
    assert re.search(r"at most \d+\.\d\d with zero engine overhead", out)
    assert re.fullmatch(r"speedup_vs_generate=\d+\.\d\d", out.strip().splitlines()[-1])
