"""Compare two runs, or plot one: `python -m course_lib compare A B` and `python -m course_lib plot RUN`.

A run is either a records file (`results/ch07.json`, or a fork's `--record --out DIR` file: every seed's claim
numbers and learning curves) or a run folder of `--report-to jsonl` (`runs/ch07-seed0`: one seed's training records,
per arm, in `metrics.jsonl`). `compare` prints, for every number both records files hold, each side's mean over its
seeds and the paired difference (B minus A) over the seeds both recorded, with its 95% t-interval (the course's
rule needs at least 5 paired seeds to decide anything: `lab.verdicts`), and draws their common curves, each side's
mean over seeds; `plot` draws one run's curves, a line per seed (a records file) or per arm (a run folder).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from course_lib.diagnostics import stats

MIN_PAIRED = 2
"""Paired seeds below which no interval is printed (one difference has no spread)."""


def load_run(path: str | Path) -> dict:
    """`{"seeds": {seed: {"numbers": {...}, "curves": {name: [[x, y], ...]}}}}` of a records file, or of a run
    folder (`metrics.jsonl`: its one seed, key 0, with a curve per arm and metric and no numbers)."""
    path = Path(path)
    if path.is_dir():
        rows = path / "metrics.jsonl"
        if not rows.is_file():
            raise FileNotFoundError(f"{path} holds no metrics.jsonl: give a run folder of --report-to jsonl")
        curves: dict[str, list[list[float]]] = {}
        for line in rows.read_text().splitlines():
            row = json.loads(line)
            for key, value in row.items():
                if key not in ("run", "method", "iteration") and isinstance(value, int | float):
                    curves.setdefault(f"{row['run']}/{key}", []).append([float(row["iteration"]), float(value)])
        return {"seeds": {"0": {"numbers": {}, "curves": curves}}}
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: give a records file (results/ch07.json) or a run folder")
    loaded = json.loads(path.read_text())
    if "seeds" not in loaded:
        raise ValueError(f"{path} is not a records file (no 'seeds'); --record writes them")
    return loaded


def number_rows(a: Mapping, b: Mapping) -> list[tuple[str, str, str, str]]:
    """Per number both runs hold: `(key, A's mean over its seeds, B's, B minus A over the paired seeds)`."""
    rows = []
    numbers_a = {seed: record["numbers"] for seed, record in a["seeds"].items()}
    numbers_b = {seed: record["numbers"] for seed, record in b["seeds"].items()}
    keys = sorted({k for n in numbers_a.values() for k in n} & {k for n in numbers_b.values() for k in n})
    for key in keys:
        side_a = [n[key] for n in numbers_a.values() if key in n and math.isfinite(n[key])]
        side_b = [n[key] for n in numbers_b.values() if key in n and math.isfinite(n[key])]
        paired = [numbers_b[s][key] - numbers_a[s][key] for s in sorted(numbers_a.keys() & numbers_b.keys(), key=int)
                  if key in numbers_a[s] and key in numbers_b[s]]  # fmt: skip
        paired = [d for d in paired if math.isfinite(d)]
        if len(paired) >= MIN_PAIRED:
            mean, low, high = stats.t_interval(paired)
            difference = f"{mean:+.3f} [{low:+.3f}, {high:+.3f}] over {len(paired)} paired seeds"
        else:
            difference = f"{len(paired)} paired seed{'s' * (len(paired) != 1)}: no interval"
        rows.append((key, _mean(side_a), _mean(side_b), difference))
    return rows


def _mean(values: Sequence[float]) -> str:
    return f"{sum(values) / len(values):.3f} ({len(values)} seeds)" if values else "-"


def mean_curves(run: Mapping) -> dict[str, list[tuple[float, float]]]:
    """Each curve's mean over the seeds that recorded it, at every x any of them did."""
    points: dict[str, dict[float, list[float]]] = {}
    for record in run["seeds"].values():
        for name, curve in record.get("curves", {}).items():
            for x, y in curve:
                points.setdefault(name, {}).setdefault(x, []).append(y)
    return {name: sorted((x, sum(ys) / len(ys)) for x, ys in by_x.items()) for name, by_x in points.items()}


def draw(panels: Mapping[str, Mapping[str, Sequence[tuple[float, float]]]], out: Path) -> Path:
    """One panel per curve name, a line per label: `{name: {label: [(x, y), ...]}}`, written as a PNG."""
    import matplotlib

    matplotlib.use("Agg")  # a file, not a window
    import matplotlib.pyplot as plt

    names = sorted(panels)
    columns = min(3, max(len(names), 1))
    rows = max(1, math.ceil(len(names) / columns))
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.0 * rows), squeeze=False)
    for axis, name in zip(axes.flat, names):
        for label, curve in panels[name].items():
            if curve:
                xs, ys = zip(*curve)
                axis.plot(xs, ys, marker=".", label=label)
        axis.set_title(name, fontsize=9)
        axis.legend(fontsize=7)
    for axis in list(axes.flat)[len(names) :]:
        axis.axis("off")
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    plt.close(figure)
    return out


def compare(a: str | Path, b: str | Path, out: str | Path = "compare.png") -> list[str]:
    """The comparison's table (Markdown lines; also printed by the command) and the PNG of the common curves."""
    run_a, run_b = load_run(a), load_run(b)
    lines = [f"A = {a}, B = {b}", "", "| number | A | B | B - A (95% t-interval) |", "|---|---|---|---|"]
    lines += [f"| {key} | {mean_a} | {mean_b} | {difference} |" for key, mean_a, mean_b, difference
              in number_rows(run_a, run_b)]  # fmt: skip
    curves_a, curves_b = mean_curves(run_a), mean_curves(run_b)
    common = sorted(curves_a.keys() & curves_b.keys())
    if common:
        draw({name: {"A": curves_a[name], "B": curves_b[name]} for name in common}, Path(out))
        lines.append(f"\n{len(common)} common curves (mean over seeds) in {out}")
    return lines


def plot(run: str | Path, out: str | Path = "plot.png") -> Path:
    """One run's curves, a line per seed (a records file) or per arm (a run folder), as a PNG."""
    loaded = load_run(run)
    panels: dict[str, dict[str, list]] = {}
    for seed, record in loaded["seeds"].items():
        for name, curve in record.get("curves", {}).items():
            panels.setdefault(name, {})[f"seed {seed}"] = [tuple(point) for point in curve]
    if not panels:
        raise ValueError(f"{run} holds no curves")
    return draw(panels, Path(out))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m course_lib", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    pair = commands.add_parser("compare", help="two runs' numbers (paired over seeds) and curves")
    pair.add_argument("a")
    pair.add_argument("b")
    pair.add_argument("--png", default="compare.png", help="where the curves go (default compare.png)")
    one = commands.add_parser("plot", help="one run's curves")
    one.add_argument("run")
    one.add_argument("--png", default="plot.png", help="where the curves go (default plot.png)")
    args = parser.parse_args(argv)
    try:
        if args.command == "compare":
            print("\n".join(compare(args.a, args.b, args.png)))
        else:
            print(f"curves of {args.run} in {plot(args.run, args.png)}")
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))


if __name__ == "__main__":
    main()
