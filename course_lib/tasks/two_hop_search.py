"""Chapter 08's task, two-hop questions answered with a search tool (`envs.two_hop_qa`): its settings
(`SearchConfig`), the imperfect demonstrator's episodes, the held-out evaluation with ARPO's entropies after each tool
response, and the tree sampler's engine. Chapters 11, 12 and 17 train in the same setting.

Hop 1 finds the role holder of a company, hop 2 that person's city. Half the questions are ambiguous by
construction: the imprecise hop 1, `search NAME ROLE`, returns two companies of the same name and only the one in
the question's city is right. The precise hop 1, `search NAME in CITY ROLE` (the name and the city copied from the
question), returns only that one.

The base is warm-started (`python -m course_lib.data build ch08`, about 2 minutes on two CPU cores) on 8,000
episodes of an imperfect demonstrator on training questions, tool responses included and masked from the loss:
with probability `precise_share` (0.05) it plays the environment's `expert_actions` (precise hop 1, then the
single candidate), else its `naive_actions` (imprecise hop 1, then a candidate drawn at random). On the held-out
questions (sampled at temperature 1, evaluation seeds 1-3) its hop-1 search is precise in 4-6% of the episodes, and
then it solves every ambiguous question (21 of 21). Searching imprecisely, it copies a single candidate's name and
the answer reliably (unambiguous success 0.97-1.00) but fails most ambiguous questions (0.11-0.14): besides picking
at random, it often joins one candidate's given name to the other's family name, a search that finds no one.
Held-out success is 0.55-0.59 (ambiguous 0.15-0.20), inside the course's 10-60% band; that band is why the share is
small (demonstrated at 0.1 the base's success was 0.61, at 0.3 0.73). Its normalised entropy is 0.001 on the first
turn's first four tokens (the query's form is decided at the fifth), 0.005-0.006 right after a single-candidate
response and 0.071-0.075 right after a two-candidate one (0.066-0.072 over the ambiguous questions, which include the
few precise searches): ARPO's branch points.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import torch

from course_lib import course_config, envs
from course_lib.diagnostics import reasoning_mutual_information
from course_lib.engine.rollout import RolloutEngine, SamplingConfig, Trajectory
from course_lib.engine.tree_rollout import TreeConfig, turn_entropy
from course_lib.envs import two_hop_qa
from course_lib.envs.base import Dialogue, distinct_seeds
from course_lib.envs.two_hop_qa import Question, TwoHopQAEnv, demonstrator_actions, vocabulary
from course_lib.rl.train import GRPOConfig, evaluate_policy
from course_lib.rl.warm_start import SFTConfig
from course_lib.tasks import bases
from course_lib.tasks.tool_task import ToolTask

ENV_NAME = "two_hop_qa"
BASE_NAME = "ch08_base"
MAX_POSITIONS = 128
"""Position table of the base model: room for `max_total_tokens` (96) and more."""


@dataclass
class SearchConfig:
    """The two-hop search task and its training (the cpu preset's values as defaults): chapter 08's setting, in which
    chapters 11, 12 and 17 train too."""

    env_name: str = ENV_NAME
    """The environment (`envs.names()`). Another one than two_hop_qa needs a base of its own (`base`) and has no
    planted ambiguity: C8.1, which reads it, is then not applicable (docs/extending.md)."""
    env_kwargs: dict = field(default_factory=dict)
    """Keyword arguments of `envs.make(env_name, split=...)`; two_hop_qa's come from the fields below."""
    base: str = BASE_NAME
    """The warm-started base: a name in the data manifest, or a folder written by `models.save`."""
    model_preset: str = "tiny"
    """Model size, a key of `models.MODEL_PRESETS`."""
    ambiguous_share: float = 0.5
    """Probability that a drawn training question is ambiguous (the environment's default)."""
    max_tool_calls: int = 3
    """Searches allowed per episode: two are needed, one is spare."""
    max_turns: int = 4
    """Actions per episode (searches and the answer)."""
    demonstrations: int = 8000
    """Warm-start episodes of the imperfect demonstrator on training questions (about 8 per question; the
    warm start reads 64,000, so every episode about 8 times)."""
    precise_share: float = 0.05
    """The demonstrator's share of precise episodes: with this probability it plays `expert_actions` (hop 1
    `search NAME in CITY ROLE`, one candidate), else `naive_actions` (hop 1 `search NAME ROLE`, a random
    candidate when two are listed). Small, so that the base's held-out success stays inside the course's 10-60%
    band (at 0.05: 0.55-0.59 over evaluation seeds 1-3; at 0.1: 0.61, at 0.3: 0.73, one seed each) while it
    still searches precisely now and then (4-6% of held-out episodes), which RL can reinforce, and mostly meets
    the two-candidate responses after which its entropy rises."""
    sft: SFTConfig = field(default_factory=lambda: SFTConfig(steps=1000, batch_size=64, learning_rate=3e-3))
    """Warm start (ch06's). At 300 steps the base still miscopies unambiguous names (success 0.88 there); 2000
    steps at this rate destabilise it (0.72)."""
    sampling: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(
            temperature=1.0, max_turn_tokens=10, max_total_tokens=96, stop_tags=("</tool_call>", "</answer>")
        )
    )
    """Rollout sampling at temperature 1. The longest action, a precise search, is 8 tokens (`<tool_call> search
    W W in CITY ROLE </tool_call>`), 2 spare; an episode that makes all three searches (each an imprecise one,
    6 tokens, answered by a two-candidate response) and answers is at most 86 tokens, prompt included."""
    eval_tasks: int = 258
    """Distinct held-out questions per evaluation: the whole test split (132 ambiguous, 126 not)."""
    entropy_tokens: int = 4
    """How many policy tokens after a tool response (and at the first turn) `entropy_after_tool` averages."""
    grpo: GRPOConfig = field(
        default_factory=lambda: GRPOConfig(
            iterations=30,
            prompts_per_iteration=8,
            group_size=8,
            eval_every=10,
            tree=TreeConfig(global_samples=4, alpha=0.5, beta=0.2, entropy_tokens=4),
        )
    )
    """RL from the base, tool responses masked, no KL, one update per batch. The budget is `group_size` = M = 8
    trajectories per question for both samplers; the tree starts N = 4 of them as global samples (the released
    script's 8 of 16, halved) and branches with its alpha 0.5 and beta 0.2 on the entropy of the first 4 tokens
    after a tool response (the longest action is 6 tokens)."""


