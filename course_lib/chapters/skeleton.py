"""The skeleton a chapter module fills in: its run, its claims, its command line.

A chapter describes itself once as a `Chapter` (how to run one seed, which numbers its claims read,
which curves it records, what to print) and gets, from here, the command line every chapter shares:

    python -m course_lib.chapters.<module> --seeds 0 1 2 [--record]

which runs each seed, prints the claims, and with `--record` writes `results/<id>.json`. The notebook
calls the same `run_seed`, so what it shows and what the command records come from one function.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from course_lib import config as course_config
from course_lib import results as recorded
from course_lib.claims import Claim, ClaimSpec, evaluate_all


@dataclass(frozen=True)
class Chapter:
    """What a chapter module provides."""

    id: str
    """`"ch07"`: the name of its results file and notebook prefix."""
    title: str
    """One line for the command line's help."""
    run: Callable[[int], dict]
    """Seed -> results (everything the chapter measured for that seed)."""
    claim_numbers: Callable[[Mapping], dict[str, float]]
    """Results -> the numbers its claims check (recorded per seed)."""
    claims: Sequence[ClaimSpec]
    curves: Callable[[Mapping], dict] | None = None
    """Results -> learning curves to record beside the numbers (for seed bands in the notebook)."""
    report: Callable[[Mapping], list[str]] | None = None
    """Results -> lines to print for a seed, before its claims."""


def run_seed(chapter: Chapter, seed: int) -> dict:
    """Run one seed: the chapter's results plus `minutes` (wall-clock) if the run did not time itself."""
    start = time.perf_counter()
    results = chapter.run(seed)
    results.setdefault("minutes", (time.perf_counter() - start) / 60)
    return results


def check(chapter: Chapter, results: Mapping) -> list[Claim]:
    """The chapter's claims evaluated on one seed's results."""
    return evaluate_all(chapter.claims, chapter.claim_numbers(results))


def run_seeds(chapter: Chapter, seeds: Sequence[int], record: bool = False) -> list[dict]:
    """The command line's loop: run, print and (with `record`) write each seed in turn."""
    outputs = []
    for seed in seeds:
        results = run_seed(chapter, seed)
        print(f"seed {seed} ({results['minutes']:.2f} min)")
        for line in chapter.report(results) if chapter.report else []:
            print(f"  {line}")
        numbers = chapter.claim_numbers(results)
        for claim in evaluate_all(chapter.claims, numbers):
            print(f"  {claim.id} {claim.status} {claim.name}")
        if record:
            curves = chapter.curves(results) if chapter.curves else None
            recorded.record(chapter.id, seed, chapter.claims, numbers, results["minutes"], curves)
        outputs.append(results)
    return outputs


def main(chapter: Chapter, argv: list[str] | None = None) -> None:
    """`python -m course_lib.chapters.<module> --seeds ... [--record]`."""
    parser = argparse.ArgumentParser(description=f"{chapter.title}: run several seeds and print the claims.")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--record", action="store_true", help=f"write each seed's numbers to results/{chapter.id}.json")
    args = parser.parse_args(argv)
    run_seeds(chapter, args.seeds, args.record)


def by_scale(cpu, gpu, scale: str | None = None):
    """`cpu` or `gpu` according to `COURSE_SCALE` (or `scale`): a chapter's preset in one line."""
    scale = scale or course_config.scale()
    if scale not in ("cpu", "gpu"):
        raise ValueError(f"scale must be 'cpu' or 'gpu', got {scale!r}")
    return cpu if scale == "cpu" else gpu
