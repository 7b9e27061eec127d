"""How likely a check is to fail by chance: the number that separates a mechanism check from a finding.

A mechanism check (an identity, a mask, a gradient equality, the course's own engine) is required: the claims cell
raises when it fails, so it must not fail by the luck of a seed. Each mechanism's `ClaimSpec.chance` computes, from
the recorded seeds' numbers, the probability that its check fails on a new seed although what it checks is true, and
says how; `course_lib.lab.verdicts` prints it and a test holds it under `claims.CHANCE_LIMIT` (1%). The rules:

- `exact`: nothing random enters the check (a mask compared token by token, a gradient identity to float rounding);
- `next_seed`: a measured number must clear a threshold. Under a normal model of the seeds, a new seed's value
  follows the t predictive distribution, mean + sd sqrt(1 + 1/n) T_{n-1}, so the probability of landing on the
  wrong side is T_{n-1}((threshold - mean) / (sd sqrt(1 + 1/n))) (or its complement). With three seeds this is
  heavy-tailed (2 degrees of freedom): a check needs a wide margin to be called a mechanism;
- `at_least_one`: a count that must not be zero (a batch needs a tool call, a tree a branch): Poisson counts whose
  rate is itself uncertain, so the chance of a zero is the posterior predictive, not the plug-in exp(-mean): with
  Jeffreys' prior on the rate and counts summing to S over n seeds, the rate's posterior is Gamma(S + 1/2, n) and
  a new seed's count is negative binomial, P(0) = (n / (n + 1))^(S + 1/2). It exceeds exp(-mean) most when seeds
  are few (24 calls over 5 seeds: 1.1% against 0.8%);
- `any_of`: a check made of several parts fails when one does: the sum of their probabilities (a union bound).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from course_lib.course.claims import Chance
from course_lib.diagnostics import stats

Rule = Callable[[Sequence[Mapping[str, float]]], Chance]
"""Recorded seeds' numbers -> how likely the check is to fail by chance on a new seed."""


def exact(what: str) -> Rule:
    """A check with nothing random in it: probability 0, because `what`."""

    def rule(seeds: Sequence[Mapping[str, float]]) -> Chance:
        return Chance(0.0, f"exact: {what}")

    return rule


def next_seed(
    key: str, threshold: float, above: bool = True, value: Callable[[Mapping[str, float]], float] | None = None
) -> Rule:
    """The check asks the number `key` (or `value(numbers)`, named `key`) to lie above (or, with `above` False,
    below) `threshold`: the probability that a new seed lands on the other side under the t predictive distribution
    of the recorded values (module docstring). With a single value, or values that never vary, the probability is
    that of the side they are on (0 or 1)."""

    def read(numbers: Mapping[str, float]) -> float | None:
        if value is not None:
            try:
                return value(numbers)
            except KeyError:
                return None
        return numbers.get(key)

    def rule(seeds: Sequence[Mapping[str, float]]) -> Chance:
        values = np.array([v for v in map(read, seeds) if v is not None], dtype=float)
        if values.size == 0:
            return Chance(1.0, f"{key} was never recorded")
        mean = float(values.mean())
        sd = float(values.std(ddof=1)) if values.size > 1 else 0.0
        side = ">" if above else "<"
        if sd == 0:
            wrong = mean <= threshold if above else mean >= threshold
            return Chance(float(wrong), f"{key} = {mean:.4g} on all {values.size} seeds ({side} {threshold:g})")
        scale = sd * math.sqrt(1 + 1 / values.size)
        below = stats.t_cdf((threshold - mean) / scale, values.size - 1)
        probability = below if above else 1 - below
        return Chance(
            probability,
            f"{key} {side} {threshold:g}: mean {mean:.4g}, sd {sd:.3g} over {values.size} seeds; a new seed falls "
            f"on the other side with probability {probability:.2g} (t predictive, {values.size - 1} df)",
        )

    return rule


def at_least_one(key: str) -> Rule:
    """The check needs the count `key` to be at least 1 (a batch with tool calls, a tree that branched): the
    posterior predictive chance of a 0 on a new seed, Poisson counts with Jeffreys' prior on their rate (module
    docstring): (n / (n + 1))^(S + 1/2) for counts summing to S over n seeds."""

    def rule(seeds: Sequence[Mapping[str, float]]) -> Chance:
        values = [numbers[key] for numbers in seeds if key in numbers]
        if not values:
            return Chance(1.0, f"{key} was never recorded")
        n, total = len(values), sum(values)
        probability = math.exp((total + 0.5) * math.log(n / (n + 1)))
        how = (f"{key} >= 1: {total / n:.3g} on average over {n} seeds (least {min(values):g}); predictive "
               f"P(0) = ({n}/{n + 1})^({total:g} + 1/2)")  # fmt: skip
        return Chance(probability, how)

    return rule


def any_of(*rules: Rule) -> Rule:
    """A check of several parts fails when any part does: the sum of their probabilities, capped at 1."""

    def rule(seeds: Sequence[Mapping[str, float]]) -> Chance:
        parts = [part(seeds) for part in rules]
        total = min(1.0, sum(part.probability for part in parts))
        return Chance(total, "; ".join(part.how for part in parts))

    return rule


def compared_exactly(what: str, key: str) -> Rule:
    """An exact comparison that needs something to compare: nothing random in the comparison (`exact(what)`), so
    its chance of failing is that of the count `key` of things compared being 0 (`at_least_one`)."""
    return any_of(exact(what), at_least_one(key))
