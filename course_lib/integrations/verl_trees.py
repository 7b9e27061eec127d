"""ARPO's and AEPO's rollout trees on verl: one prompt's `rollout.n` samples grown as a tree (`tree_rollout`).

verl's agent loop turns each of a prompt's `rollout.n` rows into one independent `run()`; a tree needs the n
leaves of a prompt to be grown together (a leaf forks another after a tool response). The smallest extension verl
allows is the agent-loop manager class (`+actor_rollout_ref.rollout.agent.agent_loop_manager_class=`
`course_lib.integrations.verl_trees.TreeAgentLoopManager`, read by `ray_trainer` and `main_ppo`): the manager only
swaps in `TreeAgentLoopWorker`, whose `generate_sequences` groups the batch's rows by their `uid` (the trainer
repeats each prompt n times with one uid), grows every group as a tree with `tree_rollout.sample_trees`, and hands
the leaves to verl's own per-sample padding and batch stacking. The leaves fill their group's rows, so they share
the prompt's uid and verl's GRPO normalises them as one group, as the course's `loop.tree_groups` does.

`sample_trees` needs an engine with `rollout`, `fork`, `run`, `config` and `tokenizer`; `ServerEngine` is that
engine over verl's server (`server_manager.generate`, token ids in and out), playing turns with the course's
`RolloutEngine` rules (stop tags, turn and total caps, observations appended as ids with mask 0, environment
snapshots for forks when `snapshot_envs`). It is also the engine `step_mode.rollout_steps` needs, so chapter 07's
step-mode episodes can be played through verl's server and turned into step rows (`verl_gigpo.step_rows`). The
tree is grown on a worker thread; each batch of sequences it continues is one `asyncio.gather` on the worker's
event loop, so the server sees them concurrently.

**Entropies.** The branch rule compares the entropy of the tokens after a tool response with the first turn's
(`algos.arpo`, `algos.aepo`): full-vocabulary entropies per sampled token, which verl's server does not return
(`TokenOutput` carries the sampled tokens' log-probs only). `ServerEngine` reads them from the server's
`TokenOutput.extra_fields["entropies"]` when present (a server backed by the torch model, as in the tests, fills
them exactly), else it uses `-log p` of the sampled token, an unbiased one-sample estimate of the entropy at that
position (its expectation over the sampled token is the entropy). What vLLM can return is top-k log-probs
(`logprobs=k`), from which the truncated sum -sum_k p log p is a lower bound (ARPO's released code uses top-10);
wiring that into verl's server call is a GPU-side change not made here.

Tree settings come from the row's `extra_info["tree"]` (`TreeConfig`'s fields; `export --tree arpo|aepo` writes
them); rows without it get `TreeConfig(global_samples=n // 2)`. Route: verl's legacy trainer (`trainer.use_v1=False`,
whose batch reaches `AgentLoopManager.generate_sequences`); the manager splits the batch into equal chunks per
worker, so `data.train_batch_size * rollout.n` must be a multiple of `agent.num_workers * rollout.n` (whole groups
per worker). Validation batches play independent episodes (verl's own path).

Checked on ARPO's own chapter 08 with its tree settings (`tests_verl/test_methods.py` through verl's worker and
padding, `tests/test_verl_methods.py` without verl): the same tree, leaves, masks and branch draws as `sample_trees`
over the course's engine on the same seeds, log-probs and entropies within float rounding.
"""

from __future__ import annotations

import asyncio
import dataclasses
import zlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import torch

from course_lib.integrations.verl import (
    EpisodeResult,
    chapter_tasks,
    output_fields,
    turn_sampling_params,
    verl_available,
)
from course_lib.prompt_format import resolve as resolve_format
from course_lib.rollout import SamplingConfig, Trajectory, fork_trajectory, start_trajectories
from course_lib.tokenizer import decode, tag_id
from course_lib.tree_rollout import TreeConfig, sample_trees

