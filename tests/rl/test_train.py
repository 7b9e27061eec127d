"""Supervised warm start and the GRPO loop on tiny models."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

from course_lib import envs
from course_lib.engine.rollout import SamplingConfig, collate
from course_lib.models import add_lora
from course_lib.rl import seams, train
from course_lib.rl.train import GRPOConfig, train_grpo
from course_lib.rl.warm_start import SFTConfig, supervised_warm_start
from course_lib.tokenizer import encode

SAMPLING = SamplingConfig(max_turn_tokens=8, max_total_tokens=40)
KEYS = {"success", "tool_use", "entropy", "reward", "loss", "grad_norm", "clip_fraction", "time_rollout", "time_update"}


def make_env():
    return envs.make("tool_arithmetic")


def grpo(model, tokenizer, seed=0, **overrides):
    config = GRPOConfig(iterations=2, prompts_per_iteration=2, group_size=4, **overrides)
    return train_grpo(model, tokenizer, make_env, SAMPLING, config, seed=seed)


def without_times(history):
    return [{k: v for k, v in record.items() if not k.startswith("time_")} for record in history]


def test_supervised_warm_start_reduces_loss(make_model, demonstrations, tokenizer):
    """Forty steps on demonstrations cut the masked next-token loss well below its start (ln V = 7.6)."""
    model = make_model()
    config = SFTConfig(steps=40, batch_size=16, learning_rate=3e-2, warmup_steps=5)
    generator = torch.Generator().manual_seed(0)
    history = supervised_warm_start(model, demonstrations, tokenizer.pad_token_id, config, generator)
    assert [h["step"] for h in history] == [0, 10, 20, 30, 39]
    assert history[0]["loss"] > 0.9 * math.log(len(tokenizer))
    assert history[-1]["loss"] < 0.5 * history[0]["loss"]
    assert not model.training


def test_train_grpo_runs_and_records_metrics(warm_model, tokenizer):
    """Two iterations of 2 prompts x 4 samples: one metrics record per iteration plus a final one."""
    before = copy.deepcopy(warm_model.state_dict())
    history = grpo(warm_model, tokenizer)
    assert [h["iteration"] for h in history] == [0, 1, 2]
    for record in history[:2]:
        assert KEYS <= record.keys()
        assert 0.0 <= record["success"] <= 1.0 and 0.0 <= record["tool_use"] <= 1.0
        assert record["entropy"] > 0 and record["time_rollout"] > 0 and record["time_update"] > 0
    assert any(h["reward_std"] > 0 for h in history[:2])  # there was signal to learn from...
    changed = any(not torch.equal(before[k], v) for k, v in warm_model.state_dict().items())
    assert changed  # ...and the weights moved


def test_train_grpo_is_deterministic(warm_model, tokenizer):
    """The same initial weights and seed give the same history (timings aside); another seed differs."""
    runs = [without_times(grpo(copy.deepcopy(warm_model), tokenizer, seed=s)) for s in (3, 3, 4)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_train_grpo_on_all_tokens(warm_model, tokenizer):
    """The mask_observations=False ablation trains on observation tokens too, and runs."""
    history = grpo(warm_model, tokenizer, mask_observations=False)
    assert all(math.isfinite(h["loss"]) for h in history[:2])


def _losses_masks(monkeypatch, model, tokenizer, mask_observations: bool):
    """Run one GRPO iteration, recording the trajectories it collated and the loss mask its loss received."""
    seen: dict = {}

    def recording_collate(trajectories, pad_id, extras=()):
        seen["trajectories"] = list(trajectories)
        return collate(trajectories, pad_id, extras)

    def recording_loss(logprobs, old_logprobs, advantages, loss_mask, config):
        seen["mask"] = loss_mask.detach().clone()
        return seams.clipped(logprobs, old_logprobs, advantages, loss_mask, config)

    monkeypatch.setattr(train, "collate", recording_collate)
    monkeypatch.setitem(seams.SEAMS["policy_loss"], "clipped", recording_loss)
    config = GRPOConfig(iterations=1, prompts_per_iteration=2, group_size=4, mask_observations=mask_observations)
    train_grpo(model, tokenizer, make_env, SAMPLING, config, seed=0)
    return seen["trajectories"], seen["mask"]


def test_loss_mask_with_and_without_observations(monkeypatch, warm_model, tokenizer):
    """Chapter 04's ablation (C4.3) rests on this: mask_observations=True trains exactly the sampled
    policy tokens; False also trains the tool/observation tokens, but never the prompt or the padding."""
    trajectories, masked = _losses_masks(monkeypatch, copy.deepcopy(warm_model), tokenizer, True)
    same, unmasked = _losses_masks(monkeypatch, copy.deepcopy(warm_model), tokenizer, False)
    assert [t.token_ids for t in same] == [t.token_ids for t in trajectories]  # same seed, same rollouts
    width = masked.shape[1]
    observation_tokens = 0
    for row, t in enumerate(trajectories):
        # the prompt is <bos> plus the reset text; nothing before the first action is ever trained
        prompt = 1 + len(encode(tokenizer, t.env.transcript.observations[0]))
        policy = t.loss_mask + [0] * (width - len(t.token_ids))
        everything_after_prompt = [0] * prompt + [1] * (len(t.token_ids) - prompt) + [0] * (width - len(t.token_ids))
        assert masked[row].tolist() == policy
        assert unmasked[row].tolist() == everything_after_prompt
        assert sum(t.loss_mask[:prompt]) == 0
        extra = [i for i, (m, u) in enumerate(zip(policy, everything_after_prompt, strict=True)) if u and not m]
        # the tokens only the ablation trains are the environment's replies, in order (the reply to the
        # last action is not appended once the episode ends, hence a prefix)
        replies = [i for obs in t.env.transcript.observations[1:] for i in encode(tokenizer, obs)]
        assert [t.token_ids[i] for i in extra] == replies[: len(extra)]
        observation_tokens += len(extra)
    assert observation_tokens > 0, "the rollouts must contain tool responses, or the ablation is untested"


def test_zero_advantages_leave_the_weights_unchanged(warm_model, tokenizer):
    """When every group's rewards are equal all advantages are 0, the GRPO loss has no gradient, and AdamW
    without weight decay must not move a single weight (no KL or entropy term in the default config)."""

    def constant_reward_env():
        env = make_env()
        original = env.step

        def step(action):
            obs, _, terminated, truncated, info = original(action)
            return obs, 0.0, terminated, truncated, info  # per step: totals equal whatever the turn count

        env.step = step
        return env

    before = copy.deepcopy(warm_model.state_dict())
    config = GRPOConfig(iterations=1, prompts_per_iteration=2, group_size=4)
    history = train_grpo(warm_model, tokenizer, constant_reward_env, SAMPLING, config, seed=0)
    assert history[0]["reward_std"] == 0.0
    assert all(torch.equal(before[k], v) for k, v in warm_model.state_dict().items())


def test_train_grpo_with_kl_on_lora(warm_model, tokenizer):
    """kl_coef > 0 with a LoRA model reports a k3 KL that starts at 0 (adapter is zero) and then grows."""
    model = add_lora(warm_model, rank=4)
    history = grpo(model, tokenizer, kl_coef=0.1, learning_rate=1e-2)
    assert history[0]["kl"] == 0.0
    assert history[1]["kl"] > 0.0


def test_train_grpo_tells_environments_the_iteration(warm_model, tokenizer):
    """Every training environment sees `training_step` = the current iteration when it is reset."""
    seen: list[int] = []

    def recording_env():
        env = make_env()
        original = env.reset

        def reset(seed=None, options=None):
            seen.append(env.training_step)
            return original(seed, options)

        env.reset = reset
        return env

    config = GRPOConfig(iterations=3, prompts_per_iteration=2, group_size=2)
    train_grpo(warm_model, tokenizer, recording_env, SAMPLING, config, seed=0)
    assert seen == [0] * 4 + [1] * 4 + [2] * 4


def test_reasoning_mask_by_hand():
    """1 on the policy tokens strictly between `<think>` and `</think>`; an open `<think>` runs to the turn's end."""
    from types import SimpleNamespace

    from course_lib.envs import frozen_lake
    from course_lib.tokenizer import build_tokenizer

    tok = build_tokenizer(frozen_lake.vocabulary())
    prompt = encode(tok, "you r1 c1")
    turn = encode(tok, "<think> you r1 c1 go down </think> <answer> down </answer>")
    observation = encode(tok, "you r2 c1")
    open_turn = encode(tok, "<think> go up")
    ids = prompt + turn + observation + open_turn
    loss_mask = [0] * len(prompt) + [1] * len(turn) + [0] * len(observation) + [1] * len(open_turn)
    batch = SimpleNamespace(input_ids=torch.tensor([ids]), loss_mask=torch.tensor([loss_mask], dtype=torch.float))
    expected = [0] * len(prompt) + [0, 1, 1, 1, 1, 1, 0, 0, 0, 0] + [0] * len(observation) + [0, 1, 1]
    assert train.reasoning_mask(batch, tok)[0].tolist() == expected


