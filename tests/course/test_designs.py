"""Designed settings: the power rule against hand-computed values, the pilot -> plan -> decision path on a fake
design, and the course-level verdict it feeds."""

import math
import sys
import types

import numpy as np
import pytest

from course_lib import chapters
from course_lib.course import chance, designs, recorded
from course_lib.course.claims import ClaimSpec, at_least
from course_lib.diagnostics import stats
from course_lib.lab import design_runs, verdicts


def test_seeds_needed_matches_the_formula_by_hand():
    """The smallest n with (t_{0.975, n-1} + t_{0.8, n-1}) sd / sqrt(n) <= effect, from printed t tables."""
    # sd = effect: n = 9 gives (2.306 + 0.889) / 3 = 1.065 > 1, n = 10 gives (2.262 + 0.883) / 3.162 = 0.995
    assert designs.seeds_needed(0.05, 0.05) == 10
    # sd twice the effect: n = 33 gives (2.037 + 0.853) / 5.745 = 0.503 > 0.5, n = 34 gives 2.035 + 0.853 over
    # 5.831 = 0.495; capped at 20
    assert designs.seeds_needed(0.10, 0.05) == 20
    assert designs.seeds_needed(0.10, 0.05, maximum=100) == 34
    # a tiny spread still asks for the minimum
    assert designs.seeds_needed(0.01, 0.05) == 6
    assert designs.seeds_needed(0.0, 0.05) == 6
    # "at most 2 points worse" with a true effect of 0: the distance is 0.02
    assert designs.seeds_needed(0.02, 0.0, margin=-0.02) == 10
    # a positive margin does not move the null (the interval must clear 0; the mean must reach the margin)
    assert designs.seeds_needed(0.05, 0.05, margin=0.03) == 10


def test_power_is_80_percent_at_the_planned_seeds_and_below_with_one_fewer():
    for sd, effect in ((0.05, 0.05), (0.08, 0.03), (0.2, 0.1)):
        n = designs.seeds_needed(sd, effect, maximum=10**6)
        assert designs.power(sd, effect, 0.0, n) >= 0.8
        if n > 6:
            assert designs.power(sd, effect, 0.0, n - 1) < 0.8
    # by hand: T_9(sqrt(10) - 2.262157) = T_9(0.900121) = 0.8042
    assert designs.power(0.05, 0.05, 0.0, 10) == pytest.approx(0.8042, abs=1e-4)
    assert designs.power(0.0, 0.05, 0.0, 2) == 1.0


def test_chi_square_quantiles_match_the_printed_tables():
    """Against a standard chi-square table (e.g. NIST/SEMATECH's): lower quantiles for small df, and a median."""
    for p, df, table in ((0.2, 3, 1.005), (0.2, 4, 1.649), (0.2, 5, 2.343), (0.05, 1, 0.00393), (0.95, 10, 18.307),
                         (0.2, 17, 12.002)):  # fmt: skip
        assert stats.chi2_quantile(p, df) == pytest.approx(table, abs=1e-3 if table > 0.01 else 1e-5)
    assert stats.chi2_quantile(0.5, 2) == pytest.approx(2 * math.log(2), abs=1e-9)  # df 2 is Exp(1/2)
    assert stats.chi2_cdf(stats.chi2_quantile(0.3, 7), 7) == pytest.approx(0.3, abs=1e-10)
    with pytest.raises(ValueError):
        stats.chi2_cdf(1.0, 0)


def test_sd_upper_bound_by_hand():
    # four pilot values: sqrt(3 / 1.00517) = 1.7276, the factor a four-seed pilot leaves on its sd
    assert stats.sd_upper_bound(1.0, 4) == pytest.approx(1.7276, abs=1e-4)
    assert stats.sd_upper_bound(0.1, 21) > 0.1 and stats.sd_upper_bound(0.1, 21) < stats.sd_upper_bound(0.1, 4)
    with pytest.raises(ValueError):
        stats.sd_upper_bound(1.0, 1)


def test_seeds_needed_rejects_an_effect_at_the_null():
    with pytest.raises(ValueError, match="beyond the null"):
        designs.seeds_needed(0.05, 0.0)
    with pytest.raises(ValueError, match="sd"):
        designs.seeds_needed(float("nan"), 0.05)


def claim(margin: float = 0.0) -> ClaimSpec:
    check = lambda n: at_least(n["a_minus_b"], margin)  # noqa: E731
    return ClaimSpec("C99.1d", "arm a beats arm b", "a paper", "a_minus_b", check, required=False,
                     effects=(("a_minus_b", margin),))  # fmt: skip


def fake_run(seed: int) -> dict[str, float]:
    a = 0.5 + 0.01 * (seed % 5)
    b = 0.45 + 0.005 * (seed % 3)
    return {"a": a, "b": b, "a_minus_b": a - b}