Config = TypeVar("Config", bound=SearchConfig)


def preset(scale: str | None = None, kind: type[Config] = SearchConfig) -> Config:
    """The task's configuration for `COURSE_SCALE` (`cpu` or `gpu`), as a `kind` (a chapter's subclass of
    `SearchConfig` adds fields of its own, left at their defaults)."""
    gpu = kind(
        model_preset="small", demonstrations=20_000, sft=SFTConfig(steps=2000, batch_size=128, learning_rate=2e-3)
    )
    return course_config.by_scale(kind(), gpu, scale)


def make_env(split: str = "train", config: SearchConfig | None = None) -> envs.TextEnv:
    config = config or SearchConfig()
    if config.env_name != ENV_NAME:
        return envs.make(config.env_name, split=split, **config.env_kwargs)
    return envs.make(
        ENV_NAME, split=split, ambiguous_share=config.ambiguous_share, max_tool_calls=config.max_tool_calls,
        max_turns=config.max_turns,
    )  # fmt: skip


def demonstration_seeds(count: int, seed: int) -> list[int]:
    """The training-split question seeds of the `count` demonstration episodes of a base built with `seed`."""
    return [seed * 10_000_019 + episode for episode in range(count)]


def demonstration_texts(count: int, seed: int, config: SearchConfig | None = None) -> list[tuple[str, str]]:
    """`(prompt, completion)` demonstrations on training questions, tool responses included.

    Each episode is played in the environment itself: the prompt is what `reset` returns and the completion
    joins every action and the observation that answered it, so the tokens are those a rollout of the same
    actions produces (`demonstration_examples` masks the tool responses, as a rollout's loss mask does).
    """
    config = config or SearchConfig()
    rng = random.Random(seed)
    return played_demonstrations(
        make_env("train", config),
        demonstration_seeds(count, seed),
        lambda question: demonstrator_actions(question, rng, config.precise_share),
    )


