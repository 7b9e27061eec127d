"""The survey's methods inside verl (run in `.venv-verl` by `make test-verl`): each computed on verl's own data path
and compared, value for value, with the course's implementation on the same episodes.

The data path: episodes become `AgentLoopOutput`s (trajectory mode: replayed through `CourseEnvAgentLoop` itself;
step mode: `verl_gigpo.step_rows`), then verl's `_agent_loop_postprocess` pads each one and `_postprocess` stacks
them into the `DataProto` the trainer receives (`non_tensor_batch` holding the `extra_fields` columns). The
advantage goes through the patched `ray_trainer.compute_advantage` and verl's estimator registry; the loss through
verl's policy-loss registry and `agg_loss`. The MI monitor runs as installed, around `RayPPOTrainer._validate`, on a
trainer object whose rollout manager and actor are stand-ins (the course's engine replayed through verl's
`AgentLoopWorker`; the torch model behind `compute_log_prob`): a real run's servers and FSDP actor need GPUs.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from methods_helpers import (
    GIGPO,
    GROUP,
    PROMPTS,
    algorithm_config,
    course_config,
    course_trajectories,
    replay,
    replayed_batch,
    response_part,
    step_batch,
    to_dataproto,
    worker,
)
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.trainer.ppo import core_algos, ray_trainer
from verl.workers.rollout.replica import TokenOutput

from course_lib.algos.gigpo import GiGPOConfig
from course_lib.engine.rollout import RolloutEngine, collate, pad_id
from course_lib.integrations import course_verl, verl_gigpo
from course_lib.rl import seams
from course_lib.rl.train import FilterConfig, GRPOConfig

pytestmark = pytest.mark.usefixtures("patched")


def test_gigpo_trajectory_mode_matches_the_course(ch07):
    """Chapter 07's key_door in trajectory mode (its 40-token cap cuts most episodes: cut actions included), each
    episode replayed through `play_episode`, the agent loop's turn logic, into verl's batch."""
    model, tokenizer, config, make = ch07
    engine = RolloutEngine(model, tokenizer, config.sampling)
    seeds = [p for p in range(PROMPTS) for _ in range(GROUP)]
    envs = [make() for _ in seeds]
    trajectories = engine.rollout(envs, seeds, [s for s in seeds], torch.Generator().manual_seed(2))
    course_adv, stats = seams.gigpo(collate(trajectories, pad_id(tokenizer)), course_config())
    assert stats["step_group_size_mean"] > 1  # some states repeat: the step part is not all zero
    outputs = []
    for t in trajectories:
        result = asyncio.run(
            course_verl.play_episode(make(), t.seed, tokenizer, replay(t), config.sampling, max_response_tokens=40)
        )
        outputs.append(AgentLoopOutput(**course_verl.output_fields(result)))
    batch = to_dataproto(worker(tokenizer, 40, 40), outputs, [f"uid-{t.group_id}" for t in trajectories])
    assert ray_trainer.compute_advantage.course_patched
    out = ray_trainer.compute_advantage(batch, "course_gigpo", gamma=0.95, config=algorithm_config("x", **GIGPO))
    expected = response_part(course_adv, trajectories, 40)
    difference = (out.batch["advantages"] - expected).abs().max().item()
    print(f"gigpo trajectory mode: largest difference {difference:.3g}")
    assert difference <= 1e-6 and expected.abs().max() > 0.1
    # without the patch verl cannot hand the estimator the step columns: the registered estimator says so
    with pytest.raises(RuntimeError, match="needs non_tensor_batch"):
        core_algos.get_adv_estimator_fn("course_gigpo")(
            token_level_rewards=batch.batch["token_level_rewards"], response_mask=batch.batch["response_mask"]
        )


@pytest.mark.parametrize("baseline", ["pooled", "trajectory"])
def test_gigpo_step_mode_matches_the_course(ch07_episodes, baseline):
    episodes, tokenizer = ch07_episodes
    rows = [row for episode in episodes for row in episode.rows]
    config = course_config(gigpo=GiGPOConfig(gamma=0.95, step_weight=1.0, episode_baseline=baseline))
    course_adv, stats = seams.gigpo(collate(rows, pad_id(tokenizer)), config)
    assert stats["step_group_size_mean"] > 1
    batch = step_batch(episodes, tokenizer)
    assert len(batch) == len(rows)
    settings = {"gigpo": {**GIGPO["gigpo"], "episode_baseline": baseline}}
    out = ray_trainer.compute_advantage(batch, "course_gigpo", gamma=0.95, config=algorithm_config("x", **settings))
    expected = response_part(course_adv, rows, 8)
    difference = (out.batch["advantages"] - expected).abs().max().item()
    print(f"gigpo step mode ({baseline}): {len(rows)} step rows, largest difference {difference:.3g}")
    assert difference <= 1e-6 and expected.abs().max() > 0.1


@pytest.mark.parametrize(
    "name, settings",
    [
        ("starpo_s", {"keep_fraction": 0.5}),
        ("snr_top_p", {"top_p": 0.9, "mode": "linear", "include_zero": False}),
        ("snr_top_p", {"top_p": 0.9, "mode": "softmax", "include_zero": True}),
    ],
)
def test_group_filters_zero_the_mask_of_the_groups_the_course_drops(ch00, tmp_path, name, settings):
    model, tokenizer = ch00
    trajectories = course_trajectories(model, tokenizer, seed=3) + course_trajectories(model, tokenizer, seed=4)
    for k, t in enumerate(trajectories):  # four groups of four: two prompts, two draws each
        t.group_id = k // GROUP
    batch = collate(trajectories, pad_id(tokenizer))
    config = GRPOConfig(group_size=GROUP, batch_filter=name, filter=FilterConfig(**settings))
    keep_course = seams.resolve("batch_filter", name)(batch, config)
    course_adv = seams.grpo(batch.select(keep_course), config)[0]
    verl_batch = replayed_batch(model, tokenizer, tmp_path, trajectories)
    verl_batch.non_tensor_batch["uid"] = np.array([f"uid-{t.group_id}" for t in trajectories], dtype=object)
    before = verl_batch.batch["response_mask"].clone()
    algorithm = algorithm_config("grpo", filter={"name": name, **settings})
    out = ray_trainer.compute_advantage(verl_batch, "grpo", config=algorithm)
    kept_rows = out.batch["response_mask"].sum(-1) > 0
    assert kept_rows.tolist() == keep_course.tolist()
    assert 0 < int(keep_course.sum()) < len(trajectories) or name == "snr_top_p"
    assert torch.equal(out.batch["response_mask"][kept_rows], before[kept_rows])
    # verl's GRPO on the kept rows equals the course's on the selected batch (one value per row)
    verl_adv = out.batch["advantages"][kept_rows]
    first = out.batch["response_mask"][kept_rows].argmax(-1)
    per_row = verl_adv[torch.arange(len(first)), first]
    difference = (per_row - course_adv).abs().max().item() if len(per_row) else 0.0
    print(f"{name} {settings}: kept {int(keep_course.sum())}/{len(trajectories)}, largest difference {difference:.3g}")
    assert difference <= 1e-5


def test_a_filter_that_keeps_nothing_zeroes_every_advantage(ch00, tmp_path):
    model, tokenizer = ch00
    trajectories = course_trajectories(model, tokenizer)
    batch = replayed_batch(model, tokenizer, tmp_path, trajectories)
    batch.batch["token_level_rewards"] = torch.zeros_like(batch.batch["token_level_rewards"])  # every std is 0
    before = batch.batch["response_mask"].clone()
    out = ray_trainer.compute_advantage(batch, "grpo", config=algorithm_config("grpo", filter={"name": "snr_top_p"}))
    assert torch.equal(out.batch["response_mask"], before) and not out.batch["advantages"].any()
    assert out.meta_info["course_metrics"]["course/filter_kept_share"] == 0.0


def test_balanced_clip_loss_and_gradient_match_the_course():
    generator = torch.Generator().manual_seed(0)
    rows, width = 6, 12
    old = -torch.rand(rows, width, generator=generator) * 3
    logits = (old + torch.randn(rows, width, generator=generator) * 0.4).requires_grad_()
    advantages = torch.randn(rows, width, generator=generator)
    mask = (torch.rand(rows, width, generator=generator) > 0.3).float()
    actor = OmegaConf.create({"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 3.0})
    loss_fn = core_algos.get_policy_loss_fn("course_entropy_balanced")
    loss, metrics = loss_fn(old, logits, advantages, mask, "token-mean", actor, None)
    (grad,) = torch.autograd.grad(loss, logits)
    config = GRPOConfig(clip_low=0.2, clip_high=0.28, aggregation="token-mean")
    reference = logits.detach().clone().requires_grad_()
    course_loss, stats = seams.entropy_balanced(reference, old, advantages, mask, config)
    (course_grad,) = torch.autograd.grad(course_loss, reference)
    ratio = torch.exp(logits.detach() - old)
    assert ((ratio > 1.28) & (advantages > 0) & mask.bool()).any()  # the balanced gradient acts somewhere
    loss_difference = (loss - course_loss).abs().item()
    grad_difference = (grad - course_grad).abs().max().item()
    print(f"balanced clip: loss difference {loss_difference:.3g}, largest gradient difference {grad_difference:.3g}")
    assert loss_difference <= 1e-6 and grad_difference <= 1e-7
    assert metrics["actor/pg_upper_clipfrac"] == pytest.approx(stats["upper_clip_fraction"])
    # the hard clip (verl's vanilla loss) drops exactly the gradient the balanced clip keeps
    vanilla = OmegaConf.merge(actor, {"global_batch_info": {}})
    hard, _ = core_algos.get_policy_loss_fn("vanilla")(old, reference, advantages, mask, "token-mean", vanilla, None)
    (hard_grad,) = torch.autograd.grad(hard, reference)
    assert torch.allclose(hard, course_loss, atol=1e-6)
    assert not torch.allclose(hard_grad, course_grad)


def test_step_mode_episodes_played_through_verls_server(ch07, ch07_episodes):
    """`step_mode.rollout_steps` over `ServerEngine` and verl's `TokenOutput` (a server replaying the course's step
    actions, each at its prompt, in the lock-step order the course plays them): the same step rows, so the same
    step-mode batch and GiGPO advantages as above."""
    from course_lib.engine.step_mode import rollout_steps
    from course_lib.integrations import verl_trees

    model, tokenizer, config, make = ch07
    episodes, _ = ch07_episodes
    queues: dict[tuple, list] = {}
    for step in range(max(len(e.rows) for e in episodes)):
        for episode in episodes:
            if step < len(episode.rows):
                row = episode.rows[step]
                prompt = sum(1 for t in row.turn_ids if t < 0)
                queues.setdefault(tuple(row.token_ids[:prompt]), []).append(
                    (row.token_ids[prompt:], row.logprobs[prompt:])
                )

    class StepServer:
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
            ids, logprobs = queues[tuple(prompt_ids)].pop(0)
            return TokenOutput(token_ids=ids, log_probs=logprobs)

    engine = verl_trees.ServerEngine(verl_trees.server_generate(StepServer()), tokenizer, config.sampling)
    seeds = [p for p in range(PROMPTS) for _ in range(GROUP)]
    played = rollout_steps(engine, [make() for _ in seeds], seeds, seeds, None, 0, "observation")
    assert all(not queue for queue in queues.values())
    for ours, theirs in zip(played, episodes, strict=True):
        assert len(ours.rows) == len(theirs.rows) and ours.total_reward == theirs.total_reward
        for a, b in zip(ours.rows, theirs.rows, strict=True):
            assert (a.token_ids, a.loss_mask, a.logprobs, a.rewards, a.anchors) == (
                b.token_ids, b.loss_mask, b.logprobs, b.rewards, b.anchors,
            )  # fmt: skip
    assert verl_gigpo.step_rows(played) == verl_gigpo.step_rows(episodes)


def test_a_filter_then_gigpo_in_step_mode_matches_the_course(ch07_episodes):
    """Both seams at once, as `train.policy_iteration` chains them: the course selects StarPO-S's groups and runs
    GiGPO on what is kept; verl's patched `compute_advantage` zeroes the dropped groups' masks, then GiGPO."""
    episodes, tokenizer = ch07_episodes
    rows = [row for episode in episodes for row in episode.rows]
    batch = collate(rows, pad_id(tokenizer))
    config = course_config(batch_filter="starpo_s", filter=FilterConfig(keep_fraction=0.5))
    keep = seams.starpo_s(batch, config)
    assert 0 < int(keep.sum()) < len(rows)
    kept_adv, _ = seams.gigpo(batch.select(keep), config)
    verl_batch = step_batch(episodes, tokenizer)
    algorithm = algorithm_config("x", **GIGPO, filter={"name": "starpo_s", "keep_fraction": 0.5})
    out = ray_trainer.compute_advantage(verl_batch, "course_gigpo", gamma=0.95, config=algorithm)
    kept_rows = out.batch["response_mask"].sum(-1) > 0
    assert kept_rows.tolist() == keep.tolist()
    expected = response_part(kept_adv, [r for r, k in zip(rows, keep.tolist(), strict=True) if k], 8)
    difference = (out.batch["advantages"][kept_rows] - expected).abs().max().item()
    print(
        f"starpo_s then gigpo (step mode): kept {int(keep.sum())}/{len(rows)} rows, largest difference {difference:.3g}"
    )
    assert difference <= 1e-6 and not out.batch["advantages"][~kept_rows].any()
