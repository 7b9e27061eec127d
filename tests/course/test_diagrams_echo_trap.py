"""Chapter 09's diagram draws the dates and values chapter 09's own functions compute from the recorded run."""

import math

import matplotlib

matplotlib.use("Agg")

from course_lib.chapters import ch09_ragen as ch09  # noqa: E402
from course_lib.course.diagrams import echo_trap  # noqa: E402
from course_lib.diagnostics import collapse


def texts(fig) -> list[str]:
    return [text.get_text() for ax in fig.axes for text in ax.texts]


def test_recorded_history_rebuilds_the_curves():
    history = echo_trap.recorded_history(0)
    assert [r["iteration"] for r in history] == list(range(61))  # 60 training iterations, evaluated 0..60
    assert sum("eval_success" in r for r in history) == 7 and sum("reward_std" in r for r in history) == 60
    assert len(collapse.windowed(history, "reward_std", 10)) == 6


def test_labels_are_the_library_timeline():
    seed = echo_trap.collapsing_seed()
    history = echo_trap.recorded_history(seed)
    t = ch09.timeline(history, ch09.preset("cpu"))
    assert not math.isnan(t["collapse_iteration"]), "the chosen seed has a dated drop"
    fig = echo_trap.figure(seed)
    drawn = texts(fig)
    assert f"peak {t['peak_success']:.3f} at {t['peak_iteration']:.0f}" in drawn
    drop = dict(ch09.eval_curve(history))[int(t["collapse_iteration"])]
    # the dip is labelled against the noise of two evaluations on the held-out maps: 1.96 sqrt(2 p (1 - p) / n)
    noise = 1.96 * math.sqrt(2 * t["peak_success"] * (1 - t["peak_success"]) / ch09.preset("cpu").eval_tasks)
    side = "within" if t["peak_success"] - drop < noise else "beyond"
    label = f"{drop:.3f} at {t['collapse_iteration']:.0f}: {side} ±{noise:.3f}, the noise of two evaluations"
    assert label in drawn
    assert side == "within" and f"{noise:.3f}" == "0.122", "on the drawn seed 0.445 against 0.508 is a dip within noise"
    assert drop <= t["peak_success"] - 0.05 + 1e-12
    for key in ("reward_std", "entropy"):
        onset = t[f"{key}_onset"]
        assert (f"fell at {onset:.0f}" if not math.isnan(onset) else "never fell 20%") in drawn
    assert str(seed) in fig._suptitle.get_text()


def test_collapsing_seed_is_the_earliest_drop():
    config = ch09.preset("cpu")
    dates = {}
    for seed in (0, 1, 2):
        dropped = collapse.collapse_point(echo_trap.recorded_history(seed), config.collapse_drop)["collapse_iteration"]
        dates[seed] = math.inf if math.isnan(dropped) else dropped
    assert echo_trap.collapsing_seed() == min(dates, key=lambda s: (dates[s], s))
