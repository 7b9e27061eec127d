"""Chapters 07 and 08, and the survey's methods on them, trained by TRL's `GRPOTrainer` through the course's trainer
subclass (`trl_methods.CourseMethodTrainer`) and rollout functions (`trl_rollouts`).

    python -m course_lib.integrations.course_trl --chapter 07 --steps 2                  # GiGPO, step mode
    python -m course_lib.integrations.course_trl --chapter 08 --steps 2                  # ARPO's tree
    python -m course_lib.integrations.course_trl --chapter 08 --steps 2 --method aepo    # AEPO: tree rule and clip

Each method is a change to the chapter's own loop configuration (`train.GRPOConfig`), which the trainer reads, so
on the same episodes TRL computes the advantages, filter and loss the chapter's `train_grpo` would: chapter 07 in
step mode (its base holds 48 positions, too few for a whole episode), chapter 08 in trajectory mode. Changes add up
on the chapter's own method: on chapter 08, `gigpo`, `starpo_s` and `snr` run on ARPO's tree, and `grpo` goes back to
independent groups. What differs from `train_grpo` is the choice of tasks: TRL draws its batches from a dataset of
distinct training prompts (`trl.dataset_prompts`), not from the loop's seed schedule.
"""

from __future__ import annotations

import dataclasses

import torch

from course_lib import data
from course_lib.integrations.course_trl import TRLSettings, _trainer, dataset_prompts, quiet_train, stop_at_tags
from course_lib.integrations.trl_methods import POLICY_LOSSES, CourseMethodTrainer
from course_lib.integrations.trl_rollouts import episode_rollout, tree_rollout
from course_lib.rl.train import GRPOConfig
from course_lib.tasks import two_hop_search
from course_lib.tasks.tool_task import ToolTask


def default_methods() -> dict[str, str]:
    """Chapter number -> its own method (`ToolTask.method_name`), for each chapter whose task has one (07: GiGPO,
    08: ARPO): the chapters this route trains."""
    from course_lib import chapters  # imported here: the chapter modules pull in the whole course

    return {key.removeprefix("ch"): task.method_name for key, task in chapters.tasks().items() if task.method}


"""Each chapter's own method, what `--chapter` trains without `--method`."""
METHODS: dict[str, dict] = {
    "grpo": {"advantage": "grpo", "sampler": "groups"},
    "gigpo": {"advantage": "gigpo"},
    "arpo": {"sampler": "tree", "rule": "arpo"},
    "aepo": {"sampler": "tree", "rule": "aepo", "policy_loss": "entropy_balanced"},
    "starpo_s": {"batch_filter": "starpo_s"},
    "snr": {"batch_filter": "snr_top_p"},
}
"""`--method`: the change each makes to the chapter's configuration (ch11's `aepo` arm for AEPO; the filters'
settings are `FilterConfig`'s defaults, the papers')."""


def chapter_setup(chapter: str | ToolTask) -> tuple[ToolTask, GRPOConfig]:
    """A training task with a method of its own (chapter 07's or 08's, cpu preset, or such a `ToolTask` itself) and
    that method's loop configuration (`ToolTask.method`)."""
    if isinstance(chapter, ToolTask):
        found = chapter
    else:
        from course_lib import chapters  # a command's `--chapter 08`: read from the chapters' index

        owned = default_methods()
        if chapter not in owned:
            raise KeyError(f"the methods' route trains chapters {', '.join(owned)}, not {chapter!r}")
        found = chapters.task(chapter)
    if found.method is None:
        raise KeyError(f"{found.label} has no method of its own: the methods' route trains a task that gives one")
    return found, found.method()


def method_config(course: GRPOConfig, method: str, settings: TRLSettings) -> GRPOConfig:
    """`course` with `method`'s changes (`METHODS`) and the run's group size, prompts and learning rate."""
    if method not in METHODS:
        raise KeyError(f"unknown method {method!r}; choose from {sorted(METHODS)}")
    change = dict(METHODS[method])
    tree = dataclasses.replace(course.tree, rule=change.pop("rule", course.tree.rule))
    if change.get("sampler") == "tree" and course.rollout_mode != "trajectory":
        raise ValueError(f"{method} grows a tree, which needs trajectory mode; this chapter trains in step mode")
    return dataclasses.replace(
        course, **change, tree=tree, group_size=settings.group, prompts_per_iteration=settings.prompts,
        learning_rate=settings.learning_rate,
    )  # fmt: skip


