"""RAGEN-2's gradient terms per reward-variance bucket (course_lib.diagnostics)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from course_lib.diagnostics import reward_std_buckets, term_gradient_norms
from course_lib.engine.rollout import Trajectory, collate
from course_lib.models import build_model
from course_lib.tokenizer import build_tokenizer


def test_reward_std_buckets_by_hand():
    # groups 5 (std 0), 7 (rewards 0.5 and 0: std 0.354) and 9 (1 and 0: std 0.707), rows interleaved
    rewards = torch.tensor([1.0, 0.5, 1.0, 1.0, 0.0, 0.0])
    groups = torch.tensor([5, 7, 9, 5, 7, 9])
    assert reward_std_buckets(rewards, groups, [0.1, 0.5]).tolist() == [0, 1, 2, 0, 1, 2]
    assert reward_std_buckets(rewards, groups, [0.0]).tolist() == [1, 1, 1, 1, 1, 1]  # an edge is inclusive below
    assert reward_std_buckets(rewards, groups, [0.8]).tolist() == [0] * 6


@pytest.fixture(scope="module")
def model_and_batch():
    tokenizer = build_tokenizer([f"w{k}" for k in range(10)])
    torch.manual_seed(0)
    model = build_model(tokenizer, "micro", max_positions=16)
    w = [tokenizer.convert_tokens_to_ids(f"w{k}") for k in range(10)]
    rows = [
        Trajectory(env=None, token_ids=[w[0], w[1], w[2], w[3]], loss_mask=[0, 1, 1, 1], logprobs=[0.0] * 4,
                   entropies=[0.0] * 4, turn_ids=[-1, 0, 0, 0], rewards=[1.0], infos=[{}]),
        Trajectory(env=None, token_ids=[w[4], w[5], w[6]], loss_mask=[0, 1, 1], logprobs=[0.0] * 3,
                   entropies=[0.0] * 3, turn_ids=[-1, 0, 0], rewards=[0.0], infos=[{}]),
    ]  # fmt: skip
    return model, collate(rows, pad_id=0)


def test_term_gradient_norms(model_and_batch):
    model, batch = model_and_batch
    zero = term_gradient_norms(model, batch, torch.zeros(2))
    assert zero["task"] == 0.0 and zero["entropy"] > 0 and math.isnan(zero["kl"])
    out = term_gradient_norms(model, batch, torch.tensor([1.0, -1.0]), reference=copy.deepcopy(model))
    assert out["kl"] == pytest.approx(0.0, abs=1e-9)  # k3's gradient vanishes where the policies agree
    assert all(p.grad is None for p in model.parameters())  # nothing accumulated
    # the task term by hand: token-mean of -A log pi over the 5 policy tokens
    from course_lib.models import token_logprobs

    logprobs, _ = token_logprobs(model, batch.input_ids, batch.attention_mask)
    loss = (-(torch.tensor([1.0, -1.0])[:, None] * logprobs) * batch.loss_mask).sum() / batch.loss_mask.sum()
    grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    expected = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads if g is not None))
    assert out["task"] == pytest.approx(expected, rel=1e-6)
    assert term_gradient_norms(model, batch, torch.tensor([2.0, -2.0]))["task"] == pytest.approx(2 * expected, rel=1e-6)
    shifted = copy.deepcopy(model)
    with torch.no_grad():
        for p in shifted.parameters():
            p.add_(0.05 * torch.randn_like(p))
    assert term_gradient_norms(model, batch, torch.zeros(2), reference=shifted)["kl"] > 0


def test_token_logprobs_lives_in_models_and_the_old_path_still_works():
    from course_lib import models
    from course_lib.rl import train

    assert train.token_logprobs is models.token_logprobs
