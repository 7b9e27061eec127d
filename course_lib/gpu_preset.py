"""The gpu preset's measurement run: each chapter's command under `COURSE_SCALE=gpu`, one after another, within a
budget of minutes, with a summary of minutes and verdicts at the end.

    python -m course_lib.gpu_preset --chapters 00 04 06 --budget-minutes 12 --record

This is the one prepared script to run on a machine with a GPU. Each chapter runs as its own process
(`python -m course_lib.chapters.<module> --seeds 0 [--record]`), so a chapter that fails or runs out of time does
not take the others with it. The first chapter to load a base builds the gpu data it needs (once, into
`data.gpu_data_dir()`); that build is part of its minutes, and the build line in its output says so. With
`--record` each chapter writes `results/gpu/<chapter>.json` (never the cpu records). Chapters the budget leaves no
time for are listed as not run. The README's chapter map takes its gpu minutes from these records.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field

from course_lib.chapters import chapter_key
from course_lib.results import MODULES

SEED_LINE = re.compile(r"^seed (\d+) \(([\d.]+) min\)")
CLAIM_LINE = re.compile(r"^\s+(C\d+\.\d+[a-z]?) (PASS|FAIL|not reproduced at this scale) ")


@dataclass
class ChapterRun:
    """One chapter's process: its wall-clock minutes, how it ended, and the verdicts it printed."""

    chapter: str
    minutes: float = 0.0
    status: str = "not run"
    verdicts: dict[str, str] = field(default_factory=dict)
    tail: str = ""

    def line(self) -> str:
        verdicts = ", ".join(f"{claim} {verdict}" for claim, verdict in self.verdicts.items()) or "-"
        return f"{self.chapter}: {self.status}, {self.minutes:.1f} min; {verdicts}"


def parse(output: str, run: ChapterRun) -> ChapterRun:
    """The verdicts a chapter's command printed for its seeds (`skeleton.run_seeds`' format)."""
    for line in output.splitlines():
        claim = CLAIM_LINE.match(line)
        if claim:
            run.verdicts[claim.group(1)] = claim.group(2)
    return run


def run_chapter(chapter: str, seeds: list[int], record: bool, timeout_s: float, env: dict[str, str]) -> ChapterRun:
    """`python -m course_lib.chapters.<module> --seeds ...` under the gpu preset, stopped after `timeout_s`."""
    key = chapter_key(chapter)
    command = [sys.executable, "-m", f"course_lib.chapters.{MODULES[key]}", "--seeds", *map(str, seeds)]
    command += ["--record"] if record else []
    start = time.perf_counter()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s)
        status = "ok" if done.returncode == 0 else f"exit {done.returncode}"
        output = done.stdout + done.stderr
    except subprocess.TimeoutExpired as stopped:
        status = f"stopped after {timeout_s / 60:.1f} min"
        output = (stopped.stdout or b"").decode() if isinstance(stopped.stdout, bytes) else (stopped.stdout or "")
    run = ChapterRun(key, (time.perf_counter() - start) / 60, status, tail="\n".join(output.splitlines()[-5:]))
    return parse(output, run)


def run_all(chapters: list[str], seeds: list[int], budget_minutes: float, record: bool) -> list[ChapterRun]:
    """Each chapter in turn with what is left of the budget; the rest are reported as not run."""
    env = {**os.environ, "COURSE_SCALE": "gpu"}
    deadline = time.perf_counter() + 60 * budget_minutes
    runs = []
    for chapter in chapters:
        left = deadline - time.perf_counter()
        if left < 30:
            runs.append(ChapterRun(chapter_key(chapter), status="not run (budget spent)"))
            continue
        runs.append(run_chapter(chapter, seeds, record, left, env))
        print(runs[-1].line(), flush=True)
        if runs[-1].status != "ok":
            print(runs[-1].tail, flush=True)
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.gpu_preset", description=__doc__.splitlines()[0])
    parser.add_argument("--chapters", nargs="+", default=[key.removeprefix("ch") for key in MODULES])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--budget-minutes", type=float, default=12.0)
    parser.add_argument("--record", action="store_true", help="write results/gpu/<chapter>.json")
    args = parser.parse_args(argv)
    unknown = [c for c in args.chapters if not c.removeprefix("ch").isdigit() or chapter_key(c) not in MODULES]
    if unknown:
        parser.error(f"unknown chapters {unknown}; choose from {sorted(MODULES)}")
    runs = run_all(args.chapters, args.seeds, args.budget_minutes, args.record)
    print("summary:")
    for run in runs:
        print(f"  {run.line()}")
    finished = sum(run.status == "ok" for run in runs)
    print(f"gpu_preset_chapters_ok={finished}/{len(runs)}")
    return 0 if finished == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
