"""Chapter 15 (lab): every pitfall reproduced on seed 0, each check flagging the broken setting and passing the fixed
one, and the claims able to fail."""

from __future__ import annotations

import pytest

from course_lib.chapters import ch15_pitfalls as ch15


@pytest.fixture(scope="module")
def results():
    return ch15.run(0)


def test_every_pitfall_is_flagged_when_broken_and_passes_when_fixed(results):
    for name in ch15.PITFALLS:
        assert results[name]["broken"].flagged, (name, str(results[name]["broken"]))
        assert not results[name]["fixed"].flagged, (name, str(results[name]["fixed"]))
    assert all(claim.passed for claim in ch15.claims(results))
    assert results["minutes"] < 1.5, "the lab's pitfalls take seconds each"


def test_symptoms_on_seed_0(results):
    """Exact where nothing is sampled (the template pitfall: 9 of 20 ch00 episodes call the tool, so an assistant
    turn is followed), exact identities elsewhere (a fresh batch's ratio is 1, all-equal groups give no gradient)."""
    n = ch15.claim_numbers(results)
    assert n["template_broken_broken"] == n["template_followed"] == 9 and n["template_fixed_broken"] == 0
    assert n["retokenization_fixed_max_log_ratio"] < 1e-4 and n["retokenization_broken_outside_clip"] > 0.05
    assert n["staleness_fixed_outside_clip"] == 0 and n["staleness_fixed_max_log_ratio"] < 1e-4
    per_update = [s["outside_clip"] for s in results["staleness"]["per_update"]]
    assert per_update[-1] > per_update[1] > per_update[0] == 0, "the ratio drifts further with each reuse"
    assert n["groups_zero_gradient"] == 0 and n["groups_broken_share"] > 0.4
    # the shifted mask moves the advantage off every action's first token onto the token after its last
    assert n["alignment_broken_missed"] == n["alignment_first_tokens"] > 0
    assert n["alignment_fixed_carrying"] == n["alignment_fixed_action_tokens"]
    assert n["observations_broken_share"] > 0 == n["observations_fixed_share"]
    assert n["shared_env_broken_failed"] == 1 and n["shared_env_broken_distinct"] == 1
    assert "after the episode ended" in results["shared_env"]["broken_error"]
    assert n["entropy_broken_final_success"] < n["entropy_fixed_final_success"]


def test_claims_fail_when_a_check_misses_or_cries_wolf(results):
    numbers = ch15.claim_numbers(results)
    flagging = [spec for spec in ch15.CLAIMS if spec.id not in ("C15.6", "C15.9")]
    for spec in flagging:
        name = spec.value.split("_")[0] if not spec.value.startswith("shared_env") else "shared_env"
        assert spec.check(numbers), spec.id
        assert not spec.check(numbers | {f"{name}_broken_flagged": 0.0}), f"{spec.id}: a missed pitfall must fail"
        assert not spec.check(numbers | {f"{name}_fixed_flagged": 1.0}), f"{spec.id}: a false alarm must fail"
    # C15.6 checks the exact zero gradient of all-equal groups (its flag at 40% is shown: chance decides it)
    groups = next(spec for spec in ch15.CLAIMS if spec.id == "C15.6")
    assert groups.check(numbers) and not groups.check(numbers | {"groups_zero_gradient": 1e-3})
    assert not groups.check(numbers | {"groups_broken_zero_std_groups": 0.0}), "no all-equal group: nothing checked"
    # the lab tests no paper's finding: its drift claim is a mechanism, entropy instability a description
    assert {spec.kind for spec in ch15.CLAIMS} == {"mechanism", "description"}
    assert [spec.id for spec in ch15.CLAIMS if spec.kind == "description"] == ["C15.7"]
    assert not ch15.CLAIMS[-1].check(numbers | {"staleness_drift": 0.05})


def test_report_prints_both_verdicts_of_every_pitfall(results):
    lines = ch15.report(results)
    assert len(lines) == 2 * len(ch15.PITFALLS)
    assert all(" FLAG " in line for line in lines[::2]) and all(" ok " in line for line in lines[1::2])
    curves = ch15.curves(results)
    assert set(curves) == {"entropy/broken", "entropy/fixed", "staleness/outside_clip"}
    assert len(curves["staleness/outside_clip"]) == ch15.preset().stale_updates
