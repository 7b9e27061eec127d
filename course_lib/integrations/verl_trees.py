"""ARPO's and AEPO's rollout trees on verl: one prompt's `rollout.n` samples grown as a tree (`tree_rollout`).

verl's agent loop turns each of a prompt's `rollout.n` rows into one independent `run()`; a tree needs the n
leaves of a prompt to be grown together (a leaf forks another after a tool response). The smallest extension verl
allows is the agent-loop manager class (`+actor_rollout_ref.rollout.agent.agent_loop_manager_class=`
`course_lib.integrations.verl_trees.TreeAgentLoopManager`, read by `ray_trainer` and `main_ppo`): the manager only
swaps in `TreeAgentLoopWorker`, whose `generate_sequences` groups the batch's rows by their `uid` (the trainer
repeats each prompt n times with one uid), grows every group as a tree with `tree_rollout.sample_trees`, and hands
the leaves to verl's own per-sample padding and batch stacking. The leaves fill their group's rows, so they share
the prompt's uid and verl's GRPO normalises them as one group, as the course's `loop.tree_groups` does.

`sample_trees` needs an engine with `rollout`, `fork`, `run`, `config` and `tokenizer`; `server_engine.ServerEngine`
is that engine over verl's server (`server_manager.generate`, token ids in and out), playing turns with the course's
turn rule (`rollout.advance`). It is also the engine `step_mode.rollout_steps` needs, so chapter 07's step-mode
episodes can be played through verl's server and turned into step rows (`verl_gigpo.step_rows`). The tree is grown
on a worker thread; each batch of sequences it continues is one `asyncio.gather` on the worker's event loop, so the
server sees them concurrently.

**Entropies.** The branch rule compares the entropy of the tokens after a tool response with the first turn's
(`algos.arpo`, `algos.aepo`): full-vocabulary entropies per sampled token, which verl's server does not return
(`TokenOutput` carries the sampled tokens' log-probs only). `server_generate` reads them from the server's
`TokenOutput.extra_fields["entropies"]` when present (a server backed by the torch model, as in the tests, fills
them exactly), else `ServerEngine` uses `-log p` of the sampled token, an unbiased one-sample estimate of the entropy
at that position (its expectation over the sampled token is the entropy). What vLLM can return is top-k log-probs
(`logprobs=k`), from which the truncated sum -sum_k p log p is a lower bound (ARPO's released code uses top-10);
wiring that into verl's server call is a GPU-side change not made here.

Tree settings come from the row's `extra_info["tree"]` (`TreeConfig`'s fields; `export --tree arpo|aepo` writes
them); rows without it get `TreeConfig(global_samples=n // 2)`. Route: verl's legacy trainer (`trainer.use_v1=False`,
whose batch reaches `AgentLoopManager.generate_sequences`); the manager splits the batch into equal chunks per
worker, so `data.train_batch_size * rollout.n` must be a multiple of `agent.num_workers * rollout.n` (whole groups
per worker). Validation batches play independent episodes (verl's own path).

Checked on ARPO's own chapter 08 with its tree settings (`tests_verl/test_trees.py` through verl's worker and
padding, `tests/integrations/test_verl_methods.py` without verl): the same tree, leaves, masks and branch draws as
`sample_trees` over the course's engine on the same seeds, log-probs and entropies within float rounding.
"""

from __future__ import annotations

import asyncio
import dataclasses
import zlib
from collections.abc import Sequence
from typing import Any

import torch

from course_lib.engine.rollout import Trajectory
from course_lib.engine.server_engine import Generate, ServerEngine
from course_lib.engine.tree_rollout import TreeConfig, sample_trees
from course_lib.integrations.course_verl import chapter_tasks, output_fields, verl_available

MANAGER_CLASS = "course_lib.integrations.verl_trees.TreeAgentLoopManager"
__all__ = ["MANAGER_CLASS", "ServerEngine", "grow", "leaf_fields", "server_generate", "tree_config"]


def leaf_fields(leaf: Trajectory, parent: int | None, fork_step: int) -> dict[str, Any]:
    """A tree leaf as the keyword arguments of verl's `AgentLoopOutput` (those `CourseEnvAgentLoop` returns for an
    episode, plus the leaf's `tree_parent` and `tree_fork_step` in `extra_fields`; no metrics: the worker times the
    whole tree, not a leaf)."""
    fields = output_fields(leaf)
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


def server_generate(server_manager) -> Generate:
    """`ServerEngine`'s `generate` over verl's `server_manager.generate` (one request id per call: a tree's
    sequences share prefixes, which the server's prefix cache finds without sticky routing)."""
    import uuid

    async def generate(prompt_ids: list[int], params: dict[str, Any]):
        out = await server_manager.generate(request_id=uuid.uuid4().hex, prompt_ids=prompt_ids, sampling_params=params)
        entropies = (out.extra_fields or {}).get("entropies")
        logprobs = list(out.log_probs) if out.log_probs else None
        return list(out.token_ids), logprobs, (list(entropies) if entropies is not None else None)

    return generate
