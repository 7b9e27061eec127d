"""Checks a config runs on construction: a ValueError that names the field, what it allows and what it got.

Every config of the loop (`train.GRPOConfig`, `warm_start.SFTConfig`, `tree_rollout.TreeConfig`,
`algos.filters.FilterConfig`, `algos.gigpo.GiGPOConfig`) refuses an impossible setting when it is made, not minutes
into a run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def one_of(name: str, value: object, allowed: Sequence[object]) -> None:
    """Raise a ValueError that names the allowed values unless `value` is one of them."""
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(repr(a) for a in allowed)}; got {value!r}")


def at_least(name: str, value: float, low: float, strict: bool = False) -> None:
    """Raise a ValueError unless `value` >= `low` (> `low` when `strict`) and finite: a NaN compares false with
    everything, so it would pass and poison the run minutes later (a NaN learning rate after the base evaluation)."""
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number; got {value!r}")
    if value < low or (strict and value == low):
        raise ValueError(f"{name} must be {'>' if strict else '>='} {low}; got {value!r}")


def within(name: str, value: float, low: float, high: float, low_open: bool = False) -> None:
    """Raise a ValueError unless `value` lies in [low, high] (`(low, high]` when `low_open`)."""
    if not (low < value <= high if low_open else low <= value <= high):
        raise ValueError(f"{name} must lie in {'(' if low_open else '['}{low}, {high}]; got {value!r}")
