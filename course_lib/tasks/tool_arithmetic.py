"""Chapter 00's task, the tool agent on arithmetic (`envs.arithmetic`): its settings (`ArithmeticConfig`), the
warm start's demonstrations, the held-out evaluation, the exact checks of the rollout bookkeeping and the whole run
(`train_and_evaluate`), which chapters 13-16 reuse on TRL, on a model of one's own, in the pitfalls lab and on
SmolLM2. The base is built by `python -m course_lib.data build ch00`."""

from __future__ import annotations

import copy
import functools
import random
import time
from dataclasses import dataclass, field

from course_lib import course_config, envs
from course_lib.engine.bookkeeping import alignment_errors, expected_tokens
from course_lib.engine.rollout import RolloutEngine, SamplingConfig
from course_lib.envs import arithmetic
from course_lib.envs.arithmetic import OPERAND_RANGE, draw_problem, solve, vocabulary
from course_lib.envs.base import Dialogue
from course_lib.rl.train import GRPOConfig, evaluate_policy, train_grpo
from course_lib.rl.warm_start import SFTConfig
from course_lib.tasks import bases
from course_lib.tasks.tool_task import ToolTask, held_out_on_test
from course_lib.tokenizer import build_tokenizer, is_word_level

ENV_NAME = "tool_arithmetic"
BASE_NAME = "ch00_base"


@dataclass
class ArithmeticConfig:
    """The tool agent's task and training: its base, warm start, GRPO, sampling and evaluation (the cpu preset's
    values as defaults). Chapter 00's config; chapters 13-15 embed it."""

    model_preset: str = "tiny"
    """Model size, a key of `models.MODEL_PRESETS`."""
    demonstrations: int = 20_000
    """Number of demonstration episodes for the warm start."""
    tool_share: float = 0.4
    """Share of demonstrations that call the tool (the rest answer directly)."""
    direct_correct: float = 0.3
    """Share of direct answers in the demonstrations that are right (the others are off by a bit)."""
    sft: SFTConfig = field(default_factory=lambda: SFTConfig(steps=1000, batch_size=64, learning_rate=3e-3))
    """Warm start."""
    grpo: GRPOConfig = field(default_factory=lambda: GRPOConfig(iterations=50, prompts_per_iteration=8, group_size=8))
    """RL."""
    sampling: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(temperature=1.0, max_turn_tokens=8, max_total_tokens=40)
    )
    """Rollout sampling (temperature 1, as RL samples)."""
    eval_tasks: int = 200
    """Distinct held-out test problems per evaluation (`test_seeds`)."""
    check_episodes: int = 64
    """Episodes sampled for the exactness checks (C0.3, C0.4)."""


def preset(scale: str | None = None) -> ArithmeticConfig:
    """The task's configuration for `COURSE_SCALE` (`cpu` or `gpu`)."""
    gpu = ArithmeticConfig(
        model_preset="small",
        demonstrations=50_000,
        sft=SFTConfig(steps=3000, batch_size=128, learning_rate=2e-3),
        grpo=GRPOConfig(iterations=100, prompts_per_iteration=32, group_size=16, learning_rate=3e-4, eval_every=20),
        eval_tasks=1000,
    )
    return course_config.by_scale(ArithmeticConfig(), gpu, scale)


def smollm2_config() -> ArithmeticConfig:
    """Chapter 00 sized for SmolLM2-135M-Instruct with LoRA on 2 CPU cores (docs/experiments/ch00-smollm2.md): 512
    demonstrations and 30 warm-start steps of 8 (the adapter at 1e-3), then 8 GRPO iterations of 4 prompts x 8
    samples at 2e-4, evaluated on 64 distinct held-out problems before and after, 32 episodes checked."""
    return ArithmeticConfig(
        demonstrations=512,
        sft=SFTConfig(steps=30, batch_size=8, learning_rate=1e-3, warmup_steps=3),
        grpo=GRPOConfig(iterations=8, prompts_per_iteration=4, group_size=8, learning_rate=2e-4, eval_every=8),
        eval_tasks=64,
        check_episodes=32,
    )