def test_design_rejects_overlapping_seeds_and_a_non_finding():
    with pytest.raises(ValueError, match="overlap"):
        designs.Design("ch99", claim(), 0.05, fake_run, pilot_seeds=(3, 100))
    with pytest.raises(ValueError, match="overlap"):
        designs.Design("ch99", claim(), 0.05, fake_run, pilot_seeds=(30,), first_seed=20)
    assert designs.Design("ch99", claim(), 0.05, fake_run, first_seed=20).deciding_seeds(3) == [20, 21, 22]
    mechanism = ClaimSpec("C99.2", "s", "p", "v", lambda n: True, kind="mechanism", chance=chance.exact("by hand"))
    with pytest.raises(ValueError, match="finding"):
        designs.Design("ch99", mechanism, 0.05, fake_run)
    with pytest.raises(ValueError, match="beyond the null"):
        designs.Design("ch99", claim(-0.02), -0.03, fake_run)


def test_a_design_is_pre_registered_in_its_chapters_document_unless_named():
    assert designs.Design("ch99", claim(), 0.05, fake_run).document == "docs/experiments/ch99-design.md"
    assert designs.Design("ch99", claim(), 0.05, fake_run, "docs/x.md").document == "docs/x.md"
    for key in chapters.designs():
        design = chapters.design(key)
        assert (recorded.ROOT / design.document).is_file(), f"{key}: {design.document} is missing"


@pytest.fixture
def fake_design(tmp_path, monkeypatch):
    monkeypatch.setattr(recorded, "RESULTS_DIR", tmp_path)
    design = designs.Design("ch08", claim(), 0.02, fake_run, "docs/experiments/fake.md", arms=(("a", "A"), ("b", "B")))
    module = types.ModuleType("fake_design_module")
    module.DESIGN = design
    monkeypatch.setitem(sys.modules, "fake_design_module", module)
    found = {**chapters.designs(), "ch08": "fake_design_module"}
    monkeypatch.setattr(chapters, "designs", lambda folder=None: found)
    return design


def test_pilot_plan_and_decision_run_from_recorded_files(fake_design, capsys):
    with pytest.raises(recorded.ResultsMissing, match="--pilot --record"):
        designs.plan(fake_design)
    design_runs.main(["ch08", "--pilot", "--record"])
    plan = designs.plan(fake_design)
    diffs = [fake_run(s)["a_minus_b"] for s in fake_design.pilot_seeds]
    sd = float(np.std(diffs, ddof=1))
    assert plan.sd == pytest.approx(sd)
    assert plan.seeds == designs.seeds_needed(sd, 0.02)
    assert plan.uncapped >= plan.seeds
    assert plan.sd_upper == pytest.approx(sd * math.sqrt(3 / stats.chi2_quantile(0.2, 3)))
    assert plan.uncapped_upper == designs.seeds_needed(plan.sd_upper, 0.02, maximum=10**6) >= plan.uncapped
    design_runs.main(["ch08", "--decide", "--record", "--seeds", "0", "1"])
    design_runs.main(["ch08", "--decide", "--record"])  # resumes: 0 and 1 are skipped
    out = capsys.readouterr().out
    assert "seed 0: already recorded" in out
    numbers = designs.recorded_design_seeds(fake_design)
    assert len(numbers) == plan.seeds
    with pytest.raises(SystemExit):
        design_runs.main(["ch08", "--decide", "--seeds", "100"])  # a pilot seed never decides
    deciding_sd = float(np.std([n["a_minus_b"] for n in numbers], ddof=1))
    line = designs.hindsight(fake_design, plan, numbers)
    assert f"sd is {deciding_sd:.3f}" in line
    assert f"was {designs.power(deciding_sd, 0.02, 0.0, len(numbers)):.2f}" in line


def test_the_designed_claim_joins_the_chapter_verdicts(fake_design, capsys, tmp_path):
    real = recorded.ROOT / "results" / "ch08.json"  # the chapter's own records, beside the fake design's
    (tmp_path / "ch08.json").write_text(real.read_text())
    assert chapters.design("ch08") is fake_design
    assert fake_design.claim not in verdicts.chapter_specs("ch08")  # nothing recorded yet: not shown
    design_runs.run_seeds(fake_design, fake_design.pilot_seeds, record=True, pilot=True)
    design_runs.run_seeds(fake_design, range(6), record=True)
    decided = verdicts.chapter_verdicts("ch08")
    assert decided[-1].id == "C99.1d"
    assert decided[-1].holds  # every seed's a - b is positive and the interval clears 0
    verdicts.print_chapter("ch08")
    assert "ch08_design.json" in capsys.readouterr().out
    design_runs.show("ch08")
    shown = capsys.readouterr().out
    assert "pre-registered in docs/experiments/fake.md" in shown and "reproduced" in shown


def test_a_design_whose_effect_points_the_other_way_is_not_reproduced(fake_design, monkeypatch, tmp_path):
    flipped = designs.Design("ch08", claim(), 0.02, lambda s: {"a_minus_b": -fake_run(s)["a_minus_b"]})
    design_runs.run_seeds(flipped, range(6), record=True)
    verdict = verdicts.decide(flipped.claim, designs.recorded_design_seeds(flipped))
    assert not verdict.holds and verdict.status == "not reproduced at this scale"
    assert math.isfinite(verdict.effects[0].detectable)


def test_a_chapter_without_a_design_has_none():
    assert chapters.design("ch01") is None
    with pytest.raises(KeyError, match="registered"):
        design_runs.load("ch01")