TreeGenerate = Callable[[list[int], dict[str, Any]], Awaitable[tuple[list[int], list[float], list[float] | None]]]
"""`await generate(prompt_ids, sampling_params)` -> new token ids, their log-probs, their entropies (or None)."""
MANAGER_CLASS = "course_lib.integrations.verl_trees.TreeAgentLoopManager"


class ServerEngine:
    """The engine `tree_rollout.sample_trees` drives, over an inference server: `rollout`, `fork`, `run`."""

    def __init__(
        self,
        generate: TreeGenerate,
        tokenizer,
        config: SamplingConfig,
        sampling_params: dict[str, Any] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        max_response_tokens: int | None = None,
    ):
        """`max_response_tokens`: a cap on the tokens after the prompt (verl's `rollout.response_length`, which
        its padded tensors hold), on top of `config.max_total_tokens`, as `verl.play_episode` applies it."""
        self.generate, self.tokenizer, self.config = generate, tokenizer, config
        self.sampling_params, self.loop = dict(sampling_params or {}), loop
        self.max_response_tokens = max_response_tokens
        self.format = resolve_format(config.prompt_format)
        self.stop_ids = {tag_id(tokenizer, tag) for tag in config.stop_tags}

    def rollout(self, envs, seeds: Sequence[int], group_ids: Sequence[int] | None = None, generator=None):
        """Reset `envs[i]` with `seeds[i]` and play each episode to its end (as `RolloutEngine.rollout`)."""
        return self.run(start_trajectories(self, envs, seeds, group_ids), generator)

    def fork(self, trajectory: Trajectory, steps: int, parent: int | None = None) -> Trajectory:
        """`trajectory` cut after the observation of step `steps`, with its environment as it was then (the same
        cut `RolloutEngine.fork` makes)."""
        return fork_trajectory(self, trajectory, steps, parent)

    def run(self, trajectories: list[Trajectory], generator=None) -> list[Trajectory]:
        """Continue every trajectory to the end of its episode, all at once on the server."""

        async def together():
            await asyncio.gather(*(self.play(t) for t in trajectories))

        if self.loop is None:
            asyncio.run(together())
        else:  # called from a worker thread while the loop serves the server calls
            asyncio.run_coroutine_threadsafe(together(), self.loop).result()
        return trajectories

    async def play(self, t: Trajectory) -> None:
        """Play `t` (its prefix ends at a turn boundary) turn by turn, as `RolloutEngine.run` plays one row."""
        cap, config = self.config.max_total_tokens, self.config
        if self.max_response_tokens is not None:
            cap = min(cap, sum(1 for turn in t.turn_ids if turn < 0) + self.max_response_tokens)
        while not (t.terminated or t.truncated):
            if len(t.token_ids) >= cap:
                t.truncated = t.cut = True
                return
            budget = min(config.max_turn_tokens, cap - len(t.token_ids))
            params = turn_sampling_params(self.sampling_params, self.stop_ids, budget)
            ids, logprobs, entropies = await self.generate(list(t.token_ids), params)
            ids = [int(i) for i in ids[:budget]]
            stop_at = next((k for k, token in enumerate(ids) if token in self.stop_ids), None)
            if stop_at is not None:
                ids = ids[: stop_at + 1]
            if entropies is None:  # one-sample estimate: E[-log p(x)] over x ~ p is the entropy
                entropies = [-float(p) for p in logprobs]
            turn = t.num_turns
            for k, token in enumerate(ids):
                t.token_ids.append(token)
                t.loss_mask.append(1)
                t.logprobs.append(float(logprobs[k]))
                t.entropies.append(float(entropies[k]))
                t.turn_ids.append(turn)
            sent = stop_at is not None or len(ids) >= config.max_turn_tokens or len(ids) < budget
            if not sent:
                t.truncated = t.cut = True
                return
            t.anchors.append(t.env.anchor())
            obs, reward, terminated, truncated, info = t.env.step(decode(self.tokenizer, ids))
            t.rewards.append(reward)
            t.infos.append(info)
            t.terminated, t.truncated = terminated, truncated
            if config.snapshot_envs:
                t.snapshots.append(t.env.fork())
            if terminated or truncated:
                return
            observation = self.format.observation_ids(self.tokenizer, obs, ids[-1]) if obs else []
            room = cap - len(t.token_ids)
            for token in observation[:room]:
                t.token_ids.append(token)
                t.loss_mask.append(0)
                t.logprobs.append(0.0)
                t.entropies.append(0.0)
                t.turn_ids.append(turn)
            if len(t.token_ids) >= cap:
                t.truncated = t.cut = True
                return


