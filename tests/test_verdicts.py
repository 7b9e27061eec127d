"""Course-level verdicts: the rule on hand numbers, and every generated place agreeing with results/."""

from __future__ import annotations

import pytest

from course_lib import results as recorded
from course_lib import stats, verdicts
from course_lib.claims import NOT_REPRODUCED, ClaimSpec, at_least


def spec(kind="finding", effects=(), check=lambda n: n["x"] > 0, required=False) -> ClaimSpec:
    return ClaimSpec("C99.1", "x is positive", "paper", "x", check, required=required, kind=kind, effects=effects)


def test_at_least_absorbs_rounding_but_not_a_real_shortfall():
    assert at_least(0.85 - 0.80, 0.05) and at_least(0.905 - 0.855, 0.05)
    assert not at_least(0.049, 0.05) and not at_least(float("nan"), 0.0)


def test_a_finding_without_effects_needs_every_seed():
    numbers = [{"x": 1.0}, {"x": 2.0}, {"x": -1.0}]
    verdict = verdicts.decide(spec(), numbers)
    assert (verdict.passed, verdict.seeds, verdict.status) == (2, 3, NOT_REPRODUCED)
    assert verdicts.decide(spec(), numbers[:2]).status == "reproduced"
    assert verdicts.decide(spec(), []).status == NOT_REPRODUCED, "no recorded seed decides nothing"


def test_a_comparison_is_decided_on_the_paired_interval_and_the_margin():
    # every seed positive, mean 0.06: the interval is above 0 and the mean reaches 0.05
    leads = [{"x": v} for v in (0.04, 0.06, 0.08, 0.05, 0.07)]
    verdict = verdicts.decide(spec(effects=(("x", 0.05),)), leads)
    assert verdict.holds and verdict.status == "reproduced"
    (effect,) = verdict.effects
    assert effect.mean == pytest.approx(0.06) and effect.low > 0 and effect.improvement == 1.0
    assert effect.detectable == pytest.approx(stats.detectable_effect([0.04, 0.06, 0.08, 0.05, 0.07]))
    # the same seeds against a larger margin: the interval is above 0 but the mean falls short
    assert not verdicts.decide(spec(effects=(("x", 0.07),)), leads).holds
    # a per-seed margin does not decide: seeds pass 2 of 4 but the interval straddles 0
    mixed = [{"x": v} for v in (0.2, -0.15, 0.1, -0.1)]
    assert not verdicts.decide(spec(effects=(("x", 0.0),)), mixed).holds
    # one seed gives no interval
    assert not verdicts.decide(spec(effects=(("x", 0.0),)), leads[:1]).holds


def test_a_margin_below_zero_asks_the_interval_to_clear_the_margin():
    close = [{"x": v} for v in (-0.01, 0.0, 0.01, -0.005)]
    assert verdicts.decide(spec(effects=(("x", -0.02),)), close).holds, "at most 2 points worse, and it is not"
    worse = [{"x": v} for v in (-0.05, 0.01, -0.03, 0.0)]
    assert not verdicts.decide(spec(effects=(("x", -0.02),)), worse).holds


def test_kinds_are_counted_apart():
    seeds = [{"x": 1.0}]
    found = verdicts.decide(spec(), seeds)
    exact = verdicts.decide(spec(kind="mechanism"), seeds)
    built = verdicts.decide(spec(kind="design"), seeds)
    assert (exact.status, built.status) == ("holds", "holds by design")
    line = verdicts.tally([found, exact, built])
    assert line.startswith("findings reproduced 1 of 1") and "mechanism checks 1 of 1" in line and "C99.1" in line
    with pytest.raises(ValueError, match="kind"):
        spec(kind="anecdote")


def test_bootstrap_interval_is_seeded_and_stratified():
    values = [0.1, 0.3, 0.2, 0.5, 0.4]
    assert stats.bootstrap_interval(values) == stats.bootstrap_interval(values)
    mean, low, high = stats.bootstrap_interval(values)
    assert low < mean < high and mean == pytest.approx(0.3)
    # two strata, each constant: every resample has the same mean
    assert stats.bootstrap_interval([1.0, 1.0, 3.0, 3.0], strata=["a", "a", "b", "b"])[1:] == (2.0, 2.0)
    assert stats.interquartile_mean([1, 2, 3, 4, 5]) == pytest.approx(3.0)
    assert stats.interquartile_mean([1, 2, 3, 100]) == pytest.approx(2.5)
    assert stats.probability_of_improvement([1, 0, -1, 2]) == pytest.approx(0.625)


@pytest.mark.parametrize("chapter", list(recorded.MODULES))
def test_every_chapter_tests_a_finding_and_requires_only_what_its_seeds_show(chapter):
    specs = verdicts.chapter_specs(chapter)
    assert any(s.kind == "finding" for s in specs), f"{chapter} tests no finding of its paper"
    for verdict, claim in zip(verdicts.chapter_verdicts(chapter), specs, strict=True):
        assert verdict.passed == verdict.seeds or not claim.required, (
            f"{claim.id} is required but failed on a recorded seed: required claims must hold on any machine"
        )
        assert verdict.holds or not claim.required, f"{claim.id} is required but its course-level verdict fails"
        for key, _ in claim.effects:
            assert verdict.effects and all(e.seeds == verdict.seeds for e in verdict.effects), (claim.id, key)


def test_generated_claims_tables_and_readme_match_results():
    assert verdicts.drift() == [], "run `python -m course_lib.verdicts --write`"
