"""Course-level verdicts: the rule on hand numbers, and every generated place agreeing with results/."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from course_lib import chapters
from course_lib.course import chance
from course_lib.course.claims import CHANCE_LIMIT, NOT_REPRODUCED, NOT_SUPPORTED, NOT_TESTABLE, ClaimSpec, at_least
from course_lib.diagnostics import stats
from course_lib.lab import verdict_docs, verdicts


def spec(kind="finding", effects=(), check=lambda n: n["x"] > 0, required=False, **fields) -> ClaimSpec:
    exact = chance.exact("by construction") if kind == "mechanism" else None
    return ClaimSpec("C99.1", "x is positive", "paper", "x", check, required=required or kind == "mechanism",
                     kind=kind, effects=effects, chance=exact, **fields)  # fmt: skip


def test_at_least_absorbs_rounding_but_not_a_real_shortfall():
    assert at_least(0.85 - 0.80, 0.05) and at_least(0.905 - 0.855, 0.05)
    assert not at_least(0.049, 0.05) and not at_least(float("nan"), 0.0)


def test_a_finding_without_effects_needs_every_seed():
    numbers = [{"x": 1.0}, {"x": 2.0}, {"x": -1.0}]
    verdict = verdicts.decide(spec(), numbers)
    assert (verdict.passed, verdict.seeds, verdict.status) == (2, 3, NOT_REPRODUCED)
    assert verdicts.decide(spec(), numbers[:2] * 3).status == "reproduced"
    assert verdicts.decide(spec(), []).status == "undecided (0 seeds)", "no recorded seed decides nothing"


def test_a_comparison_is_decided_on_the_paired_interval_and_the_margin():
    # every seed positive, mean 0.06, sd 0.0158: the t-interval 0.06 -/+ 2.776 * 0.0158 / sqrt(5) = [0.040, 0.080] is
    # above 0 and the mean reaches 0.05
    leads = [{"x": v} for v in (0.04, 0.06, 0.08, 0.05, 0.07)]
    verdict = verdicts.decide(spec(effects=(("x", 0.05),)), leads)
    assert verdict.holds and verdict.status == "reproduced"
    (effect,) = verdict.effects
    assert effect.mean == pytest.approx(0.06) and effect.improvement == 1.0
    assert effect.low == pytest.approx(0.06 - 2.776445 * 0.0158114 / 5**0.5, abs=1e-6)
    assert effect.detectable == pytest.approx(stats.detectable_effect([0.04, 0.06, 0.08, 0.05, 0.07]))
    # the same seeds against a larger margin: the interval is above 0 but the mean falls short
    assert not verdicts.decide(spec(effects=(("x", 0.07),)), leads).holds
    # a per-seed margin does not decide: seeds pass 3 of 5 but the interval straddles 0
    mixed = [{"x": v} for v in (0.2, -0.15, 0.1, -0.1, 0.05)]
    assert not verdicts.decide(spec(effects=(("x", 0.0),)), mixed).holds
    # one seed gives no interval
    assert not verdicts.decide(spec(effects=(("x", 0.0),)), leads[:1]).holds


def test_a_claim_its_seeds_cannot_test_is_not_testable_with_the_reason_computed():
    leads = [{"x": v, "scored": 0.0, "ceiling": 0.03} for v in (0.01, 0.02, 0.0, 0.01, 0.02)]
    # nothing scored on any deciding seed
    nothing = verdicts.decide(spec(effects=(("x", 0.05),), scored="scored"), leads)
    assert nothing.status == NOT_TESTABLE and not nothing.holds and not nothing.tested and nothing.decided
    assert nothing.untestable == "nothing to score: scored is 0 on all 5 seeds"
    assert "nothing to score" in nothing.line() and "nothing to score" in nothing.phrase()
    # one seed that scored something makes it testable again (then simply not reproduced)
    some = [dict(n, scored=1.0) if i == 2 else n for i, n in enumerate(leads)]
    assert verdicts.decide(spec(effects=(("x", 0.05),), scored="scored"), some).status == NOT_REPRODUCED
    # a paired difference measurable on no seed
    unmeasured = verdicts.decide(spec(effects=(("x", 0.05),)), [{"x": math.nan}] * 5)
    assert unmeasured.status == NOT_TESTABLE and "could not be measured on any of 5 seeds" in unmeasured.untestable
    # a margin beyond the largest effect the measurement can show: the mean reach 0.03 is below 0.05
    beyond = verdicts.decide(spec(effects=(("x", 0.05),), reach=lambda n: n["ceiling"]), leads)
    assert beyond.status == NOT_TESTABLE and beyond.untestable.startswith("margin out of reach: ")
    assert "+0.030 on average over 5 seeds, below the margin +0.050" in beyond.untestable
    reachable = [dict(n, ceiling=0.2) for n in leads]
    assert verdicts.decide(spec(effects=(("x", 0.05),), reach=lambda n: n["ceiling"]), reachable).status == (
        NOT_REPRODUCED
    )
    # below 5 seeds nothing is settled, not even that
    assert verdicts.decide(spec(effects=(("x", 0.05),), scored="scored"), leads[:3]).status == "undecided (3 seeds)"
    # the tally leaves it out of the count and names it
    tally = verdicts.tally([nothing, verdicts.decide(spec(), [{"x": 1.0}] * 5)])
    assert tally.startswith("findings reproduced 1 of 1 (C99.1); not testable (counted neither way): C99.1")
    with pytest.raises(ValueError, match="only a finding or a hypothesis"):
        spec(kind="design", scored="scored")


def test_a_hypothesis_is_decided_as_a_finding_and_tallied_apart():
    leads = [{"x": v} for v in (0.04, 0.06, 0.08, 0.05, 0.07)]
    supported = verdicts.decide(spec(kind="hypothesis", effects=(("x", 0.05),)), leads)
    assert supported.holds and supported.status == "supported"
    against = verdicts.decide(spec(kind="hypothesis", effects=(("x", 0.07),)), leads)
    assert not against.holds and against.status == NOT_SUPPORTED
    finding = verdicts.decide(spec(effects=(("x", 0.05),)), leads)
    assert verdicts.tally([finding, supported, against]) == (
        "findings reproduced 1 of 1 (C99.1); the course's hypotheses supported 1 of 2 (C99.1)"
    )
    assert spec(kind="hypothesis").evaluate({"x": -1.0}).status == NOT_SUPPORTED


def test_a_margin_below_zero_asks_the_interval_to_clear_the_margin():
    close = [{"x": v} for v in (-0.01, 0.0, 0.01, -0.005, 0.002)]
    assert verdicts.decide(spec(effects=(("x", -0.02),)), close).holds, "at most 2 points worse, and it is not"
    worse = [{"x": v} for v in (-0.05, 0.01, -0.03, 0.0, -0.02)]
    assert not verdicts.decide(spec(effects=(("x", -0.02),)), worse).holds


def test_kinds_are_counted_apart():
    seeds = [{"x": 1.0}] * 5
    found = verdicts.decide(spec(), seeds)
    exact = verdicts.decide(spec(kind="mechanism"), seeds)
    built = verdicts.decide(spec(kind="design"), seeds)
    shown = verdicts.decide(spec(kind="description"), seeds)
    assert (exact.status, built.status, shown.status) == ("holds", "holds by design", "shown")
    assert not shown.holds, "a description never counts"
    line = verdicts.tally([found, exact, built, shown])
    assert line.startswith("findings reproduced 1 of 1") and "mechanism checks 1 of 1" in line and "C99.1" in line
    assert "described (not counted): C99.1" in line
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


@pytest.mark.parametrize("chapter", list(chapters.modules()))
def test_every_chapter_tests_a_finding_and_requires_only_what_its_seeds_show(chapter):
    specs = verdicts.chapter_specs(chapter)
    if chapter in verdicts.APPENDICES:
        assert not any(s.kind == "finding" for s in specs), f"{chapter} checks the course's own engines"
    else:
        assert any(s.kind == "finding" for s in specs), f"{chapter} tests no finding of its paper"
    for verdict, claim in zip(verdicts.chapter_verdicts(chapter), specs, strict=True):
        assert verdict.passed == verdict.seeds or not claim.required, (
            f"{claim.id} is required but failed on a recorded seed: required claims must hold on any machine"
        )
        assert verdict.holds or not claim.required, f"{claim.id} is required but its course-level verdict fails"
        for key, _ in claim.effects:
            # every recorded seed is in the effect, measured or counted as not measurable (a NaN premise)
            assert verdict.effects and all(e.seeds + e.unmeasured == verdict.seeds for e in verdict.effects), (
                claim.id,
                key,
            )


def test_t_quantiles_match_the_printed_tables():
    """Against a standard t table: two-sided 95% and one-sided 80% quantiles."""
    for df, t975, t80 in ((1, 12.706, 1.376), (2, 4.303, 1.061), (4, 2.776, 0.941), (5, 2.571, 0.920),
                          (9, 2.262, 0.883), (19, 2.093, 0.861)):  # fmt: skip
        assert stats.t_quantile(0.975, df) == pytest.approx(t975, abs=1e-3)
        assert stats.t_quantile(0.8, df) == pytest.approx(t80, abs=1e-3)
    assert stats.t_cdf(0.0, 3) == 0.5 and stats.t_cdf(-1.0, 1) == pytest.approx(0.25)  # Cauchy at df 1
    assert stats.t_cdf(1.3, 6) + stats.t_cdf(-1.3, 6) == pytest.approx(1.0)
    assert stats.t_quantile(0.025, 7) == pytest.approx(-stats.t_quantile(0.975, 7))


def test_detectable_effect_and_sign_flip_by_hand():
    # sd of 0..4 is 1.5811; (t_{0.975,4} + t_{0.8,4}) sd / sqrt(5) = (2.7764 + 0.9410) * 1.5811 / 2.2361 = 2.6286
    assert stats.detectable_effect([0, 1, 2, 3, 4]) == pytest.approx(2.6286, abs=1e-4)
    assert math.isnan(stats.detectable_effect([1.0]))
    # three positive differences: of the 8 sign patterns only all + and all - reach |sum| 6: p = 2/8
    assert stats.sign_flip_p([1.0, 2.0, 3.0]) == pytest.approx(0.25)
    # five seeds cannot go below 2/32, however large the effect
    assert stats.sign_flip_p([9.0, 8.0, 7.0, 9.0, 8.0]) == pytest.approx(0.0625)
    # a difference of 1 against 2 and 3: patterns (+1 -2 +3) and its mirror tie the |sum| 2 of (-1 +2 +3)? no: the
    # observed sum is 1 + (-2) + 3 = 2; |sum| >= 2 for (+,+,+) 6, (-,+,+) 4, (+,-,+) 2, (+,+,-) 0 and their mirrors
    assert stats.sign_flip_p([1.0, -2.0, 3.0]) == pytest.approx(6 / 8)


@pytest.mark.parametrize("seeds", [5, 6, 10])
def test_the_decision_interval_covers_the_true_mean_95_percent_of_the_time(seeds):
    """The rule's 95% t-interval on normal data (20,000 simulated runs of `seeds` seeds, seeded): coverage within
    [0.93, 0.97]. The percentile bootstrap the course used before covers visibly less at these seed counts."""
    rng = np.random.default_rng(seeds)
    runs = rng.normal(0.3, 0.1, size=(20_000, seeds))
    mean, sd = runs.mean(axis=1), runs.std(axis=1, ddof=1)
    half = stats.t_quantile(0.975, seeds - 1) * sd / np.sqrt(seeds)
    coverage = float(((mean - half <= 0.3) & (0.3 <= mean + half)).mean())
    assert 0.93 <= coverage <= 0.97, coverage
    # each run through the library's own interval, on a subsample (it is the same arithmetic)
    for row in runs[:200]:
        _, low, high = stats.t_interval(row)
        assert low == pytest.approx(row.mean() - stats.t_quantile(0.975, seeds - 1) * row.std(ddof=1) / seeds**0.5)
    booted = [stats.bootstrap_interval(row, resamples=2_000, seed=i) for i, row in enumerate(runs[:400])]
    assert np.mean([low <= 0.3 <= high for _, low, high in booted]) < 0.93


def test_a_finding_is_never_reproduced_on_fewer_than_five_seeds():
    strong = [{"x": v} for v in (0.50, 0.52, 0.49, 0.51, 0.50)]
    for count in (1, 2, 3, 4):
        verdict = verdicts.decide(spec(effects=(("x", 0.05),)), strong[:count])
        assert verdict.status == f"undecided ({count} seed{'s' * (count > 1)})" and not verdict.holds
        assert "undecided" in verdicts.tally([verdict])
    assert verdicts.decide(spec(effects=(("x", 0.05),)), strong).status == "reproduced"
    # one seed is said in the singular and gives a number without an interval, in the tally and in claims.md
    alone = verdicts.decide(spec(effects=(("x", 0.05),)), strong[:1])
    assert "(1 seed)" in verdicts.tally([alone])
    cell = verdict_docs.status_cell(alone)
    assert "of 1 seed;" in cell and "x +0.500 on 1 seed, no interval yet" in cell and "[" not in cell
    # decided on its check on every seed: four passes are undecided, five decide, one failure decides at once
    passes = [{"x": 1.0}] * 5
    assert verdicts.decide(spec(), passes[:4]).status == "undecided (4 seeds)"
    assert verdicts.decide(spec(), passes).status == "reproduced"
    assert verdicts.decide(spec(), [{"x": 1.0}, {"x": -1.0}]).status == NOT_REPRODUCED
    # a mechanism is not held to the floor: it cannot fail by chance
    assert verdicts.decide(spec(kind="mechanism"), passes[:3]).status == "holds"


def test_the_rule_rarely_reproduces_an_effect_that_is_not_there():
    """Under the null (true mean 0, margin 0) the rule calls a finding reproduced about 2.5% of the time: the 95%
    interval's lower end lies above 0 for that share of normal samples."""
    rng = np.random.default_rng(0)
    called = sum(
        verdicts.decide(spec(effects=(("x", 0.0),)), [{"x": v} for v in rng.normal(0.0, 0.05, 6)]).holds
        for _ in range(2_000)
    )
    assert 0.015 <= called / 2_000 <= 0.035, called


