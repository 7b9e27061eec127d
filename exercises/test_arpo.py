"""`pytest exercises/test_arpo.py`: the checks of `exercises/arpo.py` (`exercises/checks/arpo.py`)."""

import pytest

from exercises.checks import cases


@pytest.mark.parametrize("case", cases("arpo.branch_decision"), ids=str)
def test_branch_decision(case, verify):
    verify(case)
