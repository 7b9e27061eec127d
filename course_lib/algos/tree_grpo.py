"""Tree-GRPO: group-relative advantages from a tree of agent turns (Ji et al. 2025, "Tree Search for LLM Agent
Reinforcement Learning", arXiv 2509.21240, ICLR 2026; official code AMAP-ML/Tree-GRPO).

Per prompt the sampler grows M trees of whole turns (thought, action, observation): each starts from one chain,
then nodes are expanded and their rest sampled anew, so every leaf H is a full trajectory and leaves of one tree
share prefixes. Only the leaves carry rewards R(H). The advantage of a leaf is the sum of two GRPO z-scores,

    A_intra(H) = (R(H) - mean_{T(H)} R) / (std_{T(H)} R + eps)     over the leaves of H's tree
    A_inter(H) = (R(H) - mean_{P(H)} R) / (std_{P(H)} R + eps)     over every leaf of every tree of the prompt
    A(H)       = A_intra(H) + A_inter(H)                          (no weight between them)

and every token of the leaf's sequence gets A(H). A prefix shared by several leaves sits in each of their
sequences, so its tokens receive the sum of their advantages: the tree's step-level preference is implicit in
this duplication (the paper shows intra-tree GRPO equals a step-level DPO); nothing reads the tree's inner shape.

Where this follows the paper and where it follows the official code (`compute_advantage`, `adv_estimator="tree"`
in `verl/trainer/ppo/ray_trainer_ts.py`, which calls GRPO's outcome advantage once per prompt and once per tree):

- **A one-leaf tree.** Here its intra-tree term is 0 (its reward minus its own mean), so a batch of unbranched
  chains gets exactly GRPO's advantage, the paper's reading. The code's GRPO gives a one-member group mean 0 and
  std 1, so its leaf gets its raw reward on top: `singleton="raw"` reproduces that (1, 0, 0, 0 in four one-leaf
  trees -> 2.5, -0.5, -0.5, -0.5 instead of GRPO's 1.5, -0.5, -0.5, -0.5).
- **A group of equal rewards** gets 0, as GRPO's (the code divides 0 by std + eps: also 0).
- std is the unbiased (n - 1) one, as `torch.std`, with eps 1e-6 outside the root, as both.
"""

from __future__ import annotations

import torch

from course_lib import bridges
from course_lib.algos.grpo import group_advantages
from course_lib.implement_it import implement_it

SINGLETON_RULES = ("zero", "raw")


@implement_it("tree_grpo.tree_advantages", bridges.tree_advantages)
def tree_advantages(
    rewards: torch.Tensor,
    prompt_ids: torch.Tensor,
    tree_ids: torch.Tensor,
    scale_by_std: bool = True,
    singleton: str = "zero",
    eps: float = 1e-6,
) -> torch.Tensor:
    """A(H) = A_intra(H) + A_inter(H) per leaf, `[N]`, of leaf rewards `[N]`.

    `prompt_ids` `[N]`: the prompt (GRPO group) of each leaf; `tree_ids` `[N]`: its tree (leaves of one tree share
    a prompt; ids need only be distinct across the batch). `singleton`: `zero` (a one-leaf tree's intra term is 0,
    the paper's reading) or `raw` (the official code's: its raw reward, mean 0 and std 1). `scale_by_std=False`
    centres without dividing (Dr. GRPO's variant, for both terms)."""
    if singleton not in SINGLETON_RULES:
        raise ValueError(f"singleton must be one of {SINGLETON_RULES}, got {singleton!r}")
    if not (rewards.shape == prompt_ids.shape == tree_ids.shape) or rewards.dim() != 1:
        raise ValueError("rewards, prompt_ids and tree_ids must be 1-D tensors of the same shape")
    for tree in torch.unique(tree_ids):
        prompts = torch.unique(prompt_ids[tree_ids == tree])
        if prompts.numel() > 1:
            raise ValueError(f"tree {int(tree)} holds leaves of prompts {prompts.tolist()}: a tree has one prompt")
    inter = group_advantages(rewards, prompt_ids, scale_by_std, eps)
    intra = group_advantages(rewards, tree_ids, scale_by_std, eps)
    if singleton == "raw":
        _, inverse, counts = torch.unique(tree_ids, return_inverse=True, return_counts=True)
        alone = counts[inverse] == 1
        intra = torch.where(alone, rewards.float() / (1.0 + eps) if scale_by_std else rewards.float(), intra)
    return intra + inter
