"""Implement it (chapter 09): generalised advantage estimation (GAE) for PPO's critic.

Fill in `gae`, then run `pytest exercises/test_ppo.py`, or in notebook 09 `check("ppo.gae", use="mine")`.
The reference solution is `course_lib/algos/ppo.py::gae` (applied to each episode of the sequence).
"""

from __future__ import annotations

import torch


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    gamma: float,
    lam: float,
    last_value: float = 0.0,
) -> torch.Tensor:
    """Advantages of generalised advantage estimation along one sequence of steps that may span several episodes.

    Schulman et al. 2016 (arXiv 1506.02438), Eqs. 16-18: from the critic's values V,

        delta_t = r_t + gamma * V_{t+1} * (1 - done_t) - V_t              (the TD error)
        A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1}          (computed backwards, A_T = 0)

    with V_T = `last_value`, the value of the state after the last step. `done_t = 1` means the episode ended
    with step t: there is no next state to bootstrap from, and the next step's advantage belongs to another
    episode, so both terms are cut. lam = 0 gives the one-step TD error; lam = 1 the discounted return minus V_t.

    Args:
        rewards: `[T]` float, the reward of each step.
        values: `[T]` float, V(s_t) of the critic.
        dones: `[T]` bool or 0/1, whether the episode ended with step t.
        gamma: the discount in [0, 1].
        lam: GAE's lambda in [0, 1].
        last_value: V(s_T) of the state after the last step, used only if the last episode did not end
            (`dones[-1] == 0`, a sequence cut by a rollout budget).

    Returns:
        `[T]` advantages, in the dtype of `rewards` (the critic's targets are then A_t + V_t).

    Edge cases:
        - `dones[-1] == 1`: `last_value` is ignored (a finished episode has no next state);
        - a done in the middle: the recursion restarts there, as if the sequences were separate.
    """
    raise NotImplementedError("ppo.gae: implement me (see the docstring)")
