"""Training runs a researcher can trust and continue: configs refuse bad settings on construction, `train_grpo`
reports each finished iteration to a callback, and an interrupted run resumes bit for bit from its checkpoint."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from course_lib.algos.filters import FilterConfig
from course_lib.train import GiGPOConfig, GRPOConfig, SFTConfig
from course_lib.tree_rollout import TreeConfig


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("rollout_mode", "steps", "'trajectory', 'step'"),
        ("aggregation", "token_mean", "'token-mean', 'seq-mean-token-mean', 'seq-mean-token-sum'"),
        ("anchor_source", "obs", "'observation', 'state'"),
        ("entropy_scope", "answer", "'policy', 'reasoning'"),
        ("entropy_rows", "low", "'all', 'zero_variance'"),
    ],
)
def test_an_unknown_mode_is_refused_naming_the_allowed_values(field, value, allowed):
    with pytest.raises(ValueError) as error:
        GRPOConfig(**{field: value})
    assert str(error.value) == f"GRPOConfig.{field} must be one of {allowed}; got {value!r}"


def test_nested_modes_are_checked_too():
    with pytest.raises(ValueError, match=r"GiGPOConfig.episode_baseline must be one of 'pooled', 'trajectory'"):
        GiGPOConfig(episode_baseline="pool")
    with pytest.raises(ValueError, match="TreeConfig.rule must be one of 'arpo', 'aepo'; got 'ARPO'"):
        GRPOConfig(tree=TreeConfig(rule="ARPO"))
    with pytest.raises(ValueError, match="TreeConfig.monitor_units must be one of 'normalised', 'nats'"):
        GRPOConfig(tree=TreeConfig(monitor_units="normalized"))
    with pytest.raises(ValueError, match="FilterConfig.mode must be one of 'linear', 'softmax'; got 'soft'"):
        GRPOConfig(filter=FilterConfig(mode="soft"))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: GRPOConfig(group_size=0), "GRPOConfig.group_size must be >= 1; got 0"),
        (lambda: GRPOConfig(prompts_per_iteration=-2), "GRPOConfig.prompts_per_iteration must be >= 1; got -2"),
        (lambda: GRPOConfig(iterations=-1), "GRPOConfig.iterations must be >= 0; got -1"),
        (lambda: GRPOConfig(learning_rate=0.0), "GRPOConfig.learning_rate must be > 0.0; got 0.0"),
        (lambda: GRPOConfig(learning_rate=-1e-4), "GRPOConfig.learning_rate must be > 0.0; got -0.0001"),
        (lambda: GRPOConfig(eval_every=0), "GRPOConfig.eval_every must be >= 1; got 0"),
        (lambda: GRPOConfig(updates_per_batch=0), "GRPOConfig.updates_per_batch must be >= 1; got 0"),
        (lambda: GRPOConfig(history_window=-1), "GRPOConfig.history_window must be >= 0; got -1"),
        (lambda: GRPOConfig(clip_low=1.5), "GRPOConfig.clip_low must lie in [0.0, 1.0]; got 1.5"),
        (lambda: GRPOConfig(max_grad_norm=0.0), "GRPOConfig.max_grad_norm must be > 0.0; got 0.0"),
        (lambda: GRPOConfig(filter=FilterConfig(top_p=0.0)), "FilterConfig.top_p must lie in (0.0, 1.0]; got 0.0"),
        (lambda: GRPOConfig(tree=TreeConfig(global_samples=0)), "TreeConfig.global_samples must be >= 1; got 0"),
        (lambda: GiGPOConfig(gamma=1.2), "GiGPOConfig.gamma must lie in [0.0, 1.0]; got 1.2"),
        (lambda: SFTConfig(batch_size=0), "SFTConfig.batch_size must be >= 1; got 0"),
        (lambda: SFTConfig(steps=-5), "SFTConfig.steps must be >= 0; got -5"),
        (lambda: SFTConfig(learning_rate=0.0), "SFTConfig.learning_rate must be > 0.0; got 0.0"),
        (lambda: SFTConfig(warmup_steps=0), "SFTConfig.warmup_steps must be >= 1; got 0"),
    ],
)
def test_impossible_sizes_and_rates_are_refused(make, message):
    with pytest.raises(ValueError) as error:
        make()
    assert str(error.value) == message


def test_replace_validates_and_the_boundaries_are_allowed():
    """`dataclasses.replace` builds a new config, so it is checked as well; the edge values chapters use pass."""
    with pytest.raises(ValueError, match="rollout_mode"):
        dataclasses.replace(GRPOConfig(), rollout_mode="Step")
    edge = GRPOConfig(iterations=0, group_size=1, history_window=0, clip_low=0.0, invalid_penalty=0.0, kl_coef=0.0)
    assert edge.iterations == 0 and edge.group_size == 1
    assert GiGPOConfig(gamma=1.0, episode_baseline="trajectory").gamma == 1.0
    assert SFTConfig(steps=0, warmup_steps=1).steps == 0
    assert GRPOConfig(advantage="registered_later").advantage == "registered_later", "seams resolve at train time"


def test_train_grpo_checks_a_config_changed_in_place_and_its_seams_before_any_work(warm_model, tokenizer):
    from course_lib import envs
    from course_lib.rollout import SamplingConfig
    from course_lib.train import train_grpo

    evaluated = []
    config = GRPOConfig(iterations=1, prompts_per_iteration=1, group_size=2)
    config.rollout_mode = "steps"
    with pytest.raises(ValueError, match="rollout_mode must be one of 'trajectory', 'step'; got 'steps'"):
        train_grpo(warm_model, tokenizer, lambda: envs.make("tool_arithmetic"), SamplingConfig(), config, 0)
    config = GRPOConfig(iterations=1, prompts_per_iteration=1, group_size=2, advantage="gea")
    with pytest.raises(KeyError, match="unknown advantage 'gea'; registered: .*'gigpo', 'grpo'"):
        train_grpo(warm_model, tokenizer, lambda: envs.make("tool_arithmetic"), SamplingConfig(), config, 0,
                   evaluate=lambda m: evaluated.append(1) or {})  # fmt: skip
    assert evaluated == [], "refused before the first evaluation"


def test_on_iteration_sees_every_finished_record_in_order(warm_model, tokenizer):
    """Each record reaches the callback once it holds its update's metrics; the final evaluation's record too,
    and the stopping one when `stop` ends the run."""
    from course_lib import envs
    from course_lib.rollout import SamplingConfig
    from course_lib.train import train_grpo

    seen, weights_at_call = [], []
    first_weight = next(warm_model.parameters())

    def log(record):
        seen.append(record)
        weights_at_call.append(first_weight.detach().clone())

    config = GRPOConfig(iterations=3, prompts_per_iteration=2, group_size=2, eval_every=2)
    sampling = SamplingConfig(max_turn_tokens=8, max_total_tokens=40)
    history = train_grpo(warm_model, tokenizer, lambda: envs.make("tool_arithmetic"), sampling, config, 0,
                         evaluate=lambda m: {"probe": 1.0}, on_iteration=log)  # fmt: skip
    assert [r["iteration"] for r in seen] == [0, 1, 2, 3] and all(a is b for a, b in zip(seen, history, strict=True))
    assert all("loss" in r and "time_update" in r for r in seen[:3]), "called after the update, not before"
    assert seen[3] == {"iteration": 3, "eval_probe": 1.0}
    assert torch.equal(weights_at_call[-1], first_weight), "the last call sees the trained model"
    assert not torch.equal(weights_at_call[0], weights_at_call[1]), "each call follows its own update"
    stopped = []
    train_grpo(warm_model, tokenizer, lambda: envs.make("tool_arithmetic"), sampling, config, 0,
               evaluate=lambda m: {"probe": 1.0}, stop=lambda r: r["iteration"] == 2,
               on_iteration=stopped.append)  # fmt: skip
    assert [r["iteration"] for r in stopped] == [0, 1, 2] and "loss" not in stopped[-1]
