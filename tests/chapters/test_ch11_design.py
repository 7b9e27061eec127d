"""Chapter 11's designed setting (`course_lib.chapters.ch11_design`): the re-searching demonstrator, the two rule
conventions, the excess over the uniform reference and the design's claim (no model is built or trained here)."""

from __future__ import annotations

import random

import pytest

from course_lib.algos import aepo, arpo
from course_lib.chapters import ch11_design as design
from course_lib.envs.two_hop_qa import expert_actions, question_pool


def _question(ambiguous: bool):
    return question_pool("train", ambiguous)[0]


def test_demonstrator_repeats_only_after_two_candidates():
    """research_share 1: exactly max_researches repeats on an ambiguous question, none on an unambiguous one."""
    ambiguous, plain = _question(True), _question(False)
    actions = design.demonstrator_actions(ambiguous, random.Random(0), 0.0, 1.0, 5)
    assert len(actions) == 1 + 5 + 2
    assert len(set(actions[:6])) == 1 and f"search {ambiguous.name} {ambiguous.role}" in actions[0]
    assert len(design.demonstrator_actions(plain, random.Random(0), 0.0, 1.0, 5)) == 3
    assert len(design.demonstrator_actions(ambiguous, random.Random(0), 0.0, 0.0, 5)) == 3
    assert design.demonstrator_actions(ambiguous, random.Random(0), 1.0, 1.0, 5) == expert_actions(ambiguous)


def test_demonstrator_repeats_are_geometric():
    """At research_share 0.5 the number of repeats is geometric, capped at 5: P(0) = 1/2, P(5) = 1/32."""
    question = _question(True)
    rng = random.Random(1)
    repeats = [len(design.demonstrator_actions(question, rng, 0.0, 0.5, 5)) - 3 for _ in range(20_000)]
    assert repeats.count(0) / len(repeats) == pytest.approx(0.5, abs=0.015)
    assert repeats.count(5) / len(repeats) == pytest.approx(1 / 32, abs=0.005)
    assert max(repeats) == 5


def test_demonstrations_end_their_episodes_within_the_tool_limit():
    config = design.DesignConfig(demonstrations=200)
    texts = design.demonstration_texts(200, 0, config)
    calls = [completion.count("<tool_call>") for _, completion in texts]
    assert len(texts) == 200 and max(calls) <= config.max_tool_calls and min(calls) == 2
    assert all(completion.rstrip().endswith("</answer>") for _, completion in texts)


@pytest.mark.parametrize("rise", [0.0, 0.01, 0.05, 0.2])
def test_calibrated_rules_agree_before_the_penalty(rise):
    """ARPO's alpha 0 and AEPO's threshold 1 give the same P = clip(beta dH) at l = 0; AEPO's is lower after."""
    trees = design.trees(design.DesignConfig())["calibrated"]
    a, b = trees["arpo"], trees["aepo"]
    p_arpo = float(arpo.branch_probability(0.1 + rise, 0.1, a.alpha, a.beta))
    assert a.beta == 6.0 and p_arpo == pytest.approx(min(1.0, 6 * rise))
    assert aepo.branch_probability(0.1 + rise, 0.1, 0, b.alpha, b.beta) == pytest.approx(p_arpo)
    # l = 2: 1 - 1 / 0.9 = -0.111... below ARPO's
    assert aepo.branch_probability(0.1 + rise, 0.1, 2, b.alpha, b.beta) == pytest.approx(
        max(0.0, min(1.0, 6 * rise - 1 / 9))
    )


def test_released_rules_are_the_fair_coin():
    trees = design.trees(design.DesignConfig())["released"]
    assert float(arpo.branch_probability(0.2, 0.2, trees["arpo"].alpha, trees["arpo"].beta)) == 0.5
    assert aepo.branch_probability(0.2, 0.2, 0, trees["aepo"].alpha, trees["aepo"].beta) == 0.5


def _numbers(arpo_excess: float, aepo_excess: float) -> dict[str, float]:
    return {
        "calibrated_arpo_excess": arpo_excess,
        "calibrated_aepo_excess": aepo_excess,
        "calibrated_arpo_excess_minus_aepo": arpo_excess - aepo_excess,
    }


def test_the_claim_can_fail():
    claim = design.DESIGN.claim
    assert claim.kind == "finding" and claim.id == "C11.1d"
    assert claim.evaluate(_numbers(0.05, 0.01)).passed
    assert not claim.evaluate(_numbers(0.05, 0.07)).passed  # the penalty concentrates
    assert not claim.evaluate(_numbers(-0.02, -0.05)).passed  # ARPO below the uniform share
    assert [key for key, _ in claim.effects] == ["calibrated_arpo_excess_minus_aepo", "calibrated_arpo_excess"]
    assert design.DESIGN.effect_key == "calibrated_arpo_excess_minus_aepo"
    assert not set(design.DESIGN.pilot_seeds) & set(range(design.DESIGN.max_seeds))
