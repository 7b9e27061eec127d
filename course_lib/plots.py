"""The few figure kinds the chapters share: learning curves (with a spread over seeds)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np


def learning_curves(
    histories: Sequence[Sequence[dict]] | Sequence[dict],
    panels: Sequence[tuple[str, str]],
    title: str,
    x_key: str = "iteration",
    x_label: str = "RL iteration",
):
    """One panel per `(metric key, y-axis label)`; several histories (seeds) give mean and range.

    `histories` is one history (a list of per-iteration dicts) or a list of them. Iterations where
    a metric is absent (e.g. evaluation every k iterations) are skipped.
    """
    if histories and isinstance(histories[0], dict):
        histories = [histories]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.2), squeeze=False)
    for axis, (key, label) in zip(axes[0], panels, strict=True):
        rows = [[(r[x_key], r[key]) for r in history if key in r] for history in histories]
        xs = np.array([x for x, _ in rows[0]])
        values = np.array([[v for _, v in row] for row in rows])
        axis.plot(xs, values.mean(0), marker="." if len(xs) < 15 else None, label="mean" if len(rows) > 1 else key)
        if len(rows) > 1:
            axis.fill_between(xs, values.min(0), values.max(0), alpha=0.25, label=f"range over {len(rows)} seeds")
        axis.set_xlabel(x_label)
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
