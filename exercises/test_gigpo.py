"""`pytest exercises/test_gigpo.py`: the checks of `exercises/gigpo.py` (`exercises/checks/gigpo.py`)."""

import pytest

from exercises.checks import cases


@pytest.mark.parametrize("case", cases("gigpo.step_group_advantages"), ids=str)
def test_step_group_advantages(case, verify):
    verify(case)
