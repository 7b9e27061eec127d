"""Chapter 10's designed setting (C10.3d): the configuration it pre-registered and a check that can fail."""

from course_lib import chapters
from course_lib.chapters import ch10_design, ch10_ragen2


def test_the_arms_differ_only_in_the_filter_at_the_papers_entropy_coefficient():
    config = ch10_design.design_config()
    plain, filtered = (ch10_ragen2.arm_config(config, arm) for arm in ch10_design.ARMS.values())
    assert plain.entropy_coef == filtered.entropy_coef == 0.001
    assert (plain.batch_filter, filtered.batch_filter) == ("none", "snr_top_p")
    assert filtered.filter.top_p == 0.9 and filtered.filter.mode == "linear" and not filtered.filter.include_zero
    assert plain.eval_every == plain.iterations == 30  # evaluated at the start and the end only
    assert plain.learning_rate == ch10_ragen2.preset("cpu").grpo.learning_rate
    differing = {k for k in vars(plain) if getattr(plain, k) != getattr(filtered, k)}
    assert differing == {"batch_filter"}


def test_the_design_is_registered_and_decides_on_unseen_seeds():
    design = chapters.design("ch10")
    assert design is ch10_design.DESIGN
    assert design.effect_key == "snr_success_gain" and design.scaled_effect == 0.06
    assert set(design.deciding_seeds(design.max_seeds)).isdisjoint({0, 1, 2, *design.pilot_seeds})


def test_the_claim_fails_when_either_gain_is_negative():
    claim = ch10_design.CLAIM
    assert claim.evaluate({"snr_success_gain": 0.05, "snr_mi_gain": 0.02}).passed
    assert not claim.evaluate({"snr_success_gain": -0.01, "snr_mi_gain": 0.02}).passed
    assert not claim.evaluate({"snr_success_gain": 0.05, "snr_mi_gain": -0.02}).passed