def make_env(split: str = "train") -> envs.TextEnv:
    return envs.make(ENV_NAME, split=split)


def demonstration_texts(count: int, seed: int, tool_share: float, direct_correct: float) -> list[tuple[str, str]]:
    """`(prompt, completion)` demonstrations on train problems.

    With probability `tool_share` the completion calls the tool and copies its result; otherwise
    it answers directly, right with probability `direct_correct` and otherwise off by 1..50 (the
    kind of near miss a model guessing sums would make).
    """
    rng = random.Random(seed)
    texts = []
    for index in range(count):
        a, op, b = draw_problem(seed * 10_000_019 + index, "train")
        result = solve(a, op, b)
        prompt = f"<question> {a} {op} {b} </question>"
        if rng.random() < tool_share:
            completion = (
                f"<tool_call> {a} {op} {b} </tool_call> "
                f"<tool_response> {result} </tool_response> <answer> {result} </answer>"
            )
        else:
            guess = result
            if rng.random() >= direct_correct:
                guess = max(0, min(2 * OPERAND_RANGE[1], result + rng.choice([-1, 1]) * rng.randint(1, 50)))
            completion = f"<answer> {guess} </answer>"
        texts.append((prompt, completion))
    return texts


def chat_sampling(tokenizer) -> SamplingConfig:
    """The cpu preset's sampling in `tokenizer`'s chat format, as `--model` runs chapter 00
    (`checkpoint.chat_sampling`: observations in the tool role, the budgets measured on the first 512
    demonstrations in this tokenizer's tokens)."""
    from course_lib.rl import checkpoint  # lazily: it imports peft

    config = preset("cpu")
    texts = demonstration_texts(512, 0, config.tool_share, config.direct_correct)
    return checkpoint.chat_sampling(config.sampling, tokenizer, texts)


def word_tokenizer():
    """The task's word-level tokenizer (tags plus every integer up to 1998), as the base was built with."""
    return build_tokenizer(vocabulary())


test_seeds = bases.held_out_seeds(lambda: make_env("test"))
"""`test_seeds(count)`: seeds of the held-out problems used for evaluation (the test split's first `count`
seeds with pairwise different problems; cached)."""


def evaluate(model, tokenizer, config: ArithmeticConfig, seed: int) -> dict[str, float]:
    """Held-out success, tool use and entropy, sampled the way RL samples (temperature 1)."""
    stats, _ = evaluate_policy(
        model, tokenizer, lambda: make_env("test"), test_seeds(config.eval_tasks), config.sampling, seed
    )
    return stats


def exactness_checks(model, tokenizer, config: ArithmeticConfig, seed: int, batch: int = 64) -> dict[str, int]:
    """Exact checks on a real batch of rollouts (C0.3 and C0.4).

    Counts tokens whose id or loss mask differs from the ones rebuilt independently from the
    environment's transcript, and turns whose decoded text differs from what the environment saw.
    """
    import torch

    engine = RolloutEngine(model, tokenizer, config.sampling)
    generator = torch.Generator().manual_seed(seed)
    trajectories = engine.rollout([make_env() for _ in range(batch)], list(range(batch)), generator=generator)
    # The course's word-level tokenizer re-encodes a sampled turn to the same ids, so the rebuild re-encodes every
    # action; a checkpoint's BPE need not (`retokenized_tokens` counts where it does not), so its rebuild keeps the
    # sampled action ids and checks everything around them.
    word_level = is_word_level(tokenizer)
    mask_errors = id_errors = drift = 0
    for t in trajectories:
        ids, mask = expected_tokens(t, tokenizer, engine.format, "reencode" if word_level else "sampled")
        id_errors += differences(ids, t.token_ids)
        mask_errors += differences(mask, t.loss_mask)
        if not word_level:
            drift += differences(expected_tokens(t, tokenizer, engine.format)[0], t.token_ids)
    checks = {
        "trajectories": len(trajectories),
        "tokens": sum(len(t.token_ids) for t in trajectories),
        "policy_tokens": sum(sum(t.loss_mask) for t in trajectories),
        "tool_calls": sum("tool_result" in i for t in trajectories for i in t.infos),
        "mask_errors": mask_errors,
        "id_errors": id_errors,
        "text_errors": sum(len(alignment_errors(t, tokenizer, engine.format)) for t in trajectories),
    }
    return checks if word_level else {**checks, "retokenized_tokens": drift}


