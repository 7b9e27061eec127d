"""Chapter 12's diagram: the capstone's loop, the seam each part plugs into, and a worked example at each seam.

The survey's combination (AEPO's tree and balanced clip, arXiv 2510.14545; RAGEN-2's SNR filter and mutual
information, arXiv 2604.06268) is four registered functions in `course_lib.rl.seams.SEAMS` plus a monitor outside the
loop (`diagnostics.MIStop`). The diagram reads which entry each seam runs from the `combined` arm's configuration
(chapter 12's `arm_config`) and computes, on a small batch of four groups of four episodes, what each seam does
with the library's own functions: the sampler's branch probability with the consecutive-branch penalty, the SNR
filter's kept groups, the GRPO advantages of a kept group, and the balanced clip's kept gradient on one token; the
MI stop's threshold is (1 - gate_drop) x the base's monitor MI recorded for seed 0 (`results/ch12.json`).
"""

from __future__ import annotations

import string

import torch
from matplotlib.figure import Figure

from course_lib.algos import aepo
from course_lib.algos.filters import group_reward_std, top_p_groups_by_reward_std
from course_lib.algos.grpo import group_advantages
from course_lib.course import recorded
from course_lib.rl import seams
from course_lib.rl.train import GRPOConfig

REWARDS = ((1.0, 1.0, 1.0, 1.0), (1.0, 0.0, 0.0, 0.0), (1.0, 1.0, 0.0, 0.0), (0.0, 0.0, 0.0, 0.0))
"""The worked batch: four groups (questions A-D) of four episodes' rewards."""
RATIO = 1.5
"""The worked token's ratio pi / pi_old: above the upper bound, where the hard clip drops its gradient."""
ROUNDS = (0, 3)
"""Consecutive rounds in which a question gained a rollout, for the sampler's branch probability."""


def worked_example(
    grpo: GRPOConfig, gate_drop: float, monitor_every: int, base_monitor_mi: float | None = None
) -> dict[str, object]:
    """What each seam of the `combined` arm (its loop configuration `grpo`, chapter 12's `arm_config(config,
    "combined")`) does on the worked batch, computed by the library: the seams' entries and functions, P(branch | dH =
    0) after each of `ROUNDS`, the groups' reward stds and the SNR filter's kept groups, the GRPO advantages of the
    first kept group, the worked token's loss and gradients under both clips, and the MI stop's threshold (`gate_drop`
    below the base's monitor MI, measured every `monitor_every` iterations)."""
    entries = {seam: getattr(grpo, seam) for seam in ("sampler", "batch_filter", "advantage", "policy_loss")}
    functions = {seam: seams.resolve(seam, name).__name__ for seam, name in entries.items()}
    tree = grpo.tree
    branch = {
        rounds: aepo.branch_probability(0.0, 0.0, rounds, tree.alpha, tree.beta, tree.penalty_slope)
        for rounds in ROUNDS
    }
    rewards = torch.tensor([r for group in REWARDS for r in group])
    groups = torch.tensor([g for g, group in enumerate(REWARDS) for _ in group])
    _, stds = group_reward_std(rewards, groups)
    f = grpo.filter
    keep = top_p_groups_by_reward_std(rewards, groups, f.top_p, f.mode, f.include_zero)
    kept = sorted({int(g) for g in groups[keep]})
    rows = groups == kept[0]
    advantages = group_advantages(rewards[rows], torch.zeros(int(rows.sum()), dtype=torch.long), grpo.scale_by_std)
    advantage = float(advantages.max())
    token = {}
    for balanced in (False, True):
        logp = torch.tensor([[RATIO]], dtype=torch.float64).log().requires_grad_()
        losses, _ = aepo.balanced_clip_losses(
            logp, torch.zeros_like(logp), torch.tensor([[advantage]], dtype=torch.float64), grpo.clip_low,
            grpo.clip_high, balanced=balanced,
        )  # fmt: skip
        losses.sum().backward()
        token["balanced" if balanced else "hard"] = float(logp.grad)
        token["loss"] = float(losses.detach())
    if base_monitor_mi is None:
        base_monitor_mi = recorded.load("ch12")["seeds"]["0"]["numbers"]["base_monitor_mi"]
    return {
        "entries": entries,
        "functions": functions,
        "branch": branch,
        "stds": [float(s) for s in stds],
        "kept": kept,
        "advantages": [float(a) for a in advantages],
        "token": token,
        "advantage": advantage,
        "threshold": (1 - gate_drop) * base_monitor_mi,
        "base_monitor_mi": base_monitor_mi,
        "gate_drop": gate_drop,
        "monitor_every": monitor_every,
    }


