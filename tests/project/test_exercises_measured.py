"""Every exercise in a notebook links its solution script and shows a collapsed, measured expected outcome in the cell
after it, and both are exactly what `python -m exercises.measure` ran and recorded (`exercises/solutions/`,
`results/exercises/`)."""

from pathlib import Path

import nbformat
import pytest

from exercises import measure

NOTEBOOKS = sorted(measure.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def chapter(path: Path) -> str:
    return "ch" + path.stem[:2]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_exercises_are_numbered_cells_with_measured_solutions(path):
    name = chapter(path)
    notebook = nbformat.read(path, as_version=4)
    cells = measure.exercise_cells(notebook)
    assert cells, f"{path.name}: no '### Exercise K · title' cell in section 8"
    assert sorted(cells) == list(range(1, len(cells) + 1)), f"exercises numbered {sorted(cells)}"
    recorded = measure.records(name)
    for number, (task, outcome) in cells.items():
        assert number in measure.solutions(name), f"{name} exercise {number}: no {measure.solution_path(name, number)}"
        assert str(number) in recorded, f"{name} exercise {number} not measured: python -m exercises.measure {name}"
        assert outcome is not None, f"{name} exercise {number}: no cell after the task for its expected outcome"
        cells_now = (task.source, outcome.source)
        synced = measure.synced_text(*cells_now, name, number, recorded[str(number)])
        assert synced == cells_now, f"{name} exercise {number}: the cells differ from the files (--sync rewrites them)"
    orphans = set(measure.solutions(name)) - set(cells)
    assert not orphans, f"solution scripts without an exercise cell: {sorted(orphans)}"


def test_records_hold_output_and_time():
    for path in sorted(measure.RECORDS.glob("ch*.json")):
        for number, record in measure.records(path.stem).items():
            assert record["output"].strip(), f"{path.name} exercise {number} printed nothing"
            assert record["cpu_seconds"] > 0 and record["threads"] == 1


def test_sync_rewrites_stale_cells(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "SOLUTIONS", tmp_path)
    (tmp_path / "ch99_1.py").write_text("print('hello')\n")
    record = {"output": "hello", "cpu_seconds": 42.0}
    task = "### Exercise 1 · Say hello\n\nDo it.\n\n**Solution:** [`old.py`](../old.py) (run it from the repo root)"
    outcome = (
        "<details><summary>Expected outcome (measured: 9.9 CPU-minutes, one thread)</summary>\n\n"
        "```text\nbye\n```\n\nIt greets.\n</details>"
    )
    monkeypatch.setattr(measure, "ROOT", tmp_path.parent)
    task, outcome = measure.synced_text(task, outcome, "ch99", 1, record)
    script = f"{tmp_path.name}/ch99_1.py"
    assert f"**Solution:** [`{script}`](../{script}) (run it from the repo root)" in task
    assert "```text\nhello\n```" in outcome and "measured: 0.7 CPU-minutes" in outcome and "It greets." in outcome
    with pytest.raises(SystemExit, match="needs a"):
        measure.synced_text("### Exercise 1 · No link", outcome, "ch99", 1, record)
    with pytest.raises(SystemExit, match="needs a"):
        measure.synced_text(task, "no outcome block", "ch99", 1, record)
