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
    """GiGPO's step advantages: each step's discounted return against the other steps taken from the same state.

    Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training" (arXiv 2505.10978): the
    discounted return R_t of Eq. 5, the anchor-state step groups of Eq. 6 and the step advantage A^S of Eq. 7
    (notebook 07's section 1 writes all three). The trainer then adds the episode advantage,
    A = A^E + omega * A^S (Eq. 8); this exercise is A^S only.

    Args:
        rewards: one list per trajectory, the reward r_t of each of its steps in order; the return after a
            trajectory's last step is 0.
        anchors: the same shape as `rewards`: a hashable key of the state s_t the step acted from (a string, a
            number, a tuple). Equal keys mean the same state.
        group_ids: one per trajectory, its episode group (the task it started from).
        gamma: the discount of Eq. 5, in [0, 1].
        scale_by_std: divide by the step group's std, as Eq. 7 does, or only subtract its mean ("mean_norm" in
            GiGPO's code).
        eps: added to the std in the denominator, `std + eps`.

    Returns:
        The step advantage A^S_t of every step, as a list of lists shaped like `rewards`.

    Contract:
        - the std is the unbiased (n - 1) standard deviation, as `torch.std`;
        - a step group is keyed by (group id, anchor): the same state in two tasks does not share a baseline;
        - a state visited twice by one trajectory contributes both visits to its step group;
        - a singleton step group (a state only one step acted from) gets 0: it has no baseline;
        - a step group whose returns are all equal gets 0.
    """
    raise NotImplementedError("gigpo.step_group_advantages: implement me (see the docstring)")
