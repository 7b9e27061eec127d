"""Chapter 07's diagram draws GiGPO's own numbers for the worked example, which are the hand-computed ones."""

import math

import matplotlib
import pytest

matplotlib.use("Agg")

from course_lib.course.diagrams import step_groups  # noqa: E402


def drawn(fig) -> dict[str, str]:
    return {text.get_gid(): text.get_text() for ax in fig.axes for text in ax.texts if text.get_gid()}


def test_labels_are_the_library_values():
    out = step_groups.advantages()
    texts = drawn(step_groups.figure())
    for row in range(len(step_groups.EXAMPLE.episode)):
        assert texts[f"step-{row}"] == step_groups.step_label(out.returns[row], out.step[row])
    assert texts["episode-0"] == step_groups.episode_label(0, out.episode[0])
    assert texts["episode-1"] == step_groups.episode_label(1, out.episode[2])


def test_the_example_by_hand():
    """gamma 0.9: returns 0.9, 1 for episode 0, zeros for episode 1; group A = (0.9, 0, 0), group B = (1, 0)."""
    out = step_groups.advantages()
    assert out.returns == pytest.approx([0.9, 1.0, 0.0, 0.0, 0.0])
    std_a = math.sqrt(((0.9 - 0.3) ** 2 + 2 * 0.3**2) / 2)  # unbiased, as torch.std
    assert out.step[0] == pytest.approx(0.6 / std_a, rel=1e-5)
    assert out.step[2] == out.step[3] == pytest.approx(-0.3 / std_a, rel=1e-5)
    assert out.step[1] == pytest.approx(1 / math.sqrt(2), rel=1e-5)
    assert out.step[4] == pytest.approx(-1 / math.sqrt(2), rel=1e-5)
    assert out.step_group_size == [3, 2, 3, 3, 2]
    texts = drawn(step_groups.figure())
    assert "+1.155" in texts["step-0"] and "-0.707" in texts["step-4"]


def test_a_group_without_repeats_draws_zero_step_advantages():
    example = step_groups.StepExample(episode=(0, 1), step=(0, 0), anchor=("A", "B"), reward=(1.0, 0.0))
    texts = drawn(step_groups.figure(example))
    assert "$A^S$ = +0.000" in texts["step-0"] and "$A^S$ = +0.000" in texts["step-1"]
