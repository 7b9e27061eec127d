"""Chapter 07's task, the key-and-door grid in step mode (`envs.key_door`): its settings (`KeyDoorConfig`), its
environments in the full, aliased and noisy views (`EnvFactory`), the noisy expert's demonstrations, the held-out
evaluation and RL with evaluation (`train`). Chapter 17 trains GraphGPO in the same setting. The base is built by
`python -m course_lib.data build ch07`."""

from __future__ import annotations

import dataclasses
import functools
import random
from dataclasses import dataclass, field
from typing import TypeVar

from course_lib import course_config, envs
from course_lib.algos.gigpo import GiGPOConfig
from course_lib.engine.rollout import SamplingConfig
from course_lib.envs import key_door
from course_lib.envs.base import Dialogue, distinct_seeds
from course_lib.envs.key_door import ACTIONS, expert_action
from course_lib.rl.train import GRPOConfig, evaluate_policy, train_grpo
from course_lib.rl.warm_start import SFTConfig
from course_lib.tasks.tool_task import ToolTask

ENV_NAME = "key_door"
BASE_NAME = "ch07_base"
STOP = "</action>"


@dataclass
class KeyDoorConfig:
    """The key-door task and its training in step mode (the cpu preset's values as defaults): chapter 07's setting,
    which chapter 17 trains GraphGPO in."""

    env_name: str = ENV_NAME
    """The environment (`envs.names()`). Another one than key_door needs a base of its own (`base`) and its own stop
    tag in `sampling`, and has no noisy view: the exact control C7.2 is then not applicable (docs/extending.md)."""
    env_kwargs: dict = field(default_factory=dict)
    """Keyword arguments of `envs.make(env_name, split=...)`; key_door's size, view and episode limit come from the
    fields below."""
    base: str = BASE_NAME
    """The warm-started base: a name in the data manifest, or a folder written by `models.save` (a fork's base,
    whose tokenizer covers its environment's words)."""
    model_preset: str = "micro"
    """Model size, a key of `models.MODEL_PRESETS` (114k parameters: one action word from a short text)."""
    size: int = 6
    """Grid side."""
    max_steps: int = 22
    """Episode limit in RL and evaluation. Shortest plans take 12.4 steps on average; every held-out task has one
    of at most 22 steps (two training tasks in a thousand need 23 or 24). Chosen, from the base's held-out success
    alone (0.34, 0.42, 0.53, 0.61, 0.76 at limits 18, 20, 22, 24, 30), to put the base inside the course's
    10-60% band."""
    demo_max_steps: int = 30
    """Episode limit of the warm-start demonstrations (the committed base was built with it)."""
    demonstrations: int = 6000
    """Warm-start episodes of a noisy expert on training tasks (about 140,000 steps: more than the warm start
    reads, 2000 x 64, so the model learns the demonstrator's mixture instead of memorising its draws)."""
    expert_noise: float = 0.3
    """Probability that a demonstration step is a uniformly random action instead of the expert's: the
    warm-started policy imitates this mixture, so it succeeds sometimes, wastes steps, and leaves RL
    something to learn."""
    sft: SFTConfig = field(default_factory=lambda: SFTConfig(steps=2000, batch_size=64, learning_rate=3e-3))
    """Warm start."""
    sampling: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(
            temperature=1.0, max_turn_tokens=3, max_total_tokens=40, stop_tags=(STOP,)
        )
    )
    """One action word and the stop tag per step, sampled at temperature 1 in training and evaluation."""
    grpo: GRPOConfig = field(
        default_factory=lambda: GRPOConfig(
            iterations=20,
            prompts_per_iteration=4,
            group_size=8,
            learning_rate=1e-3,
            eval_every=10,
            rollout_mode="step",
            history_window=0,
            anchor_source="observation",
            invalid_penalty=0.1,
            gigpo=GiGPOConfig(gamma=0.95, step_weight=1.0, episode_baseline="pooled"),
        )
    )
    """RL in step mode (no KL, one on-policy update per batch); verl-agent's GiGPO defaults where they
    apply: gamma 0.95, omega 1, the pooled episode baseline, the invalid-action penalty 0.1."""
    eval_tasks: int = 200
    """Distinct held-out tasks per evaluation."""


Config = TypeVar("Config", bound=KeyDoorConfig)


def preset(scale: str | None = None, kind: type[Config] = KeyDoorConfig) -> Config:
    """The task's configuration for `COURSE_SCALE` (`cpu` or `gpu`), as a `kind` (a chapter's subclass of
    `KeyDoorConfig` adds fields of its own, left at their defaults)."""
    gpu = kind(
        model_preset="small",
        demonstrations=10_000,
        sft=SFTConfig(steps=2000, batch_size=128, learning_rate=2e-3),
        grpo=dataclasses.replace(kind().grpo, iterations=150, prompts_per_iteration=16),
        eval_tasks=500,
    )
    return course_config.by_scale(kind(), gpu, scale)


