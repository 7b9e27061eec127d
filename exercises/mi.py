"""Implement it (chapter 10): RAGEN-2's cross-scoring estimate of the mutual information between input and reasoning.

Fill in `cross_scoring`, then run `pytest exercises/test_mi.py`, or in notebook 10
`check("mi.cross_scoring", use="mine")`. The reference solution is
`course_lib/diagnostics/__init__.py::mutual_information` (its `mi` and `retrieval_accuracy` entries).
"""

from __future__ import annotations

import torch


def cross_scoring(logp: torch.Tensor, prompt_index: torch.Tensor) -> dict[str, float]:
    """Does the reasoning depend on the input? Score every reasoning under every prompt and see.

    RAGEN-2 (arXiv 2604.06268) detects template collapse, reasoning that reads the same whatever the input, by
    cross-scoring: each of Z sampled reasonings z_i is scored by teacher forcing under each of the batch's P
    prompts x_j, which gives logp[i, j] = log p(z_i | x_j). With x uniform over the P prompts,

        MI = mean_i [ log p(z_i | x_own(i)) - log( (1/P) sum_j p(z_i | x_j) ) ]
           = mean_i [ logp[i, own] - logsumexp_j logp[i, j] + log P ]

    an estimate of I(x; z) in nats, between 0 (z ignores x) and log P (z identifies its prompt). The retrieval
    accuracy is the share of rows i whose own prompt scores highest: argmax_j logp[i, j] == own(i).

    Args:
        logp: `[Z, P]` float, logp[i, j] = log p(z_i | x_j).
        prompt_index: `[Z]` integers in [0, P), the prompt that produced z_i.

    Returns:
        `{"mi": float, "retrieval_accuracy": float}`.

    Edge cases:
        - log-probabilities of whole sequences are large negative numbers (-1000 is ordinary): exp underflows to 0,
          so use `torch.logsumexp`, never log(sum(exp(...)));
        - the retrieval argmax breaks ties to the lowest j (as `torch.argmax`): a row that scores the same under
          every prompt counts as correct only if its own prompt is prompt 0.
    """
    raise NotImplementedError("mi.cross_scoring: implement me (see the docstring)")
