"""Chapter 08's algorithm diagram: one prompt's ARPO tree rollout on a worked example (Dong et al. 2025, arXiv
2507.19849, section 3.2; the course's sampler is `course_lib/engine/tree_rollout.py`).

A budget of M leaves for the prompt. N global samples start from the prompt; each writes a search, reads the tool's
response, and writes its first k tokens after it, whose normalised entropy H_t is compared with the sample's initial
entropy H_0. The sample forks there with probability P = clip(alpha + beta (H_t - H_0), 0, 1): the fork copies the
prefix up to the response and re-samples the rest. Once nothing can branch, refills (fresh global samples) fill the
budget. The entropies are the example's inputs (they stand for what a policy would write: a response that lists two
candidates leaves more to decide); every probability and every branch decision is computed by the library
(`algos.arpo.branch_probability`, `algos.arpo.should_branch` from a seeded generator), so the drawing shows what the
rule does, not what one would like it to do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from matplotlib.figure import Figure

from course_lib.algos.arpo import ALPHA, BETA, branch_probability, should_branch


@dataclass(frozen=True)
class TreeExample:
    """One prompt's global samples: their tool responses, initial entropies H_0 and entropies H_t after the response
    (`[N]` each, normalised to [0, 1]); the budget M, the rule's alpha and beta and the generator's seed."""

    responses: tuple[str, ...] = ("two candidates", "one candidate")
    initial: tuple[float, ...] = (0.005, 0.005)
    after: tuple[float, ...] = (0.075, 0.01)
    budget: int = 4
    alpha: float = 0.0
    beta: float = 10.0
    seed: int = 0


EXAMPLE = TreeExample()
"""Entropies of the size chapter 08 measures on its base (a rise of about 0.07 after two candidates, under 0.01 after
one), branched by the chapter's entropy-only rule (alpha 0, beta 10): probabilities 0.7 and 0.05. The released alpha
0.5, beta 0.2 would give 0.514 and 0.501, a fair coin either way."""


@dataclass
class GrownTree:
    """What the sampler did on a `TreeExample`: per global sample its branch probability and decision, and the leaves
    (`("global", i)`, `("branch", i)` for a fork of global sample i, `("refill", j)`), M of them."""

    probabilities: list[float] = field(default_factory=list)
    branched: list[bool] = field(default_factory=list)
    leaves: list[tuple[str, int]] = field(default_factory=list)


def grow(example: TreeExample = EXAMPLE) -> GrownTree:
    """One round of ARPO's rule on `example`: each global sample, in order, while the prompt has fewer than M leaves,
    forks after its tool response with the library's probability; then refills up to M leaves."""
    generator = torch.Generator().manual_seed(example.seed)
    tree = GrownTree(leaves=[("global", i) for i in range(len(example.after))])
    for i, (after, initial) in enumerate(zip(example.after, example.initial, strict=True)):
        if len(tree.leaves) >= example.budget:
            break
        probability = float(branch_probability(after, initial, example.alpha, example.beta))
        tree.probabilities.append(probability)
        tree.branched.append(should_branch(probability, generator))
        if tree.branched[-1]:
            tree.leaves.append(("branch", i))
    refills = example.budget - len(tree.leaves)
    tree.leaves += [("refill", j) for j in range(refills)]
    return tree


def point_label(after: float, initial: float, probability: float, branched: bool) -> str:
    """The text at a branch point: the entropies, the probability and what the draw decided."""
    decision = "branched" if branched else "did not branch"
    return f"$H_t$ = {after:.3f}, $H_0$ = {initial:.3f}\nP = {probability:.3f}: {decision}"


def figure(example: TreeExample = EXAMPLE) -> Figure:
    """The tree of `grow(example)`, left to right: the prompt, each global sample's search, its tool response (a
    branch point labelled by `point_label`, gid `point-<i>`), the answers that end its leaves; forks drawn from the
    response, refills from the prompt (dashed). The released defaults' probability is noted beside each point."""
    import matplotlib.pyplot as plt

    tree = grow(example)
    leaves = tree.leaves
    ys = {leaf: -1.1 * k for k, leaf in enumerate(leaves)}
    fig, ax = plt.subplots(figsize=(10.5, 1.3 + 1.05 * len(leaves)))
    box = {"boxstyle": "round,pad=0.3", "facecolor": "white", "edgecolor": "black"}
    prompt_y = sum(ys.values()) / len(ys)
    ax.text(0, prompt_y, "prompt", ha="center", va="center", bbox={**box, "facecolor": "#dddddd"})

    def edge(x0, y0, x1, y1, style="-", colour="black"):
        ax.annotate("", xy=(x1 - 0.35, y1), xytext=(x0 + 0.35, y0),
                    arrowprops={"arrowstyle": "->", "linestyle": style, "color": colour})  # fmt: skip

    for i, response in enumerate(example.responses):
        y = ys[("global", i)]
        edge(0, prompt_y, 1.6, y)
        ax.text(1.6, y, "search", ha="center", va="center", bbox=box)
        edge(1.6, y, 3.4, y)
        ax.text(3.4, y, response, ha="center", va="center", fontsize=9, bbox={**box, "facecolor": "#ffe9b3"})
        edge(3.4, y, 7.6, y)
        ax.text(7.6, y, f"answer (global {i})", ha="center", va="center", bbox=box)
        if i < len(tree.probabilities):
            released = float(branch_probability(example.after[i], example.initial[i], ALPHA, BETA))
            label = point_label(example.after[i], example.initial[i], tree.probabilities[i], tree.branched[i])
            ax.text(5.4, y + 0.12, label, ha="center", va="bottom", fontsize=8.5, gid=f"point-{i}")
            ax.text(5.4, y - 0.12, f"(released $\\alpha$, $\\beta$: P = {released:.3f})", ha="center", va="top",
                    fontsize=7.5, color="0.4")  # fmt: skip
    for kind, index in leaves:
        y = ys[(kind, index)]
        if kind == "branch":
            edge(3.4, ys[("global", index)], 7.6, y, colour="tab:red")
            ax.text(7.6, y, f"answer (fork of {index})", ha="center", va="center",
                    bbox={**box, "edgecolor": "tab:red"})  # fmt: skip
        elif kind == "refill":
            edge(0, prompt_y, 7.6, y, style="--", colour="0.5")
            ax.text(7.6, y, f"answer (refill {index})", ha="center", va="center", bbox={**box, "edgecolor": "0.5"})
    ax.set_xlim(-0.8, 8.8)
    ax.set_ylim(min(ys.values()) - 0.7, 0.8)
    ax.axis("off")
    ax.set_title(
        f"ARPO tree rollout of one prompt: M = {example.budget} leaves, N = {len(example.after)} global samples, "
        f"P = clip({example.alpha:g} + {example.beta:g} ($H_t$ - $H_0$), 0, 1)",
        fontsize=10.5,
    )
    fig.tight_layout()
    return fig
