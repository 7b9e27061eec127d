"""Chapter 10's diagram draws the numbers `diagnostics.mutual_information` computes from its matrix."""

import math

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from course_lib.course.diagrams import cross_scoring  # noqa: E402
from course_lib.diagnostics import mutual_information  # noqa: E402


def drawn(fig) -> list[str]:
    ax = fig.axes[0]
    return [text.get_text() for text in ax.texts] + [ax.get_title()]


def test_row_terms_average_to_the_estimate():
    terms = cross_scoring.row_terms(cross_scoring.EXAMPLE_LOGP, cross_scoring.EXAMPLE_OWN)
    whole = mutual_information(cross_scoring.EXAMPLE_LOGP, cross_scoring.EXAMPLE_OWN)
    assert sum(terms) / len(terms) == pytest.approx(whole["mi"], abs=1e-12)
    # a row's term by hand: own score minus the log of the mean of exp over the row
    row = cross_scoring.EXAMPLE_LOGP[2]
    assert terms[2] == pytest.approx(float(row[2] - (torch.logsumexp(row, 0) - math.log(4))), abs=1e-12)


def test_labels_are_the_library_values():
    logp, own, starts = cross_scoring.EXAMPLE_LOGP, cross_scoring.EXAMPLE_OWN, cross_scoring.EXAMPLE_STARTS
    fig = cross_scoring.figure()
    texts = drawn(fig)
    title = fig.axes[0].get_title()
    whole = mutual_information(logp, own)
    twins = mutual_information(logp, own, prompt_keys=starts)
    assert f"MI {whole['mi']:.3f} nats" in title and f"H(Z|X) {whole['conditional_entropy']:.3f}" in title
    assert f"retrieval {whole['retrieval_accuracy']:.2f} (chance 0.25)" in title
    assert f"{twins['retrieval_accuracy']:.2f} counting a twin" in title
    # the twin maps tie, the tie goes to the first, so z1 is not retrieved unless twins count
    assert whole["retrieval_accuracy"] == 0.75 and twins["retrieval_accuracy"] == 1.0
    for i, term in enumerate(cross_scoring.row_terms(logp, own)):
        assert f"row term {term:.3f}" in texts
        best = int(logp[i].argmax())
        assert f"{float(logp[i, best]):.2f} *" in texts
    assert sum(t.endswith(" *") for t in texts) == logp.shape[0]


def test_a_reasoning_that_ignores_its_prompt_draws_zero():
    flat = torch.full((3, 3), -1.5, dtype=torch.float64)
    fig = cross_scoring.figure(flat, [0, 1, 2], ["a", "b", "c"])
    assert "MI 0.000 nats" in fig.axes[0].get_title()
    assert "row term 0.000" in drawn(fig)
