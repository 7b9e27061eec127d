"""The critic: values aligned with tokens, terminal rewards, whitening, GAE through the loop (course_lib.rl.critic)."""

from __future__ import annotations

import copy

import pytest
import torch

from course_lib import envs
from course_lib.engine.rollout import SamplingConfig, Trajectory, collate
from course_lib.rl import seams
from course_lib.rl.critic import Critic, CriticConfig, build_critic, masked_whiten, terminal_rewards, token_values
from course_lib.rl.train import GRPOConfig, train_grpo


def row(tokens: list[int], mask: list[int], reward: float, group: int = 0) -> Trajectory:
    turns = [-1 if not m and i < mask.index(1) else 0 for i, m in enumerate(mask)] if 1 in mask else [-1] * len(mask)
    return Trajectory(
        env=None, token_ids=tokens, loss_mask=mask, logprobs=[0.0] * len(tokens), entropies=[0.0] * len(tokens),
        turn_ids=turns, group_id=group, rewards=[reward], infos=[{}],
    )  # fmt: skip


@pytest.fixture
def batch():
    # row 0: prompt 2 tokens, 2 policy tokens, 1 tool token, 1 policy token; row 1: prompt, 2 policy tokens
    return collate([row([1, 5, 6, 7, 8, 9], [0, 0, 1, 1, 0, 1], 1.0), row([1, 6, 7], [0, 1, 1], -0.5, 1)], pad_id=0)


@pytest.fixture
def critic_model(tokenizer):
    torch.manual_seed(0)
    return build_critic(tokenizer, "micro", max_positions=32)


def test_token_values_are_the_head_one_position_earlier(critic_model, batch):
    heads = critic_model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[..., 0]
    values = token_values(critic_model, batch.input_ids, batch.attention_mask)
    assert values.shape == batch.input_ids.shape and (values[:, 0] == 0).all()
    assert torch.equal(values[:, 1:], heads[:, :-1])


def test_terminal_rewards_sit_on_the_last_policy_token(batch):
    rewards = terminal_rewards(batch)
    assert rewards.tolist() == [[0, 0, 0, 0, 0, 1.0], [0, 0, -0.5, 0, 0, 0]]
    empty = collate([row([1, 2], [0, 0], 3.0)], pad_id=0)
    assert terminal_rewards(empty).abs().sum() == 0


def test_masked_whiten_by_hand():
    values = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    assert masked_whiten(values, mask)[0].tolist() == pytest.approx([-1.0, 0.0, 1.0, 0.0], abs=1e-6)
    assert masked_whiten(values, torch.tensor([[1, 0, 0, 0]])).abs().sum() == 0  # one token has no spread


def test_advantages_are_return_minus_value_before_the_update(critic_model, batch):
    critic = Critic(critic_model, CriticConfig(whiten=False, clip_range=None))
    with torch.no_grad():
        values = token_values(critic_model, batch.input_ids, batch.attention_mask) * batch.loss_mask
    advantages, stats = critic.advantages(batch, GRPOConfig())
    returns = torch.tensor([1.0, -0.5])[:, None] * batch.loss_mask  # gamma = lam = 1: the episode's reward
    expected = (returns - values) * batch.loss_mask
    assert advantages.flatten().tolist() == pytest.approx(expected.flatten().tolist(), abs=1e-6)
    assert {"value_loss", "value_mean", "explained_variance", "critic_grad_norm"} <= set(stats)
    whitened, _ = Critic(copy.deepcopy(critic_model)).advantages(batch, GRPOConfig())
    policy = batch.loss_mask.bool()
    assert whitened[policy].mean().item() == pytest.approx(0.0, abs=1e-5) and (whitened[~policy] == 0).all()


def test_the_critic_learns_the_returns(critic_model, batch):
    critic = Critic(critic_model, CriticConfig(learning_rate=3e-3, updates=1))
    first = critic.advantages(batch)[1]["value_loss"]
    for _ in range(60):
        last = critic.advantages(batch)[1]
    assert last["value_loss"] < 0.05 * first and last["explained_variance"] > 0.9


def test_a_critic_drives_the_loop_as_an_estimator(monkeypatch, warm_model, tokenizer):
    critic = Critic(build_critic(tokenizer, "micro", max_positions=64))
    monkeypatch.setitem(seams.SEAMS["advantage"], "gae", critic.advantages)
    config = GRPOConfig(iterations=2, prompts_per_iteration=2, group_size=2, advantage="gae")
    sampling = SamplingConfig(max_turn_tokens=8, max_total_tokens=40)
    history = train_grpo(warm_model, tokenizer, lambda: envs.make("tool_arithmetic"), sampling, config, seed=0)
    assert all("value_loss" in record and torch.isfinite(torch.tensor(record["loss"])) for record in history[:2])
