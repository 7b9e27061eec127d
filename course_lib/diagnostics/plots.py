"""The few figure kinds the chapters share.

- `grid(n)`: n panels laid out two per row (2x2 for four), so figures stay readable in a notebook column.
- `curves_with_bands`: learning curves over seeds (mean line, min-max band), e.g. from `recorded.load_curves`.
- `arm_comparison`: one bar per arm (mean over seeds) with an error bar and the seeds as dots.
- `learning_curves`: per-metric panels from in-memory histories (one run or several seeds).
- `tree_axes`: the frame the course's tree drawings share (MCTS's search tree, ARPO's rollout tree).

Bands and error bars default to the min-max range over seeds: with 3-5 seeds a 95% t-interval is wide
(t = 4.30 at 2 degrees of freedom) and rests on a normality assumption nobody can check on 3 points; the
range shows exactly what was measured. `arm_comparison(..., kind="t95")` draws the t-interval instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from course_lib.diagnostics.stats import interval

FEW_POINTS = 15
"""Curves with fewer points than this get a marker at each point (sparse evaluations stay visible)."""


def grid(n: int, width: float = 4.6, height: float = 3.4, columns: int = 2) -> tuple[Figure, list[Axes]]:
    """A figure with `n` panels, `columns` per row (2x2 for four panels, 1x2 for two, a single panel for
    one); unused cells of the last row are removed. Returns the figure and the `n` axes in reading order."""
    if n < 1:
        raise ValueError(f"grid needs at least one panel, got {n}")
    cols = min(columns, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    flat = list(axes.flat)
    for spare in flat[n:]:
        spare.remove()
    return fig, flat[:n]


def _aligned(curves: Mapping[int, Sequence[tuple[float, float]]]) -> tuple[np.ndarray, np.ndarray]:
    """x values common to every seed (sorted) and a seeds-by-x array of y values at them."""
    common = set.intersection(*({x for x, _ in points} for points in curves.values()))
    xs = np.array(sorted(common))
    if not len(xs):
        raise ValueError("the seeds' curves share no x value; record them on the same evaluation schedule")
    values = np.array([[dict(points)[x] for x in xs] for points in curves.values()])
    return xs, values


def curves_with_bands(
    series: Mapping[str, Mapping[int, Sequence[tuple[float, float]]]],
    ax: Axes,
    x_label: str = "RL iteration",
    y_label: str = "",
    title: str | None = None,
    few_points: int = FEW_POINTS,
) -> Axes:
    """One mean line per label over its seeds, with the min-max band when there are several seeds.

    `series` maps a label (an arm) to `{seed: [(x, y), ...]}` (what `recorded.load_curves` returns). Seeds
    are compared at the x values they all have; a curve with fewer than `few_points` points gets markers.
    """
    for label, curves in series.items():
        if not curves:
            raise ValueError(f"no seeds for {label!r}")
        xs, values = _aligned(curves)
        n = len(values)
        legend = f"{label} (mean, range of {n} seeds)" if n > 1 else f"{label} (1 seed)"
        (line,) = ax.plot(xs, values.mean(0), marker="o" if len(xs) < few_points else None, ms=3, label=legend)
        if n > 1:
            ax.fill_between(xs, values.min(0), values.max(0), color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def _label_bars(ax: Axes, y_label: str, title: str | None) -> Axes:
    """The y label, the title (if any), horizontal grid lines and the legend of a per-arm panel."""
    ax.set_ylabel(y_label)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return ax


def paired_differences(
    values: Mapping[str, Sequence[float]],
    pairs: Sequence[tuple[str, str]],
    ax: Axes,
    y_label: str = "",
    title: str | None = None,
    margin: float | Mapping[int, tuple[float, str]] | None = None,
) -> Axes:
    """For each `(arm, baseline)` of `pairs`, arm minus baseline on the same seed (`values[name][k]` is seed k's):
    one dot per seed, the mean with its 95% t-interval (`stats.interval`), a line at 0 and, when given, the claim's
    margin: a number draws it across the panel; `{pair index: (margin, label)}` draws each over its own pair (a
    panel whose pairs are different claims). What a paired claim is decided on, which bars from 0 hide when the
    seeds' spread exceeds the difference."""
    for position, (label, baseline) in enumerate(pairs):
        arm, base = np.asarray(values[label], dtype=float), np.asarray(values[baseline], dtype=float)
        if arm.shape != base.shape:
            raise ValueError(f"{label!r} has {arm.size} seeds and {baseline!r} {base.size}: a pair needs both")
        differences = arm - base
        mean, low, high = interval(differences, "t95")
        ax.errorbar(position, mean, yerr=[[mean - low], [high - mean]], fmt="o", color="C0", capsize=5,
                    label="mean, 95% t-interval" if position == 0 else None)  # fmt: skip
        ax.scatter(np.full(differences.size, position + 0.18), differences, s=12, color="black", alpha=0.6,
                   label="one seed" if position == 0 else None)  # fmt: skip
    ax.axhline(0.0, color="grey", linewidth=1)
    if isinstance(margin, Mapping):
        for position, (value, label) in margin.items():
            ax.hlines(value, position - 0.4, position + 0.4, color="C3", linestyle="--", linewidth=1, label=label)
    elif margin is not None:
        ax.axhline(margin, color="C3", linestyle="--", linewidth=1, label=f"the claim's margin, {margin:+g}")
    ax.set_xticks(range(len(pairs)), [f"{label}\nminus {baseline}" for label, baseline in pairs], fontsize=8)
    ax.set_xlim(-0.5, len(pairs) - 0.5)
    return _label_bars(ax, y_label, title)


def arm_comparison(
    values: Mapping[str, Sequence[float]],
    ax: Axes,
    y_label: str = "",
    title: str | None = None,
    kind: Literal["range", "t95"] = "range",
    show_seeds: bool = True,
) -> Axes:
    """One bar per arm at its mean over seeds, with an error bar (`kind`: min-max "range", the default, or
    the 95% t-interval "t95", see `stats.interval`) and, with `show_seeds`, each seed's value as a dot."""
    labels = list(values)
    stats = [interval(values[label], kind) for label in labels]
    positions = np.arange(len(labels))
    means = np.array([mean for mean, _, _ in stats])
    below = means - np.array([low for _, low, _ in stats])
    above = np.array([high for _, _, high in stats]) - means
    ax.bar(positions, means, width=0.6, color="C0", alpha=0.55, label="mean over seeds")
    bar_label = "range over seeds" if kind == "range" else "95% t-interval"
    ax.errorbar(
        positions, means, yerr=np.vstack([below, above]), fmt="none", ecolor="black", capsize=4, label=bar_label
    )
    if show_seeds:
        for position, label in zip(positions, labels, strict=True):
            seeds = np.asarray(values[label], dtype=float)
            ax.scatter(np.full(seeds.size, position), seeds, s=14, color="black", zorder=3)
    ax.set_xticks(positions, labels)
    return _label_bars(ax, y_label, title)


def learning_curves(
    histories: Sequence[Sequence[dict]] | Sequence[dict],
    panels: Sequence[tuple[str, str]],
    title: str,
    x_key: str = "iteration",
    x_label: str = "RL iteration",
) -> Figure:
    """One panel per `(metric key, y-axis label)`, two per row; several histories (seeds) give mean and range.

    `histories` is one history (a list of per-iteration dicts) or a list of them. Iterations where
    a metric is absent (e.g. evaluation every k iterations) are skipped.
    """
    if histories and isinstance(histories[0], dict):
        histories = [histories]
    fig, axes = grid(len(panels), width=4.4, height=3.2)
    for axis, (key, label) in zip(axes, panels, strict=True):
        rows = [[(r[x_key], r[key]) for r in history if key in r] for history in histories]
        xs = np.array([x for x, _ in rows[0]])
        values = np.array([[v for _, v in row] for row in rows])
        axis.plot(
            xs, values.mean(0), marker="." if len(xs) < FEW_POINTS else None, label="mean" if len(rows) > 1 else key
        )
        if len(rows) > 1:
            axis.fill_between(xs, values.min(0), values.max(0), alpha=0.25, label=f"range over {len(rows)} seeds")
        axis.set_xlabel(x_label)
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def tree_axes(ax: Axes, depths: Sequence[int], title: str, y_label: str) -> Axes:
    """Frame a top-down tree drawn at y = -depth: a title, one y tick per depth, no box but the left axis."""
    ax.set_title(title)
    ax.set_ylabel(y_label)
    ax.set_yticks([-d for d in depths], [str(d) for d in depths])
    ax.tick_params(left=True, labelleft=True)
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    return ax


def legend_outside(fig: Figure, axes: Sequence[Axes] | None = None, columns: int = 4) -> None:
    """One legend for the whole figure, below the panels, instead of one per panel on top of the data.

    Entries are collected from `axes` (default: every axis of `fig`), de-duplicated by label, and each
    panel's own legend is removed; the panels are then laid out (`tight_layout`) in the space above the legend, so
    it neither overlaps the x labels nor leaves an empty band, whatever the number of rows."""
    axes = list(fig.axes if axes is None else axes)
    handles: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if not label.startswith("_"):
                handles.setdefault(label, handle)
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    if not handles:
        fig.tight_layout()
        return
    legend = fig.legend(
        list(handles.values()),
        list(handles),
        loc="lower center",
        ncol=min(columns, len(handles)),
        fontsize=8,
        frameon=False,
        bbox_to_anchor=(0.5, 0.0),
    )
    renderer = fig.canvas.get_renderer()
    height = legend.get_window_extent(renderer).height / fig.bbox.height
    fig.tight_layout(rect=(0.0, min(0.5, height + 0.01), 1.0, 1.0))


def show(fig: Figure, alt: str) -> None:
    """Display `fig` in a notebook as a PNG that carries `alt` as its alt text (read by screen readers and shown
    where the image cannot be), then close it so it is not drawn a second time.

    The course's notebook-structure test requires every committed figure to have alt text: call this instead of
    `plt.show()`. The alt text says what the figure shows and what to read from it, in a sentence or two."""
    import io

    from IPython.display import Image, display

    if not alt or not alt.strip():
        raise ValueError("alt text is required: describe what the figure shows in a sentence or two")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    display(Image(data=buffer.getvalue(), format="png", alt=" ".join(alt.split())))
