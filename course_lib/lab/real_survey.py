"""The survey on a real model, its runs: SmolLM2 warm-started on each of the survey's tasks (`tasks.real_model`),
held-out success and valid actions per seed, printed and recorded seed by seed.

    python -m course_lib.lab.real_survey warm-start [--tasks calculator key_door two_hop lake] [--seeds 0 1 2 3 4]
        [--record]      # results/ch18_warm_start.json, one record per seed (a seed run again replaces its record)
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence

from course_lib.course import recorded
from course_lib.tasks.real_model import TASKS, warm_start_numbers

WARM_START_RESULTS = "ch18_warm_start"
"""`results/ch18_warm_start.json`: per seed, every task's warm-start numbers, prefixed by the task's name."""


def warm_starts(tasks: Sequence[str], seeds: Sequence[int], record: bool = False) -> dict[int, dict[str, float]]:
    """`warm_start_numbers` of every task in `tasks` on every seed, printed, and with `record` written per seed to
    `results/ch18_warm_start.json` (a seed's record holds the tasks run with it; a later run of the same seed
    replaces it)."""
    if record:
        recorded.begin()
    out: dict[int, dict[str, float]] = {}
    for seed in seeds:
        start, numbers = time.perf_counter(), {}
        for name in tasks:
            found = warm_start_numbers(name, seed)
            print(f"seed {seed} {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in found.items()), flush=True)
            numbers |= {f"{name}_{key}": value for key, value in found.items()}
        if record:
            recorded.record(WARM_START_RESULTS, seed, (), numbers, (time.perf_counter() - start) / 60)
        out[seed] = numbers
    return out


def summary(results: Mapping[int, Mapping[str, float]], tasks: Sequence[str]) -> list[str]:
    """One line per task: the mean and range over seeds of held-out success and the valid-action rate."""
    lines = []
    for name in tasks:
        success = [numbers[f"{name}_success"] for numbers in results.values()]
        valid = [numbers[f"{name}_valid_rate"] for numbers in results.values()]
        lines.append(f"{name}: success {sum(success) / len(success):.3f} ({min(success):.3f}-{max(success):.3f}), "
                     f"valid actions {sum(valid) / len(valid):.3f} ({min(valid):.3f}-{max(valid):.3f}) over "
                     f"{len(success)} seeds")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.lab.real_survey", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    warm = sub.add_parser("warm-start", help="warm-start SmolLM2 on each task and evaluate it on held-out problems")
    warm.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    warm.add_argument("--seeds", nargs="+", type=int, default=[0])
    warm.add_argument("--record", action="store_true", help="write results/ch18_warm_start.json, seed by seed")
    args = parser.parse_args(argv)
    results = warm_starts(args.tasks, args.seeds, args.record)
    print("\n".join(summary(results, args.tasks)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