def test_entropy_scope_must_be_known(warm_model, tokenizer):
    import pytest

    with pytest.raises(ValueError, match="entropy_scope"):
        grpo(warm_model, tokenizer, entropy_coef=0.01, entropy_scope="answer")


def test_zero_variance_rows_by_hand():
    """Rows of groups whose rewards are all equal, whole groups, interleaved ids; one-row groups count as flat."""
    from types import SimpleNamespace

    batch = SimpleNamespace(
        rewards=torch.tensor([1.0, 0.0, 1.0, 0.5, 1.0, 0.5, 0.0]),
        group_ids=torch.tensor([7, 3, 7, 5, 3, 5, 9]),
        input_ids=torch.zeros(7, 2, dtype=torch.long),
    )
    assert train.zero_variance_rows(batch).tolist() == [True, False, True, True, False, True, True]


def test_entropy_rows_must_be_known(warm_model, tokenizer):
    import pytest

    with pytest.raises(ValueError, match="entropy_rows"):
        grpo(warm_model, tokenizer, entropy_coef=0.01, entropy_rows="low")


def test_train_grpo_stops_where_its_stop_says(warm_model, tokenizer):
    """`stop` sees each evaluated record before that iteration's update; True makes that record the last."""
    seen = []

    def stop(record):
        seen.append(record["iteration"])
        return record["iteration"] == 2

    config = GRPOConfig(iterations=4, prompts_per_iteration=2, group_size=4, eval_every=2)
    history = train_grpo(copy.deepcopy(warm_model), tokenizer, make_env, SAMPLING, config, 0,
                         evaluate=lambda m: {"probe": 1.0}, stop=stop)  # fmt: skip
    assert seen == [0, 2] and [h["iteration"] for h in history] == [0, 1, 2]
    assert "loss" not in history[-1] and history[-1]["eval_probe"] == 1.0, "no update after the stop"
    full = train_grpo(copy.deepcopy(warm_model), tokenizer, make_env, SAMPLING, config, 0, stop=lambda r: True)
    assert [h["iteration"] for h in full] == [0, 1, 2, 3, 4], "without an evaluation, stop is never asked"
    asked = []
    train_grpo(copy.deepcopy(warm_model), tokenizer, make_env, SAMPLING, config, 0, evaluate=lambda m: {},
               stop=lambda r: asked.append(r["iteration"]) or False)  # fmt: skip
    assert asked == [0, 2, 4], "the final evaluation is asked too (a stop there means: roll back)"


