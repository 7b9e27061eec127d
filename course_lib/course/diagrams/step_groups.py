"""Chapter 07's algorithm diagram: GiGPO's step groups on a worked example (Feng et al. 2025, arXiv 2505.10978,
Eqs. 5-8).

Two episodes of one task start in the same state. Every step is a box at its episode's row, coloured by the state it
was taken from: boxes of one colour form one anchor-state group G^S(s) (Eq. 6). Under each box, the step's discounted
return R_t (Eq. 5) and its step advantage A^S (Eq. 7, normalised within its colour); left of each row, the episode
advantage A^E (Eq. 3, GRPO's, the same for every step of the episode). Every number is computed by
`course_lib.algos.gigpo.gigpo_advantages` on the example, so the diagram cannot show what the method would not
produce.
"""

from __future__ import annotations

from dataclasses import dataclass

from matplotlib.figure import Figure

from course_lib.algos.gigpo import GiGPOAdvantages, gigpo_advantages


@dataclass(frozen=True)
class StepExample:
    """Step rows of one episode group, one entry per step `[N]`: episode, step index, anchor (state before the
    action), reward; and the discount. The default is chapter 07's section-3 example: episode 0 goes A -> B -> goal
    (reward 1 at its second step), episode 1 wastes a step, A -> A -> B, and runs out of time."""

    episode: tuple[int, ...] = (0, 0, 1, 1, 1)
    step: tuple[int, ...] = (0, 1, 0, 1, 2)
    anchor: tuple[str, ...] = ("A", "B", "A", "A", "B")
    reward: tuple[float, ...] = (0.0, 1.0, 0.0, 0.0, 0.0)
    gamma: float = 0.9


EXAMPLE = StepExample()


def advantages(example: StepExample = EXAMPLE) -> GiGPOAdvantages:
    """GiGPO's per-row outputs on `example` (one episode group, every action valid, no invalid-action penalty)."""
    n = len(example.episode)
    return gigpo_advantages(
        list(example.reward), [True] * n, list(example.anchor), [0] * n, list(example.episode), list(example.step),
        gamma=example.gamma, invalid_penalty=0.0,
    )  # fmt: skip


def step_label(returns: float, step_advantage: float) -> str:
    """The text under a step's box: its return R_t and step advantage A^S."""
    return f"$R_t$ = {returns:.3f}\n$A^S$ = {step_advantage:+.3f}"


def episode_label(episode: int, episode_advantage: float) -> str:
    """The text left of an episode's row: its id and episode advantage A^E."""
    return f"episode {episode}\n$A^E$ = {episode_advantage:+.3f}"


def figure(example: StepExample = EXAMPLE) -> Figure:
    """The step groups of `example`: one row per episode, one box per step coloured by its anchor state, the
    library's R_t and A^S under each box, A^E per row, and the outcome after the last step. Texts carry gids
    (`step-<row>`, `episode-<id>`) so a test can read what was drawn."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch, Patch

    out = advantages(example)
    episodes = sorted(set(example.episode))
    states = sorted(set(example.anchor))
    colours = {state: plt.get_cmap("tab10")(i) for i, state in enumerate(states)}
    longest = max(example.step) + 1
    fig, ax = plt.subplots(figsize=(2.0 + 1.9 * (longest + 1), 1.0 + 1.7 * len(episodes)))
    for row, episode in enumerate(episodes):
        y = -1.7 * row
        rows = sorted((i for i, e in enumerate(example.episode) if e == episode), key=lambda i: example.step[i])
        first = rows[0]
        ax.text(-0.9, y, episode_label(episode, out.episode[first]), ha="right", va="center", fontsize=10,
                gid=f"episode-{episode}")  # fmt: skip
        for i in rows:
            x = 1.9 * example.step[i]
            box = FancyBboxPatch((x - 0.45, y - 0.3), 0.9, 0.6, boxstyle="round,pad=0.05",
                                 facecolor=colours[example.anchor[i]], alpha=0.35, edgecolor="black")  # fmt: skip
            ax.add_patch(box)
            ax.text(x, y, example.anchor[i], ha="center", va="center", fontsize=13, weight="bold")
            ax.text(x, y - 0.42, step_label(out.returns[i], out.step[i]), ha="center", va="top", fontsize=8.5,
                    gid=f"step-{i}")  # fmt: skip
            ax.annotate("", xy=(x + 1.4, y), xytext=(x + 0.52, y), arrowprops={"arrowstyle": "->"})
        last = rows[-1]
        end = "goal (reward 1)" if example.reward[last] > 0 else "time out (reward 0)"
        ax.text(1.9 * example.step[last] + 1.5, y, end, ha="left", va="center", fontsize=9, style="italic")
    handles = []
    for state in states:
        members = [i for i, anchor in enumerate(example.anchor) if anchor == state]
        handles.append(Patch(facecolor=colours[state], alpha=0.35, edgecolor="black",
                             label=f"step group of state {state}: {len(members)} steps"))  # fmt: skip
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=len(states), frameon=False)
    ax.set_xlim(-3.2, 1.9 * longest + 1.6)
    ax.set_ylim(-1.7 * (len(episodes) - 1) - 1.3, 0.6)
    ax.axis("off")
    ax.set_title(
        f"GiGPO step groups ($\\gamma$ = {example.gamma}): same colour = same state, compared with each other",
        fontsize=11,
    )
    fig.tight_layout()
    return fig