def test_a_verdict_line_names_dirty_seeds_and_the_numbers_shown_beside_it():
    shown = ClaimSpec("C99.1", "x", "paper", "x", lambda n: n["x"] > 0, effects=(("x", 0.0),), shown=(("y", "why"),))
    seeds = [{"x": 0.1 + 0.01 * i, "y": 1.0 + i} for i in range(5)]
    line = verdicts.decide(shown, seeds, dirty=2).line()
    assert "2 of them recorded from uncommitted code" in line
    assert "shown: why +3.000 [" in line and "over 5 seeds" in line


def test_a_mechanism_says_how_it_could_fail_by_chance():
    with pytest.raises(ValueError, match="chance"):
        ClaimSpec("C99.2", "exact", "p", "x", lambda n: True, kind="mechanism")
    with pytest.raises(ValueError, match="only a finding"):
        ClaimSpec("C99.2", "exact", "p", "x", lambda n: True, kind="mechanism", chance=chance.exact("by hand"),
                  effects=(("x", 0.0),))  # fmt: skip
    exact = ClaimSpec("C99.2", "exact", "p", "x", lambda n: True, kind="mechanism", chance=chance.exact("by hand"))
    assert verdicts.decide(exact, [{"x": 1.0}]).chance.probability == 0.0


@pytest.mark.parametrize("chapter", list(chapters.modules()))
def test_every_mechanism_cannot_fail_by_chance_on_its_recorded_seeds(chapter):
    """claims.md: a mechanism check is required only if it fails by chance with probability under 1% (computed from
    the recorded seeds); above that it is a finding or a description."""
    for verdict in verdicts.chapter_verdicts(chapter):
        if verdict.kind == "mechanism":
            assert verdict.spec.required, f"{verdict.id}: a mechanism is required"
            assert verdict.chance.probability < CHANCE_LIMIT, f"{verdict.id}: {verdict.chance.how}"
        if verdict.kind == "description":
            assert not verdict.spec.required, f"{verdict.id}: a description is never required"