def test_the_updates_own_old_log_probs_make_the_first_ratio_exactly_one(warm_model, tokenizer):
    """Sampling in bf16 and updating under bf16 autocast, `old_logprobs="auto"` takes the ratio's denominator from the
    update's own forward: the first update's ratio is exactly 1 (no clip), the second's is not (the step moved the
    policy). Taken from the bf16 sampler instead (the pitfall), the first ratio is already off 1."""
    sampling = dataclasses.replace(SAMPLING, precision="bf16")
    config = GRPOConfig(iterations=1, prompts_per_iteration=2, group_size=4, autocast="bf16", updates_per_batch=2,
                        learning_rate=5e-2)  # fmt: skip
    assert train.recomputes_old_logprobs(config, "bf16")
    own = train_grpo(copy.deepcopy(warm_model), tokenizer, make_env, sampling, config, seed=0)[0]
    assert own["clip_fraction_update_0"] == 0.0 and own["clip_fraction_update_1"] > 0
    first = dataclasses.replace(config, updates_per_batch=1)
    assert train_grpo(copy.deepcopy(warm_model), tokenizer, make_env, sampling, first, seed=0)[0]["ratio_mean"] == 1.0
    stale = dataclasses.replace(first, old_logprobs="sampler")
    ratio = train_grpo(copy.deepcopy(warm_model), tokenizer, make_env, sampling, stale, seed=0)[0]["ratio_mean"]
    assert ratio != 1.0 and abs(ratio - 1.0) < 0.05


