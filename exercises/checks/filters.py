"""Checks of `exercises/filters.py` (chapters 09 and 10) against hand-picked selections and
`course_lib.algos.filters`."""

from __future__ import annotations

import math

import torch

from course_lib.algos import filters
from exercises.checks.common import Exercise, ExerciseFailure, expect_same, generator, reference


def library_starpo_s(rewards, group_ids, keep_fraction=0.25):
    return filters.top_groups_by_reward_std(rewards, group_ids, keep_fraction)


def library_snr(rewards, group_ids, top_p=0.9, eps=0.01):
    return filters.top_p_groups_by_reward_std(rewards, group_ids, top_p, mode="linear", include_zero=False, eps=eps)


def pairs(stds: list[float], first_id: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """Groups of two rewards (0, s * sqrt(2)), whose unbiased std is s; group ids 10, 11, ...; the groups' rows
    interleaved (first rows of every group, then second rows), so a filter cannot assume adjacent rows."""
    rows = [(first_id + g, r) for g, s in enumerate(stds) for r in (0.0, s * math.sqrt(2))]
    rows = rows[0::2] + rows[1::2]
    return torch.tensor([r for _, r in rows], dtype=torch.float64), torch.tensor([g for g, _ in rows])


def kept(fn, rewards, ids, *args) -> list[int]:
    """The groups `fn` keeps, sorted; ExerciseFailure unless it keeps or drops each group's rows together."""
    mask = torch.as_tensor(fn(rewards, ids, *args))
    if mask.shape != ids.shape:
        raise ExerciseFailure(
            f"return a [B] bool mask with one entry per row ({ids.shape[0]}), got {tuple(mask.shape)}"
        )
    mask = mask.bool().tolist()
    groups = {int(g) for g, keep in zip(ids.tolist(), mask) if keep}
    if any(keep != (g in groups) for g, keep in zip(ids.tolist(), mask)):
        raise ExerciseFailure("keep or drop whole groups: every row of a kept group, no row of a dropped one")
    return sorted(groups)


# -- filters.starpo_s ----------------------------------------------------------------------------------------------

EIGHT = [0.1, 0.4, 0.0, 0.3, 0.2, 0.0, 0.5, 0.05]  # groups 10..17; ranked 16, 11, 13, 14, 10, 17, then 12 and 15


def top_quarter(fn):
    rewards, ids = pairs(EIGHT)
    expect_same(
        kept(fn, rewards, ids, 0.25),
        [11, 16],
        "keep the int(0.25 * 8) = 2 groups with the LARGEST reward std (stds 0.5 and 0.4): those are the groups "
        "where the policy's choices made a difference",
    )
    expect_same(kept(fn, rewards, ids, 0.5), [11, 13, 14, 16], "keep_fraction 0.5 of 8 groups keeps the top 4 by std")


def rounding(fn):
    rewards, ids = pairs(EIGHT)
    expect_same(
        kept(fn, rewards, ids, 0.1),
        [],
        "int(keep_fraction * G) rounds down: 0.1 of 8 groups is int(0.8) = 0 groups, so nothing is kept",
    )
    expect_same(kept(fn, rewards, ids, 1.0), list(range(10, 18)), "keep_fraction 1 keeps every group")


def singleton_and_ties(fn):
    # group 7: rewards 1, 1, 0 and group 3: 0, 1, 0 both have std sqrt(1/3); group 9 is a single row (std 0)
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 5.0])
    ids = torch.tensor([7, 3, 7, 3, 7, 3, 9])
    expect_same(
        kept(fn, rewards, ids, 0.34),
        [7],
        "groups 7 and 3 tie at std sqrt(1/3): ties go to the group seen first (7), and the single-row group 9 has "
        "std 0, not NaN",
    )
    expect_same(
        kept(fn, rewards, ids, 0.67),
        [3, 7],
        "a group of one row has std 0 (torch.std of one value is NaN, which must not rank first)",
    )


def random_starpo(fn):
    for seed in range(3):
        g = generator(seed)
        ids = torch.randint(0, 8, (30,), generator=g)
        rewards = torch.randn(30, generator=g, dtype=torch.float64)
        for fraction in (0.25, 0.5):
            expect_same(
                kept(fn, rewards, ids, fraction),
                reference(
                    f"filters.starpo_s/seed {seed}, keep {fraction}",
                    kept,
                    library_starpo_s,
                    rewards,
                    ids,
                    fraction,
                ),
                f"on a seeded random batch (seed {seed}, keep_fraction {fraction}) you keep other groups than the "
                "library",
            )


# -- filters.snr ---------------------------------------------------------------------------------------------------


def top_p_by_hand(fn):
    rewards, ids = pairs([0.3, 0.0, 0.5, 0.2])  # total 1.0; ranked 12 (0.5), 10 (0.3), 13 (0.2); 11 has std 0
    expect_same(
        kept(fn, rewards, ids, 0.9),
        [10, 12, 13],
        "sort the groups by std, largest first, and keep the shortest prefix whose summed std reaches "
        "top_p * total - eps = 0.9 * 1.0 - 0.01 = 0.89: 0.5 and 0.8 fall short, 1.0 reaches it",
    )
    expect_same(
        kept(fn, rewards, ids, 0.5),
        [12],
        "groups sorted by std, largest first: at top_p 0.5 the threshold is 0.49, which the largest std (0.5) reaches",
    )
    expect_same(
        kept(fn, rewards, ids, 0.8),
        [10, 12],
        "groups sorted by std, largest first: at top_p 0.8 the threshold is 0.79, reached by 0.5 + 0.3",
    )


def zero_std_groups(fn):
    rewards, ids = pairs([0.0, 0.0, 0.0])
    expect_same(
        kept(fn, rewards, ids, 0.9),
        [],
        "if no group's rewards spread (every std 0), nothing is kept: the training step is skipped",
    )
    rewards, ids = pairs([0.3, 0.0, 0.5])
    expect_same(
        kept(fn, rewards, ids, 1.0),
        [10, 12],
        "a group whose rewards are all equal (std 0) is never kept, even at top_p 1: it carries no gradient",
    )


def eps_tail(fn):
    rewards, ids = pairs([0.7, 0.003])
    expect_same(
        kept(fn, rewards, ids, 1.0),
        [10],
        "stop as soon as the prefix reaches top_p * total - eps = 0.703 - 0.01: at top_p 1 the 0.003 group is dropped",
    )


def random_snr(fn):
    for seed in range(3):
        g = generator(seed)
        ids = torch.randint(0, 8, (30,), generator=g)
        rewards = (torch.rand(30, generator=g) < 0.5).double() * torch.rand(30, generator=g, dtype=torch.float64)
        for top_p in (0.5, 0.9):
            expect_same(
                kept(fn, rewards, ids, top_p),
                reference(f"filters.snr/seed {seed}, top_p {top_p}", kept, library_snr, rewards, ids, top_p),
                f"on a seeded random batch (seed {seed}, top_p {top_p}) you keep other groups than the library",
            )


EXERCISES = [
    Exercise(
        "filters.starpo_s",
        "09",
        "course_lib/algos/filters.py",
        library_starpo_s,
        (
            ("top quarter", top_quarter),
            ("rounding down", rounding),
            ("singleton and ties", singleton_and_ties),
            ("random batches", random_starpo),
        ),
    ),
    Exercise(
        "filters.snr",
        "10",
        "course_lib/algos/filters.py",
        library_snr,
        (
            ("top-p by hand", top_p_by_hand),
            ("zero-std groups", zero_std_groups),
            ("eps tail", eps_tail),
            ("random batches", random_snr),
        ),
    ),
]
