"""Checks of `exercises/gigpo.py` (chapter 07) against hand values of GiGPO's Eqs. 5-7 and `course_lib.algos.gigpo`."""

from __future__ import annotations

import math

import torch

from course_lib.algos import gigpo
from exercises.checks.common import Exercise, ExerciseFailure, expect_close, generator, reference


def library_step_group_advantages(rewards, anchors, group_ids, gamma, scale_by_std=True, eps=1e-6):
    """The library's Eq. 5 per trajectory, then its Eqs. 6-7 on the flattened step rows."""
    returns, flat_anchors, flat_groups = [], [], []
    for traj_rewards, traj_anchors, group in zip(rewards, anchors, group_ids, strict=True):
        returns += gigpo.discounted_returns(traj_rewards, gamma)
        flat_anchors += list(traj_anchors)
        flat_groups += [group] * len(traj_rewards)
    flat = gigpo.step_group_advantages(returns, flat_anchors, flat_groups, scale_by_std, eps)
    out, start = [], 0
    for traj_rewards in rewards:
        out.append(flat[start : start + len(traj_rewards)])
        start += len(traj_rewards)
    return out


def _shaped(got, like: list[list[float]]) -> None:
    if not isinstance(got, (list, tuple)) or [len(row) for row in got] != [len(row) for row in like]:
        raise ExerciseFailure(
            f"return one list per trajectory with one advantage per step, shaped {[len(row) for row in like]}"
        )


def _check(fn, rewards, anchors, groups, gamma, expected, why, **kwargs):
    got = fn(rewards, anchors, groups, gamma, **kwargs)
    _shaped(got, rewards)
    expect_close(got, expected, why)


# Three trajectories of one group share their first state s0; at gamma 0.5 their returns there are 0.5, 1, 0.25.
SHARED = dict(
    rewards=[[0.0, 1.0], [1.0], [0.0, 0.0, 1.0]],
    anchors=[["s0", "s1"], ["s0"], ["s0", "s3", "s4"]],
    groups=[0, 0, 0],
)
SHARED_STD = math.sqrt(((1 / 12) ** 2 + (5 / 12) ** 2 + (4 / 12) ** 2) / 2)  # around the mean 7/12


def singleton_step_groups(fn):
    _check(
        fn,
        [[0.0, 1.0], [1.0]],
        [["s0", "s1"], ["s2"]],
        [0, 0],
        0.5,
        [[0.0, 0.0], [0.0]],
        "advantages of a singleton step group must be 0: a group of one has no baseline (torch.std of one value "
        "is NaN)",
    )


def shared_first_state(fn):
    s = SHARED_STD
    _check(
        fn,
        *SHARED.values(),
        0.5,
        [[-1 / 12 / s, 0.0], [5 / 12 / s], [-4 / 12 / s, 0.0, 0.0]],
        "rows that share (group id, anchor) form a step group (Eq. 6), normalised by the mean and unbiased std of "
        "its discounted returns R_t = r_t + gamma R_{t+1} (Eqs. 5, 7): at s0 the returns are 0.5, 1 and 0.25 at "
        "gamma 0.5, mean 7/12",
    )


def group_id_in_the_key(fn):
    h = 0.5 / math.sqrt(0.5)
    _check(
        fn,
        [[1.0], [0.0], [1.0], [1.0]],
        [["s0"], ["s0"], ["s0"], ["s0"]],
        ["task-a", "task-a", "task-b", "task-b"],
        1.0,
        [[h], [-h], [0.0], [0.0]],
        "a step group is keyed by (episode group id, anchor): the same state in two different tasks must not share "
        "a baseline (task-b's two returns are equal, so its advantages are 0)",
    )


def all_equal_returns(fn):
    _check(
        fn,
        [[0.7]] * 7,
        [["s0"]] * 7,
        [0] * 7,
        0.9,
        [[0.0]] * 7,
        "a step group whose returns are all equal carries no signal: its advantages must be exactly 0 (test for "
        "equal returns rather than divide the mean's rounding noise by eps)",
    )


def repeated_state(fn):
    # returns at s0: 0.5 and 1 (trajectory A, twice) and 0 (B): mean 0.5, std 0.5
    _check(
        fn,
        [[0.0, 1.0], [0.0]],
        [["s0", "s0"], ["s0"]],
        [0, 0],
        0.5,
        [[0.0, 1.0], [-1.0]],
        "every visit to a state is a member of its step group, even two visits by one trajectory (returns 0.5, 1 "
        "and 0 at s0: mean 0.5, std 0.5)",
    )


def without_std(fn):
    _check(
        fn,
        *SHARED.values(),
        0.5,
        [[-1 / 12, 0.0], [5 / 12], [-4 / 12, 0.0, 0.0]],
        "with scale_by_std=False the step advantage is R_t minus its step group's mean (7/12 at s0), no division",
        scale_by_std=False,
    )


def random_groups(fn):
    for seed in range(3):
        g = generator(seed)
        rewards, anchors, groups = [], [], []
        for group in range(3):
            for _ in range(4):
                length = int(torch.randint(1, 5, (), generator=g))
                rewards.append([round(float(x), 3) for x in torch.randn(length, generator=g)])
                anchors.append([(int(x), 0) for x in torch.randint(0, 3, (length,), generator=g)])
                groups.append(group)
        got = fn(rewards, anchors, groups, 0.9)
        _shaped(got, rewards)
        expect_close(
            got,
            reference(
                f"gigpo.step_group_advantages/seed {seed}",
                library_step_group_advantages,
                rewards,
                anchors,
                groups,
                0.9,
            ),
            f"on seeded random trajectories (seed {seed}, 3 groups of 4, gamma 0.9, anchors are tuples) your step "
            "advantages differ from the library's",
        )


EXERCISES = [
    Exercise(
        "gigpo.step_group_advantages",
        "07",
        "course_lib/algos/gigpo.py",
        library_step_group_advantages,
        (
            ("singleton step groups", singleton_step_groups),
            ("shared first state", shared_first_state),
            ("group id in the key", group_id_in_the_key),
            ("all-equal returns", all_equal_returns),
            ("repeated state", repeated_state),
            ("scale_by_std off", without_std),
            ("random groups", random_groups),
        ),
    ),
]