def test_old_log_probs_come_from_the_sampler_in_float32_unless_asked():
    """`auto` keeps the float32 runs as they were (the sampler's log-probs, the golden run's arithmetic)."""
    assert not train.recomputes_old_logprobs(GRPOConfig(), "fp32")
    assert train.recomputes_old_logprobs(GRPOConfig(), "bf16")
    assert train.recomputes_old_logprobs(GRPOConfig(autocast="bf16"), "fp32")
    assert train.recomputes_old_logprobs(GRPOConfig(old_logprobs="update"), "fp32")
    assert not train.recomputes_old_logprobs(GRPOConfig(old_logprobs="sampler", autocast="bf16"), "bf16")
    with pytest.raises(ValueError, match="GRPOConfig.old_logprobs"):
        GRPOConfig(old_logprobs="engine")


def test_settings_that_leave_the_rewards_nothing_to_teach_are_warned(warm_model, tokenizer):
    """Issue 58: a group of one, or greedy sampling, give GRPO's advantage 0 on every sample; a run trained nothing
    without a hint. Now each is named before the first iteration; a critic's estimator, or a normal run, is not."""
    single = GRPOConfig(iterations=1, prompts_per_iteration=2, group_size=1)
    (hint,) = train.idle_settings(single, SAMPLING)
    assert "group_size=1" in hint and "advantage is 0" in hint
    greedy = dataclasses.replace(SAMPLING, temperature=0.0)
    assert len(train.idle_settings(single, greedy)) == 2
    assert train.idle_settings(GRPOConfig(group_size=4), SAMPLING) == []
    assert train.idle_settings(dataclasses.replace(single, advantage="gigpo"), greedy) == []  # steps can differ
    with pytest.warns(RuntimeWarning, match="group_size=1"):
        train_grpo(copy.deepcopy(warm_model), tokenizer, lambda: envs.make("tool_arithmetic"), SAMPLING, single, seed=0)


def test_step_mode_with_environment_snapshots_is_refused_before_sampling(warm_model, tokenizer):
    """Issue 58: `snapshot_envs=True` in step mode crashed inside the first rollout (`_OneStep` has no `fork`)."""
    from course_lib.engine.rollout import RolloutEngine
    from course_lib.engine.step_mode import rollout_steps

    config = GRPOConfig(iterations=1, prompts_per_iteration=2, group_size=2, rollout_mode="step")
    snapshots = dataclasses.replace(SAMPLING, snapshot_envs=True)
    with pytest.raises(ValueError, match="snapshot_envs=True in step mode"):
        train_grpo(warm_model, tokenizer, make_env, snapshots, config, seed=0)
    with pytest.raises(ValueError, match="rollout_mode='trajectory'"):
        rollout_steps(RolloutEngine(warm_model, tokenizer, snapshots), [make_env()], [0])
