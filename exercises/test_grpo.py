"""`pytest exercises/test_grpo.py`: the checks of `exercises/grpo.py` (`exercises/checks/grpo.py`)."""

import pytest

from exercises.checks import cases


@pytest.mark.parametrize("case", cases("grpo.group_advantages"), ids=str)
def test_group_advantages(case, verify):
    verify(case)


@pytest.mark.parametrize("case", cases("grpo.clipped_surrogate_loss"), ids=str)
def test_clipped_surrogate_loss(case, verify):
    verify(case)
