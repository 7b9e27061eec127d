"""Chapter 09's task, a slippery 4x4 FrozenLake played with a short reasoning before every move (`envs.frozen_lake`):
its settings (`LakeConfig`), the noisy demonstrator whose reasoning names the agent's cell, the held-out evaluation
with the reasoning's input dependence (`reasoning_stats`) and the evaluation callback a run keeps its last episodes
from (`HeldOutEvaluator`). Chapter 10 trains from the same base and evaluates on the same maps. The base is built by
`python -m course_lib.data build ch09`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from course_lib import course_config, envs
from course_lib.engine.rollout import SamplingConfig, Trajectory
from course_lib.envs import frozen_lake
from course_lib.envs.base import InvalidAction
from course_lib.envs.reasoning import parse_turn, turn_text
from course_lib.rl.train import evaluate_policy
from course_lib.rl.warm_start import SFTConfig
from course_lib.tasks import bases

ENV_NAME = "frozen_lake"
BASE_NAME = "ch09_base"
MAX_POSITIONS = 512
"""Position table of the base (and the critic): an episode of 8 turns is at most about 170 tokens."""
STOP = "</answer>"


@dataclass
class LakeConfig:
    """The slippery FrozenLake with a reasoning turn, its base and its held-out evaluation (the cpu preset's values as
    defaults): chapter 09's setting, whose base and evaluation chapter 10 shares."""

    model_preset: str = "tiny"
    """Model size, a key of `models.MODEL_PRESETS` (the critic has the same size, as in RAGEN)."""
    demonstrations: int = 4000
    """Warm-start episodes of the noisy demonstrator on training maps."""
    expert_noise: float = 0.3
    """Probability that a demonstration move is uniformly random instead of a shortest-path move (its reasoning
    still names the cell and the move it makes): the base succeeds sometimes and leaves RL something to learn."""
    sft: SFTConfig = field(default_factory=lambda: SFTConfig(steps=1200, batch_size=32, learning_rate=3e-3))
    """Warm start. Chosen after seeing RL on a first base (disclosed in the chapter): warm-started for 600 steps
    (loss already flat at about 0.12), it had held-out success 0.25 and every RL arm degraded it from the first
    iterations at the course's learning rate; the base warm-started twice as long (0.21, on the whole-map split of
    the time) first improves under StarPO (seed 0 of a pilot: 0.21 to 0.31 within 10 iterations). Rebuilt with the
    same settings on the layout split, it has held-out success 0.27-0.31 (evaluation seeds 1-3)."""
    sampling: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(
            temperature=1.0, max_turn_tokens=16, max_total_tokens=400, stop_tags=(STOP,)
        )
    )
    """Rollout sampling at temperature 1 (training and evaluation). A demonstrated turn is 13 tokens
    (`<think> you r2 c3 go down </think> <answer> down </answer>`); 16 leave room for a longer, invalid one."""
    eval_tasks: int = 128
    """Distinct held-out maps per evaluation."""


Config = TypeVar("Config", bound=LakeConfig)


def preset(scale: str | None = None, kind: type[Config] = LakeConfig, **gpu_changes) -> Config:
    """The task's configuration for `COURSE_SCALE` (`cpu` or `gpu`), as a `kind` (a chapter's subclass of
    `LakeConfig`, whose own fields take `gpu_changes` under the gpu preset and their defaults otherwise)."""
    gpu = kind(
        model_preset="small",
        demonstrations=10_000,
        sft=SFTConfig(steps=1500, batch_size=64, learning_rate=2e-3),
        eval_tasks=512,
        **gpu_changes,
    )
    return course_config.by_scale(kind(), gpu, scale)


def make_env(split: str = "train") -> envs.TextEnv:
    return envs.make(ENV_NAME, split=split)


def demonstration_seeds(count: int, seed: int) -> list[int]:
    """The training-split map seeds of the `count` demonstration episodes of a base built with `seed`."""
    return [seed * 10_000_019 + episode for episode in range(count)]


def demonstration_texts(count: int, seed: int, config: LakeConfig | None = None) -> list[tuple[str, str]]:
    """`(prompt, completion)` episodes of the noisy demonstrator on training maps, played in the environment
    (so the observations are the environment's own, masked by `demonstration_examples` as a rollout's are).
    Each move is a shortest-path move, or with probability `expert_noise` (or when no path is left) a uniformly
    random one; the reasoning before it names the agent's cell and the move (`frozen_lake.reasoning`)."""
    config = config or LakeConfig()
    rng = random.Random(seed)
    env = make_env("train")
    texts = []
    for task_seed in demonstration_seeds(count, seed):
        prompt, _ = env.reset(seed=task_seed)
        parts = []
        while not env.done:
            try:
                move = frozen_lake.expert_move(env) if rng.random() >= config.expert_noise else None
            except ValueError:  # cut off from the goal by holes
                move = None
            move = move or rng.choice(list(frozen_lake.MOVES))
            action = turn_text(frozen_lake.reasoning(env, move), move)
            observation, *_ = env.step(action)
            parts += [action, observation] if observation and not env.done else [action]
        texts.append((prompt, " ".join(parts)))
    return texts


