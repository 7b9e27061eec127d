"""The premises' arithmetic on hand-made episodes (`tasks.real_premises`)."""

from __future__ import annotations

import math

import pytest

from course_lib.engine.rollout import Trajectory
from course_lib.tasks import real_premises


def episode(turns: list[list[float]], first_info: dict) -> Trajectory:
    """A trajectory of a 2-token prompt, then per turn its policy tokens' entropies and a 1-token observation."""
    tokens = [(0, 0, 0.0, -1), (0, 0, 0.0, -1)]  # (id, mask, entropy, turn)
    for turn, values in enumerate(turns):
        tokens += [(1, 1, value, turn) for value in values]
        tokens.append((2, 0, 9.9, turn))  # an observation: not scored
    ids, mask, entropies, turn_ids = (list(column) for column in zip(*tokens, strict=True))
    infos = [first_info] + [{} for _ in turns[1:]]
    return Trajectory(env=None, token_ids=ids, loss_mask=mask, logprobs=[0.0] * len(ids), entropies=entropies,
                      turn_ids=turn_ids, infos=infos)  # fmt: skip


def test_the_entropy_after_the_first_result_by_hand():
    """Two scored episodes: first turns' first 2 tokens average 1.0 and 2.0, the turns after the result 1.5 and 1.0
    (differences +0.5 and -1.0, mean -0.25). An episode whose first action returned nothing, and one that ended at
    its first turn, are not scored."""
    scored = [
        episode([[1.0, 1.0, 7.0], [1.0, 2.0, 7.0]], {"tool_result": "x"}),
        episode([[2.0, 2.0], [0.5, 1.5], [5.0]], {"tool_result": "y"}),
    ]
    unscored = [episode([[3.0], [3.0]], {"valid": False}), episode([[4.0, 4.0]], {"tool_result": "z"})]
    numbers = real_premises.after_result_entropies(scored + unscored, first=2)
    assert numbers["scored"] == 2
    assert numbers["entropy_first_turn"] == pytest.approx(1.5)
    assert numbers["entropy_after_result"] == pytest.approx(1.25)
    assert numbers["after_result_minus_first"] == pytest.approx(-0.25)


def test_nothing_scored_is_nan_not_zero():
    numbers = real_premises.after_result_entropies([episode([[1.0]], {"tool_result": "x"})])
    assert numbers["scored"] == 0 and math.isnan(numbers["after_result_minus_first"])
