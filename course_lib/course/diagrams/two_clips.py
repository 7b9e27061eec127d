"""Chapter 11's diagram: PPO's hard clip against AEPO's entropy-balanced clip, as functions of the ratio.

AEPO (Dong et al. 2025, arXiv 2510.14545, Eq. 10) replaces the upper bound 1 + eps_high of PPO's clip by
(1 + eps_high) r / sg(r): the loss keeps the hard clip's value, but a positive-advantage token above the bound keeps
the gradient -(1 + eps_high) A grad log pi instead of 0. The diagram draws, for A = +1 and A = -1, each token's loss
and its gradient d loss / d log pi over the ratio r = pi / pi_old, both computed by `algos.aepo.balanced_clip_losses`
with autograd, and labels the chapter's worked example (the six tokens of its section 1) with the library's values.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from course_lib.algos import aepo
from course_lib.diagnostics.plots import legend_outside

PROBES: dict[float, tuple[float, ...]] = {1.0: (0.7, 1.1, 1.5), -1.0: (0.7, 1.1, 3.5)}
"""The worked example's tokens, advantage -> ratios: chapter 11's six tokens, one in each region of the clip."""
OFFSETS = {(1.0, 0.7): (8, 2), (1.0, 1.1): (8, -6), (1.0, 1.5): (10, 22),
           (-1.0, 0.7): (-12, 14), (-1.0, 1.1): (10, -4), (-1.0, 3.5): (-26, 14)}  # fmt: skip
"""Where each label sits relative to its token, in points (clear of the curves and of each other)."""


def clip_curves(
    advantage: float, ratios: Sequence[float], balanced: bool, clip_low: float = 0.2, clip_high: float = 0.2
) -> tuple[np.ndarray, np.ndarray]:
    """Per-token loss and d loss / d log pi (each `[len(ratios)]`) of tokens with `ratios` (pi_old = 1) and one
    `advantage`, under AEPO's balanced clip (`balanced`) or PPO's hard clip, both with dual clip."""
    logprobs = torch.log(torch.tensor([list(ratios)], dtype=torch.float64)).requires_grad_()
    advantages = torch.full_like(logprobs, advantage).detach()
    losses, _ = aepo.balanced_clip_losses(
        logprobs, torch.zeros_like(logprobs), advantages, clip_low, clip_high, balanced=balanced
    )
    losses.sum().backward()
    return losses.detach()[0].numpy(), logprobs.grad[0].numpy()


def worked_example(clip_low: float = 0.2, clip_high: float = 0.2) -> dict[tuple[float, float], dict[str, float]]:
    """`(advantage, ratio) -> {"loss", "hard", "balanced"}` for the tokens of `PROBES`: the loss (equal under both
    clips) and each clip's gradient d loss / d log pi, as the library computes them."""
    out = {}
    for advantage, ratios in PROBES.items():
        loss, hard = clip_curves(advantage, ratios, False, clip_low, clip_high)
        _, balanced = clip_curves(advantage, ratios, True, clip_low, clip_high)
        for i, ratio in enumerate(ratios):
            out[advantage, ratio] = {"loss": float(loss[i]), "hard": float(hard[i]), "balanced": float(balanced[i])}
    return out


def label(values: dict[str, float]) -> str:
    """A probe's gradient label: one number when both clips agree, both when they differ."""
    if np.isclose(values["hard"], values["balanced"]):
        return f"both {values['hard']:+.2f}"
    return f"PPO {values['hard']:+.2f}\nAEPO {values['balanced']:+.2f}"


def draw(clip_low: float = 0.2, clip_high: float = 0.2, dual_clip: float = aepo.DUAL_CLIP) -> Figure:
    """Two columns (A = +1, A = -1), two rows (the loss; its gradient d loss / d log pi), the hard clip solid and
    the balanced clip dashed, the clip bounds as grey lines, and the worked example's tokens labelled with their
    gradients. Each label's `gid` is `"grad <advantage> <ratio>"`, so a test can read it back."""
    import matplotlib.pyplot as plt

    grid = np.linspace(0.3, 4.0, 371)
    example = worked_example(clip_low, clip_high)
    fig, axes = plt.subplots(2, 2, figsize=(9.6, 6.0), sharex=True)
    for column, advantage in enumerate(PROBES):
        top, bottom = axes[0, column], axes[1, column]
        loss, hard = clip_curves(advantage, grid, False, clip_low, clip_high)
        _, balanced = clip_curves(advantage, grid, True, clip_low, clip_high)
        top.plot(grid, loss, color="black", label="loss (the same under both clips)")
        bottom.plot(grid, hard, color="C0", label="PPO's hard clip")
        bottom.plot(grid, balanced, color="C3", ls="--", label="AEPO's balanced clip")
        bounds = [1 - clip_low, 1 + clip_high] + ([dual_clip] if advantage < 0 else [])
        for ax in (top, bottom):
            for bound in bounds:
                ax.axvline(bound, color="grey", lw=0.7, ls=":")
            ax.grid(alpha=0.3)
        bottom.margins(y=0.18)
        for ratio in PROBES[advantage]:
            values = example[advantage, ratio]
            top.plot(ratio, values["loss"], "o", color="black", ms=4)
            bottom.plot(ratio, values["hard"], "o", color="C0", ms=5)
            bottom.plot(ratio, values["balanced"], "x", color="C3", ms=7)
            text = bottom.annotate(
                label(values), (ratio, values["balanced"]), xytext=OFFSETS[advantage, ratio],
                textcoords="offset points", fontsize=8,
            )  # fmt: skip
            text.set_gid(f"grad {advantage:+.0f} {ratio}")
        sign = "A = +1 (a good token)" if advantage > 0 else "A = -1 (a bad token)"
        top.set_title(f"{sign}: loss per token")
        bottom.set_title(f"{sign}: gradient per token")
        top.set_ylabel("loss")
        bottom.set_ylabel("d loss / d log pi")
        bottom.set_xlabel(
            "ratio r = pi / pi_old (grey: 1 - eps, 1 + eps" + (", dual clip 3)" if advantage < 0 else ")")
        )
    fig.suptitle("PPO's clip against AEPO's balanced clip: the same loss, a kept gradient above 1 + eps for A > 0")
    legend_outside(fig, columns=3)
    return fig
