"""`pytest exercises/test_loop.py`: the checks of `exercises/loop.py` (`exercises/checks/loop.py`)."""

import pytest

from exercises.checks import cases


@pytest.mark.parametrize("case", cases("loop.grpo_update"), ids=str)
def test_grpo_update(case, verify):
    verify(case)
