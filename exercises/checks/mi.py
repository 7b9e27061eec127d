"""Checks of `exercises/mi.py` (chapter 10) against hand values of the cross-scoring MI and
`course_lib.diagnostics.mutual_information`."""

from __future__ import annotations

import math

import torch

from course_lib import diagnostics
from exercises.checks.common import Exercise, ExerciseFailure, expect_close, generator, reference


def library_cross_scoring(logp, prompt_index):
    out = diagnostics.mutual_information(logp, prompt_index)
    return {"mi": out["mi"], "retrieval_accuracy": out["retrieval_accuracy"]}


def _score(fn, logp, own) -> tuple[float, float]:
    out = fn(torch.as_tensor(logp, dtype=torch.float64), torch.as_tensor(own))
    if not isinstance(out, dict) or not {"mi", "retrieval_accuracy"} <= set(out):
        raise ExerciseFailure('return a dict with the keys "mi" and "retrieval_accuracy"')
    return float(out["mi"]), float(out["retrieval_accuracy"])


def independent_of_the_input(fn):
    per_row = [-2.0, -5.0, -1.0, -3.0, -4.0, -2.5, -6.0, -0.5]
    own = [0, 1, 2, 3, 0, 1, 2, 3]
    mi, accuracy = _score(fn, [[v] * 4 for v in per_row], own)
    expect_close(
        mi,
        0.0,
        "when log p(z_i | x_j) is the same under every prompt, z says nothing about x and the MI must be 0: "
        "MI = mean_i [logp[i, own] - logsumexp_j logp[i, j] + log P] (-log P = -1.3863 means the + log P, the 1/P "
        "of the marginal, is missing)",
    )
    expect_close(
        accuracy,
        0.25,
        "retrieval counts row i when argmax_j logp[i, j] is its own prompt, ties to the lowest j: with equal "
        "scores only the 2 rows of prompt 0 of 8 count",
    )


def identifies_its_prompt(fn):
    own = [0, 0, 1, 1, 2, 2, 3, 3]
    logp = torch.full((8, 4), -1e9, dtype=torch.float64)
    logp[torch.arange(8), torch.tensor(own)] = 0.0
    mi, accuracy = _score(fn, logp, own)
    expect_close(
        mi,
        math.log(4),
        "a reasoning certain under its own prompt and impossible under the others identifies its input: the MI is "
        "the most it can be, log P = log 4 = 1.3863",
    )
    expect_close(accuracy, 1.0, "every row's own prompt scores highest here: the retrieval accuracy is 1")


def long_sequences(fn):
    logp = torch.full((4, 4), -1010.0, dtype=torch.float64)
    logp.fill_diagonal_(-1000.0)
    mi, accuracy = _score(fn, logp, [0, 1, 2, 3])
    expect_close(
        mi,
        math.log(4) - math.log(1 + 3 * math.exp(-10)),
        "log-probabilities of whole sequences are large negative numbers: exp(-1000) underflows to 0, so compute "
        "log sum_j p(z_i | x_j) with torch.logsumexp (own prompt -1000, the others -1010)",
    )
    expect_close(accuracy, 1.0, "every row's own prompt scores highest (-1000 > -1010): the retrieval accuracy is 1")


def noisy_copy(fn):
    # x uniform over two prompts, z a copy of x flipped with probability 0.2: MI = log 2 - H(0.2), in exact proportion
    rows, own = [], []
    for prompt in (0, 1):
        for flipped in [False] * 8 + [True] * 2:
            z = 1 - prompt if flipped else prompt
            rows.append([math.log(0.8 if z == x else 0.2) for x in (0, 1)])
            own.append(prompt)
    mi, accuracy = _score(fn, rows, own)
    binary_entropy = -(0.8 * math.log(0.8) + 0.2 * math.log(0.2))
    expect_close(
        mi,
        math.log(2) - binary_entropy,
        "z a copy of x flipped with probability 0.2 (a binary symmetric channel): the estimate is exactly "
        "log 2 - H(0.2) = 0.1927 nats",
    )
    expect_close(accuracy, 0.8, "the 4 flipped rows of 20 score higher under the other prompt: accuracy 0.8")


def random_matrices(fn):
    for seed in range(3):
        g = generator(seed)
        logp = 2.0 * torch.randn(12, 4, generator=g, dtype=torch.float64) - 5.0
        own = torch.tensor([i % 4 for i in range(12)])[torch.randperm(12, generator=g)]
        want = reference(f"mi.cross_scoring/seed {seed}", library_cross_scoring, logp, own)
        mi, accuracy = _score(fn, logp, own)
        why = f"on a seeded random [12, 4] matrix (seed {seed}) your"
        expect_close(mi, want["mi"], f"{why} MI differs from the library's")
        expect_close(accuracy, want["retrieval_accuracy"], f"{why} retrieval accuracy differs from the library's")


EXERCISES = [
    Exercise(
        "mi.cross_scoring",
        "10",
        "course_lib/diagnostics/__init__.py",
        library_cross_scoring,
        (
            ("independent of the input", independent_of_the_input),
            ("identifies its prompt", identifies_its_prompt),
            ("long sequences", long_sequences),
            ("noisy copy", noisy_copy),
            ("random matrices", random_matrices),
        ),
    ),
]
