"""Implement it (chapter 07): GiGPO's step groups and their step advantages.

Fill in `step_group_advantages`, then run `pytest exercises/test_gigpo.py`, or in notebook 07
`check("gigpo.step_group_advantages", use="mine")`. The reference solution is `course_lib/algos/gigpo.py`
(`discounted_returns` and `step_group_advantages`).
"""

from __future__ import annotations

from collections.abc import Hashable


def step_group_advantages(
    rewards: list[list[float]],
    anchors: list[list[Hashable]],
    group_ids: list[Hashable],
    gamma: float,
    scale_by_std: bool = True,
    eps: float = 1e-6,
) -> list[list[float]]:
    """GiGPO's step-level advantages: compare the actions taken from the same state across a group's trajectories.

    Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training" (arXiv 2505.10978). A group
    holds several trajectories that start from the same task. For each step t of a trajectory,

        R_t = r_t + gamma * R_{t+1}                                   (Eq. 5, discounted return, R after the end = 0)
        G^S(s) = {every step, of any trajectory of the group, whose anchor state is s}        (Eq. 6, step groups)
        A^S_t = (R_t - mean_{G^S(s_t)}(R)) / (std_{G^S(s_t)}(R) + eps)                         (Eq. 7)

    with std the unbiased (n - 1) standard deviation, as `torch.std`. The trainer then adds the episode advantage,
    A_t = A^E + omega * A^S_t (Eq. 8); this exercise is A^S only.

    Args:
        rewards: one list per trajectory, the reward r_t of each of its steps in order.
        anchors: the same shape as `rewards`: a hashable key of the state s_t the step acted from (a string, a
            number, a tuple). Equal keys mean the same state.
        group_ids: one per trajectory, its episode group (the task it started from).
        gamma: the discount in [0, 1].
        scale_by_std: divide by the step group's std, or only subtract its mean ("mean_norm" in GiGPO's code).
        eps: added to the std.

    Returns:
        The step advantage A^S_t of every step, as a list of lists shaped like `rewards`.

    Edge cases:
        - a step group is keyed by (group id, anchor): the same state in two tasks does not share a baseline;
        - a state visited twice by one trajectory contributes both visits to its step group;
        - a singleton step group (a state only one step reached) gets 0: it has no baseline;
        - a step group whose returns are all equal gets 0.
    """
    raise NotImplementedError("gigpo.step_group_advantages: implement me (see the docstring)")
