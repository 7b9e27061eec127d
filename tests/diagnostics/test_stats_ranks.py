"""Rank correlation by hand: average ranks with ties, Spearman's rho on small paired lists."""

from __future__ import annotations

import math

import numpy as np
import pytest

from course_lib.diagnostics.stats import average_ranks, spearman


def test_average_ranks_share_ties():
    assert average_ranks([10, 20, 20, 30]).tolist() == [1.0, 2.5, 2.5, 4.0]
    assert average_ranks([3, 1, 2]).tolist() == [3.0, 1.0, 2.0]
    assert average_ranks([5, 5, 5]).tolist() == [2.0, 2.0, 2.0]


def test_spearman_by_hand():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)
    # no ties: 1 - 6 sum d^2 / (n (n^2 - 1)); ranks y = [2, 1, 4, 3] against [1, 2, 3, 4]: sum d^2 = 4, rho = 0.6
    assert spearman([1, 2, 3, 4], [0.2, 0.1, 0.9, 0.5]) == pytest.approx(0.6)
    # with a tie: x ranks [1, 2.5, 2.5, 4], y ranks [1, 2, 3, 4]; Pearson of those = 4.5 / sqrt(4.5 * 5)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(4.5 * 5))
    # monotone but not linear: rank correlation 1 where Pearson's is below 1
    x = [1, 2, 3, 4, 5]
    y = [1, 2, 4, 8, 100]
    assert spearman(x, y) == pytest.approx(1.0) and np.corrcoef(x, y)[0, 1] < 0.9


def test_spearman_edge_cases():
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3])), "a constant side has no ranking"
    assert math.isnan(spearman([1], [2]))
    with pytest.raises(ValueError, match="paired"):
        spearman([1, 2], [1, 2, 3])
