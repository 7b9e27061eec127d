"""`course_lib.diagnostics.plots` renders on an Agg canvas and draws what it says: mean lines, min-max bands,
error bars with the stated interval, 2-per-row grids."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.container import BarContainer, ErrorbarContainer  # noqa: E402

from course_lib.diagnostics import plots, stats  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_grid_layouts():
    for n, shape in ((1, (1, 1)), (2, (1, 2)), (3, (2, 2)), (4, (2, 2)), (5, (3, 2))):
        fig, axes = plots.grid(n)
        assert len(axes) == n == len(fig.axes)  # spare cells of the last row are removed
        rows_cols = {(round(ax.get_position().y0, 3), round(ax.get_position().x0, 3)) for ax in axes}
        assert len({y for y, _ in rows_cols}) == shape[0] and len({x for _, x in rows_cols}) == shape[1], n
    with pytest.raises(ValueError):
        plots.grid(0)


def test_curves_with_bands_mean_band_and_markers():
    fig, (ax,) = plots.grid(1)
    series = {
        "masked": {0: [(0, 0.1), (10, 0.5), (20, 0.7)], 1: [(0, 0.3), (10, 0.3), (20, 0.9)]},
        "plain": {0: [(x, 0.2) for x in range(40)]},
    }
    plots.curves_with_bands(series, ax, y_label="accuracy")
    fig.canvas.draw()
    masked, plain = ax.get_lines()
    np.testing.assert_allclose(masked.get_xdata(), [0, 10, 20])
    np.testing.assert_allclose(masked.get_ydata(), [0.2, 0.4, 0.8])
    assert masked.get_marker() == "o" and plain.get_marker() in (None, "None", "")  # few points get markers
    assert masked.get_label() == "masked (mean, range of 2 seeds)" and plain.get_label() == "plain (1 seed)"
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 1  # a single seed has no band
    vertices = bands[0].get_paths()[0].vertices
    assert vertices[:, 1].min() == pytest.approx(0.1) and vertices[:, 1].max() == pytest.approx(0.9)


def test_curves_with_bands_uses_common_x_only():
    fig, (ax,) = plots.grid(1)
    plots.curves_with_bands({"a": {0: [(0, 1.0), (5, 2.0)], 1: [(0, 3.0), (7, 9.0)]}}, ax)
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), [2.0])
    with pytest.raises(ValueError, match="share no x"):
        plots.curves_with_bands({"b": {0: [(1, 1.0)], 1: [(2, 1.0)]}}, ax)


def test_interval_range_and_t95():
    assert stats.interval([0.2, 0.5, 0.8]) == pytest.approx((0.5, 0.2, 0.8))
    mean, low, high = stats.interval([0.2, 0.5, 0.8], "t95")
    half = np.std([0.2, 0.5, 0.8], ddof=1) * 4.302652729911275 / np.sqrt(3)  # t(0.975, 2), from tables to 16 digits
    assert (mean, low, high) == pytest.approx((0.5, 0.5 - half, 0.5 + half))
    assert stats.interval([0.4], "t95") == (0.4, 0.4, 0.4)
    with pytest.raises(ValueError):
        stats.interval([1.0, 2.0], "sd")  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["range", "t95"])
def test_arm_comparison_bars_error_bars_and_seed_dots(kind):
    fig, (ax,) = plots.grid(1)
    values = {"masked": [0.7, 0.8, 0.9], "unmasked": [0.5, 0.6, 1.0]}
    plots.arm_comparison(values, ax, y_label="accuracy", kind=kind)
    fig.canvas.draw()
    bars = next(c for c in ax.containers if isinstance(c, BarContainer))
    assert [p.get_height() for p in bars.patches] == pytest.approx([0.8, 0.7])
    errorbar = next(c for c in ax.containers if isinstance(c, ErrorbarContainer))
    segments = errorbar.lines[2][0].get_segments()
    spans = [(seg[:, 1].min(), seg[:, 1].max()) for seg in segments]
    expected = [stats.interval(v, kind)[1:] for v in values.values()]
    assert spans == [pytest.approx(e) for e in expected]
    if kind == "range":
        assert spans == [pytest.approx((0.7, 0.9)), pytest.approx((0.5, 1.0))]
    dots = [c for c in ax.collections if c.get_offsets().shape[0] == 3]
    assert len(dots) == 2 and sorted(dots[1].get_offsets()[:, 1]) == pytest.approx([0.5, 0.6, 1.0])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["masked", "unmasked"]


def test_learning_curves_keeps_working_and_lays_out_two_per_row():
    histories = [[{"iteration": i, "loss": 1.0 / (i + 1 + s), "eval": 0.1 * i} for i in range(4)] for s in range(3)]
    fig = plots.learning_curves(histories, [("loss", "loss"), ("eval", "acc"), ("loss", "l2")], title="t")
    assert len(fig.axes) == 3
    first = fig.axes[0]
    np.testing.assert_allclose(
        first.get_lines()[0].get_ydata(), np.mean([[1 / (i + 1 + s) for i in range(4)] for s in range(3)], 0)
    )
    assert any(isinstance(c, PolyCollection) for c in first.collections)
    assert fig.axes[0].get_position().y0 == pytest.approx(fig.axes[1].get_position().y0)  # same row
    assert fig.axes[2].get_position().y0 < fig.axes[0].get_position().y0  # next row


def test_recorded_panels_draw_recorded_bands_and_this_run(tmp_path, monkeypatch):
    from course_lib.course import recorded
    from course_lib.course.claims import ClaimSpec

    monkeypatch.setattr(recorded, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(recorded, "_run_provenance", None)  # this test's own run, restored after it
    recorded.begin()
    spec = (ClaimSpec("C9.1", "x", "p", "gain", lambda n: n["gain"] > 0),)
    recorded.write("ch09", [recorded.make_record(s, spec, {"gain": 1.0}, 1.0,
                                               curves={"a/acc": [(0, 0.1 * s), (10, 0.5 + 0.1 * s)]})
                           for s in range(3)])  # fmt: skip
    history = [{"iteration": 0, "acc": 0.0}, {"iteration": 5}, {"iteration": 10, "acc": 0.6}]
    fig = recorded.panels("ch09", {"arm A": "a"}, [("acc", "accuracy")], this_run={"arm A": history})
    (ax,) = fig.axes
    recorded_line, this_line = ax.get_lines()
    np.testing.assert_allclose(recorded_line.get_ydata(), [0.1, 0.6])
    np.testing.assert_allclose(this_line.get_ydata(), [0.0, 0.6])
    assert this_line.get_linestyle() == "--" and this_line.get_color() == recorded_line.get_color()
    assert len([c for c in ax.collections if isinstance(c, PolyCollection)]) == 1
    with pytest.raises(KeyError, match="no recorded seed of ch09 has the curve 'b/acc'"):
        recorded.panels("ch09", {"arm B": "b"}, [("acc", "accuracy")])


def test_recorded_panels_put_one_legend_below_the_panels_not_on_the_data(tmp_path, monkeypatch):
    from course_lib.course import recorded
    from course_lib.course.claims import ClaimSpec

    monkeypatch.setattr(recorded, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(recorded, "_run_provenance", None)  # this test's own run, restored after it
    recorded.begin()
    spec = (ClaimSpec("C9.1", "x", "p", "gain", lambda n: n["gain"] > 0),)
    curves = {"a/acc": [(0, 0.1), (10, 0.5)], "a/len": [(0, 3.0), (10, 2.0)]}
    recorded.write("ch09", [recorded.make_record(s, spec, {"gain": 1.0}, 1.0, curves=curves) for s in range(2)])
    fig = recorded.panels("ch09", {"arm A": "a"}, [("acc", "accuracy"), ("len", "length")])
    assert all(ax.get_legend() is None for ax in fig.axes), "no legend inside a panel"
    (legend,) = fig.legends
    labels = [text.get_text() for text in legend.get_texts()]
    assert len(labels) == len(set(labels)) and any("arm A" in label for label in labels)
    fig.canvas.draw()
    legend_top = legend.get_window_extent().y1
    assert all(ax.get_window_extent().y0 > legend_top for ax in fig.axes), "the legend sits below every panel"


def test_show_displays_a_png_with_its_alt_text_and_refuses_none(monkeypatch):
    import matplotlib.pyplot as plt

    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    plots.show(fig, alt="A  straight line\n from 0 to 1.")
    (image,) = shown
    _, metadata = image._repr_png_()
    assert image.data.startswith(b"\x89PNG") and metadata == {"alt": "A straight line from 0 to 1."}
    assert not plt.fignum_exists(fig.number), "the figure is closed so it is not drawn twice"
    with pytest.raises(ValueError, match="alt text is required"):
        plots.show(plt.subplots()[0], alt=" ")


def test_paired_differences_plots_each_seeds_difference_and_its_t_interval():
    """GiGPO minus GRPO on the same seed: by hand, differences [0.1, 0.0, 0.2], mean 0.1, std 0.1, and the 95%
    t-interval mean +- t(0.975, 2) * 0.1 / sqrt(3) = 0.1 +- 4.303 * 0.0577 = [-0.148, 0.348]."""
    fig, (ax,) = plots.grid(1)
    values = {"GRPO": [0.5, 0.7, 0.6], "GiGPO": [0.6, 0.7, 0.8]}
    plots.paired_differences(values, [("GiGPO", "GRPO")], ax, y_label="success, paired", margin=0.05)
    fig.canvas.draw()
    errorbar = next(c for c in ax.containers if isinstance(c, ErrorbarContainer))
    (segment,) = errorbar.lines[2][0].get_segments()
    assert (segment[:, 1].min(), segment[:, 1].max()) == pytest.approx((-0.1484, 0.3484), abs=1e-4)
    (dots,) = [c for c in ax.collections if c.get_offsets().shape[0] == 3]
    assert sorted(dots.get_offsets()[:, 1]) == pytest.approx([0.0, 0.1, 0.2])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["GiGPO\nminus GRPO"]
    lines = {round(line.get_ydata()[0], 6) for line in ax.get_lines() if len(set(line.get_ydata())) == 1}
    assert {0.0, 0.05} <= lines, "a line at 0 and one at the margin"
    with pytest.raises(ValueError, match="a pair needs both"):
        plots.paired_differences({"a": [1.0, 2.0], "b": [1.0]}, [("b", "a")], ax)
