"""Every exercise in a notebook has a collapsed solution and a measured expected outcome, and both are exactly what
`python -m exercises.measure` ran and recorded (`exercises/solutions/`, `results/exercises/`)."""

from pathlib import Path

import nbformat
import pytest

from exercises import measure

NOTEBOOKS = sorted(measure.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def chapter(path: Path) -> str:
    return "ch" + path.stem[:2]


def section_8(path: Path) -> list[str]:
    cells = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"]
    start = next(i for i, c in enumerate(cells) if c.source.startswith("## 8 "))
    return [c.source for c in cells[start:]]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_exercises_are_numbered_cells_with_measured_solutions(path):
    name = chapter(path)
    notebook = nbformat.read(path, as_version=4)
    cells = measure.exercise_cells(notebook)
    assert cells, f"{path.name}: no '### Exercise K · title' cell in section 8"
    assert sorted(cells) == list(range(1, len(cells) + 1)), f"exercises numbered {sorted(cells)}"
    recorded = measure.records(name)
    for number, cell in cells.items():
        text = cell.source
        assert number in measure.solutions(name), f"{name} exercise {number}: no {measure.solution_path(name, number)}"
        assert str(number) in recorded, f"{name} exercise {number} not measured: python -m exercises.measure {name}"
        synced = measure.synced_text(text, name, number, recorded[str(number)])
        assert synced == text, f"{name} exercise {number}: the cell differs from the files (--sync rewrites it)"
    orphans = set(measure.solutions(name)) - set(cells)
    assert not orphans, f"solution scripts without an exercise cell: {sorted(orphans)}"


def test_records_hold_output_and_time():
    for path in sorted(measure.RECORDS.glob("ch*.json")):
        for number, record in measure.records(path.stem).items():
            assert record["output"].strip(), f"{path.name} exercise {number} printed nothing"
            assert record["cpu_seconds"] > 0 and record["threads"] == 1


def test_sync_rewrites_a_stale_cell(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "SOLUTIONS", tmp_path)
    (tmp_path / "ch99_1.py").write_text("print('hello')\n")
    record = {"output": "hello", "cpu_seconds": 42.0}
    stale = (
        "### Exercise 1 · Say hello\n\nDo it.\n\n<details><summary>Solution (old.py)</summary>\n\n```python\nold\n```\n"
        "</details>\n\n<details><summary>Expected outcome (measured: 9.9 CPU-minutes, one thread)</summary>\n\n"
        "```text\nbye\n```\n\nIt greets.\n</details>"
    )
    monkeypatch.setattr(measure, "ROOT", tmp_path.parent)
    synced = measure.synced_text(stale, "ch99", 1, record)
    assert "```python\nprint('hello')\n```" in synced and "```text\nhello\n```" in synced
    assert "measured: 0.7 CPU-minutes" in synced and "It greets." in synced and f"({tmp_path.name}/ch99_1.py)" in synced
    with pytest.raises(SystemExit, match="needs a"):
        measure.synced_text("### Exercise 1 · No blocks", "ch99", 1, record)
