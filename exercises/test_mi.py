"""`pytest exercises/test_mi.py`: the checks of `exercises/mi.py` (`exercises/checks/mi.py`)."""

import pytest

from exercises.checks import cases


@pytest.mark.parametrize("case", cases("mi.cross_scoring"), ids=str)
def test_cross_scoring(case, verify):
    verify(case)
