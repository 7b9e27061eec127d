"""Implement it (chapter 17): Tree-GRPO's advantage, a leaf's z-score in its tree plus its z-score in its prompt.

Fill in `tree_advantages`, then run `pytest exercises/test_tree_grpo.py`, or in notebook 17
`check("tree_grpo.tree_advantages", use="mine")`. The reference solution is `course_lib/algos/tree_grpo.py`.
"""

from __future__ import annotations

from collections.abc import Hashable


def tree_advantages(
    rewards: list[float],
    prompt_ids: list[Hashable],
    tree_ids: list[Hashable],
    eps: float = 1e-6,
) -> list[float]:
    """Tree-GRPO's advantage of every leaf: how it stands among the leaves of its own tree plus among every leaf of
    its prompt.

    Ji et al. 2025, "Tree Search for LLM Agent Reinforcement Learning" (arXiv 2509.21240): the intra-tree and
    inter-tree group-relative advantages and their sum, A = A_intra + A_inter (notebook 17's section 1 writes
    both). Each leaf is a whole trajectory whose tokens all get its A.

    Args:
        rewards: the outcome reward R(H) of each leaf.
        prompt_ids: the same length: the prompt each leaf answers (its inter-tree group: every tree of that prompt).
        tree_ids: the same length: the tree each leaf belongs to (its intra-tree group); a tree's leaves share one
            prompt.
        eps: added to the std in each denominator, `std + eps`.

    Returns:
        A list of floats, one advantage per leaf, in the order of `rewards`.

    Contract:
        - each z-score is (R - mean) / (std + eps) over its group, with the unbiased (n - 1) std, as `torch.std`;
        - a group whose rewards are all equal contributes 0 (no signal), and so does a group of one leaf: a tree
          that never branched adds nothing, so a batch of unbranched chains gets exactly GRPO's advantage (the
          official code gives a one-leaf tree its raw reward instead; the course follows the paper);
        - the two terms are added with no weight.
    """
    raise NotImplementedError("tree_grpo.tree_advantages: implement me (see the docstring)")
