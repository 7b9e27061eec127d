"""Chapter 15's bug hunt (`course.bug_hunt`): each seed plants three of the four suspects; a clean loop passes every
check; each plant alone is flagged by its own check; `accuse` grades a hunt."""

from __future__ import annotations

import pytest

from course_lib.course import bug_hunt, pitfalls


def precise_flags(evidence) -> dict[str, bool]:
    """What each suspect's own check says of the evidence (the alignment check by its `missed` number, which only a
    shifted mask moves)."""
    batch = evidence.batch
    aligned = pitfalls.check_advantage_alignment(
        evidence.advantages, evidence.loss_mask, batch.loss_mask, on_flag="return"
    )
    return {
        "alignment": aligned.numbers["missed"] > 0,
        "observations": pitfalls.check_observation_share(evidence.loss_mask, batch.loss_mask, on_flag="return").flagged,
        "entropy": pitfalls.check_entropy(evidence.history, on_flag="return").flagged,
        "staleness": pitfalls.check_staleness(
            evidence.logprobs, batch.old_logprobs, batch.loss_mask, on_flag="return"
        ).flagged,
    }


def test_each_seed_plants_three_of_the_four_suspects_and_the_seeds_cover_every_choice():
    choices = {bug_hunt.planted(seed) for seed in range(8)}
    assert all(len(set(c)) == 3 and set(c) <= set(bug_hunt.SUSPECTS) for c in choices)
    assert len(choices) == 4
    assert bug_hunt.planted(3) == bug_hunt.planted(3)


def test_a_loop_with_every_suspect_fixed_passes_every_check():
    evidence = bug_hunt.mystery_loop(0, fixed=list(bug_hunt.SUSPECTS))
    assert precise_flags(evidence) == dict.fromkeys(bug_hunt.SUSPECTS, False)
    aligned = pitfalls.check_advantage_alignment(
        evidence.advantages, evidence.loss_mask, evidence.batch.loss_mask, "return"
    )
    assert not aligned.flagged


@pytest.mark.parametrize("suspect", list(bug_hunt.SUSPECTS))
def test_each_plant_alone_is_flagged_by_its_own_check(suspect):
    seed = next(seed for seed in range(8) if suspect in bug_hunt.planted(seed))
    evidence = bug_hunt.mystery_loop(seed, fixed=[s for s in bug_hunt.SUSPECTS if s != suspect])
    assert precise_flags(evidence)[suspect]


def test_accuse_counts_the_planted_names_and_refuses_unknown_ones():
    planted = bug_hunt.planted(0)
    absent = next(s for s in bug_hunt.SUSPECTS if s not in planted)
    assert bug_hunt.accuse(0, planted).endswith("All found.")
    partly = bug_hunt.accuse(0, [planted[0], absent])
    assert partly.startswith("seed 0: 1 of 3 planted pitfalls found") and f"Not planted: {absent}" in partly
    assert planted[1] not in partly, "a missed suspect is not revealed"
    with pytest.raises(ValueError, match="no suspect"):
        bug_hunt.accuse(0, ["gremlins"])
    with pytest.raises(ValueError, match="no suspect"):
        bug_hunt.mystery_loop(0, fixed=["gremlins"])
    with pytest.raises(ValueError, match="at least one iteration"):
        bug_hunt.mystery_loop(0, iterations=0)