def test_takeaways_fill_statuses_and_numbers_from_results():
    text = verdicts.fill("ch07", "GiGPO: {C7.1}. Lead {C7.1:gigpo_minus_grpo}; {C7.2}.")
    by_id = {v.id: v for v in verdicts.chapter_verdicts("ch07")}
    assert by_id["C7.1"].phrase() in text and by_id["C7.2"].phrase() in text
    assert "over 20 seeds" in text and "{" not in text
    with pytest.raises(KeyError, match="no claim C7.9"):
        verdicts.fill("ch07", "{C7.9}")
    with pytest.raises(KeyError, match="recorded the number"):
        verdicts.fill("ch07", "{C7.1:no_such_number}")


def test_generated_claims_tables_and_readme_match_results():
    assert verdict_docs.drift() == [], "run `python -m course_lib.lab.verdicts --write`"


def test_a_difference_that_could_not_be_measured_is_counted_apart_and_never_holds():
    """A seed whose number is NaN (a premise with nothing to score) is left out of the statistics and counted: on no
    measurable seed out of five the finding is decided and does not hold; on three of five it is undecided."""
    nan = float("nan")
    none = verdicts.effect("retrieval", 0.05, [nan] * 5)
    assert none.decided and not none.holds and none.unmeasured == 5
    assert none.text() == "retrieval not measurable on any of 5 seeds (margin +0.050)"
    some = verdicts.effect("retrieval", 0.05, [0.2, 0.3, 0.25, nan, nan])
    assert some.seeds == 3 and some.unmeasured == 2 and not some.decided
    assert some.interval_text().endswith("over 3 seeds (2 more not measurable)")
    full = verdicts.effect("retrieval", 0.05, [0.2, 0.3, 0.25, 0.22, 0.28])
    assert full.holds and full.unmeasured == 0