build_base = bases.base_builder(
    preset, frozen_lake.vocabulary, MAX_POSITIONS,
    lambda config, seed: demonstration_texts(config.demonstrations, seed, config),
)  # fmt: skip
"""`build_base(out_dir, seed, scale, progress, config)`: a fresh model warm-started on the demonstrations, saved."""


test_seeds = bases.held_out_seeds(lambda: make_env("test"))
"""`test_seeds(count)`: seeds of `count` distinct held-out maps."""


def turn_texts(trajectory: Trajectory, tokenizer) -> list[str]:
    """The decoded policy text of each turn (`Trajectory.turn_ids`), in order."""
    turns: dict[int, list[int]] = {}
    for token, turn, policy in zip(trajectory.token_ids, trajectory.turn_ids, trajectory.loss_mask, strict=True):
        if policy and turn >= 0:
            turns.setdefault(turn, []).append(token)
    return [tokenizer.decode(turns[k]) for k in sorted(turns)]


def reasoning_words(text: str) -> list[str] | None:
    """The reasoning words of one turn, or None if the turn breaks the format."""
    try:
        return parse_turn(text)[0]
    except InvalidAction:
        return None


def reasoning_stats(trajectories: Sequence[Trajectory], tokenizer) -> dict[str, float]:
    """How much the reasoning still reads its input.

    - `reasoning_tracks_state`: share of well-formed turns whose reasoning names the agent's true cell (`you rR
      cC`, as the demonstrator's does), over every turn of every episode;
    - `distinct_first_reasoning`: distinct first-turn reasonings over episodes. Each episode is a distinct map, but
      a first reasoning names only the start cell and a move (at most 16 x 4 = 64 different ones), so this is at
      most 0.5 on 128 maps; it falls when the reasoning stops varying with the start cell (a template);
    - `first_reasoning_tracks_state`: the same as the first on first turns only.
    """
    tracked = total = first_tracked = first_total = 0
    firsts = []
    for trajectory in trajectories:
        for k, text in enumerate(turn_texts(trajectory, tokenizer)):
            words = reasoning_words(text)
            if words is None or k >= len(trajectory.anchors):
                continue
            _, position = trajectory.anchors[k]
            truth = ["you", *frozen_lake.cell_words(position).split()]
            hit = words[:3] == truth
            tracked, total = tracked + hit, total + 1
            if k == 0:
                first_tracked, first_total = first_tracked + hit, first_total + 1
                firsts.append(" ".join(words))
    return {
        "reasoning_tracks_state": tracked / max(total, 1),
        "first_reasoning_tracks_state": first_tracked / max(first_total, 1),
        "distinct_first_reasoning": len(set(firsts)) / max(len(trajectories), 1),
    }


def evaluate(model, tokenizer, config: LakeConfig, seed: int, keep: bool = False) -> dict:
    """Held-out success (one episode per distinct map, temperature 1), turns, invalid-turn rate, entropy and the
    reasoning's input dependence (`reasoning_stats`); with `keep`, also the trajectories."""
    stats, trajectories = evaluate_policy(
        model, tokenizer, lambda: make_env("test"), test_seeds(config.eval_tasks), config.sampling, seed
    )
    stats |= reasoning_stats(trajectories, tokenizer)
    return {**stats, "trajectories": trajectories} if keep else stats


class HeldOutEvaluator:
    """`train_grpo`'s evaluation callback: `evaluate` on the held-out maps (seed `seed`), keeping the trajectories of
    its latest call. Given `start` (the base's evaluation with the same seed), the first call, made on the untouched
    copy of the base at iteration 0, returns it instead of repeating it: the same weights and seed give the same
    numbers, and every arm's run starts with that call."""

    def __init__(self, tokenizer, config, seed: int, start: Mapping | None = None, measure=None):
        self.tokenizer, self.config, self.seed = tokenizer, config, seed
        self.start = dict(start) if start is not None else None
        self.measure = measure or evaluate
        """`measure(model, tokenizer, config, seed, keep=True)`: this task's `evaluate`, or a chapter's own."""
        self.trajectories: list[Trajectory] = []

    def __call__(self, model) -> dict[str, float]:
        if self.start is not None:
            stats, self.start = self.start, None
            return stats
        stats = self.measure(model, self.tokenizer, self.config, self.seed, keep=True)
        self.trajectories = stats.pop("trajectories")
        return stats


def without_trajectories(stats: Mapping) -> dict:
    return {k: v for k, v in stats.items() if k != "trajectories"}