class EnvFactory:
    """Training environments of one run; in the noisy view each gets its own `noise_id`, the same in
    every run, so two runs that differ only in their estimator see the same noise."""

    def __init__(self, split: str, config: KeyDoorConfig, view: str = "full"):
        self.split, self.config, self.view, self.made = split, config, view, 0

    def __call__(self) -> envs.TextEnv:
        config = self.config
        if config.env_name != ENV_NAME:
            if self.view != "full":
                raise ValueError(f"the {self.view} view is key_door's; {config.env_name} has only its own")
            return envs.make(config.env_name, split=self.split, **config.env_kwargs)
        extra = {"noise_id": self.made} if self.view == "noisy" else {}
        self.made += 1
        return envs.make(
            ENV_NAME, split=self.split, size=config.size, view=self.view, max_steps=config.max_steps,
            **extra, **config.env_kwargs,
        )  # fmt: skip


def demonstration_seeds(count: int, seed: int) -> list[int]:
    """The training-split task seeds of the `count` demonstration episodes of a base built with `seed`."""
    return [seed * 10_000_019 + episode for episode in range(count)]


def demonstration_texts(count: int, seed: int, config: KeyDoorConfig | None = None) -> list[tuple[str, str]]:
    """`(observation, action)` pairs from `count` episodes of a noisy demonstrator on training tasks: at
    each step a uniformly random action with probability `expert_noise`, else the expert's (the first of
    `ACTIONS` that starts a shortest plan). The warm-started policy imitates this mixture. Step-mode
    prompts, so the warm start sees exactly what the policy will."""
    config = config or KeyDoorConfig()
    rng = random.Random(seed)
    env = envs.make(ENV_NAME, split="train", size=config.size, max_steps=config.demo_max_steps)
    texts = []
    for task_seed in demonstration_seeds(count, seed):
        observation, _ = env.reset(seed=task_seed)
        while not env.done:
            action = rng.choice(ACTIONS) if rng.random() < config.expert_noise else expert_action(env)
            texts.append((observation, f"{action} {STOP}"))
            observation, *_ = env.step(action)
    return texts


def test_seeds(count: int, config: KeyDoorConfig) -> list[int]:
    """Seeds of `count` distinct held-out tasks (`envs.base.distinct_seeds`); for key_door they depend on the grid
    size only."""
    if config.env_name != ENV_NAME:
        return distinct_seeds(EnvFactory("test", config), count)
    return _held_out(count, config.size)


@functools.lru_cache(maxsize=8)
def _held_out(count: int, size: int) -> list[int]:
    """Cached: every evaluation during training asks again."""
    return distinct_seeds(lambda: envs.make(ENV_NAME, split="test", size=size), count)


def evaluate(model, tokenizer, config: KeyDoorConfig, seed: int, view: str = "full") -> dict[str, float]:
    """Held-out success, steps per episode and invalid-action rate, in the rollout mode training uses
    (`grpo.rollout_mode`: step mode for the chapter's own) at temperature 1, on the held-out tasks shown in `view`
    (`full` or `aliased`; the tasks are the same in every view)."""
    stats, _ = evaluate_policy(
        model, tokenizer, EnvFactory("test", config, view), test_seeds(config.eval_tasks, config), config.sampling,
        seed, rollout_mode=config.grpo.rollout_mode, history_window=config.grpo.history_window,
    )  # fmt: skip
    return stats


def train(model, tokenizer, config: KeyDoorConfig, seed: int, grpo: GRPOConfig, view: str = "full") -> list[dict]:
    """RL with `grpo`'s estimator on training tasks of `view` (model trained in place), evaluated on the held-out
    tasks in the same view every `eval_every` iterations (not in the noisy view, whose runs are compared exactly)."""
    return train_grpo(
        model, tokenizer, EnvFactory("train", config, view), config.sampling, grpo, seed,
        evaluate=(lambda m: evaluate(m, tokenizer, config, seed + 1, view)) if view != "noisy" else None,
    )  # fmt: skip


def demonstrator_episodes(count: int, seed: int) -> list[Dialogue]:
    """`count` episodes of the warm start's noisy expert (`key_door.demonstrator_episodes`), cpu preset, with the
    task's stop tag, as chat messages (the stand-ins' tokenizer text)."""
    config = KeyDoorConfig()
    seeds = demonstration_seeds(count, seed)
    return key_door.demonstrator_episodes(seeds, seed, config.size, config.max_steps, config.expert_noise, STOP)


def tool_task() -> ToolTask:
    """The key-and-door task in step mode with GiGPO's loop, chapter 07's (TRL's methods route trains it)."""
    config = KeyDoorConfig()
    return ToolTask(
        config.env_name, config.base, config.sampling, EnvFactory("train", config),
        method=lambda: dataclasses.replace(config.grpo, advantage="gigpo"), method_name="gigpo", step_mode=True,
        chapter="ch07",
    )  # fmt: skip
