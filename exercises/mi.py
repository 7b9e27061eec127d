"""Implement it (chapter 10): RAGEN-2's cross-scoring estimate of the mutual information between input and reasoning.

Fill in `cross_scoring`, then run `pytest exercises/test_mi.py`, or in notebook 10
`check("mi.cross_scoring", use="mine")`. The reference solution is
`course_lib/diagnostics/__init__.py::mutual_information` (its `mi` and `retrieval_accuracy` entries).
"""

from __future__ import annotations

import torch


def cross_scoring(logp: torch.Tensor, prompt_index: torch.Tensor) -> dict[str, float]:
    """Does the reasoning depend on the input? RAGEN-2's cross-scoring estimate of I(x; z) and its retrieval accuracy.

    RAGEN-2 (arXiv 2604.06268) detects template collapse, reasoning that reads the same whatever the input, by
    cross-scoring: each of Z sampled reasonings z_i is scored by teacher forcing under each of the batch's P
    prompts x_j, which gives logp[i, j] = log p(z_i | x_j). The estimate is its in-batch mutual information with
    the prompts uniform, in nats, written in notebook 10's section 1; the retrieval accuracy is the share of
    reasonings whose best-scoring prompt is their own.

    Args:
        logp: `[Z, P]` float, logp[i, j] = log p(z_i | x_j).
        prompt_index: `[Z]` integers in [0, P), the prompt that produced z_i.

    Returns:
        `{"mi": float, "retrieval_accuracy": float}`.

    Contract:
        - "mi" lies between 0 (every prompt scores z_i alike: z ignores x) and log P (z_i is likely only under its
          own prompt);
        - it stays finite for sequence log-probabilities such as -1000 (ordinary for whole sequences);
        - the best-scoring prompt breaks ties to the lowest j (as `torch.argmax`): a row that scores the same under
          every prompt counts as retrieved only if its own prompt is prompt 0.
    """
    raise NotImplementedError("mi.cross_scoring: implement me (see the docstring)")
