"""`pytest exercises/test_filters.py`: the checks of `exercises/filters.py` (`exercises/checks/filters.py`)."""

import pytest

from exercises.checks import cases


@pytest.mark.parametrize("case", cases("filters.starpo_s"), ids=str)
def test_starpo_s(case, verify):
    verify(case)


@pytest.mark.parametrize("case", cases("filters.snr"), ids=str)
def test_snr(case, verify):
    verify(case)
