"""The Echo Trap read off a run's history (RAGEN, arXiv 2504.20073, section 4): held-out success improves, peaks and
drops, and the within-group reward std, the entropy and the gradient norm move first. Chapter 09 dates each event of
its runs with these functions (its claims C9.1 and C9.2), and its diagram draws them.

A history is `train_grpo`'s list of per-iteration records: training rows (with `time_rollout`) and the evaluations'
`eval_<key>` entries.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

WINDOW = 10
"""Iterations per window when dating the warning signals (`signal_onsets`)."""
SIGNAL_DROP = 0.2
"""A signal has moved when its windowed mean falls this share below its first window's."""
COLLAPSE_DROP = 0.05
"""Success has collapsed when a held-out evaluation after the peak falls this far below the peak."""


def eval_curve(history: Sequence[Mapping], key: str = "success") -> list[tuple[int, float]]:
    """`(iteration, value)` of a held-out measurement (`eval_<key>`, default success) at every evaluation of a run."""
    return [(int(r["iteration"]), float(r[f"eval_{key}"])) for r in history if f"eval_{key}" in r]


def collapse_point(history: Sequence[Mapping], drop: float) -> dict[str, float]:
    """The run's peak held-out success (and its iteration) and the first evaluation after the peak at least `drop`
    below it (`collapse_iteration`, NaN if none): the Echo Trap's "improves, then collapses" read on held-out maps."""
    curve = eval_curve(history)
    peak_iteration, peak = max(curve, key=lambda point: (point[1], -point[0]))
    after = [it for it, value in curve if it > peak_iteration and value <= peak - drop + 1e-12]
    return {
        "start_success": curve[0][1],
        "peak_success": peak,
        "peak_iteration": float(peak_iteration),
        "final_success": curve[-1][1],
        "collapse_iteration": float(after[0]) if after else float("nan"),
    }


def evaluation_noise(success: float, tasks: int) -> float:
    """The standard deviation of the difference of two held-out evaluations of one policy, each the success rate on
    `tasks` episodes at rate `success`: sqrt(2 p (1 - p) / N). A drop between two evaluations smaller than about
    twice this is what sampling alone gives (at N = 128 and p = 0.5, 2 sd is 0.125)."""
    return math.sqrt(2 * success * (1 - success) / tasks)


def echo_windows(history: Sequence[Mapping]) -> dict[str, float]:
    """C9.1's pre-registered windows of held-out success (fixed before the runs on the layout-split base, so that the
    peak is not the maximum of noisy evaluations): the mean over the evaluations after iteration 0 up to half the run
    (`early_success`) and over those in its last third (`late_success`)."""
    curve = eval_curve(history)
    last = curve[-1][0]
    early = [value for it, value in curve if 0 < it <= last / 2]
    late = [value for it, value in curve if it > 2 * last / 3]
    return {f"{name}_success": statistics.fmean(window) if window else math.nan
            for name, window in (("early", early), ("late", late))}  # fmt: skip


def windowed(history: Sequence[Mapping], key: str, window: int) -> list[tuple[int, float]]:
    """`(last iteration, mean)` of `key` over consecutive windows of `window` training iterations."""
    rows = [r for r in history if key in r and "time_rollout" in r]
    return [
        (int(rows[i + window - 1]["iteration"]), statistics.fmean(r[key] for r in rows[i : i + window]))
        for i in range(0, len(rows) - window + 1, window)
    ]


