"""How likely a check is to fail by chance (`course_lib.course.chance`), against hand-computed values."""

import math

import pytest

from course_lib.course import chance


def test_an_exact_check_cannot_fail_by_chance():
    found = chance.exact("compared token by token")([{"x": 1.0}])
    assert found.probability == 0.0 and found.how == "exact: compared token by token"


def test_a_count_that_must_not_be_zero_is_poisson_at_its_mean():
    # counts 2 and 4: rate 3, P(0) = exp(-3) = 0.0498
    found = chance.at_least_one("calls")([{"calls": 2.0}, {"calls": 4.0}])
    assert found.probability == pytest.approx(math.exp(-3)) and "least 2" in found.how
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
    assert both.probability == pytest.approx(2 * math.exp(-3)) and both.how.startswith("exact: by hand; calls >= 1")


def test_an_exact_comparison_fails_by_chance_only_when_nothing_was_compared():
    seeds = [{"calls": 2.0}, {"calls": 4.0}]
    found = chance.compared_exactly("by hand", "calls")(seeds)
    assert found.probability == pytest.approx(math.exp(-3)) and found.how.startswith("exact: by hand; calls >= 1")