def method_trainer(
    chapter: str | ToolTask,
    method: str | None,
    settings: TRLSettings,
    model=None,
    tokenizer=None,
    keep: list | None = None,
    course: GRPOConfig | None = None,
    callbacks: list | None = None,
) -> CourseMethodTrainer:
    """`CourseMethodTrainer` on chapter `chapter`'s task (or that `ToolTask`) with `method` (the task's own if None), or
    with the loop configuration `course` as given; `keep` receives each step's episodes (`trl_rollouts`)."""
    task, own = chapter_setup(chapter)
    if course is None:
        course = method_config(own, method or task.method_name, settings)
    if model is None:
        model, tokenizer = data.load_base(task.base)
    prompts = dataset_prompts(task, settings)
    generator = torch.Generator().manual_seed(settings.seed)
    make = tree_rollout if course.sampler == "tree" else episode_rollout
    rollout = make(task, tokenizer, prompts, generator, course, keep=keep)
    stop_at_tags(model, tokenizer, task, warn=False)
    length = task.sampling.max_total_tokens if course.rollout_mode == "trajectory" else task.sampling.max_turn_tokens
    overrides = {"epsilon": course.clip_low, "epsilon_high": course.clip_high,
                 "delta": POLICY_LOSSES.get(course.policy_loss)}  # fmt: skip
    return _trainer(
        model, tokenizer, prompts, _episode_reward, settings, length, rollout_func=rollout,
        trainer_class=CourseMethodTrainer, config_overrides=overrides, course=course, callbacks=callbacks,
    )  # fmt: skip


def _episode_reward(prompts, completions, env_reward, **kwargs) -> list[float]:
    """TRL's reward function: the episode's reward (what TRL logs; the advantages are the course's)."""
    return [float(r) for r in env_reward]


_episode_reward.__name__ = "env_reward"


def chapter_settings(chapter: str, steps: int, prompts: int | None, group: int | None, learning_rate: float | None,
                     seed: int = 0, gpu: bool = False) -> TRLSettings:  # fmt: skip
    """The command line's settings: the chapter's own prompts per step, group size and learning rate where the
    command does not set them."""
    _, course = chapter_setup(chapter)
    return TRLSettings(
        steps=steps, prompts=prompts or course.prompts_per_iteration, group=group or course.group_size,
        learning_rate=learning_rate or course.learning_rate, seed=seed, gpu=gpu,
    )  # fmt: skip


def mi_monitor(chapter: str, model, tokenizer, every: int, seed: int = 0):
    """Chapter 12's MI stop with rollback as a TRL callback (`trl_monitor.MIRollback`): chapter 12's `monitor_mi`
    (its monitor prompts, played and cross-scored) every `every` steps, stopping below (1 - `gate_drop`) x the base's
    MI, measured here on `model` before training. Chapter 12 monitors chapter 08's task, so only chapter 08 has it."""
    if chapter != "08":
        raise ValueError("the MI monitor is chapter 12's, on chapter 08's task: use it with --chapter 08")
    from course_lib.integrations.trl_monitor import MIRollback

    task = two_hop_search.SearchConfig()

    def measure(m) -> float:
        return two_hop_search.monitor_mi(m, tokenizer, task, two_hop_search.MONITOR_PROMPTS, seed)

    return MIRollback(measure, measure(model), two_hop_search.GATE_DROP, every)


def train_method(
    chapter: str, method: str | None, settings: TRLSettings, mi_every: int = 0
) -> tuple[CourseMethodTrainer, str]:
    """Train `settings.steps` TRL steps of `method` (the chapter's own if None) on chapter `chapter`, with chapter
    12's MI stop every `mi_every` steps if positive (`mi_monitor`); returns the trainer and the method's name."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.set_verbosity_error()
    method = method or default_methods()[chapter]
    task, _ = chapter_setup(chapter)
    model, tokenizer = data.load_base(task.base)
    callbacks = [mi_monitor(chapter, model, tokenizer, mi_every, settings.seed)] if mi_every > 0 else None
    trainer = method_trainer(chapter, method, settings, model, tokenizer, callbacks=callbacks)
    quiet_train(trainer)
    return trainer, method
