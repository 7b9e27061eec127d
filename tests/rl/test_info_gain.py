"""IGPO's gold answer (`rl.info_gain`): read from the first step that names it, so an episode that opens with an
invalid action (whose info is the base class's: `valid`, `error`) is scored as any other; an episode with no valid
step has no information to measure and gets a gain of 0 on its turns (issue 58: both raised a ValueError)."""

from __future__ import annotations

import pytest

from course_lib.algos.igpo import IGPOConfig
from course_lib.engine.rollout import Trajectory
from course_lib.rl import info_gain


def episode(infos: list[dict], rewards: list[float]) -> Trajectory:
    """Three turns of two tokens after a two-token prompt (turn ids -1, then 0, 1, 2)."""
    turns = [-1, -1] + [t for t in range(len(rewards)) for _ in range(2)]
    return Trajectory(env=None, token_ids=list(range(len(turns))), loss_mask=[0] * len(turns),
                      logprobs=[0.0] * len(turns), entropies=[0.0] * len(turns), turn_ids=turns,
                      rewards=rewards, infos=infos)  # fmt: skip


@pytest.fixture
def scored(monkeypatch):
    """Gold log-probabilities without a model: each context scores its length / 10, so the gain of a turn is
    exp(after) - exp(before)."""
    monkeypatch.setattr(info_gain, "gold_tokens", lambda tokenizer, template, answer: ([0], [True]))
    monkeypatch.setattr(
        info_gain, "gold_mean_logprobs", lambda model, tok, contexts, gold: [-len(c) / 10 for c in contexts]
    )


def test_the_answer_comes_from_the_first_step_that_names_it():
    invalid_first = episode([{"valid": False, "error": "?"}, {"valid": True, "answer": "paris"}, {}], [0.0, 0.0, 1.0])
    assert info_gain.gold_answer(invalid_first, "answer") == "paris"
    assert info_gain.gold_answer(episode([{"valid": False}], [0.0]), "answer") == ""


def test_an_episode_opening_with_an_invalid_step_is_scored_and_one_without_an_answer_gains_nothing(scored):
    opens_invalid = episode([{"valid": False, "error": "?"}, {"answer": "paris"}, {"answer": "paris"}], [0.0, 0.0, 1.0])
    all_invalid = episode([{"valid": False}, {"valid": False}, {"valid": False}], [-0.1, -0.1, -0.1])
    logprobs = info_gain.annotate(None, None, [opens_invalid, all_invalid], IGPOConfig())
    assert [round(v, 6) for v in logprobs[0]] == [-0.2, -0.4, -0.6] and logprobs[1] == []
    gains = [info["turn_reward"] for info in opens_invalid.infos]
    # by hand: p = exp(-0.2), exp(-0.4), exp(-0.6) = 0.8187, 0.6703, 0.5488; IG_1 = -0.1484, IG_2 = -0.1215
    assert gains == pytest.approx([-0.1484, -0.1215, 1.0], abs=1e-4)  # the last turn earns the outcome
    assert [info["turn_reward"] for info in all_invalid.infos] == pytest.approx([0.0, 0.0, -0.3])
