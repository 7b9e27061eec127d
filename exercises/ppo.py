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

    Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized Advantage Estimation"
    (arXiv 1506.02438), Eq. 16, the GAE(gamma, lambda) advantage from the critic's values, with its special cases
    lambda = 0 (the one-step TD error, Eq. 17) and lambda = 1 (the discounted return minus V(s_t), Eq. 18),
    applied to each episode of the sequence on its own. Notebook 09's section 1 shows the case StarPO-PPO uses.

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

    Contract:
        - `done_t = 1` means there is no next state after step t: nothing is bootstrapped across it, and no
          advantage of the next episode flows back into this one;
        - `dones[-1] == 1`: `last_value` is ignored;
        - a done in the middle splits the sequence: the result equals GAE on each episode separately.
    """
    raise NotImplementedError("ppo.gae: implement me (see the docstring)")