def test_a_forks_not_applicable_claim_is_printed_as_such_from_the_folder_read(tmp_path, capsys):
    """Issue 58: `print_chapter` on a fork's record printed a not-applicable claim as "fails" ("mechanism checks 1 of
    2 hold") and said it read `results/` when it read the fork's folder. Two seeds of chapter 07 recorded into a
    fork's folder, C7.2 not applicable on both (a fork without the noisy view), as `--record --out` writes them."""
    from course_lib.chapters import ch07_gigpo as ch07
    from course_lib.course import recorded

    numbers = recorded.load("ch07")["seeds"]["0"]["numbers"]  # the course's seed 0, as a fork's numbers
    reason = {"C7.2": "needs chapter 07's noisy view; my_grid has none"}
    with recorded.recording_into(tmp_path / "my_fork"):
        recorded.begin()
        for seed in (0, 1):
            recorded.record("ch07", seed, ch07.CLAIMS, numbers, 1.0, not_applicable=reason)
        capsys.readouterr()
        verdicts.print_chapter("ch07")
        by_id = {v.id: v for v in verdicts.chapter_verdicts("ch07")}
    out = capsys.readouterr().out
    assert f"from {tmp_path / 'my_fork'}/ ch07.json" in out and "from results/" not in out
    assert by_id["C7.2"].status == "not applicable" and not by_id["C7.2"].holds and not by_id["C7.2"].tested
    assert "C7.2" in out.split("not applicable (counted neither way): ")[1]
    assert "needs chapter 07's noisy view" in by_id["C7.2"].line()
    verdicts.print_chapter("ch07")  # the course's own records again, from results/, once the fork's folder is left
    assert "from results/ ch07.json" in capsys.readouterr().out