def box_texts(example: dict[str, object]) -> dict[str, str]:
    """The text of each box, by the box's name (which is also its label's `gid`)."""
    names = string.ascii_uppercase
    e, f = example["entries"], example["functions"]
    branch = ", ".join(f"l={rounds}: {p:.3f}" for rounds, p in example["branch"].items())
    stds = " ".join(f"{s:.2f}" for s in example["stds"])
    kept = ", ".join(names[g] for g in example["kept"])
    advantages = " ".join(f"{a:+.2f}" for a in example["advantages"])
    token = example["token"]
    kept_group = names[example["kept"][0]]
    lines = {
        "sampler": [f"sampler: '{e['sampler']}'", f"loop.{f['sampler']}", "", "AEPO's tree, penalty on",
                    "P(branch | dH=0)", branch],
        "batch_filter": [f"batch filter: '{e['batch_filter']}'", f"loop.{f['batch_filter']}", "",
                         "reward std of A-D", stds, f"keeps {kept}"],
        "advantage": [f"advantage: '{e['advantage']}'", f"loop.{f['advantage']}", "", f"GRPO in group {kept_group}",
                      advantages],
        "policy_loss": [f"policy loss: '{e['policy_loss']}'", f"loop.{f['policy_loss']}", "",
                        f"token A={example['advantage']:+.2f}, r={RATIO}", f"loss {token['loss']:+.3f}",
                        f"grad: hard {token['hard']:+.3f},", f"balanced {token['balanced']:+.3f}"],
        "monitor": [f"MI monitor (outside the loop): every {example['monitor_every']} iterations, MI of the first "
                    "action on 32 training questions;",
                    f"stop and roll back to the last policy that passed when MI < (1 - {example['gate_drop']}) x "
                    f"{example['base_monitor_mi']:.2f} = {example['threshold']:.2f} nats"],
    }  # fmt: skip
    return {name: "\n".join(text) for name, text in lines.items()}


def draw(grpo: GRPOConfig, gate_drop: float, monitor_every: int, base_monitor_mi: float | None = None) -> Figure:
    """The loop as boxes left to right (sampler, batch filter, advantage, policy loss, then the update), the MI
    monitor below it with its stop and rollback, each box holding its seam's entry and worked example
    (`worked_example`'s arguments)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    texts = box_texts(worked_example(grpo, gate_drop, monitor_every, base_monitor_mi))
    fig, ax = plt.subplots(figsize=(13, 5.2))
    ax.set(xlim=(0, 13), ylim=(0, 5.2))
    ax.axis("off")
    seams = ("sampler", "batch_filter", "advantage", "policy_loss")
    width, gap, top = 2.5, 0.45, 2.2
    for i, seam in enumerate(seams):
        x = 0.2 + i * (width + gap)
        ax.add_patch(FancyBboxPatch((x, top), width, 2.7, boxstyle="round,pad=0.05", fc="#e8f0fb", ec="C0"))
        ax.text(x + 0.1, top + 2.6, texts[seam], va="top", fontsize=8.5, family="monospace", gid=seam)
        end = x + width + gap - 0.05
        ax.add_patch(FancyArrowPatch((x + width + 0.05, top + 1.35), (end, top + 1.35), arrowstyle="-|>",
                                     mutation_scale=14))  # fmt: skip
    update = 0.2 + 4 * (width + gap)
    ax.add_patch(FancyBboxPatch((update, top + 0.8), 0.7, 1.1, boxstyle="round,pad=0.05", fc="#eeeeee", ec="grey"))
    ax.text(update + 0.35, top + 1.35, "4\nupdates", ha="center", va="center", fontsize=8.5)
    ax.add_patch(FancyBboxPatch((0.2, 0.25), 11.0, 1.1, boxstyle="round,pad=0.05", fc="#fbece8", ec="C3"))
    ax.text(0.3, 1.2, texts["monitor"], va="top", fontsize=8.5, family="monospace", gid="monitor")
    ax.add_patch(FancyArrowPatch((update + 0.35, top + 0.75), (update + 0.35, 1.4), arrowstyle="-|>",
                                 mutation_scale=14, color="C3", ls="--"))  # fmt: skip
    ax.add_patch(FancyArrowPatch((update + 0.35, 5.05), (0.5, 5.05), connectionstyle="arc3,rad=0.0",
                                 arrowstyle="-|>", mutation_scale=14, color="grey"))  # fmt: skip
    ax.text(6.5, 5.12, "next iteration", ha="center", fontsize=8, color="grey")
    ax.set_title("The capstone's loop: what each seam of the combined arm runs, on a batch of four groups", fontsize=11)
    return fig
