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
    """Whether a rollout forks after a tool call: ARPO's branch probability and one seeded draw.

    Dong et al. 2025, "Agentic Reinforced Policy Optimization" (arXiv 2507.19849), its entropy-based adaptive
    rollout: the probability of branching after a tool response rises with the change of the policy's normalised
    entropy, from H_initial (the first tokens of the answer) to H_t (the first tokens after the tool response),
    with intercept `alpha` and slope `beta`, clipped to [0, 1]. Notebook 08's section 1 writes the equation.

    Args:
        entropy_after: H_t, the normalised entropy after the tool call, in [0, 1].
        initial_entropy: H_initial, in [0, 1].
        generator: a seeded `torch.Generator`, the only source of randomness (not Python's `random`, not torch's
            global generator), so that a seeded sampler is reproducible.
        alpha: the branch probability when the entropy did not change (the released script's 0.5).
        beta: how much an entropy change tilts it (the released script's 0.2).

    Returns:
        `(probability, branch)`: P_t as a float in [0, 1] and the decision as a bool.

    Contract:
        - more uncertainty after the tool call than at the start means a higher probability;
        - the decision is "branch iff u < P_t" for one uniform u = `torch.rand((), generator=generator)`, so at
          P_t = 0 it never branches and at P_t = 1 always;
        - exactly one uniform is drawn per call, whatever P_t, so that later decisions do not depend on earlier
          probabilities.
    """
    raise NotImplementedError("arpo.branch_decision: implement me (see the docstring)")
