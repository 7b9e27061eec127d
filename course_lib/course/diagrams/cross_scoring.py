"""Chapter 10's algorithm diagram: RAGEN-2's in-batch cross-scoring (arXiv 2604.06268, section 3).

Each reasoning z_i is scored under every prompt x_j of the batch by teacher forcing, giving a matrix
logp[i, j] = log p(z_i | x_j) of shape [Z, P]. Row by row, the mutual-information estimate compares the score under
the reasoning's own prompt with the log of the mean score over all prompts, and retrieval asks whether the own prompt
scores best. The diagram draws a small such matrix and every number on it (each row's MI term, the estimate, the
retrieval accuracy, H(Z|X)) is computed by `diagnostics.mutual_information`, the function the chapter's runs use.

The worked example is four FrozenLake maps whose first reasonings were scored by a policy that is partly grounded:
maps 0 and 1 share their start cell (a first reasoning names only that cell and a move, so it cannot tell them
apart), map 2's reasoning points clearly to its own map, map 3's barely. The matrix is the example's input; what the
diagram shows about it is the library's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from matplotlib.figure import Figure

from course_lib.diagnostics import mutual_information

EXAMPLE_LOGP = torch.tensor(
    [
        [-0.40, -0.40, -2.50, -2.80],
        [-0.50, -0.50, -2.60, -2.90],
        [-2.20, -2.40, -0.30, -2.00],
        [-1.20, -1.10, -1.40, -1.00],
    ],
    dtype=torch.float64,
)
"""[Z, P] = [4, 4] per-token mean log-probabilities log p(z_i | x_j) of the worked example (the input)."""
EXAMPLE_OWN = [0, 1, 2, 3]
"""The prompt that produced each reasoning: z_i was written on map i."""
EXAMPLE_STARTS = ["r1 c1", "r1 c1", "r2 c3", "r4 c2"]
"""Each map's start cell (maps 0 and 1 share theirs): the prompt keys under which a twin counts as retrieved."""


def row_terms(logp: torch.Tensor, own: Sequence[int]) -> list[float]:
    """Each row's contribution to the estimate, logp[i, own] - log mean_j exp(logp[i, j]), as
    `mutual_information` computes it on that row alone (the estimate is their mean)."""
    return [mutual_information(logp[i : i + 1], [own[i]])["mi"] for i in range(logp.shape[0])]


def figure(
    logp: torch.Tensor = EXAMPLE_LOGP, own: Sequence[int] = EXAMPLE_OWN, starts: Sequence[str] = EXAMPLE_STARTS
) -> Figure:
    """The cross-scoring matrix as a heat map with each log-probability written in its cell, the own prompt of each
    row outlined and the row's best prompt marked, each row's MI term beside it, and the estimate, retrieval (with
    and without counting a twin start cell as correct) and H(Z|X) in the title."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    whole = mutual_information(logp, own)
    twins = mutual_information(logp, own, prompt_keys=list(starts))
    terms = row_terms(logp, own)
    rows, prompts = logp.shape
    fig, ax = plt.subplots(figsize=(7.2, 3.9))
    image = ax.imshow(logp.numpy(), cmap="viridis", vmin=float(logp.min()), vmax=0.0)
    best = logp.argmax(dim=1).tolist()
    for i in range(rows):
        for j in range(prompts):
            mark = " *" if j == best[i] else ""
            ax.text(j, i, f"{float(logp[i, j]):.2f}{mark}", ha="center", va="center", fontsize=9,
                    color="black" if float(logp[i, j]) > float(logp.min()) / 2 else "white")  # fmt: skip
        ax.add_patch(Rectangle((own[i] - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2))
        ax.text(prompts - 0.35, i, f"row term {terms[i]:.3f}", ha="left", va="center", fontsize=9)
    ax.set_xticks(range(prompts), [f"x{j}\n({starts[j]})" for j in range(prompts)], fontsize=8)
    ax.set_yticks(range(rows), [f"z{i} (map {own[i]})" for i in range(rows)], fontsize=8)
    ax.set_xlabel("prompt x_j scoring the reasoning (its start cell)")
    ax.set_ylabel("reasoning z_i")
    fig.colorbar(image, ax=ax, fraction=0.04, pad=0.28, label="log p(z_i | x_j), per-token mean")
    ax.set_title(
        f"MI {whole['mi']:.3f} nats (at most log {prompts} = {math.log(prompts):.3f}), "
        f"H(Z|X) {whole['conditional_entropy']:.3f}\n"
        f"retrieval {whole['retrieval_accuracy']:.2f} (chance {whole['chance']:.2f}); "
        f"{twins['retrieval_accuracy']:.2f} counting a twin start cell as correct",
        fontsize=9,
    )
    ax.text(0.0, -0.3, "red box: own prompt; *: best-scoring prompt (ties to the first)", transform=ax.transAxes,
            fontsize=8)  # fmt: skip
    fig.tight_layout()
    return fig