def signal_onsets(history: Sequence[Mapping], window: int, drop: float) -> dict[str, float]:
    """When each warning signal moved: the last iteration of the first window whose mean `reward_std` (or
    `entropy`) is at least `drop` (a share) below the first window's (NaN if never), and the iteration of the
    largest gradient norm."""
    onsets = {}
    for key in ("reward_std", "entropy"):
        windows = windowed(history, key, window)
        if not windows:  # a run shorter than one window: nothing moved
            onsets |= {f"{key}_onset": float("nan"), f"{key}_first_window": float("nan"),
                       f"{key}_last_window": float("nan")}  # fmt: skip
            continue
        first = windows[0][1]
        moved = [it for it, value in windows[1:] if value <= (1 - drop) * first]
        onsets[f"{key}_onset"] = float(moved[0]) if moved else float("nan")
        onsets[f"{key}_first_window"], onsets[f"{key}_last_window"] = first, windows[-1][1]
    norms = [(int(r["iteration"]), r["grad_norm"]) for r in history if "grad_norm" in r]
    peak_iteration, peak = max(norms, key=lambda point: point[1])
    onsets["grad_norm_peak_iteration"], onsets["grad_norm_peak"] = float(peak_iteration), peak
    onsets["grad_norm_median"] = statistics.median(value for _, value in norms)
    return onsets


def timeline(
    history: Sequence[Mapping],
    collapse_drop: float = COLLAPSE_DROP,
    window: int = WINDOW,
    signal_drop: float = SIGNAL_DROP,
) -> dict[str, float]:
    """Every date of the Echo Trap's reading of one run: `collapse_point`, `signal_onsets` and `echo_windows`."""
    return collapse_point(history, collapse_drop) | signal_onsets(history, window, signal_drop) | echo_windows(history)


def plot_timeline(
    history: Sequence[Mapping],
    collapse_drop: float = COLLAPSE_DROP,
    window: int = WINDOW,
    signal_drop: float = SIGNAL_DROP,
    title: str = "",
    eval_tasks: int | None = None,
):
    """The Echo Trap's timeline of one run on a `plots.grid` of four panels: held-out success (peak and the first
    evaluation `collapse_drop` below it marked), and the windowed within-group reward std, entropy and gradient norm
    of the training batches, each with a dotted line where it moved (`timeline`). With `eval_tasks` (the episodes of
    one evaluation) that drop is called a collapse only when it exceeds twice the noise of two evaluations
    (`evaluation_noise` at the peak's rate); a smaller one is labelled as within that noise."""
    from course_lib.diagnostics.plots import grid

    t = timeline(history, collapse_drop, window, signal_drop)
    fig, axes = grid(4, width=4.4, height=2.8)
    curve = eval_curve(history)
    axes[0].plot(*zip(*curve, strict=True), marker=".", label="held-out success")
    axes[0].axvline(t["peak_iteration"], color="C2", linestyle=":", label="peak")
    if not math.isnan(t["collapse_iteration"]):
        drop = t["peak_success"] - dict(curve)[int(t["collapse_iteration"])]
        label = f"first drop of {collapse_drop:g} or more ({drop:.2f})"
        if eval_tasks:
            noise = 2 * evaluation_noise(t["peak_success"], eval_tasks)
            label = f"collapse: a drop of {drop:.2f}" if drop > noise else f"a drop of {drop:.2f}, within noise"
            label += f" (2 sd of two evaluations: {noise:.2f})"
        axes[0].axvline(t["collapse_iteration"], color="C3", linestyle=":", label=label)
    panels = (("reward_std", "within-group reward std"), ("entropy", "entropy (policy tokens)"),
              ("grad_norm", "gradient norm"))  # fmt: skip
    for ax, (key, label) in zip(axes[1:], panels, strict=True):
        rows = [(r["iteration"], r[key]) for r in history if key in r and "time_rollout" in r]
        ax.plot(*zip(*rows, strict=True), alpha=0.35, label="per iteration")
        ax.plot(*zip(*windowed(history, key, window), strict=True), marker="o", label="window mean")
        moved = t["grad_norm_peak_iteration"] if key == "grad_norm" else t[f"{key}_onset"]
        if not math.isnan(moved):
            ax.axvline(moved, color="C3", linestyle=":", label="largest" if key == "grad_norm" else "moved")
        ax.set_ylabel(label)
    for ax in axes:
        ax.set_xlabel("RL iteration")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("held-out success")
    fig.suptitle(title)
    fig.tight_layout()
    return fig
