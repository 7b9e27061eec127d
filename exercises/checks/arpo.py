"""Checks of `exercises/arpo.py` (chapter 08): ARPO's branch probability by hand, and its draw's frequency and
reproducibility with a seeded generator, against `course_lib.algos.arpo`."""

from __future__ import annotations

import math

import torch

from course_lib.algos import arpo
from exercises.checks.common import Exercise, ExerciseFailure, expect_close, generator, reference


def library_branch_decision(entropy_after, initial_entropy, generator, alpha=0.5, beta=0.2):
    probability = arpo.branch_probability(entropy_after, initial_entropy, alpha, beta)
    return probability, arpo.should_branch(probability, generator)


def _decide(fn, after, initial, seed=0, **kwargs):
    result = fn(after, initial, generator(seed), **kwargs)
    if not isinstance(result, tuple) or len(result) != 2:
        raise ExerciseFailure(f"return a tuple (probability, branch), got {result!r}")
    return float(result[0]), bool(result[1])


def _decisions(fn, after, initial, draws, seed, **kwargs) -> list[bool]:
    g = generator(seed)
    return [bool(fn(after, initial, g, **kwargs)[1]) for _ in range(draws)]


def probability_by_hand(fn):
    for after, initial, expected in [(0.7, 0.2, 0.6), (0.2, 0.7, 0.4), (0.4, 0.4, 0.5)]:
        expect_close(
            _decide(fn, after, initial)[0],
            expected,
            f"P = alpha + beta * (H_after - H_initial) = 0.5 + 0.2 * ({after} - {initial}): more uncertainty after "
            "the tool call, more branching",
        )


def probability_clipped(fn):
    expect_close(
        _decide(fn, 0.9, 0.1, alpha=0.9, beta=1.0)[0],
        1.0,
        "a probability lies in [0, 1]: alpha + beta * dH = 0.9 + 0.8 = 1.7 must be clipped to 1",
    )
    expect_close(
        _decide(fn, 0.0, 0.8, alpha=0.1, beta=1.0)[0],
        0.0,
        "a probability lies in [0, 1]: alpha + beta * dH = 0.1 - 0.8 = -0.7 must be clipped to 0",
    )


def exact_ends(fn):
    always = _decisions(fn, 0.9, 0.1, 50, seed=1, alpha=0.9, beta=1.0)
    never = _decisions(fn, 0.0, 0.8, 50, seed=1, alpha=0.1, beta=1.0)
    if not all(always) or any(never):
        raise ExerciseFailure(
            "at probability 1 the rollout must always branch and at 0 never: branch iff u < P with u in [0, 1) "
            f"(branched {sum(always)} of 50 times at P = 1 and {sum(never)} of 50 at P = 0)"
        )
    g = generator(5)
    before = g.get_state()
    fn(0.9, 0.1, g, alpha=0.9, beta=1.0)
    if torch.equal(g.get_state(), before):
        raise ExerciseFailure(
            "draw the uniform even when P is 0 or 1 (the generator must advance by one draw on every call), so that "
            "a seeded sampler's later decisions do not depend on earlier probabilities"
        )


def branch_frequency(fn):
    draws = 4000
    for after, initial, p in [(0.7, 0.2, 0.6), (0.0, 1.0, 0.3)]:
        share = sum(_decisions(fn, after, initial, draws, seed=2)) / draws
        if abs(share - p) > 4 * math.sqrt(p * (1 - p) / draws):
            raise ExerciseFailure(
                f"the rollout must branch with probability P = {p}: draw u ~ Uniform[0, 1) from the generator and "
                f"branch iff u < P (it branched in {share:.3f} of {draws} seeded draws)"
            )


def reproducible(fn):
    first, second = _decisions(fn, 0.4, 0.4, 200, seed=3), _decisions(fn, 0.4, 0.4, 200, seed=3)
    if first != second:
        raise ExerciseFailure(
            "two generators seeded alike must give the same decisions: draw from the generator you are given "
            "(torch.rand((), generator=generator)), not from Python's random or torch's global generator"
        )


def random_probabilities(fn):
    g = generator(4)
    for k in range(20):
        after, initial = (round(float(x), 3) for x in torch.rand(2, generator=g))
        alpha, beta = round(float(torch.rand((), generator=g)), 3), round(float(2 * torch.rand((), generator=g)), 3)
        expect_close(
            _decide(fn, after, initial, alpha=alpha, beta=beta)[0],
            reference(f"arpo.branch_decision/case {k}", arpo.branch_probability, after, initial, alpha, beta),
            f"on seeded random values (H_after {after}, H_initial {initial}, alpha {alpha}, beta {beta}) your "
            "probability differs from the library's",
        )


EXERCISES = [
    Exercise(
        "arpo.branch_decision",
        "08",
        "course_lib/algos/arpo.py",
        library_branch_decision,
        (
            ("probability by hand", probability_by_hand),
            ("probability clipped", probability_clipped),
            ("reproducible draws", reproducible),
            ("branch frequency", branch_frequency),
            ("exact at 0 and 1", exact_ends),
            ("random probabilities", random_probabilities),
        ),
    ),
]