def played_demonstrations(
    env: TwoHopQAEnv, task_seeds: Sequence[int], actions: Callable[[Question], list[str]]
) -> list[tuple[str, str]]:
    """`(prompt, completion)` per task seed: `actions(question)` played in `env`, the completion joining every
    action and the observation that answered it (the tokens a rollout of the same actions produces). A demonstrator
    whose actions do not end the episode is a bug in the demonstrator: it raises rather than teach a cut episode."""
    texts = []
    for task_seed in task_seeds:
        prompt, _ = env.reset(seed=task_seed)
        parts = []
        for action in actions(env.question):
            observation, *_ = env.step(action)
            parts += [action, observation] if observation else [action]
        if not env.done:
            raise RuntimeError(f"a demonstration did not end its episode: {prompt} {' '.join(parts)}")
        texts.append((prompt, " ".join(parts)))
    return texts


build_base = bases.base_builder(
    preset, vocabulary, MAX_POSITIONS, lambda config, seed: demonstration_texts(config.demonstrations, seed, config)
)
"""`build_base(out_dir, seed, scale, progress, config)`: a fresh model warm-started on the demonstrations, saved."""


_held_out = bases.held_out_seeds(lambda: make_env("test"))


def test_seeds(count: int, config: SearchConfig | None = None) -> list[int]:
    """Seeds of `count` distinct held-out questions (the test split's first `count` seeds with pairwise different
    questions; cached for two_hop_qa), of `config`'s environment."""
    if config is not None and config.env_name != ENV_NAME:
        return envs.base.distinct_seeds(lambda: make_env("test", config), count)
    return _held_out(count)


def entropy_after_tool(trajectories: Sequence[Trajectory], tokenizer, k: int) -> dict[str, float]:
    """Normalised token entropy at the start of the answer and right after the first and second tool responses.

    Per trajectory, the mean entropy of its first `k` policy tokens of a turn, divided by log |V| (|V| =
    `len(tokenizer)`; `tree_rollout.turn_entropy`, what the tree sampler branches on), so that it lies in
    [0, 1] as ARPO's entropies do; then the mean over trajectories:

    - `initial`: the first turn (ARPO's initial entropy);
    - `after_tool_1`: the turn after the first tool response (a step whose info has `tool_result`), also
      split into `after_tool_1_ambiguous` and `after_tool_1_unambiguous` by `info["ambiguous"]`;
    - `after_tool_2` (and split likewise): the turn after the second tool response.

    `count_<key>` is the number of trajectories behind each mean; a mean over none is NaN. A trajectory whose
    tool response was the last thing it saw (cut by the length cap) adds nothing after it.
    """
    vocabulary = len(tokenizer)
    samples: dict[str, list[float]] = {"initial": []}
    for t in trajectories:
        initial = turn_entropy(t, 0, k, vocabulary)
        if initial is not None:
            samples["initial"].append(initial)
        tool_steps = [step for step, info in enumerate(t.infos) if "tool_result" in info]
        ambiguous = "ambiguous" if t.infos and t.infos[0].get("ambiguous") else "unambiguous"
        for number, step in enumerate(tool_steps[:2], start=1):
            after = turn_entropy(t, step + 1, k, vocabulary)
            if after is not None:
                for key in (f"after_tool_{number}", f"after_tool_{number}_{ambiguous}"):
                    samples.setdefault(key, []).append(after)
    keys = ["initial"] + [f"after_tool_{n}{split}" for n in (1, 2) for split in ("", "_ambiguous", "_unambiguous")]
    means = {key: float(np.mean(samples[key])) if samples.get(key) else float("nan") for key in keys}
    return {**means, **{f"count_{key}": float(len(samples.get(key, []))) for key in keys}}


def first_search_precise(trajectory: Trajectory) -> bool:
    """Whether the trajectory's first search was the precise company query (`search NAME in CITY ROLE`)."""
    searches = [info for info in trajectory.infos if "tool_result" in info]
    return bool(searches and searches[0].get("precise"))