def leaf_fields(leaf: Trajectory, parent: int | None, fork_step: int) -> dict[str, Any]:
    """A tree leaf as the keyword arguments of verl's `AgentLoopOutput` (those `CourseEnvAgentLoop` returns for an
    episode, plus the leaf's `tree_parent` and `tree_fork_step` in `extra_fields`)."""
    prompt = sum(1 for turn in leaf.turn_ids if turn < 0)
    turns = leaf.turn_ids[prompt:]
    mask = leaf.loss_mask[prompt:]
    spans, observations = [], 0
    for turn in range(max(turns, default=-1) + 1):  # the action of each turn (a cut one included), in order
        actions = [k for k, (t, m) in enumerate(zip(turns, mask, strict=True)) if t == turn and m]
        if actions:
            spans.append((actions[0], actions[-1] + 1))
        observations += any(t == turn and not m for t, m in zip(turns, mask, strict=True))
    result = EpisodeResult(
        env=leaf.env, seed=leaf.seed, prompt_ids=leaf.token_ids[:prompt], response_ids=leaf.token_ids[prompt:],
        response_mask=mask, response_logprobs=leaf.logprobs[prompt:], turn_ids=turns, rewards=list(leaf.rewards),
        infos=list(leaf.infos), anchors=list(leaf.anchors), action_spans=spans, terminated=leaf.terminated,
        truncated=leaf.truncated, cut=leaf.cut, observations=observations,
    )  # fmt: skip
    fields = output_fields(result)
    fields["metrics"] = {}  # the worker times the whole tree, not a leaf
    fields["extra_fields"].update(tree_parent=-1 if parent is None else int(parent), tree_fork_step=int(fork_step))
    return fields