def differences(expected: list[int], actual: list[int]) -> int:
    """Positions where two id (or mask) lists differ, a length difference counting each missing position."""
    return abs(len(expected) - len(actual)) + sum(a != b for a, b in zip(expected, actual, strict=False))


def train_and_evaluate(
    seed: int, config: ArithmeticConfig | None = None, progress: bool = False, base: tuple | None = None
) -> dict:
    """Chapter 00's run for one seed (chapter 14 runs it on a checkpoint): evaluate the base, check the rollout
    bookkeeping, train with GRPO, evaluate again. Returns every number chapter 00's claims use. `base`, `(model,
    tokenizer, config)` as `warm_base` returns them, starts from a copy of that warm start instead of making one (it
    is the same for every seed: the demonstrations and the warm start's seed do not depend on `seed`)."""
    config = config or preset()
    start = time.perf_counter()
    course_config.seed_everything(seed)
    if base is None:
        model, tokenizer, config = warm_base(config)
    else:
        model, tokenizer, config = copy.deepcopy(base[0]), base[1], base[2]
        course_config.seed_everything(seed)  # as after a warm start of its own, which reseeds to its fixed seed
    base_model = copy.deepcopy(model)
    results = {"base": evaluate(model, tokenizer, config, seed)}
    results["checks"] = exactness_checks(model, tokenizer, config, seed, config.check_episodes)
    results["history"] = train_grpo(
        model, tokenizer, make_env, config.sampling, config.grpo, seed,
        evaluate=lambda m: evaluate(m, tokenizer, config, seed), progress=progress,
    )  # fmt: skip
    results["trained"] = evaluate(model, tokenizer, config, seed + 1)
    results["minutes"] = (time.perf_counter() - start) / 60
    results["model"], results["base_model"], results["tokenizer"] = model, base_model, tokenizer
    results["sampling"] = config.sampling  # in the chat format, with measured budgets, on a checkpoint
    return results


def warm_base(config: ArithmeticConfig) -> tuple:
    """`(model, tokenizer, config)` the task trains from: its base, or with `--model` a checkpoint warm-started
    on the task's demonstrations (`bases.base_for`), `config` with the sampling that goes with it."""
    texts = functools.partial(demonstration_texts, config.demonstrations, 0, config.tool_share, config.direct_correct)
    return bases.base_for(BASE_NAME, config, texts)


CURVE_KEYS = ("success", "eval_success", "tool_use", "entropy")
"""History keys whose curves `--record` stores (under `grpo/<key>`), for seed bands in the notebook."""


def demonstrator_episodes(count: int, seed: int) -> list[Dialogue]:
    """`count` episodes of the warm start's demonstrator (`arithmetic.demonstrator_episodes`; `demonstration_texts`
    writes the same policy's text without the environment), cpu preset, as chat messages (the stand-ins' tokenizer
    text)."""
    config = ArithmeticConfig()
    return arithmetic.demonstrator_episodes(count, seed, config.tool_share, config.direct_correct)


def tool_task() -> ToolTask:
    """The arithmetic tool task at the cpu preset, chapter 00's (TRL, verl, the golden run and the benchmarks train on
    it; chapter 13 trains it through TRL)."""
    return ToolTask(
        ENV_NAME, BASE_NAME, preset("cpu").sampling, make_env, held_out_on_test(test_seeds, make_env), chapter="ch00"
    )
