"""Checks of `exercises/grpo.py` (chapter 00) against hand values from GRPO's equations and `course_lib.algos.grpo`."""

from __future__ import annotations

import math

import torch

from course_lib.algos import grpo
from exercises.checks.common import (
    Exercise,
    ExerciseFailure,
    expect_close,
    expect_tensor_with_grad,
    generator,
    reference,
    value_and_gradient,
)

# -- grpo.group_advantages -----------------------------------------------------------------------------------------


def library_group_advantages(rewards, group_ids, scale_by_std=True, eps=1e-6):
    return grpo.group_advantages(rewards, group_ids, scale_by_std, eps)


def _advantages(fn, rewards, ids, **kwargs):
    return fn(torch.tensor(rewards), torch.tensor(ids), **kwargs)


def one_group_by_hand(fn):
    # mean 0.5; unbiased std sqrt((4 * 0.25) / 3) = sqrt(1/3); 0.5 / sqrt(1/3) = 0.8660
    a = 0.5 / math.sqrt(1 / 3)
    expect_close(
        _advantages(fn, [1.0, 0.0, 0.0, 1.0], [0, 0, 0, 0]),
        [a, -a, -a, a],
        "A_i = (r_i - mean) / std with the unbiased (n - 1) std, as torch.std: rewards [1, 0, 0, 1] have mean 0.5 "
        "and std sqrt(1/3), so A = ±0.8660 (±1.0 would be the population std, n in the denominator)",
    )


def groups_by_id(fn):
    # group 0: [1, 2, 3], mean 2, std 1; group 1: [10, 10, 40], mean 20, std sqrt(600 / 2) = 17.32
    s = math.sqrt(300.0)
    expect_close(
        _advantages(fn, [1.0, 10.0, 2.0, 10.0, 3.0, 40.0], [0, 1, 0, 1, 0, 1]),
        [-1.0, -10 / s, 0.0, -10 / s, 1.0, 20 / s],
        "each group is normalised on its own: the rows with the same group id, wherever they sit "
        "(ids [0, 1, 0, 1, 0, 1] are two interleaved groups)",
    )


def singleton_group(fn):
    h = 0.5 / math.sqrt(0.5)
    expect_close(
        _advantages(fn, [5.0, 0.0, 1.0], [7, 4, 4]),
        [0.0, -h, h],
        "advantages of a singleton group must be 0: a group of one has no baseline (torch.std of one value is NaN)",
    )


def all_equal_group(fn):
    h = 0.5 / math.sqrt(0.5)
    expect_close(
        _advantages(fn, [0.7] * 7 + [0.0, 1.0], [3] * 7 + [4, 4]),
        [0.0] * 7 + [-h, h],
        "a group whose rewards are all equal carries no signal: its advantages must be exactly 0 (test for equal "
        "rewards: the mean of seven 0.7s is off by float rounding, and that noise divided by eps is not 0)",
    )


def without_std(fn):
    expect_close(
        _advantages(fn, [0.0, 0.0, 3.0], [0, 0, 0], scale_by_std=False),
        [-1.0, -1.0, 2.0],
        "Dr. GRPO: with scale_by_std=False the advantage is r - mean(r), with no division",
    )
    s = math.sqrt(3.0)
    expect_close(
        _advantages(fn, [0.0, 0.0, 3.0], [0, 0, 0], scale_by_std=True),
        [-1 / s, -1 / s, 2 / s],
        "with scale_by_std=True (the default) divide by the group's unbiased std, sqrt(3) here",
    )


def random_groups(fn):
    for seed in range(3):
        g = generator(seed)
        sizes = torch.randint(1, 6, (6,), generator=g).tolist()
        ids = torch.tensor([100 + k for k, size in enumerate(sizes) for _ in range(size)])
        ids = ids[torch.randperm(len(ids), generator=g)]
        rewards = torch.randn(len(ids), generator=g)
        expect_close(
            fn(rewards, ids),
            reference(f"grpo.group_advantages/seed {seed}", library_group_advantages, rewards, ids),
            f"on seeded random groups (seed {seed}, sizes {sizes}) your advantages differ from the library's",
        )


# -- grpo.clipped_surrogate_loss -----------------------------------------------------------------------------------


def library_clipped_surrogate_loss(logprobs, old_logprobs, advantages, loss_mask, clip_low=0.2, clip_high=0.2):
    loss, _ = grpo.clipped_surrogate_loss(logprobs, old_logprobs, advantages, loss_mask, clip_low, clip_high)
    return loss


def _tokens(ratios: list[list[float]]) -> tuple[torch.Tensor, torch.Tensor]:
    """logprobs (requiring grad) and old log-probs whose ratios are `ratios`."""
    logprobs = torch.tensor([[math.log(r) for r in row] for row in ratios], dtype=torch.float64, requires_grad=True)
    return logprobs, torch.zeros_like(logprobs)


def _loss(fn, ratios, advantages, mask, **kwargs):
    logprobs, old = _tokens(ratios)
    adv = torch.tensor(advantages, dtype=torch.float64)
    loss = fn(logprobs, old, adv, torch.tensor(mask, dtype=torch.float64), **kwargs)
    return expect_tensor_with_grad(loss, "the loss"), logprobs


