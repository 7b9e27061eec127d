"""Implement it (chapter 00): the policy update of one GRPO iteration, from the library's parts.

Fill in `grpo_update`, then run `pytest exercises/test_loop.py`, or in notebook 00
`check("loop.grpo_update", use="mine")`. Chapter 00's section "One GRPO iteration, by hand" writes one iteration
with one update; this is the general update the loop runs. The reference solution is the update of
`course_lib/rl/train.py` (`policy_iteration`, with the `grpo` advantage and the `clipped` policy loss).
"""

from __future__ import annotations

import torch


def grpo_update(
    model: torch.nn.Module,
    rows: list,
    pad_id: int,
    config,
    optimizer: torch.optim.Optimizer,
    temperature: float = 1.0,
) -> float:
    """Update `model` on one sampled batch as GRPO does: the update half of a policy iteration.

    DeepSeekMath (Shao et al. 2024, arXiv 2402.03300), Eq. 3 (the GRPO objective, here without its KL term) with
    the outcome-supervision advantage of its section 4.1.2, maximised by `config.updates_per_batch` gradient steps
    on the same batch (PPO's reuse of a batch, arXiv 1707.06347, Eq. 7), each step's gradient norm clipped to
    `config.max_grad_norm`.

    Args:
        model: a causal LM (`model(input_ids=..., attention_mask=...).logits` is `[B, T, V]`) in eval mode.
        rows: the sampled episodes, `course_lib.engine.rollout.Trajectory` objects as `RolloutEngine.rollout`
            returns them (token ids, loss mask, the sampling policy's log-probs, reward, group id).
        pad_id: the tokenizer's pad id, to right-pad the rows into `[B, T]` tensors.
        config: a `course_lib.rl.train.GRPOConfig`; this exercise reads `scale_by_std`, `clip_low`, `clip_high`
            (token-mean aggregation), `updates_per_batch` and `max_grad_norm`.
        optimizer: built over the model's trainable parameters; call its `step()` once per update.
        temperature: the sampling temperature; the policy's log-probs are those of logits / temperature.

    Returns:
        The loss of the last update, a float.

    Contract:
        - the model's parameters after the call equal those of the library's update on the same batch;
        - pi_old in the ratio is the policy that sampled the rows (their recorded log-probs), at every update;
        - only the tokens the policy wrote (loss mask 1) enter the loss;
        - a group whose rewards are all equal contributes no gradient;
        - the model is back in eval mode on return.
    """
    raise NotImplementedError("loop.grpo_update: implement me (see the docstring)")
