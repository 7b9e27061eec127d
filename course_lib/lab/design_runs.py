"""The designed settings' command: find a chapter's pre-registered design (`chapters/chNN_design.py`, which defines
`DESIGN`, a `course.designs.Design`), run its pilot or deciding seeds into `results/`, and show or plot the decision
(read from `results/` only, as the notebooks do). The plan and the power it rests on are `course.designs`'.

    python -m course_lib.lab.design_runs ch08 --pilot --record     # pilot seeds -> results/ch08_design_pilot.json
    python -m course_lib.lab.design_runs ch08 --decide --record    # seeds 0..n-1 (skips recorded seeds: resumes)
    python -m course_lib.lab.design_runs ch08 --show               # plan, per-seed numbers and the decision
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import numpy as np

from course_lib import chapters
from course_lib.course import recorded
from course_lib.course.designs import Design, hindsight, plan, recorded_design_seeds
from course_lib.diagnostics import stats
from course_lib.lab import verdicts


def load(chapter: str) -> Design:
    """`chapter`'s `DESIGN` (`chapters.design`), or a KeyError naming the chapters that have one."""
    design = chapters.design(chapter)
    if design is None:
        registered = ", ".join(chapters.designs())
        raise KeyError(f"no designed setting is registered for {chapter!r}; registered: {registered}")
    return design


def run_seeds(design: Design, seeds: Sequence[int], record: bool, pilot: bool = False) -> dict[int, dict]:
    """Run `design` on `seeds`, printing each seed's arms and difference; with `record`, write each seed as it lands
    (pilot seeds to the pilot file) and skip seeds already recorded there, so an interrupted run resumes."""
    name = design.pilot_name if pilot else design.name
    done = set()
    if record:
        recorded.begin()  # stamp the code and machine before the first seed runs
    if record and recorded.path(name).exists():
        done = {int(seed) for seed in recorded.load(name)["seeds"]}
    out = {}
    for seed in seeds:
        if seed in done:
            print(f"seed {seed}: already recorded in results/{name}.json")
            continue
        begin = time.perf_counter()
        numbers = {key: float(value) for key, value in design.run(seed).items()}
        minutes = (time.perf_counter() - begin) / 60
        arms = ", ".join(f"{label} {numbers[key]:.3f}" for key, label in design.arms if key in numbers)
        print(f"seed {seed} ({minutes:.1f} min): {arms}; {design.effect_key} {numbers[design.effect_key]:+.3f}",
              flush=True)  # fmt: skip
        if record:
            recorded.record(name, seed, [design.claim], numbers, minutes)
        out[seed] = numbers
    return out


def show(chapter: str) -> None:
    """A notebook's compared cell: the pre-registration, the pilot's plan, the deciding seeds and the verdict, all
    read from `results/` (deterministic)."""
    design = load(chapter)
    print(f"designed setting {design.claim.id} (pre-registered in {design.document}): {design.claim.statement}")
    print(plan(design).text(design))
    numbers = recorded_design_seeds(design)
    if not numbers:
        print(f"no deciding seeds recorded yet: run `python -m course_lib.lab.design_runs {chapter} --decide --record`")
        return
    seeds = sorted(int(seed) for seed in recorded.load(design.name)["seeds"])
    print(f"  recorded deciding seeds: {seeds[0]}-{seeds[-1]} ({len(seeds)}; planned, when they ran, with the normal's "
          "quantiles in place of t's)")  # fmt: skip
    for key, label in design.arms:
        values = [n[key] for n in numbers if key in n]
        mean, low, high = stats.t_interval(values)
        print(f"  {label:<24} mean {mean:.3f} [{low:.3f}, {high:.3f}] over {len(values)} seeds")
    print(verdicts.decide(design.claim, numbers).line())
    print(hindsight(design, plan(design), numbers))


def plot(chapter: str):
    """Every recorded deciding seed: each arm's value (a dot per seed, the mean as a bar) and the paired difference
    with its 95% t-interval (the one the verdict reads). Returns the figure."""
    import matplotlib.pyplot as plt

    from course_lib.diagnostics.plots import legend_outside

    design = load(chapter)
    numbers = recorded_design_seeds(design)
    if not numbers:
        raise recorded.ResultsMissing(f"no deciding seeds in results/{design.name}.json")
    widths = [max(len(design.arms), 1), 1]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2), gridspec_kw={"width_ratios": widths})
    jitter = np.linspace(-0.15, 0.15, len(numbers))
    for i, (key, _) in enumerate(design.arms):
        values = np.array([n[key] for n in numbers])
        left.scatter(i + jitter, values, s=14, alpha=0.7)
        left.hlines(values.mean(), i - 0.3, i + 0.3, color="black")
    left.set_xticks(range(len(design.arms)), [label for _, label in design.arms])
    left.set_ylabel(design.arms_measure)
    left.set_title(f"{len(numbers)} seeds, each a dot")
    diffs = [n[design.effect_key] for n in numbers]
    mean, low, high = stats.t_interval(diffs)
    right.scatter(jitter, diffs, s=14, alpha=0.7, color="tab:gray")
    right.errorbar([0], [mean], yerr=[[mean - low], [high - mean]], fmt="o", color="black", capsize=4)
    right.axhline(0, color="black", lw=0.6)
    if design.margin:
        right.axhline(design.margin, color="tab:red", lw=0.8, ls="--", label=f"margin {design.margin:+.2f}")
    right.set_xticks([])
    right.set_ylabel(design.effect_key.replace("_", " "))
    right.set_title("paired difference, 95% interval")
    legend_outside(fig)  # the margin's legend below the panels, not on the seeds' dots
    return fig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run or show a chapter's pre-registered designed setting.")
    parser.add_argument("chapter", choices=sorted(chapters.designs()))
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--pilot", action="store_true", help="run the pilot seeds (they never decide)")
    mode.add_argument("--decide", action="store_true", help="run deciding seeds 0..n-1, n from the pilot")
    mode.add_argument("--show", action="store_true", help="print the plan and the decision from results/")
    parser.add_argument("--seeds", type=int, nargs="+", help="run these deciding seeds instead of the plan's")
    parser.add_argument("--record", action="store_true", help="write each seed to results/")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: two designs can share 2 cores)")
    args = parser.parse_args(argv)
    if args.show:
        show(args.chapter)
        return 0
    import torch

    torch.set_num_threads(args.threads)
    if args.record:
        try:
            recorded.begin()  # the code and machine, stamped before anything runs
        except recorded.DirtyTree as error:
            parser.error(str(error))
    design = load(args.chapter)
    if args.pilot:
        run_seeds(design, design.pilot_seeds, args.record, pilot=True)
        if args.record:
            print(plan(design).text(design))
        return 0
    seeds = args.seeds if args.seeds is not None else design.deciding_seeds(plan(design).seeds)
    if set(seeds) & set(design.pilot_seeds):
        parser.error(f"pilot seeds {design.pilot_seeds} never decide")
    run_seeds(design, seeds, args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