def on_policy_token_mean(fn):
    loss, _ = _loss(fn, [[1.0] * 3, [1.0] * 3], [1.0, -2.0], [[1, 1, 1], [1, 0, 0]])
    expect_close(
        loss,
        -0.25,
        "at ratio 1 the loss is minus the token-mean of the advantages over the response tokens: "
        "(1 + 1 + 1 - 2) / 4 = 0.25, so L = -0.25 (averaging each sequence first gives +0.5: that is the original "
        "GRPO's mean, not the token-mean)",
    )


def mask_only(fn):
    loss, _ = _loss(fn, [[1.0, 1.0, 0.5, 0.5]], [1.0], [[1, 1, 0, 0]])
    expect_close(
        loss,
        -1.0,
        "the loss must only average over response tokens (mask == 1): the two masked tokens, of ratio 0.5, must "
        "count neither in the sum nor in the number of tokens",
    )


REGIONS = [  # advantage, ratio, loss at clip 0.2 / 0.2, why
    (1.0, 1.5, -1.2, "A > 0, ratio 1.5: the ratio is clipped at 1 + clip_high = 1.2, so the loss is -1.2"),
    (1.0, 0.5, -0.5, "A > 0, ratio 0.5: min keeps the unclipped 0.5 (the pessimistic bound), so the loss is -0.5"),
    (-1.0, 1.5, 1.5, "A < 0, ratio 1.5: min keeps the unclipped -1.5 (no upper clip helps it), so the loss is 1.5"),
    (-1.0, 0.5, 0.8, "A < 0, ratio 0.5: the ratio is clipped at 1 - clip_low = 0.8, so the loss is 0.8"),
]


def clip_regions(fn):
    for advantage, ratio, expected, why in REGIONS:
        loss, _ = _loss(fn, [[ratio]], [advantage], [[1]])
        expect_close(loss, expected, f"{why}: L = -min(rho A, clip(rho, 1 - clip_low, 1 + clip_high) A)")


def clip_higher(fn):
    cases = [
        (1.0, 1.5, -1.28, "A > 0, ratio 1.5 at clip_high 0.28: clipped at 1 + clip_high = 1.28"),
        (-1.0, 0.5, 0.8, "A < 0, ratio 0.5 at clip_low 0.2: clipped at 1 - clip_low = 0.8"),
        (1.0, 1.25, -1.25, "A > 0, ratio 1.25 lies inside [0.8, 1.28]: not clipped"),
    ]
    for advantage, ratio, expected, why in cases:
        loss, _ = _loss(fn, [[ratio]], [advantage], [[1]], clip_low=0.2, clip_high=0.28)
        expect_close(loss, expected, f"{why} (clip_high bounds the ratio from above, clip_low from below)")


def gradient_by_hand(fn):
    loss, logprobs = _loss(fn, [[1.0, 1.5]], [2.0], [[1, 1]])
    loss.backward()
    expect_close(
        logprobs.grad,
        [-1.0, 0.0],
        "the gradient flows through unclipped tokens only: with A = 2 and ratios [1, 1.5], dL/dlogprobs = "
        "[-A * 1 / 2, 0] = [-1, 0] (the second token is clipped at 1.2, a constant)",
    )


def empty_mask(fn):
    loss, _ = _loss(fn, [[1.0, 1.0]], [1.0], [[0, 0]])
    expect_close(loss, 0.0, "a batch with no response token gives a loss of 0, not NaN: divide by max(count, 1)")


def random_batches(fn):
    for seed in range(3):
        g = generator(seed)
        old = torch.randn(3, 5, generator=g, dtype=torch.float64) - 2.0
        shift = 0.3 * torch.randn(3, 5, generator=g, dtype=torch.float64)
        advantages = torch.randn(3, generator=g, dtype=torch.float64)
        mask = (torch.rand(3, 5, generator=g) < 0.7).double()
        mask[0, 0] = 1.0
        batch = ("the loss", old, shift, advantages, mask)
        grads = [
            value_and_gradient(fn, *batch),
            reference(
                f"grpo.clipped_surrogate_loss/seed {seed}", value_and_gradient, library_clipped_surrogate_loss, *batch
            ),
        ]
        why = f"on a seeded random batch (seed {seed}, clip 0.2 / 0.28) your loss differs from the library's"
        expect_close(grads[0][0], grads[1][0], why)
        if grads[0][1] is None:
            raise ExerciseFailure("the loss has no gradient with respect to logprobs")
        expect_close(grads[0][1], grads[1][1], why.replace("loss differs", "gradient dL/dlogprobs differs"))


EXERCISES = [
    Exercise(
        "grpo.group_advantages",
        "00",
        "course_lib/algos/grpo.py",
        library_group_advantages,
        (
            ("one group by hand", one_group_by_hand),
            ("groups by id", groups_by_id),
            ("singleton group", singleton_group),
            ("all-equal group", all_equal_group),
            ("scale_by_std off", without_std),
            ("random groups", random_groups),
        ),
    ),
    Exercise(
        "grpo.clipped_surrogate_loss",
        "00",
        "course_lib/algos/grpo.py",
        library_clipped_surrogate_loss,
        (
            ("response tokens only", mask_only),
            ("on-policy token-mean", on_policy_token_mean),
            ("clip regions", clip_regions),
            ("clip-higher", clip_higher),
            ("gradient by hand", gradient_by_hand),
            ("empty mask", empty_mask),
            ("random batches", random_batches),
        ),
    ),
]