def episode_stats(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Success on ambiguous and unambiguous questions, tool calls per episode and per solved one, and the share
    of episodes whose first search is precise (`precise_first_search`)."""
    calls = [sum("tool_result" in info for info in t.infos) for t in trajectories]
    solved = [c for c, t in zip(calls, trajectories, strict=True) if t.success]
    stats = {
        "tool_calls": float(np.mean(calls)),
        "tool_calls_per_solved": float(np.mean(solved)) if solved else float("nan"),
        "precise_first_search": float(np.mean([first_search_precise(t) for t in trajectories])),
    }
    for name, wanted in (("ambiguous", True), ("unambiguous", False)):
        subset = [t.success for t in trajectories if bool(t.infos and t.infos[0].get("ambiguous")) == wanted]
        stats[f"success_{name}"] = float(np.mean(subset)) if subset else float("nan")
        stats[f"count_{name}"] = float(len(subset))
    return stats


def evaluate(model, tokenizer, config: SearchConfig, seed: int, keep: bool = False) -> dict:
    """Held-out success (overall, ambiguous, unambiguous), tool calls, invalid rate and the entropies of
    `entropy_after_tool` (keys prefixed `entropy_`), one episode per held-out question at temperature 1. With
    `keep`, also the trajectories (under `trajectories`, in the order of `test_seeds`)."""
    stats, trajectories = evaluate_policy(
        model, tokenizer, lambda: make_env("test", config), test_seeds(config.eval_tasks, config), config.sampling, seed
    )
    entropies = entropy_after_tool(trajectories, tokenizer, config.entropy_tokens)
    stats = {**stats, **episode_stats(trajectories), **{f"entropy_{k}": v for k, v in entropies.items()}}
    return {**stats, "trajectories": trajectories} if keep else stats


def tree_engine(model, tokenizer, config: SearchConfig) -> RolloutEngine:
    """An engine that keeps environment copies after every step, which forking needs."""
    return RolloutEngine(model, tokenizer, dataclasses.replace(config.sampling, snapshot_envs=True))


def demonstrator_episodes(count: int, seed: int) -> list[Dialogue]:
    """`count` episodes of the warm start's demonstrator (`two_hop_qa.demonstrator_episodes`), cpu preset, as chat
    messages (the stand-ins' tokenizer text)."""
    config = SearchConfig()
    env = make_env("train", config)
    return two_hop_qa.demonstrator_episodes(env, demonstration_seeds(count, seed), seed, config.precise_share)


def tool_task() -> ToolTask:
    """The two-hop search task at the cpu preset with ARPO's loop, chapter 08's (TRL's methods route and verl train
    it; chapters 11 and 12 train on it too)."""
    config = preset("cpu")
    split_env = functools.partial(make_env, config=config)

    def held_out(split: str, count: int) -> list[int]:
        return test_seeds(count, config) if split == "test" else distinct_seeds(lambda: split_env(split), count)

    return ToolTask(
        config.env_name, config.base, config.sampling, split_env, held_out,
        method=lambda: dataclasses.replace(config.grpo, sampler="tree"), method_name="arpo", chapter="ch08",
    )  # fmt: skip


# The MI monitor of chapter 12's stop with rollback (also on TRL and verl) --------------------------------------------
MONITOR_PROMPTS = 32
"""Training questions the MI monitor plays (one episode each) and cross-scores: chapter 12's default."""
GATE_DROP = 0.2
"""The MI stop fires when the monitor's MI falls below (1 - GATE_DROP) x the base's: chapter 12's default."""
MONITOR_SEED = 33_000_000
"""The MI monitor's training questions are `MONITOR_SEED + p` (the same for every run seed and arm)."""


def first_action_mi(model, tokenizer, trajectories, samples: int, seed: int) -> dict[str, float]:
    """MI of the first action over `trajectories`, each its own input (one per distinct question)."""
    for index, trajectory in enumerate(trajectories):
        trajectory.group_id = index
    generator = torch.Generator().manual_seed(seed)
    return reasoning_mutual_information(model, tokenizer, trajectories, samples, generator=generator, span="action")


def monitor_mi(model, tokenizer, config: SearchConfig, prompts: int, seed: int) -> float:
    """Chapter 12's MI stop's measurement (TRL's and verl's monitors take it too): `prompts` training questions
    (`MONITOR_SEED + p`) played once, every first action scored under every question."""
    seeds = [MONITOR_SEED + p for p in range(prompts)]
    _, trajectories = evaluate_policy(model, tokenizer, lambda: make_env("train", config), seeds, config.sampling, seed)
    return first_action_mi(model, tokenizer, trajectories, prompts, seed)["mi"]
