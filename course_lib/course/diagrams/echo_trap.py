"""Chapter 09's algorithm diagram: the Echo Trap's timeline (RAGEN, arXiv 2504.20073, section 4).

RAGEN reads a collapse off a run's logs: the within-group reward std and the entropy fall first, held-out success
peaks and then drops. The diagram draws that reading on one recorded StarPO run of `results/ch09.json`, three panels
on one iteration axis, with every marker placed by the functions chapter 09's claims C9.1 and C9.2 are computed with
(`diagnostics.collapse.timeline` at the chapter's thresholds, its defaults: the peak and the first evaluation 5 points
below it, and the window where each warning signal fell 20% below its first window). So the dates it shows are not
drawn by hand.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from matplotlib.figure import Figure

from course_lib.course import recorded
from course_lib.diagnostics import collapse
from course_lib.tasks import lake_reasoning

SIGNALS = (("reward_std", "within-group reward std"), ("entropy", "entropy (policy tokens)"))
"""The warning signals drawn, as `(history key, axis label)`, in RAGEN's order."""


def recorded_history(seed: int, arm: str = "starpo", chapter: str = "ch09") -> list[dict]:
    """One recorded run rebuilt as a training history (`train_grpo`'s list of per-iteration dicts) from its curves.

    Training rows carry `reward_std`, `entropy`, `grad_norm` and a `time_rollout` key (0.0: the record keeps no
    times; `collapse.windowed` uses the key only to tell a training row from an evaluation-only one); held-out success
    goes in as `eval_success` at the iterations it was evaluated."""
    rows: dict[int, dict] = {}
    for key in ("reward_std", "entropy", "grad_norm"):
        for x, y in recorded.load_curves(chapter, f"{arm}/{key}")[seed]:
            rows.setdefault(int(x), {"iteration": int(x), "time_rollout": 0.0})[key] = y
    for x, y in recorded.load_curves(chapter, f"{arm}/eval_success")[seed]:
        rows.setdefault(int(x), {"iteration": int(x)})["eval_success"] = y
    return [rows[it] for it in sorted(rows)]


def collapsing_seed(arm: str = "starpo", chapter: str = "ch09") -> int:
    """The recorded seed whose run comes closest to a collapse by `collapse.collapse_point`'s descriptive rule: the
    earliest `collapse_iteration` (an evaluation at least `COLLAPSE_DROP` below the peak), ties to the lower seed."""
    seeds = sorted(recorded.load_curves(chapter, f"{arm}/eval_success"))
    dated = []
    for seed in seeds:
        history = recorded_history(seed, arm, chapter)
        dropped = collapse.collapse_point(history, collapse.COLLAPSE_DROP)["collapse_iteration"]
        dated.append((math.inf if math.isnan(dropped) else dropped, seed))
    return min(dated)[1]


def marks(history: list[Mapping]) -> dict[str, float]:
    """The timeline's dates and values as chapter 09 computes them (`collapse.timeline` at its thresholds)."""
    return collapse.timeline(history)


def figure(seed: int | None = None, arm: str = "starpo") -> Figure:
    """The Echo Trap timeline of recorded run `arm`/`seed` (default: `collapsing_seed`): within-group reward std and
    entropy (per iteration, faint, and window means), then held-out success; dotted lines where the library dates
    each event, each labelled with its iteration (and the peak and the drop with their success)."""
    from course_lib.diagnostics.plots import grid, legend_outside

    seed = collapsing_seed(arm) if seed is None else seed
    history = recorded_history(seed, arm)
    t = marks(history)
    fig, axes = grid(3, width=7.5, height=2.1, columns=1)
    for ax, (key, label) in zip(axes, SIGNALS, strict=False):
        rows = [(r["iteration"], r[key]) for r in history if key in r]
        ax.plot(*zip(*rows, strict=True), color="grey", alpha=0.35, label="per iteration")
        ax.plot(*zip(*collapse.windowed(history, key, collapse.WINDOW), strict=True), marker="o", color="C0",
                label=f"mean over {collapse.WINDOW} iterations")  # fmt: skip
        onset = t[f"{key}_onset"]
        if not math.isnan(onset):
            ax.axvline(onset, color="C1", linestyle=":", label="signal fell 20% below its first window")
            ax.annotate(f"fell at {onset:.0f}", (onset, 0.8), xycoords=("data", "axes fraction"), fontsize=8,
                        ha="right", color="C1")  # fmt: skip
        else:
            ax.annotate("never fell 20%", (0.99, 0.8), xycoords="axes fraction", fontsize=8, ha="right", color="C1")
        ax.set_ylabel(label, fontsize=8)
    success = axes[2]
    success.plot(*zip(*collapse.eval_curve(history), strict=True), marker="s", color="C2", label="held-out success")
    success.axvline(t["peak_iteration"], color="C2", linestyle=":", label="peak")
    success.annotate(f"peak {t['peak_success']:.3f} at {t['peak_iteration']:.0f}", (t["peak_iteration"], 0.08),
                     xycoords=("data", "axes fraction"), fontsize=8, ha="right", color="C2")  # fmt: skip
    if not math.isnan(t["collapse_iteration"]):
        drop = dict(collapse.eval_curve(history))[int(t["collapse_iteration"])]
        # Two evaluations on `eval_tasks` maps differ by chance with a standard error of sqrt(2 p (1 - p) / n): a dip
        # inside 1.96 of them is labelled as a dip within noise, not as a collapse.
        maps = lake_reasoning.LakeConfig().eval_tasks
        noise = 1.96 * math.sqrt(2 * t["peak_success"] * (1 - t["peak_success"]) / maps)
        within = t["peak_success"] - drop < noise
        label = f"first evaluation 5 points below the peak ({'a dip within noise' if within else 'beyond noise'})"
        success.axvline(t["collapse_iteration"], color="C3", linestyle=":", label=label)
        success.annotate(f"{drop:.3f} at {t['collapse_iteration']:.0f}: "
                         f"{'within' if within else 'beyond'} ±{noise:.3f}, the noise of two evaluations",
                         (t["collapse_iteration"], 0.3), xycoords=("data", "axes fraction"), fontsize=8, ha="right",
                         color="C3")  # fmt: skip
    success.set_ylabel("held-out success", fontsize=8)
    success.set_xlabel("RL iteration")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.set_xlim(-1, max(r["iteration"] for r in history) + 1)
    fig.suptitle(f"The Echo Trap's timeline as RAGEN reads it: StarPO, recorded seed {seed}", fontsize=10)
    legend_outside(fig, columns=3)
    return fig
