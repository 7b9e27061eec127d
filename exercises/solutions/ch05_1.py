"""Chapter 05, exercise 1: how many paired seeds would a 2-point difference of fine - coarse need?"""

import math

import numpy as np

from course_lib.course import recorded

Z = 1.959964  # the normal 97.5% quantile


def t_975(df: int) -> float:
    """Student-t 97.5% quantile, Cornish-Fisher expansion around the normal (within 0.01 of tables for df >= 3)."""
    return Z + (Z**3 + Z) / (4 * df) + (5 * Z**5 + 16 * Z**3 + 3 * Z) / (96 * df**2)


differences = 100 * np.asarray(recorded.recorded_numbers(recorded.load("ch05"), "fine_minus_coarse"))
s = differences.std(ddof=1)
print(f"{differences.size} recorded seeds: fine - coarse mean {differences.mean():+.1f} points, sd {s:.1f} points")
n = 2
while t_975(n - 1) * s / math.sqrt(n) > 2.0:
    n += 1
print(f"half-width of the 95% interval <= 2 points from n = {n} seeds (t = {t_975(n - 1):.2f})")
half = t_975(differences.size - 1) * s / math.sqrt(differences.size)
print(f"half-width with the {differences.size} recorded seeds: {half:.1f} points")
