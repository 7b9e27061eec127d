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
