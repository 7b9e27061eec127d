"""Checks of `exercises/ppo.py` (chapter 09) against hand values of GAE and `course_lib.algos.ppo.gae`."""

from __future__ import annotations

import torch

from course_lib.algos import ppo
from exercises.checks.common import Exercise, expect_close, generator, reference


def library_gae(rewards, values, dones, gamma, lam, last_value=0.0):
    """The library's `gae` run on each episode of the sequence: an episode that ended bootstraps from 0."""
    dones = torch.as_tensor(dones).bool().tolist()
    out = torch.empty_like(rewards)
    start = 0
    for t in range(len(dones)):
        if dones[t] or t == len(dones) - 1:
            bootstrap = 0.0 if dones[t] else last_value
            out[start : t + 1] = ppo.gae(rewards[start : t + 1], values[start : t + 1], gamma, lam, bootstrap)
            start = t + 1
    return out


def _gae(fn, rewards, values, dones, gamma, lam, last_value=0.0):
    r, v = torch.tensor(rewards, dtype=torch.float64), torch.tensor(values, dtype=torch.float64)
    return fn(r, v, torch.tensor(dones, dtype=torch.bool), gamma, lam, last_value)


def one_step(fn):
    expect_close(
        _gae(fn, [1.0], [0.5], [True], 0.9, 0.95),
        [0.5],
        "one step that ends its episode: A = delta = r - V = 1 - 0.5 = 0.5",
    )
    expect_close(
        _gae(fn, [1.0], [0.5], [True], 0.9, 0.95, last_value=3.0),
        [0.5],
        "a finished episode has no next state: with dones[-1] == 1, last_value must be ignored",
    )


def two_steps_bootstrapped(fn):
    # delta_1 = 1 + 0.9 * 0.4 - 0.2 = 1.16; delta_0 = 0 + 0.9 * 0.2 - 0.5 = -0.32; A_0 = -0.32 + 0.72 * 1.16
    expect_close(
        _gae(fn, [0.0, 1.0], [0.5, 0.2], [False, False], 0.9, 0.8, last_value=0.4),
        [-0.32 + 0.9 * 0.8 * 1.16, 1.16],
        "gamma 0.9, lam 0.8, last_value 0.4: delta_1 = 1 + 0.9 * 0.4 - 0.2 = 1.16 (the last step bootstraps from "
        "last_value when its episode has not ended) and A_0 = delta_0 + gamma * lam * A_1 = -0.32 + 0.72 * 1.16",
    )


def lambda_limits(fn):
    rewards, values, dones = [1.0, 0.0, 2.0], [0.3, 0.6, 0.1], [False, False, True]
    expect_close(
        _gae(fn, rewards, values, dones, 0.5, 0.0),
        [1.0 + 0.5 * 0.6 - 0.3, 0.0 + 0.5 * 0.1 - 0.6, 2.0 - 0.1],
        "lam = 0: each advantage is its one-step TD error r_t + gamma V_{t+1} - V_t",
    )
    expect_close(
        _gae(fn, rewards, values, dones, 0.5, 1.0),
        [1.5 - 0.3, 1.0 - 0.6, 2.0 - 0.1],
        "lam = 1: each advantage is the discounted return minus V_t (returns 1.5, 1, 2 at gamma 0.5)",
    )


def done_in_the_middle(fn):
    # episode 1 (steps 0, 1): returns 2, 1 at gamma 1, so A = 1.5, 0.5; episode 2 (step 2): 1 + 2 - 0.5 = 2.5
    expect_close(
        _gae(fn, [1.0, 1.0, 1.0], [0.5, 0.5, 0.5], [False, True, False], 1.0, 1.0, last_value=2.0),
        [1.5, 0.5, 2.5],
        "after a step with done = 1 the episode is over: do not bootstrap from the next state's value and do not "
        "carry the next advantage across (multiply both by 1 - done_t)",
    )


def random_sequences(fn):
    for seed in range(3):
        g = generator(seed)
        rewards = torch.randn(12, generator=g, dtype=torch.float64)
        values = torch.randn(12, generator=g, dtype=torch.float64)
        dones = torch.rand(12, generator=g) < 0.25
        last = float(torch.randn((), generator=g))
        expect_close(
            fn(rewards, values, dones, 0.97, 0.9, last),
            reference(f"ppo.gae/seed {seed}", library_gae, rewards, values, dones, 0.97, 0.9, last),
            f"on a seeded random sequence (seed {seed}, dones at {dones.nonzero().flatten().tolist()}, gamma 0.97, "
            "lam 0.9) your advantages differ from the library's",
        )


EXERCISES = [
    Exercise(
        "ppo.gae",
        "09",
        "course_lib/algos/ppo.py",
        library_gae,
        (
            ("one step", one_step),
            ("two steps bootstrapped", two_steps_bootstrapped),
            ("lambda 0 and 1", lambda_limits),
            ("done in the middle", done_in_the_middle),
            ("random sequences", random_sequences),
        ),
    ),
]
