"""ARPO's "soft" credit on a tree's shared prefixes, checked exactly (Dong et al. 2025, arXiv 2507.19849, Sec. 3.3).

ARPO trains GRPO on the leaves of its rollout tree and adds no tree-aware advantage: a token of a prefix that n
leaves share appears n times in the batch, once per leaf, each time with that leaf's advantage A_i. The paper
calls this "soft" advantage estimation and argues that it equals "hard" estimation, which gives the shared
prefix ONE copy with the leaves' mean advantage. With ratio 1 (no clipping active, the first update on fresh
rollouts) the gradient a token at position j of a leaf contributes is -A_i w_i grad log pi(x_j | x_<j), where
w_i is that token's weight in the loss's aggregation. The prefix is identical in every leaf, so is its
log-probability, and the soft gradient on it is

    -(sum_i A_i w_i) grad log pi(prefix)      vs. hard:   -(n mean(A) mean(w)) grad log pi(prefix).

They are equal when every leaf's tokens weigh the same: always under `token-mean` (one normaliser for the whole
batch, DAPO's and the released code's `loss_agg_mode`), and under `seq-mean-token-mean` (the original GRPO's
per-sequence mean) only if the leaves have the same number of valid tokens; otherwise a leaf with fewer tokens
weighs more and the soft credit tilts toward short leaves. `prefix_gradient_gap` computes both gradients with
the model on a real tree and returns their relative difference.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch

from course_lib.engine.rollout import Trajectory
from course_lib.engine.tree_rollout import TreeStats


def shared_prefixes(trajectories: Sequence[Trajectory], stats: TreeStats) -> list[tuple[list[int], int]]:
    """Every set of leaves of one group that share a prefix containing policy tokens, with the prefix's length,
    largest first: per realised branch, the leaves whose first `cut` tokens equal the branch's source's, `cut`
    being the end of the tool response it forked after."""
    found = []
    for child, parent in enumerate(stats.parents):
        if parent is None:
            continue
        source, cut = trajectories[parent], trajectories[child].branch_position
        if not any(source.loss_mask[:cut]):
            continue
        prefix = source.token_ids[:cut]
        leaves = [
            i
            for i, t in enumerate(trajectories)
            if t.group_id == source.group_id and t.token_ids[:cut] == prefix and len(t.token_ids) > cut
        ]
        found.append((leaves, cut))
    return sorted(found, key=lambda entry: -len(entry[0]))


def shared_prefix(trajectories: Sequence[Trajectory], stats: TreeStats) -> tuple[list[int], int]:
    """The largest of `shared_prefixes`, or ([], 0) if nothing branched."""
    found = shared_prefixes(trajectories, stats)
    return found[0] if found else ([], 0)


def token_weights(trajectories: Sequence[Trajectory], leaves: Sequence[int], aggregation: str) -> list[float]:
    """The weight of one valid token of each leaf in the loss over the whole batch `trajectories`: `token-mean`
    1 / (valid tokens in the batch); `seq-mean-token-mean` 1 / (sequences x the leaf's valid tokens)."""
    valid = [sum(t.loss_mask) for t in trajectories]
    if aggregation == "token-mean":
        return [1.0 / sum(valid)] * len(leaves)
    if aggregation == "seq-mean-token-mean":
        return [1.0 / (len(trajectories) * valid[i]) for i in leaves]
    raise ValueError(f"token_weights knows 'token-mean' and 'seq-mean-token-mean', not {aggregation!r}")


def prefix_gradient_gap(
    model: torch.nn.Module,
    trajectories: Sequence[Trajectory],
    leaves: Sequence[int],
    cut: int,
    advantages: Sequence[float],
    weights: Sequence[float],
) -> dict[str, float]:
    """Soft vs hard credit on the policy tokens of the first `cut` tokens shared by `leaves` (indices into
    `trajectories`; `advantages` and `weights` per leaf): the parameter gradients of
    sum_i A_i w_i sum_prefix -log pi (each leaf's own row) and of n mean(A) mean(w) sum_prefix -log pi (one
    copy), and `relative_gap` = max |soft - hard| / max |hard| over all parameters, computed in float64 on a copy of
    `model` (the model itself is left as it is)."""
    rows = [trajectories[i] for i in leaves]
    if any(t.token_ids[:cut] != rows[0].token_ids[:cut] for t in rows):
        raise ValueError("the leaves do not share their first `cut` tokens")
    # In float64, on a copy of the model, one leaf at a time (each its own unpadded sequence), and the gradient
    # of the unweighted prefix log-likelihood, weighted afterwards: so what is left of the identity's rounding
    # is float64's, not the float32 parts of the model's kernels or of a padded batch's masking.
    model = copy.deepcopy(model).double()
    params = [p for p in model.parameters() if p.requires_grad]

    def prefix_gradient(leaf: Trajectory) -> torch.Tensor:
        """Gradient of -sum over the prefix's policy tokens of log pi, for one leaf."""
        ids = torch.tensor([leaf.token_ids])
        mask = torch.tensor([leaf.loss_mask[1:cut] + [0] * (len(leaf.token_ids) - cut)], dtype=torch.float64)
        logits = model(input_ids=ids).logits[:, :-1]
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        loss = -(logprobs * mask).sum()
        return torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)]).double()

    gradients = [prefix_gradient(leaf) for leaf in rows]
    soft = sum(a * w * g for a, w, g in zip(advantages, weights, gradients, strict=True))
    n = len(rows)
    hard = n * (sum(advantages) / n) * (sum(weights) / n) * gradients[0]
    scale = hard.abs().max().clamp(min=1e-30)
    lengths = [sum(t.loss_mask) for t in rows]
    return {
        "relative_gap": float((soft - hard).abs().max() / scale),
        "leaves": float(n),
        "prefix_policy_tokens": float(sum(rows[0].loss_mask[:cut])),
        "equal_lengths": float(len(set(lengths)) == 1),
    }
