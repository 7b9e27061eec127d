"""Chapter 11's diagram labels the worked example's gradients exactly as `algos.aepo` computes them."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from course_lib.algos import aepo  # noqa: E402
from course_lib.course.diagrams import two_clips  # noqa: E402


def library_gradient(advantage: float, ratio: float, balanced: bool) -> float:
    logp = torch.log(torch.tensor([[ratio]], dtype=torch.float64)).requires_grad_()
    losses, _ = aepo.balanced_clip_losses(
        logp, torch.zeros_like(logp), torch.tensor([[advantage]], dtype=torch.float64), balanced=balanced
    )
    losses.sum().backward()
    return float(logp.grad)


def test_drawn_labels_are_the_librarys_gradients():
    fig = two_clips.draw()
    labels = {t.get_gid(): t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid()}
    plt.close(fig)
    assert len(labels) == 6
    for advantage, ratios in two_clips.PROBES.items():
        for ratio in ratios:
            hard, balanced = library_gradient(advantage, ratio, False), library_gradient(advantage, ratio, True)
            expected = f"both {hard:+.2f}" if abs(hard - balanced) < 1e-9 else f"PPO {hard:+.2f}\nAEPO {balanced:+.2f}"
            assert labels[f"grad {advantage:+.0f} {ratio}"] == expected


def test_only_the_positive_token_above_the_bound_differs():
    example = two_clips.worked_example()
    differ = [key for key, v in example.items() if abs(v["hard"] - v["balanced"]) > 1e-12]
    assert differ == [(1.0, 1.5)]
    assert example[1.0, 1.5]["hard"] == 0.0
    assert example[1.0, 1.5]["balanced"] == pytest.approx(-1.2)  # -(1 + eps_high) A
    assert example[-1.0, 3.5]["loss"] == pytest.approx(aepo.DUAL_CLIP)  # the dual clip caps the loss at -A c
