"""The golden run: any change to what the engine or a GRPO update computes, down to the last bit."""

from __future__ import annotations

import json
import math

import pytest

from course_lib.lab import golden

pytestmark = pytest.mark.slow  # the whole file: see its docstring


def test_digests_see_a_one_ulp_change():
    value = 0.1
    nudged = math.nextafter(value, 1.0)
    assert golden.digest([[1, 2], [value]]) == golden.digest([[1, 2], [0.1]])
    assert golden.digest([[1, 2], [nudged]]) != golden.digest([[1, 2], [value]])


def test_differences_name_the_changed_cases(tmp_path, monkeypatch):
    path = tmp_path / "golden.json"
    path.write_text(json.dumps({"machine": golden.machine(), "digests": {"a": "1", "b": "2", "gone": "3"}}))
    monkeypatch.setattr(golden, "digests", lambda: {"a": "1", "b": "changed", "new": "4"})
    assert sorted(golden.differences(path)) == ["b", "gone", "new"]


def test_a_missing_record_says_how_to_make_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="python -m course_lib.lab.golden --update"):
        golden.recorded(tmp_path / "missing.json")


def test_golden_run_is_bit_identical():
    """Chapter outputs were committed from this arithmetic. A failure here means the engine or the
    update now computes different bits: if that is deliberate, re-run every chapter's seeds, refresh
    the notebooks and record the new digests with `python -m course_lib.lab.golden --update`."""
    stored = golden.recorded()
    if stored["machine"] != golden.machine():
        pytest.skip(f"digests recorded on {stored['machine']}; this machine rounds differently")
    assert golden.differences() == []
