"""`pytest exercises/test_tree_grpo.py`: the checks of `exercises/tree_grpo.py` (`exercises/checks/tree_grpo.py`)."""

import pytest

from exercises.checks import cases


@pytest.mark.parametrize("case", cases("tree_grpo.tree_advantages"), ids=str)
def test_tree_advantages(case, verify):
    verify(case)
