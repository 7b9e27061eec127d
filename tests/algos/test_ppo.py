"""GAE and the value loss against hand-computed values (course_lib.algos.ppo)."""

from __future__ import annotations

import pytest
import torch

from course_lib.algos.ppo import gae, masked_gae, value_loss

REWARDS = torch.tensor([0.0, 0.0, 1.0])
VALUES = torch.tensor([0.5, 0.6, 0.8])


def test_gae_by_hand():
    # delta_2 = 1 - 0.8 = 0.2; delta_1 = 0.9*0.8 - 0.6 = 0.12; delta_0 = 0.9*0.6 - 0.5 = 0.04; gamma*lam = 0.72
    expected = [0.04 + 0.72 * (0.12 + 0.72 * 0.2), 0.12 + 0.72 * 0.2, 0.2]
    assert gae(REWARDS, VALUES, gamma=0.9, lam=0.8).tolist() == pytest.approx(expected)


def test_gae_limits():
    # lam = 1, gamma = 1: the return to go minus the value; lam = 0: the one-step TD errors
    assert gae(REWARDS, VALUES, 1.0, 1.0).tolist() == pytest.approx([0.5, 0.4, 0.2])
    assert gae(REWARDS, VALUES, 0.9, 0.0).tolist() == pytest.approx([0.04, 0.12, 0.2])
    # a bootstrap value after the last step: delta_2 = 1 + 0.9 * 2 - 0.8
    assert gae(REWARDS, VALUES, 0.9, 0.0, last_value=2.0)[-1].item() == pytest.approx(2.0)
    # no critic (values 0), gamma = lam = 1: every step's advantage is the episode's return to go
    assert gae(torch.tensor([1.0, -0.1, 10.0]), torch.zeros(3), 1.0, 1.0).tolist() == pytest.approx([10.9, 9.9, 10.0])


def test_gae_batches_rows_independently():
    rewards = torch.stack([REWARDS, torch.tensor([1.0, 0.0, 0.0])])
    values = torch.stack([VALUES, torch.tensor([0.3, 0.2, 0.1])])
    batched = gae(rewards, values, 0.9, 0.8, last_value=torch.tensor([0.0, 0.5]))
    assert batched[0].tolist() == pytest.approx(gae(rewards[0], values[0], 0.9, 0.8).tolist())
    assert batched[1].tolist() == pytest.approx(gae(rewards[1], values[1], 0.9, 0.8, last_value=0.5).tolist())


def test_gae_rejects_bad_input():
    with pytest.raises(ValueError):
        gae(REWARDS, VALUES[:2], 1.0, 1.0)
    with pytest.raises(ValueError):
        gae(REWARDS, VALUES, 1.1, 1.0)


def test_masked_gae_skips_environment_tokens():
    # policy tokens at 0, 1 and 4; the tool's tokens at 2-3 carry a nonsense value that must not be read
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    values = torch.tensor([[0.1, 0.2, 9.0, 9.0, 0.4], [1.0, 1.0, 1.0, 1.0, 1.0]])
    mask = torch.tensor([[1, 1, 0, 0, 1], [0, 0, 0, 0, 0]])
    advantages, returns = masked_gae(rewards, values, mask)
    assert advantages[0].tolist() == pytest.approx([0.9, 0.8, 0.0, 0.0, 0.6])
    assert returns[0].tolist() == pytest.approx([1.0, 1.0, 0.0, 0.0, 1.0])
    assert advantages[1].abs().sum() == 0 and returns[1].abs().sum() == 0  # a row without policy tokens
    # gamma < 1 discounts per policy token, not per position: token 1's next value is token 4's
    advantages, _ = masked_gae(rewards, values, mask, gamma=0.5, lam=1.0)
    assert advantages[0, 1].item() == pytest.approx(0.5 * 1.0 - 0.2)
    with pytest.raises(ValueError, match="masked token"):
        masked_gae(torch.tensor([[0.0, 1.0]]), torch.zeros(1, 2), torch.tensor([[1, 0]]))


def test_value_loss_by_hand_and_its_mask():
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    returns = torch.tensor([[0.0, 2.0], [3.0, 0.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    assert value_loss(values, returns, mask).item() == pytest.approx(0.5 * 1.0 / 3)  # the masked 16 is not read
    with pytest.raises(ValueError):
        value_loss(values, returns, torch.zeros(2, 2))


def test_value_clipping_takes_the_larger_error_and_stops_its_gradient():
    values = torch.tensor([[0.1]], requires_grad=True)
    old, target, mask = torch.tensor([[1.0]]), torch.tensor([[0.0]]), torch.tensor([[1]])
    loss = value_loss(values, target, mask, old_values=old, clip_range=0.2)
    assert loss.item() == pytest.approx(0.5 * 0.8**2)  # the old value moved by at most 0.2: 0.8, error 0.64
    loss.backward()
    assert values.grad.item() == 0.0  # the clipped branch is flat in V
    # inside the clip range both errors are equal and the gradient is (V - R)
    values = torch.tensor([[0.9]], requires_grad=True)
    value_loss(values, target, mask, old_values=old, clip_range=0.2).backward()
    assert values.grad.item() == pytest.approx(0.9)
    with pytest.raises(ValueError):
        value_loss(values, target, mask, clip_range=0.2)