def tree_config(extra_info: dict[str, Any], group_size: int) -> TreeConfig:
    """The row's `extra_info["tree"]` as a `TreeConfig` (default: half the group as global samples)."""
    fields = dict(extra_info.get("tree") or {})
    fields.setdefault("global_samples", max(group_size // 2, 1))
    return TreeConfig(**fields)


def grow(
    engine: ServerEngine, extra_infos: Sequence[dict[str, Any]], group_size: int, seed: int
) -> tuple[list[Trajectory], Any]:
    """One tree of `group_size` leaves per prompt (`extra_infos`: one row's `extra_info` per prompt; all of one
    chapter, split and tree setting) with `sample_trees`; returns the leaves grouped by prompt and the tree."""
    first = extra_infos[0]
    tasks = chapter_tasks(first["chapter"])
    envs = [tasks.make_env(str(first["split"])) for _ in range(group_size * len(extra_infos))]
    seeds = [int(info["seed"]) for info in extra_infos]
    return sample_trees(
        engine, envs, seeds, group_size, tree_config(first, group_size), torch.Generator().manual_seed(seed)
    )


if verl_available():
    import numpy as np
    import ray
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager, AgentLoopOutput, AgentLoopWorker

    class TreeAgentLoopWorker(AgentLoopWorker):
        """verl's agent-loop worker, growing each uid's rows as one tree (module docstring)."""

        async def generate_sequences(self, batch):
            validate = batch.meta_info.get("validate", False)
            if validate or "uid" not in batch.non_tensor_batch:
                return await super().generate_sequences(batch)
            uids = list(batch.non_tensor_batch["uid"])
            order: dict[str, list[int]] = {}
            for row, uid in enumerate(uids):
                order.setdefault(uid, []).append(row)
            sizes = {len(rows) for rows in order.values()}
            if len(sizes) != 1:
                raise ValueError(f"every uid needs the same number of rows (rollout.n), got sizes {sorted(sizes)}")
            group_size = sizes.pop()
            config = self.rollout_config
            params = {"temperature": config.temperature, "top_p": config.top_p, "top_k": config.top_k,
                      "repetition_penalty": 1.0, "logprobs": config.calculate_log_probs}  # fmt: skip
            extra_infos = [dict(batch.non_tensor_batch["extra_info"][rows[0]]) for rows in order.values()]
            tasks = chapter_tasks(extra_infos[0]["chapter"])
            first = extra_infos[0]  # the row's limits, as `CourseEnvAgentLoop.run` reads them
            sampling = dataclasses.replace(
                tasks.sampling, temperature=float(config.temperature), snapshot_envs=True,
                max_turn_tokens=int(first.get("max_turn_tokens", tasks.sampling.max_turn_tokens)),
                max_total_tokens=int(first.get("max_total_tokens", tasks.sampling.max_total_tokens)),
                stop_tags=tuple(first.get("stop_tags", tasks.sampling.stop_tags)),
            )  # fmt: skip
            engine = ServerEngine(
                server_generate(self.llm_client), self.tokenizer, sampling, params, asyncio.get_running_loop(),
                max_response_tokens=int(config.response_length),
            )  # fmt: skip
            # the branch draws' seed: the step and the chunk's first uid, so that workers draw differently
            seed = zlib.crc32(f"{batch.meta_info.get('global_steps', 0)}/{uids[0]}".encode())
            leaves, tree = await asyncio.to_thread(grow, engine, extra_infos, group_size, seed)
            outputs = [None] * len(uids)
            for position, (leaf, parent, fork) in enumerate(zip(leaves, tree.parents, tree.fork_steps, strict=True)):
                row = list(order.values())[leaf.group_id][position % group_size]
                kwargs = {key: value[row] for key, value in batch.non_tensor_batch.items()}
                output = AgentLoopOutput(**leaf_fields(leaf, parent, fork))
                outputs[row] = await self._agent_loop_postprocess(output, validate, **kwargs)
            result = self._postprocess(outputs, input_non_tensor_batch=batch.non_tensor_batch, validate=validate)
            result.non_tensor_batch["tree_branch"] = np.array([p >= 0 for p in result.non_tensor_batch[
                "tree_parent"]], dtype=bool)  # fmt: skip
            return result

    class TreeAgentLoopManager(AgentLoopManager):
        """verl's agent-loop manager with `TreeAgentLoopWorker` workers (`agent_loop_manager_class`)."""

        def __init__(self, *args, **kwargs):
            self.agent_loop_workers_class = ray.remote(TreeAgentLoopWorker)
            super().__init__(*args, **kwargs)


def server_generate(server_manager) -> TreeGenerate:
    """`ServerEngine`'s `generate` over verl's `server_manager.generate` (one request id per call: a tree's
    sequences share prefixes, which the server's prefix cache finds without sticky routing)."""
    import uuid

    async def generate(prompt_ids: list[int], params: dict[str, Any]):
        out = await server_manager.generate(request_id=uuid.uuid4().hex, prompt_ids=prompt_ids, sampling_params=params)
        entropies = (out.extra_fields or {}).get("entropies")
        logprobs = list(out.log_probs) if out.log_probs else [0.0] * len(out.token_ids)
        return list(out.token_ids), logprobs, (list(entropies) if entropies is not None else None)

    return generate
