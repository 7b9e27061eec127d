"""Implement it (chapter 08): ARPO's entropy-based branch decision.

Fill in `branch_decision`, then run `pytest exercises/test_arpo.py`, or in notebook 08
`check("arpo.branch_decision", use="mine")`. The reference solution is `course_lib/algos/arpo.py`
(`branch_probability` and `should_branch`).
"""

from __future__ import annotations

import torch


def branch_decision(
    entropy_after: float,
    initial_entropy: float,
    generator: torch.Generator,
    alpha: float = 0.5,
    beta: float = 0.2,
) -> tuple[float, bool]:
    """Whether a rollout forks after a tool call: more uncertainty than at the start, more branching.

    Dong et al. 2025, "Agentic Reinforced Policy Optimization" (arXiv 2507.19849), entropy-based adaptive rollout:
    with H_initial the policy's normalised token entropy at the start of the answer and H_t the one on the tokens
    right after a tool response (both in [0, 1]),

        dH_t = H_t - H_initial
        P_t  = clip(alpha + beta * dH_t, 0, 1)

    and the rollout branches with probability P_t: draw u ~ Uniform[0, 1) from `generator` and branch iff u < P_t.
    (The released code branches iff clip(u - beta * dH, 0, 1) <= alpha, which for alpha < 1 is the same event.)

    Args:
        entropy_after: H_t, the normalised entropy after the tool call, in [0, 1].
        initial_entropy: H_initial, in [0, 1].
        generator: a seeded `torch.Generator`; draw the uniform with `torch.rand((), generator=generator)` so that
            a seeded sampler is reproducible (not Python's `random`, not torch's global generator).
        alpha: the branch probability when the entropy did not change (the released script's 0.5).
        beta: how much an entropy change tilts it (the released script's 0.2).

    Returns:
        `(probability, branch)`: P_t as a float and the decision as a bool.

    Edge cases:
        - P_t is clipped to [0, 1]: at P_t = 0 it never branches, at P_t = 1 always;
        - draw exactly one uniform per call, whatever P_t, so that later decisions do not depend on earlier values.
    """
    raise NotImplementedError("arpo.branch_decision: implement me (see the docstring)")
