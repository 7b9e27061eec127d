"""`rollout_func`s for TRL's `GRPOTrainer` that carry what the course's methods need: the step table (GiGPO), one
row per environment step (step mode), and ARPO's or AEPO's tree.

TRL 1.16 asks a `rollout_func` for `prompt_ids`, `completion_ids` and `logprobs` per completion slot (the batch's
prompts, each repeated `num_generations` times in a row) and merges every other key it returns into that slot's
input dict before `_generate_and_score_completions` goes on. The course's trainer subclass
(`trl_methods.CourseMethodTrainer`) reads them there. Every slot carries `course_rows`: the list of its rows as
plain fields (`row_fields`), one row in trajectory mode, one per environment step in step mode, so the subclass can
rebuild a `rollout.RolloutBatch` in TRL's layout with the course's own `rollout.collate` and give it to the course's
estimators and filters. The fields are what a distributed engine would ship (ids, lists, anchors), not Python
objects from the rollout, so the same route serves an engine whose rollouts run elsewhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from course_lib.engine.rollout import RolloutEngine, Trajectory
from course_lib.integrations.course_trl import completion_fields
from course_lib.rl.train import GRPOConfig
from course_lib.tasks.tool_task import ToolTask

RolloutFunc = Callable[[list[str], object], dict[str, list]]
"""TRL's `rollout_func(prompts, trainer) -> {"prompt_ids": [...], "completion_ids": [...], "logprobs": [...], ...}`."""


def row_fields(t: Trajectory) -> dict:
    """One course row (a whole episode, or one step-mode step) as TRL's prompt/completion split plus the step table
    of `rollout.collate`: per step (turn) of the row its reward, `info["valid"]` and anchor; per token of the
    completion its turn id (-1 on the observation that opens a row); the row's group, episode and first step."""
    return {
        **completion_fields(t),
        "turn_ids": t.turn_ids[t.prefix_length(0) :],
        "step_rewards": [float(r) for r in t.rewards],
        "step_valid": [bool(info.get("valid", True)) for info in t.infos],
        "step_anchors": [t.anchors[k] if k < len(t.anchors) else None for k in range(len(t.rewards))],
        "group_id": t.group_id,
        "traj_id": t.traj_id,
        "step_index": t.step_index,
        "episode_reward": t.total_reward if t.episode_reward is None else float(t.episode_reward),
    }


def row_trajectory(row: dict, completion_ids: list[int] | None = None) -> Trajectory:
    """The inverse of `row_fields`, on the completion only (the tokens TRL trains): a `Trajectory` whose tokens are
    the completion, for `rollout.collate` to build the course's `RolloutBatch` in TRL's completion layout."""
    ids = row["completion_ids"] if completion_ids is None else completion_ids
    return Trajectory(
        env=None,
        token_ids=list(ids),
        loss_mask=list(row["env_mask"]),
        logprobs=list(row["logprobs"]),
        entropies=[0.0] * len(ids),
        turn_ids=list(row["turn_ids"]),
        group_id=row["group_id"],
        rewards=list(row["step_rewards"]),
        infos=[{"valid": valid} for valid in row["step_valid"]],
        anchors=list(row["step_anchors"]),
        traj_id=row["traj_id"],
        step_index=row["step_index"],
        episode_reward=row["episode_reward"],
    )


def _slot(rows: list[dict], reward: float) -> dict:
    """One completion slot for TRL: its first row's split (all TRL sees of a step-mode episode before the subclass
    rebuilds the batch), the episode reward, and every row in `course_rows`."""
    first = rows[0]
    return {
        "prompt_ids": first["prompt_ids"],
        "completion_ids": first["completion_ids"],
        "logprobs": first["logprobs"],
        "env_mask": first["env_mask"],
        "env_reward": reward,
        "course_rows": rows,
    }


def _columns(slots: list[dict]) -> dict[str, list]:
    return {key: [slot[key] for slot in slots] for key in slots[0]}


def _groups(prompts: list[str], seeds: dict[str, int]) -> tuple[list[int], list[int]]:
    """Task seeds and group ids of the slots: one group per distinct prompt, in order of appearance."""
    unknown = [p for p in prompts if p not in seeds]
    if unknown:
        raise KeyError(f"rollout_func got a prompt that is not in its dataset: {unknown[0]!r}")
    groups: dict[str, int] = {}
    return [seeds[p] for p in prompts], [groups.setdefault(p, len(groups)) for p in prompts]


def _model(trainer):
    """The trainer's current weights (unwrapped from accelerate's wrappers), as `trl.course_rollout` samples them."""
    return trainer.accelerator.unwrap_model(trainer.model)


def episode_rollout(
    task: ToolTask, tokenizer, seeds: dict[str, int], generator: torch.Generator, course: GRPOConfig, keep=None
) -> RolloutFunc:
    """Independent episodes (GRPO's groups), in the course's trajectory or step mode (`course.rollout_mode`): each
    slot one episode; in step mode its rows are the episode's steps (`step_mode.rollout_steps`, the course's
    `history_window` and `anchor_source`). `keep` receives each call's trajectories (or `step_mode.Episode`s)."""

    def rollout(prompts: list[str], trainer) -> dict[str, list]:
        task_seeds, group_ids = _groups(prompts, seeds)
        engine = RolloutEngine(_model(trainer), tokenizer, task.sampling)
        envs = [task.make_env() for _ in prompts]
        if course.rollout_mode == "trajectory":
            episodes = engine.rollout(envs, task_seeds, group_ids, generator=generator)
            slots = [_slot([row_fields(t)], t.total_reward) for t in episodes]
        else:
            from course_lib.engine.step_mode import rollout_steps

            episodes = rollout_steps(
                engine, envs, task_seeds, group_ids, generator, course.history_window, course.anchor_source
            )
            slots = [_slot([row_fields(row) for row in e.rows], e.total_reward) for e in episodes]
        if keep is not None:
            keep[:] = episodes
        return _columns(slots)

    return rollout


def tree_rollout(
    task: ToolTask, tokenizer, seeds: dict[str, int], generator: torch.Generator, course: GRPOConfig, keep=None
) -> RolloutFunc:
    """ARPO's (or, with `course.tree.rule="aepo"`, AEPO's) entropy-guided tree, grown by `tree_rollout.sample_trees`
    with the trainer's current weights: each prompt's `num_generations` leaves are its generations, in the tree's
    order (global samples and branches by creation). A branch's shared prefix is repeated in every leaf that holds
    it, with the log-probs and masks it was sampled with: TRL trains on leaves, as the course's loop does. `keep`
    receives `(trajectories, TreeStats)` of each call."""
    from course_lib.engine.tree_rollout import sample_trees

    sampling = dataclasses.replace(task.sampling, snapshot_envs=True)  # forking needs the environments' copies

    def rollout(prompts: list[str], trainer) -> dict[str, list]:
        task_seeds, group_ids = _groups(prompts, seeds)
        size = trainer.num_generations
        if any(group_ids[i] != i // size for i in range(len(prompts))):
            raise ValueError("the tree rollout needs each prompt repeated num_generations times in a row")
        engine = RolloutEngine(_model(trainer), tokenizer, sampling)
        envs = [task.make_env() for _ in prompts]
        trajectories, stats = sample_trees(engine, envs, task_seeds[::size], size, course.tree, generator)
        if keep is not None:
            keep[:] = [trajectories, stats]
        for name, value in stats.counts(size, len(prompts) // size).items():
            trainer._metrics["train"][f"course/{name}"].append(value)  # TRL averages and logs these per step
        return _columns([_slot([row_fields(t)], t.total_reward) for t in trajectories])

    return rollout
