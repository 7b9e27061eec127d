"""Helpers of the verl method tests: the course's episodes replayed into verl's batch, and the configs on both
sides."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import torch
from omegaconf import OmegaConf
from test_agent_loop import build_loop, dataset_rows
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, AgentLoopWorker
from verl.workers.rollout.replica import TokenOutput

from course_lib.algos.gigpo import GiGPOConfig
from course_lib.engine.rollout import RolloutEngine
from course_lib.integrations import course_verl, verl_gigpo
from course_lib.rl.train import GRPOConfig

PROMPTS, GROUP = 2, 4


def chapter_rows(tokenizer, tmp_path, chapter: str, count: int) -> list[dict]:
    """`dataset_rows` for any chapter: the first `count` rows of its training export, read by `RLHFDataset` with
    the chapter's `data.max_prompt_length` (`sequence_lengths`), collated, `agent_name` taken out."""
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    path = course_verl.export_parquet(chapter, "train", tmp_path, count=count)
    config = OmegaConf.create(
        {"max_prompt_length": course_verl.sequence_lengths(chapter)[0], "filter_overlong_prompts": False,
         "cache_dir": str(tmp_path / "cache")}
    )  # fmt: skip
    dataset = RLHFDataset(str(path), tokenizer, config)
    batch = collate_fn([dataset[i] for i in range(len(dataset))])
    rows = [{key: value[i] for key, value in batch.items() if not torch.is_tensor(value)} for i in range(count)]
    assert all(row.pop("agent_name") == course_verl.AGENT_NAME for row in rows)
    return rows


def worker(tokenizer, prompt_length: int, response_length: int) -> AgentLoopWorker:
    """An `AgentLoopWorker` without ray or servers: its per-sample padding and its batch stacking only."""
    w = AgentLoopWorker.__new__(AgentLoopWorker)
    w.rollout_config = OmegaConf.create({"prompt_length": prompt_length, "response_length": response_length})
    w.tokenizer, w.processor = tokenizer, None
    w.reward_loop_worker_handles, w.distillation_enabled, w.mm_processor_kwargs = None, False, {}
    return w


def to_dataproto(w: AgentLoopWorker, outputs: list[AgentLoopOutput], uids: list[str]):
    """verl's post-processing of agent-loop outputs into the trainer's batch, with the uid the trainer assigns per
    prompt and the token-level rewards it derives from `rm_scores`."""
    padded = [asyncio.run(w._agent_loop_postprocess(o, validate=False, raw_prompt=[])) for o in outputs]
    batch = w._postprocess(padded, input_non_tensor_batch=None)
    batch.non_tensor_batch["uid"] = np.array(uids, dtype=object)
    batch.batch["token_level_rewards"] = batch.batch["rm_scores"]
    return batch


def replay(trajectory):
    """`play_episode`'s `generate` answering each turn with the tokens the course's engine sampled there."""
    ids, mask, logprobs = trajectory.token_ids, trajectory.loss_mask, trajectory.logprobs

    async def generate(prompt_ids, params):
        start = len(prompt_ids)
        assert list(prompt_ids) == ids[:start]
        end = start
        while end < len(ids) and mask[end] == 1:
            end += 1
        return ids[start:end], logprobs[start:end]

    return generate


class ReplayServer:
    """verl's server interface over `replay`, for `CourseEnvAgentLoop` itself."""

    def __init__(self, trajectory):
        self.generate_turn = replay(trajectory)

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        ids, logprobs = await self.generate_turn(list(prompt_ids), sampling_params)
        return TokenOutput(token_ids=ids, log_probs=logprobs, stop_reason="completed")


def course_trajectories(model, tokenizer, seed: int = 0):
    """`PROMPTS` x `GROUP` chapter-00 episodes of the course's engine (training seeds 0, 1)."""
    tasks = course_verl.chapter_tasks("00")
    engine = RolloutEngine(model, tokenizer, tasks.sampling)
    envs = [tasks.make_env("train") for _ in range(PROMPTS * GROUP)]
    seeds = [p for p in range(PROMPTS) for _ in range(GROUP)]
    groups = [p for p in range(PROMPTS) for _ in range(GROUP)]
    return engine.rollout(envs, seeds, groups, torch.Generator().manual_seed(seed))


def replayed_batch(model, tokenizer, tmp_path, trajectories):
    """The course's chapter-00 episodes replayed through `CourseEnvAgentLoop` and verl's post-processing."""
    rows = dataset_rows(tokenizer, tmp_path, count=PROMPTS)
    outputs = []
    for t in trajectories:
        agent = build_loop(tokenizer, ReplayServer(t), tmp_path)
        outputs.append(asyncio.run(agent.run({"temperature": 1.0}, **rows[t.seed])))
    return to_dataproto(worker(tokenizer, 16, 48), outputs, [f"uid-{t.group_id}" for t in trajectories])


def response_part(course: torch.Tensor, trajectories, width: int) -> torch.Tensor:
    """The course's `[B, T]` (prompt and response, right-padded) cut to verl's response tensor `[B, width]`."""
    out = torch.zeros(len(trajectories), width, dtype=course.dtype)
    for b, t in enumerate(trajectories):
        prompt = sum(1 for turn in t.turn_ids if turn < 0)
        length = len(t.token_ids) - prompt
        out[b, :length] = course[b, prompt : prompt + length]
    return out


def algorithm_config(estimator: str, **course) -> OmegaConf:
    return OmegaConf.create(
        {"adv_estimator": estimator, "gamma": 0.95, "norm_adv_by_std_in_grpo": True, "course": course}
    )


GIGPO = {"gigpo": {"step_weight": 1.0, "episode_baseline": "pooled", "invalid_penalty": 0.1}}


def course_config(**changes) -> GRPOConfig:
    base = GRPOConfig(
        group_size=GROUP, advantage="gigpo", invalid_penalty=0.1,
        gigpo=GiGPOConfig(gamma=0.95, step_weight=1.0, episode_baseline="pooled"),
    )  # fmt: skip
    return dataclasses.replace(base, **changes)


def step_batch(episodes, tokenizer):
    rows = verl_gigpo.step_rows(episodes)
    outputs = [AgentLoopOutput(**row) for row in rows]
    width = max(len(r["prompt_ids"]) for r in rows)
    return to_dataproto(worker(tokenizer, width, 8), outputs, [r["extra_fields"]["uid_hint"] for r in rows])
