"""Checks of `exercises/aepo.py` (chapter 11): the balanced clip's value and gradient in every region by hand, and
random batches against `course_lib.algos.aepo.balanced_clip_losses`."""

from __future__ import annotations

import math

import torch

from course_lib.algos import aepo
from exercises.checks.common import (
    Exercise,
    ExerciseFailure,
    expect_close,
    expect_tensor_with_grad,
    generator,
    reference,
    value_and_gradient,
)


def library_balanced_clip(logprobs, old_logprobs, advantages, clip_low=0.2, clip_high=0.2, dual_clip=3.0):
    losses, _ = aepo.balanced_clip_losses(logprobs, old_logprobs, advantages, clip_low, clip_high, dual_clip)
    return losses


REGIONS = [  # advantage, ratio, loss, d loss / d logprob, why (clip 0.2 / 0.2, dual clip 3)
    (1.0, 1.5, -1.2, -1.2, "A > 0 above the upper bound (ratio 1.5 > 1.2): the value is clipped to -A * 1.2"),
    (1.0, 1.1, -1.1, -1.1, "A > 0 inside the bounds (ratio 1.1): the plain -A r"),
    (1.0, 0.5, -0.5, -0.5, "A > 0 below the lower bound (ratio 0.5): the max keeps the unclipped -A r"),
    (-1.0, 0.5, 0.8, 0.0, "A < 0 below the lower bound (ratio 0.5): the lower clip stays hard, -A * 0.8"),
    (-1.0, 1.5, 1.5, 1.5, "A < 0 above the upper bound (ratio 1.5): the max keeps the unclipped -A r"),
    (-1.0, 4.0, 3.0, 0.0, "A < 0 beyond the dual clip (ratio 4 > 3): the loss is capped at -A * dual_clip = 3"),
]

GRADIENT_WHY = {
    0: "above the upper bound the gradient is KEPT, rescaled: -A (1 + clip_high) d log pi = -1.2 (write the bound "
    "as (1 + clip_high) * r / r.detach(): its value is 1.2, its gradient is not 0 as PPO's hard clip)",
    3: "below the lower bound the clip stays hard: no gradient (clip to the constant 1 - clip_low)",
    5: "beyond the dual clip the loss is the constant -A * dual_clip: no gradient",
}


def _region(fn, advantage, ratio, **kwargs):
    logprobs = torch.tensor([[math.log(ratio)]], dtype=torch.float64, requires_grad=True)
    losses = fn(logprobs, torch.zeros_like(logprobs), torch.tensor([advantage], dtype=torch.float64), **kwargs)
    losses = expect_tensor_with_grad(losses, "the losses")
    if losses.shape != logprobs.shape:
        raise ExerciseFailure(
            f"return per-token losses shaped like logprobs [B, T] = [1, 1], got {tuple(losses.shape)}"
        )
    losses.sum().backward()
    return losses, logprobs.grad


def values_per_region(fn):
    for advantage, ratio, value, _, why in REGIONS:
        losses, _ = _region(fn, advantage, ratio)
        expect_close(losses, [value], f"{why}: loss = max(-A r, -A clip(r)), then min with -A * 3 where A < 0")


def gradients_per_region(fn):
    for k, (advantage, ratio, _, gradient, why) in enumerate(REGIONS):
        _, grad = _region(fn, advantage, ratio)
        if grad is None:
            raise ExerciseFailure("the losses have no gradient with respect to logprobs")
        expect_close(grad, [gradient], f"{why}; {GRADIENT_WHY.get(k, 'the gradient is -A r d log pi')}")


def other_bounds(fn):
    losses, _ = _region(fn, 1.0, 1.5, clip_low=0.1, clip_high=0.28)
    expect_close(losses, [-1.28], "clip_high bounds the ratio from above: at clip_high 0.28 the value is -A * 1.28")
    losses, _ = _region(fn, -1.0, 0.5, clip_low=0.1, clip_high=0.28)
    expect_close(losses, [0.9], "clip_low bounds the ratio from below: at clip_low 0.1 the value is -A * 0.9")
    losses, _ = _region(fn, -2.0, 2.5, dual_clip=2.0)
    expect_close(losses, [4.0], "at dual_clip 2 a negative-advantage token's loss is capped at -A * 2 = 4")


def advantages_per_row(fn):
    logprobs = torch.log(torch.tensor([[1.0, 1.1], [1.0, 0.9]], dtype=torch.float64)).requires_grad_()
    losses = fn(logprobs, torch.zeros_like(logprobs), torch.tensor([2.0, -1.0], dtype=torch.float64))
    expect_close(
        expect_tensor_with_grad(losses, "the losses"),
        [-2.0, -2.2, 1.0, 0.9],
        "advantages [B] hold one value per row: broadcast each over its row's tokens (A = 2 on row 0, -1 on row 1)",
    )


def random_batches(fn):
    for seed in range(3):
        g = generator(seed)
        old = torch.randn(3, 6, generator=g, dtype=torch.float64) - 2.0
        shift = 0.5 * torch.randn(3, 6, generator=g, dtype=torch.float64)
        advantages = 2.0 * torch.randn(3, 6, generator=g, dtype=torch.float64)
        batch = ("the losses", old, shift, advantages)
        results = [
            value_and_gradient(fn, *batch),
            reference(f"aepo.balanced_clip/seed {seed}", value_and_gradient, library_balanced_clip, *batch),
        ]
        why = f"on a seeded random [3, 6] batch (seed {seed}, clip 0.2 / 0.28, per-token advantages) your"
        expect_close(results[0][0], results[1][0], f"{why} losses differ from the library's")
        expect_close(results[0][1], results[1][1], f"{why} gradients differ from the library's")


EXERCISES = [
    Exercise(
        "aepo.balanced_clip",
        "11",
        "course_lib/algos/aepo.py",
        library_balanced_clip,
        (
            ("values per region", values_per_region),
            ("gradients per region", gradients_per_region),
            ("other bounds", other_bounds),
            ("advantages per row", advantages_per_row),
            ("random batches", random_batches),
        ),
    ),
]
