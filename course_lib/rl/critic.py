"""A critic for PPO on agent trajectories: a tiny transformers model with a scalar head (chapters 09-10).

RAGEN's StarPO-PPO (arXiv 2504.20073) estimates advantages with GAE from a learned value function, gamma =
lam = 1 over the response's policy tokens, the episode's return on the last one (RAGEN v1's defaults; its
critic learns at ten times the actor's rate, 1e-5 against 1e-6). The critic here is a Llama-style model of
the policy's size with a one-label token-classification head (`LlamaForTokenClassification`): one value per
position. As in verl, the value of a policy token is the head's output at the position before it, the state
from which that token was chosen.

`Critic.advantages(batch, config)` is an advantage estimator for the RL loop (`seams.register("advantage",
name, critic.advantages)`): it computes the values of the batch with the current critic, GAE advantages and
returns over the policy tokens (`algos.ppo.masked_gae`), whitens the advantages over those tokens (verl's
`compute_gae_advantage_return`), then trains the critic towards the returns (`algos.ppo.value_loss`) for
`updates` steps on the same batch. The batch it sees is the one the batch filter kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import AutoModelForTokenClassification, LlamaConfig, PreTrainedModel

from course_lib.algos.ppo import masked_gae, value_loss
from course_lib.engine.rollout import RolloutBatch
from course_lib.models import MODEL_PRESETS


@dataclass
class CriticConfig:
    """The critic's own settings."""

    learning_rate: float = 1e-3
    """AdamW learning rate of the critic (RAGEN: ten times the actor's)."""
    gamma: float = 1.0
    """Discount over policy tokens (RAGEN v1: 1)."""
    lam: float = 1.0
    """GAE's lambda (RAGEN v1: 1, so an advantage is the return minus the value)."""
    updates: int = 1
    """Critic optimizer steps per batch."""
    clip_range: float | None = 0.5
    """Value clipping around the values the batch was scored with (verl's `cliprange_value` 0.5); None: off."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip of the critic's update."""
    whiten: bool = True
    """Standardise the advantages over the batch's policy tokens (verl's GAE does)."""


def build_critic(tokenizer, preset: str = "tiny", max_positions: int = 256) -> PreTrainedModel:
    """A freshly initialised Llama-style model with a one-label token head, sized by `MODEL_PRESETS[preset]`."""
    if preset not in MODEL_PRESETS:
        raise KeyError(f"unknown model preset {preset!r}; choose from {sorted(MODEL_PRESETS)}")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=max_positions,
        num_labels=1,
        classifier_dropout=0.0,  # a value head without dropout, as verl's critics (the default would be 0.1)
        pad_token_id=tokenizer.pad_token_id,
        **MODEL_PRESETS[preset],
    )
    return AutoModelForTokenClassification.from_config(config).eval()


def token_values(critic: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, T] values aligned with the tokens: token t's value is the head's output at position t - 1 (0 at t = 0)."""
    heads = critic(input_ids=input_ids, attention_mask=attention_mask).logits[..., 0].float()
    return torch.cat([torch.zeros_like(heads[:, :1]), heads[:, :-1]], dim=1)


def terminal_rewards(batch: RolloutBatch) -> torch.Tensor:
    """[B, T]: each row's episode reward on its last policy token, 0 elsewhere (RAGEN's `use_turn_scores` off)."""
    rewards = torch.zeros_like(batch.loss_mask, dtype=torch.float)
    positions = torch.arange(batch.loss_mask.shape[1], device=batch.loss_mask.device)
    last = torch.where(batch.loss_mask.bool(), positions, -1).max(dim=1).values
    rows = (last >= 0).nonzero().squeeze(-1)
    rewards[rows, last[rows]] = batch.rewards[rows].float()
    return rewards


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(values - mean) / sqrt(var + eps) over the mask's entries (unbiased variance, as verl); 0 off the mask."""
    weights = mask.float()
    count = weights.sum()
    if count < 2:
        return values * 0.0
    mean = (values * weights).sum() / count
    variance = (((values - mean) ** 2) * weights).sum() / (count - 1)
    return (values - mean) * torch.rsqrt(variance + eps) * weights


class Critic:
    """A value model, its optimizer and settings; `advantages` is an advantage estimator for the RL loop."""

    def __init__(self, model: torch.nn.Module, config: CriticConfig | None = None):
        self.model = model
        self.config = config or CriticConfig()
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=self.config.learning_rate, weight_decay=0.0)

    def advantages(self, batch: RolloutBatch, config=None) -> tuple[torch.Tensor, dict[str, float]]:
        """GAE advantages of `batch` ([B, T], 0 off the policy tokens), then the critic's update on it.

        Stats: `value_loss` (of the last update), `value_mean` (over policy tokens, before the update),
        `explained_variance` (1 - Var(returns - values) / Var(returns) over policy tokens) and `critic_grad_norm`.
        """
        settings, mask = self.config, batch.loss_mask
        self.model.eval()
        with torch.no_grad():
            values = token_values(self.model, batch.input_ids, batch.attention_mask) * mask
        advantages, returns = masked_gae(terminal_rewards(batch), values, mask, settings.gamma, settings.lam)
        keep = mask.bool()
        spread = returns[keep].var() if keep.sum() > 1 else torch.tensor(0.0)
        explained = 1.0 - float((returns - values)[keep].var() / spread) if spread > 0 else float("nan")
        stats = {"value_mean": float(values[keep].mean()) if keep.any() else 0.0, "explained_variance": explained}
        stats |= self.update(batch, returns, values)
        if settings.whiten:
            advantages = masked_whiten(advantages, mask)
        return advantages, stats

    def update(self, batch: RolloutBatch, returns: torch.Tensor, old_values: torch.Tensor) -> dict[str, float]:
        """`updates` optimizer steps of the value loss towards `returns` ([B, T]) on the batch's policy tokens."""
        settings = self.config
        self.model.train()
        loss, norm = torch.tensor(0.0), torch.tensor(0.0)
        for _ in range(settings.updates):
            values = token_values(self.model, batch.input_ids, batch.attention_mask)
            loss = value_loss(values, returns, batch.loss_mask, old_values, settings.clip_range)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), settings.max_grad_norm)
            self.optimizer.step()
        self.model.eval()
        return {"value_loss": loss.item(), "critic_grad_norm": float(norm)}
