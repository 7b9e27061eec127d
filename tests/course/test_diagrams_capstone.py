"""Chapter 12's diagram shows what the combined arm's seams run and the worked batch's numbers the library computes."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from course_lib.algos.filters import top_p_groups_by_reward_std  # noqa: E402
from course_lib.algos.grpo import group_advantages  # noqa: E402
from course_lib.chapters import ch12_capstone as ch12  # noqa: E402
from course_lib.course.diagrams import capstone  # noqa: E402

CPU = ch12.preset("cpu")
COMBINED = (ch12.arm_config(CPU, "combined"), CPU.gate_drop, CPU.monitor_every)
"""What the notebook passes: the combined arm's loop configuration, the MI stop's drop and its interval."""


def drawn_text(fig) -> dict[str, str]:
    return {t.get_gid(): t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid()}


def test_boxes_name_the_combined_arms_seams_and_their_functions():
    fig = capstone.draw(*COMBINED, base_monitor_mi=2.5)
    text = drawn_text(fig)
    plt.close(fig)
    grpo = ch12.arm_config(ch12.preset("cpu"), "combined")
    expected = {"sampler": ("tree", "tree_groups"), "batch_filter": ("snr_top_p", "snr_top_p"),
                "advantage": ("grpo", "grpo"), "policy_loss": ("entropy_balanced", "entropy_balanced")}  # fmt: skip
    for seam, (entry, function) in expected.items():
        assert getattr(grpo, seam) == entry
        assert f"'{entry}'" in text[seam] and f"loop.{function}" in text[seam]
    assert "2.50 = 2.00 nats" in text["monitor"]  # (1 - 0.2) x 2.5


def test_worked_batch_labels_are_the_librarys_values():
    example = capstone.worked_example(*COMBINED, base_monitor_mi=2.5)
    rewards = torch.tensor([r for group in capstone.REWARDS for r in group])
    groups = torch.tensor([g for g, group in enumerate(capstone.REWARDS) for _ in group])
    keep = top_p_groups_by_reward_std(rewards, groups, 0.9, "linear", False)
    assert example["kept"] == sorted({int(g) for g in groups[keep]}) == [1, 2]  # the two groups with reward spread
    assert example["stds"] == pytest.approx([0.0, 0.5, 0.57735, 0.0], abs=1e-5)
    advantages = group_advantages(rewards[groups == 1], torch.zeros(4, dtype=torch.long))
    assert example["advantages"] == pytest.approx(advantages.tolist())
    assert example["token"]["hard"] == 0.0  # above the bound with A > 0: PPO drops the gradient
    assert example["token"]["balanced"] == pytest.approx(-1.2 * example["advantage"])
    assert example["branch"][0] == pytest.approx(0.5) and example["branch"][3] < example["branch"][0]
    text = capstone.box_texts(example)
    assert "keeps B, C" in text["batch_filter"] and "0.00 0.50 0.58 0.00" in text["batch_filter"]
    assert " ".join(f"{a:+.2f}" for a in advantages.tolist()) in text["advantage"]
    assert f"balanced {-1.2 * example['advantage']:+.3f}" in text["policy_loss"]
