"""Measured exercises: run each exercise's solution, record what it printed and how long it took, and keep the
notebook's collapsed solution and expected outcome equal to what was run.

    python -m exercises.measure ch07           # run every solution of chapter 07, write results/exercises/ch07.json
    python -m exercises.measure ch07 2 3       # only exercises 2 and 3 (the others' records are kept)
    python -m exercises.measure ch07 --sync    # rewrite the notebook's Solution / Expected outcome blocks from them

A solution is a script, `exercises/solutions/ch07_2.py` for exercise 2 of chapter 07, that runs on its own from the
repository root (it loads or builds what it needs, as a student's cell would) and prints its outcome in a few lines.
It runs in a fresh process on one CPU thread; the record keeps its output, its CPU time (the process's user+system
time, which a busy machine barely changes) and its wall time.

In the notebook, exercise K of a chapter is two markdown cells, which `--sync` writes and
`tests/project/test_exercises_measured.py` checks. The first, headed `### Exercise K · <title>`, holds the task and
ends with a link to the script (the script stays in its file, so the lesson's cell stays short):

    **Solution:** [`exercises/solutions/ch07_2.py`](../exercises/solutions/ch07_2.py) ...

The next cell holds one collapsed block:

    <details><summary>Expected outcome (measured: 1.4 CPU-minutes, one thread)</summary> + a text fence with its
    output, then the exercise's own reading of it (prose that is the author's, kept as it is)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "exercises" / "solutions"
RECORDS = ROOT / "results" / "exercises"
NOTEBOOKS = ROOT / "notebooks"

HEADING = re.compile(r"^### Exercise (\d+) · ", re.M)
SOLUTION_LINK = re.compile(r"\*\*Solution:\*\* \[`(?P<path>[^`]+)`\]\(\.\./(?P<target>[^)]+)\)")
OUTCOME_BLOCK = re.compile(
    r"(<details><summary>Expected outcome \(measured: )(?P<minutes>[\d.]+)( CPU-minutes?, one thread\)</summary>\n\n"
    r"```text\n)(?P<output>.*?)(\n```)",
    re.S,
)


def solution_path(chapter: str, number: int) -> Path:
    return SOLUTIONS / f"{chapter}_{number}.py"


def solutions(chapter: str) -> list[int]:
    """Exercise numbers of `chapter` that have a solution script, in order."""
    found = (int(p.stem.split("_")[1]) for p in SOLUTIONS.glob(f"{chapter}_*.py") if p.stem.split("_")[1].isdigit())
    return sorted(found)


def records(chapter: str) -> dict[str, dict]:
    """The chapter's measured exercises (`{"2": {"output", "cpu_seconds", "wall_seconds", ...}}`); empty if none."""
    path = RECORDS / f"{chapter}.json"
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise SystemExit(f"{path} is not valid JSON ({error}); rerun: python -m exercises.measure {chapter}") from error


def cpu_minutes(record: dict) -> str:
    """The minutes shown in the notebook's summary line, to one decimal (at least 0.1)."""
    return f"{max(0.1, record['cpu_seconds'] / 60):.1f}"


def run(chapter: str, number: int) -> dict:
    """Run one solution in a fresh process on one thread; raise with its stderr if it fails."""
    path = solution_path(chapter, number)
    if not path.exists():
        raise SystemExit(f"no solution script {path.relative_to(ROOT)}")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(path)], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{path.relative_to(ROOT)} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "output": done.stdout.rstrip("\n"),
        "cpu_seconds": round(cpu, 1),
        "wall_seconds": round(wall, 1),
        "threads": 1,
        "script": str(path.relative_to(ROOT)),
        "measured": time.strftime("%Y-%m-%d"),
    }


def notebook_of(chapter: str) -> Path:
    found = sorted(NOTEBOOKS.glob(f"{chapter[2:]}_*.ipynb"))
    if len(found) != 1:
        raise SystemExit(f"no single notebook for {chapter} in {NOTEBOOKS}")
    return found[0]


def exercise_cells(notebook: dict) -> dict[int, tuple[dict, dict | None]]:
    """Exercise number -> (its task cell, headed `### Exercise K · ...`; the markdown cell right after it, which
    holds the expected outcome, or None if there is none)."""
    cells = {}
    markdown = [cell for cell in notebook["cells"] if cell["cell_type"] == "markdown"]
    for index, cell in enumerate(markdown):
        match = HEADING.search("".join(cell["source"]))
        if match:
            cells[int(match.group(1))] = (cell, markdown[index + 1] if index + 1 < len(markdown) else None)
    return cells


def synced_text(task: str, outcome: str, chapter: str, number: int, record: dict) -> tuple[str, str]:
    """An exercise's two cells (markdown) with the solution link and the expected-outcome block set from the files."""
    script = str(solution_path(chapter, number).relative_to(ROOT))
    if not SOLUTION_LINK.search(task) or not OUTCOME_BLOCK.search(outcome):
        raise SystemExit(
            f"{chapter} exercise {number}: the task cell needs a '**Solution:** [`path`](../path)' link and the cell "
            "after it a '<details><summary>Expected outcome (measured: 0 CPU-minutes, one thread)</summary>' block "
            "with a text fence (see exercises/measure.py)"
        )
    task = SOLUTION_LINK.sub(f"**Solution:** [`{script}`](../{script})", task, count=1)
    outcome = OUTCOME_BLOCK.sub(
        lambda m: m.group(1) + cpu_minutes(record) + m.group(3) + record["output"] + m.group(5), outcome, count=1
    )
    return task, outcome


def sync(chapter: str) -> list[int]:
    """Rewrite the notebook's exercise cells from the solution scripts and records; returns the numbers synced."""
    import nbformat

    path = notebook_of(chapter)
    notebook = nbformat.read(path, as_version=4)
    measured = records(chapter)
    synced = []
    for number, (task, outcome) in exercise_cells(notebook).items():
        if str(number) not in measured:
            continue
        if outcome is None:
            raise SystemExit(f"{chapter} exercise {number}: no cell after the task for the expected outcome")
        task["source"], outcome["source"] = synced_text(
            "".join(task["source"]), "".join(outcome["source"]), chapter, number, measured[str(number)]
        )
        synced.append(number)
    nbformat.write(notebook, path)
    return synced


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapter", help="e.g. ch07")
    parser.add_argument("numbers", nargs="*", type=int, help="exercise numbers (default: every solution script)")
    parser.add_argument("--sync", action="store_true", help="only rewrite the notebook's blocks from the records")
    args = parser.parse_args(argv)
    if not args.sync:
        measured = records(args.chapter)
        for number in args.numbers or solutions(args.chapter):
            print(f"{args.chapter} exercise {number} ...", flush=True)
            measured[str(number)] = run(args.chapter, number)
            record = measured[str(number)]
            print(f"  {record['cpu_seconds']:.0f} CPU-seconds, {record['wall_seconds']:.0f} s wall\n{record['output']}")
            RECORDS.mkdir(parents=True, exist_ok=True)
            (RECORDS / f"{args.chapter}.json").write_text(json.dumps(measured, indent=1, sort_keys=True) + "\n")
    print(f"synced exercises {sync(args.chapter)} of {notebook_of(args.chapter).name}")


if __name__ == "__main__":
    main()
