"""How likely a check is to fail by chance (`course_lib.course.chance`), against hand-computed values."""

import math

import pytest

from course_lib.course import chance


def test_an_exact_check_cannot_fail_by_chance():
    found = chance.exact("compared token by token")([{"x": 1.0}])
    assert found.probability == 0.0 and found.how == "exact: compared token by token"


PREDICTIVE = (2 / 3) ** 6.5
"""Counts 2 and 4 over 2 seeds: S = 6, P(0) = (2/3)^(6 + 1/2) = 0.0717 (the plug-in exp(-3) would say 0.0498)."""


def test_a_count_that_must_not_be_zero_is_negative_binomial_predictive():
    found = chance.at_least_one("calls")([{"calls": 2.0}, {"calls": 4.0}])
    assert found.probability == pytest.approx(0.07168, abs=1e-5)
    assert found.probability > math.exp(-3), "the rate's uncertainty makes a zero likelier than the plug-in says"
    assert "least 2" in found.how and "(2/3)^(6 + 1/2)" in found.how
    # chapter 00's SmolLM2 mask check: 24 calls over 5 seeds, 1.15% (above the 1% a mechanism allows)
    assert chance.at_least_one("c")([{"c": x} for x in (2.0, 6.0, 5.0, 7.0, 4.0)]).probability == pytest.approx(
        (5 / 6) ** 24.5
    )
    # many seeds: the predictive approaches the plug-in
    many = chance.at_least_one("c")([{"c": 3.0}] * 10_000).probability
    assert many == pytest.approx(math.exp(-3), rel=1e-3)
    assert chance.at_least_one("calls")([{"other": 1.0}]).probability == 1.0, "never recorded: no guarantee"


def test_a_measured_number_uses_the_t_predictive_tail():
    # values 1, 2, 3: mean 2, sd 1, scale sqrt(1 + 1/3) = 1.1547; the threshold 0 is 1.7321 scales below the mean;
    # with 2 df, P(T <= -1.7321) = (1 - 1.7321 / sqrt(2 + 3)) / 2 = 0.1127
    seeds = [{"x": 1.0}, {"x": 2.0}, {"x": 3.0}]
    assert chance.next_seed("x", 0.0)(seeds).probability == pytest.approx(0.1127, abs=1e-4)
    # the check "x below 4": the same distance on the other side
    assert chance.next_seed("x", 4.0, above=False)(seeds).probability == pytest.approx(0.1127, abs=1e-4)
    # a derived number, named by its key
    derived = chance.next_seed("twice", 0.0, value=lambda n: 2 * n["x"])(seeds)
    assert derived.probability == pytest.approx(0.1127, abs=1e-4) and derived.how.startswith("twice > 0")
    # values that never vary: the side they are on
    assert chance.next_seed("x", 0.0)([{"x": 1.0}] * 4).probability == 0.0
    assert chance.next_seed("x", 5.0)([{"x": 1.0}] * 4).probability == 1.0


def test_parts_add_up():
    seeds = [{"calls": 2.0}, {"calls": 4.0}]
    both = chance.any_of(chance.exact("by hand"), chance.at_least_one("calls"), chance.at_least_one("calls"))(seeds)
    assert both.probability == pytest.approx(2 * PREDICTIVE) and both.how.startswith("exact: by hand; calls >= 1")


def test_an_exact_comparison_fails_by_chance_only_when_nothing_was_compared():
    seeds = [{"calls": 2.0}, {"calls": 4.0}]
    found = chance.compared_exactly("by hand", "calls")(seeds)
    assert found.probability == pytest.approx(PREDICTIVE) and found.how.startswith("exact: by hand; calls >= 1")
