"""Summaries of a number over seeds: its mean with the min-max range or a 95% Student-t interval.

Chapter 05's paired comparisons (its claims) and the plots' error bars use the same function, so a
bar in a figure and the interval a claim checks are one computation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
"""Two-sided 95% Student-t quantiles for 1-10 degrees of freedom (no scipy in the course's environment)."""


def interval(values: Sequence[float], kind: Literal["range", "t95"] = "range") -> tuple[float, float, float]:
    """`(mean, low, high)` of `values`: low/high are the min and max ("range") or the mean -/+ the 95%
    Student-t half-width s * t(0.975, n-1) / sqrt(n) ("t95"; equal to the mean for a single value)."""
    data = np.asarray(values, dtype=float)
    if not data.size:
        raise ValueError("no values")
    mean = float(data.mean())
    if kind == "range":
        return mean, float(data.min()), float(data.max())
    if kind != "t95":
        raise ValueError(f"interval kind must be 'range' or 't95', got {kind!r}")
    if data.size < 2:
        return mean, mean, mean
    if data.size - 1 > len(T_975):
        raise ValueError(f"t95 is tabulated for up to {len(T_975) + 1} values, got {data.size}")
    half = float(data.std(ddof=1)) * T_975[data.size - 2] / math.sqrt(data.size)
    return mean, mean - half, mean + half


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks 1..n of `values`, tied values sharing the mean of the ranks they span (`[10, 20, 20, 30]` ->
    `[1, 2.5, 2.5, 4]`)."""
    _, position, counts = np.unique(np.asarray(values, dtype=float), return_inverse=True, return_counts=True)
    last = np.cumsum(counts)  # the last rank each distinct value spans; its first is last - count + 1
    return ((2 * last - counts + 1) / 2)[position]


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation of paired values: Pearson's correlation of their average ranks (ties shared), in
    [-1, 1]; NaN when either side is constant (no ranking to compare) or fewer than two pairs are given. Chapter 10
    uses it to ask which diagnostic orders runs by their final success (RAGEN-2's comparison of MI and entropy)."""
    if len(x) != len(y):
        raise ValueError(f"spearman needs paired values, got {len(x)} and {len(y)}")
    if len(x) < 2:
        return float("nan")
    rx, ry = average_ranks(x), average_ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])
