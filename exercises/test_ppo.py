"""`pytest exercises/test_ppo.py`: the checks of `exercises/ppo.py` (`exercises/checks/ppo.py`)."""

import pytest

from exercises.checks import cases


@pytest.mark.parametrize("case", cases("ppo.gae"), ids=str)
def test_gae(case, verify):
    verify(case)
