"""`pytest exercises/test_aepo.py`: the checks of `exercises/aepo.py` (`exercises/checks/aepo.py`)."""

import pytest

from exercises.checks import cases


@pytest.mark.parametrize("case", cases("aepo.balanced_clip"), ids=str)
def test_balanced_clip(case, verify):
    verify(case)
