"""Chapter 12's designed setting (C12.1d): the configuration it pre-registered and a check that can fail."""

from course_lib import chapters
from course_lib.chapters import ch12_capstone, ch12_design


def test_only_the_learning_rate_differs_from_the_chapter():
    config, chapter = ch12_design.design_config(), ch12_capstone.preset("cpu")
    assert config.grpo.learning_rate == ch12_design.LEARNING_RATE == 4 * chapter.grpo.learning_rate
    for arm in ch12_design.ARMS:
        mine, theirs = ch12_capstone.arm_config(config, arm), ch12_capstone.arm_config(chapter, arm)
        assert {k for k in vars(mine) if getattr(mine, k) != getattr(theirs, k)} == {"learning_rate"}
        assert mine.entropy_coef == 0.0  # no inducer
    assert ch12_capstone.ARMS["combined"].get("mi_stop") and not ch12_capstone.ARMS["aepo"].get("mi_stop")


def test_the_design_is_registered_and_its_claim_can_fail():
    design = chapters.design("ch12")
    assert design is ch12_design.DESIGN and design.effect_key == "combined_minus_aepo"
    assert design.claim.evaluate({"combined_minus_aepo": 0.2}).passed
    assert not design.claim.evaluate({"combined_minus_aepo": -0.01}).passed