def test_chapter_00_shows_the_verdicts_without_the_statistics_its_box_explains(capsys):
    """Issue 59: a first lesson opened with bootstrap, IQM, sign-flip p and detectable effects. `statistics=False`
    prints each verdict with its checks, and a finding's mean, interval and margin only; the default prints all."""
    verdicts.print_chapter("ch00", statistics=False)
    brief = capsys.readouterr().out
    verdicts.print_chapter("ch00")
    full = capsys.readouterr().out
    for statistic in ("bootstrap", "IQM", "P(improvement)", "sign-flip p", "detectable", "P(fails by chance)"):
        assert statistic not in brief and statistic in full
    gain = next(verdict for verdict in verdicts.chapter_verdicts("ch00") if verdict.effects).effects[0]
    assert f"{gain.key} {gain.interval_text()}, margin {gain.margin:+.3f}" in brief and "over 5 seeds" in brief
    assert brief.splitlines()[0] == full.splitlines()[0] and brief.splitlines()[-1] == full.splitlines()[-1]


def test_one_seed_is_shown_as_a_number_never_as_an_interval():
    """A finding with one recorded seed printed `+0.312 [+0.312, +0.312] over 1 seeds`, an interval of zero width that
    one seed cannot give: it now reads as the one number it is, and none of the statistics that need several seeds."""
    one = verdicts.effect("gain", 0.05, [0.312])
    assert one.interval_text() == "+0.312 on 1 seed, no interval yet"
    assert one.text() == "gain +0.312 on 1 seed, no interval yet (margin +0.050)"
    assert not one.decided and not one.holds
    assert verdicts.interval_text([0.312]) == "+0.312 on 1 seed, no interval yet"
    assert verdicts.effect("gain", 0.05, [0.3, 0.4]).interval_text().endswith("over 2 seeds")


def test_the_mean_and_its_interval_are_written_in_one_place():
    """`docs/claims.md`'s status cells, `Effect.interval_text` and `interval_text` once each wrote the one-seed phrase
    themselves; all three now take it from `mean_and_interval`, so they cannot drift apart."""
    assert verdicts.mean_and_interval(0.1, 0.05, 0.15, 3) == "+0.100 [+0.050, +0.150]"
    assert verdicts.mean_and_interval(0.1, 0.1, 0.1, 1) == "+0.100 on 1 seed, no interval yet"
    two = verdicts.effect("gain", 0.05, [0.3, 0.4])
    assert two.bracket() == two.interval_text().removesuffix(" over 2 seeds")
    assert verdicts.interval_text([0.3, 0.4]) == two.interval_text()
    one = verdicts.effect("gain", 0.05, [0.312])
    cell = verdict_docs.status_cell(replace(verdicts.chapter_verdicts("ch00")[0], effects=(one,), seeds=1, passed=0))
    assert "; gain +0.312 on 1 seed, no interval yet" in cell
