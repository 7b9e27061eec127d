"""Summaries of a number over seeds, and the course's rule for deciding a paired difference.

A finding that compares arms is decided on the paired differences over its seeds by a 95% Student-t interval
(`t_interval`), whose coverage is exact for normal data at any number of seeds. The percentile bootstrap
(`bootstrap_interval`), the interquartile mean, the probability of improvement and the exact sign-flip test
(`sign_flip_p`) describe the same differences (Agarwal et al. 2021); they do not decide: at 3 to 6 seeds the
bootstrap covers only 76-86% of the time (at 3 seeds it is the seeds' range). `detectable_effect` and the designs'
seed counts use t quantiles too, not the normal's, which understate the effect small samples can see.

Chapter 05's paired comparisons and the plots' error bars use `interval`, so a bar in a figure and the interval a
claim checks are one computation. No scipy in the course's environment: the t and chi-square distributions are
computed here in closed form (Abramowitz and Stegun 26.7.3-4, 26.4.4-5) and inverted by bisection.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Literal

import numpy as np


def t_cdf(x: float, df: int) -> float:
    """P(T <= x) for Student's t with a whole number `df` of degrees of freedom, in closed form: with
    theta = atan(x / sqrt(df)), P(|T| <= |x|) is, for odd df, (2/pi) (theta + sin(theta) (cos(theta)
    + (2/3) cos^3(theta) + ... + (2 4 ... (df-3)) / (1 3 ... (df-2)) cos^(df-2)(theta))) (just 2 theta / pi at df 1),
    and for even df, sin(theta) (1 + (1/2) cos^2(theta) + ... + (1 3 ... (df-3)) / (2 4 ... (df-2))
    cos^(df-2)(theta)) (Abramowitz and Stegun 26.7.3-4)."""
    if df < 1 or int(df) != df:
        raise ValueError(f"df must be a positive whole number, got {df}")
    if math.isinf(x):
        return 1.0 if x > 0 else 0.0
    theta = math.atan(abs(x) / math.sqrt(df))
    sin, cos = math.sin(theta), math.cos(theta)
    if df % 2:
        term, total = cos, cos if df > 1 else 0.0
        for k in range(3, df - 1, 2):  # term_k = term_{k-2} (k - 1) / k cos^2
            term *= (k - 1) / k * cos * cos
            total += term
        inside = 2 / math.pi * (theta + sin * total)
    else:
        term, total = 1.0, 1.0
        for k in range(2, df - 1, 2):  # term_k = term_{k-2} (k - 1) / k cos^2
            term *= (k - 1) / k * cos * cos
            total += term
        inside = sin * total
    return 0.5 + 0.5 * inside if x >= 0 else 0.5 - 0.5 * inside


def t_quantile(p: float, df: int) -> float:
    """The `p` quantile of Student's t with `df` degrees of freedom (`t_cdf` inverted by bisection to 1e-12)."""
    if not 0 < p < 1:
        raise ValueError(f"p must lie in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2
    while high - low > 1e-12 * max(1.0, high):
        middle = (low + high) / 2
        low, high = (middle, high) if t_cdf(middle, df) < p else (low, middle)
    return (low + high) / 2


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """`(mean, low, high)`: the mean of `values` -/+ t(1 - (1 - level)/2, n - 1) s / sqrt(n), the Student-t interval
    for the mean of normal data, whose coverage is `level` at every n. One value gives `(v, v, v)`: no interval, so a
    rule reading it must also ask for enough values (`verdicts.MIN_SEEDS`)."""
    data = np.asarray(values, dtype=float)
    if not data.size:
        raise ValueError("no values")
    mean = float(data.mean())
    if data.size < 2:
        return mean, mean, mean
    half = float(data.std(ddof=1)) * t_quantile(1 - (1 - level) / 2, data.size - 1) / math.sqrt(data.size)
    return mean, mean - half, mean + half


def interval(values: Sequence[float], kind: Literal["range", "t95"] = "range") -> tuple[float, float, float]:
    """`(mean, low, high)` of `values`: low/high are the min and max ("range") or the 95% Student-t interval
    ("t95", `t_interval`; equal to the mean for a single value)."""
    data = np.asarray(values, dtype=float)
    if not data.size:
        raise ValueError("no values")
    if kind == "range":
        return float(data.mean()), float(data.min()), float(data.max())
    if kind != "t95":
        raise ValueError(f"interval kind must be 'range' or 't95', got {kind!r}")
    return t_interval(data)


def sign_flip_p(values: Sequence[float]) -> float:
    """The exact two-sided p-value of a paired sign-flip (permutation) test of a zero mean: the share of the 2^n
    sign patterns whose |sum| is at least the observed |sum| (ties counted, with a 1e-12 slack for rounding). It
    assumes only that each difference is symmetric about 0 under the null; with n seeds it cannot go below
    2 / 2^n (0.0625 at 5 seeds). 1.0 for no values."""
    data = np.asarray(values, dtype=float)
    if not data.size:
        return 1.0
    if data.size > 20:
        raise ValueError(f"the exact test enumerates 2^n sign patterns; {data.size} values is too many")
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=data.size)))
    sums = np.abs(signs @ data)
    return float((sums >= abs(data.sum()) - 1e-12).mean())


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


