"""`pytest exercises/test_rollout.py`: the checks of `exercises/rollout.py` (`exercises/checks/rollout.py`)."""

import pytest

from exercises.checks import cases


@pytest.mark.parametrize("case", cases("rollout.play_episode"), ids=str)
def test_play_episode(case, verify):
    verify(case)