def chi2_cdf(x: float, df: int) -> float:
    """P(X <= x) for a chi-square variable with a whole number `df` of degrees of freedom, in closed form: for even
    df, 1 - exp(-x/2) sum_{j < df/2} (x/2)^j / j!; for odd df, erf(sqrt(x/2)) - sqrt(2x/pi) exp(-x/2)
    sum_{j=1}^{(df-1)/2} x^(j-1) / (1 * 3 * ... * (2j-1)) (Abramowitz and Stegun 26.4.4-5)."""
    if df < 1 or int(df) != df:
        raise ValueError(f"df must be a positive whole number, got {df}")
    if x <= 0:
        return 0.0
    if df % 2 == 0:
        term, total = 1.0, 1.0
        for j in range(1, df // 2):
            term *= (x / 2) / j
            total += term
        return 1.0 - math.exp(-x / 2) * total
    term, total = 1.0, 0.0
    for j in range(1, (df + 1) // 2):
        total += term
        term *= x / (2 * j + 1)
    return math.erf(math.sqrt(x / 2)) - math.sqrt(2 * x / math.pi) * math.exp(-x / 2) * total


def chi2_quantile(p: float, df: int) -> float:
    """The `p` quantile of the chi-square distribution with `df` degrees of freedom (`chi2_cdf` inverted by
    bisection to 1e-12)."""
    if not 0 < p < 1:
        raise ValueError(f"p must lie in (0, 1), got {p}")
    low, high = 0.0, max(1.0, 4.0 * df)
    while chi2_cdf(high, df) < p:
        high *= 2
    while high - low > 1e-12 * max(1.0, high):
        middle = (low + high) / 2
        low, high = (middle, high) if chi2_cdf(middle, df) < p else (low, middle)
    return (low + high) / 2


def sd_upper_bound(sd: float, n: int, confidence: float = 0.8) -> float:
    """One-sided upper confidence bound of a normal population's standard deviation from a sample sd of `n` values:
    sd sqrt((n - 1) / chi2_{1 - confidence}(n - 1)). Four pilot seeds know the sd only to a factor of about 1.7 at
    80% confidence, which is why a plan on the sample sd alone can fall short of its power."""
    if n < 2:
        raise ValueError(f"need at least two values for an sd, got {n}")
    return sd * math.sqrt((n - 1) / chi2_quantile(1 - confidence, n - 1))


def bootstrap_interval(
    values: Sequence[float],
    strata: Sequence[object] | None = None,
    level: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """`(mean, low, high)`: the mean of `values` and its percentile bootstrap interval at `level`, resampling with
    replacement within each stratum (`strata[i]` labels `values[i]`; one stratum by default), as Agarwal et al. (2021,
    "Deep RL at the edge of the statistical precipice") do over runs. Seeded, so the same values always give the same
    interval. One value gives `(v, v, v)`."""
    data = np.asarray(values, dtype=float)
    if not data.size:
        raise ValueError("no values")
    labels = np.zeros(data.size, dtype=int) if strata is None else np.unique(np.asarray(strata), return_inverse=True)[1]
    if labels.size != data.size:
        raise ValueError(f"{data.size} values but {labels.size} stratum labels")
    rng = np.random.default_rng(seed)
    picks = []
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        picks.append(members[rng.integers(0, members.size, size=(resamples, members.size))])
    means = data[np.concatenate(picks, axis=1)].mean(axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(data.mean()), float(low), float(high)


def interquartile_mean(values: Sequence[float]) -> float:
    """The mean of the middle half of `values` (a quarter trimmed from each end, fractional weights at the cut, as
    rliable's IQM), robust to one outlying seed."""
    data = np.sort(np.asarray(values, dtype=float))
    if not data.size:
        raise ValueError("no values")
    n = data.size
    positions = np.arange(n)
    # each value covers [i, i + 1) of [0, n); keep the part inside [n/4, 3n/4)
    weights = np.clip(np.minimum(positions + 1, 0.75 * n) - np.maximum(positions, 0.25 * n), 0, 1)
    return float((weights * data).sum() / weights.sum())


def probability_of_improvement(differences: Sequence[float]) -> float:
    """The share of paired runs (seeds) in which the first arm beat the second, ties counting half."""
    data = np.asarray(differences, dtype=float)
    if not data.size:
        raise ValueError("no values")
    return float(((data > 0).sum() + 0.5 * (data == 0).sum()) / data.size)


def detectable_effect(values: Sequence[float]) -> float:
    """The smallest mean difference that a two-sided 5% t-test of paired `values` detects with 80% power:
    (t_{0.975, n-1} + t_{0.8, n-1}) sd / sqrt(n), the t quantiles in place of the normal's (which would understate
    it 1.9 times at 3 seeds and 1.25 times at 6). NaN below two values."""
    data = np.asarray(values, dtype=float)
    if data.size < 2:
        return float("nan")
    quantiles = t_quantile(0.975, data.size - 1) + t_quantile(0.8, data.size - 1)
    return float(quantiles * data.std(ddof=1) / math.sqrt(data.size))
