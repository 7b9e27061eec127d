"""The survey's tasks on a real model: SmolLM2-135M-Instruct warm-started on each, at bf16 speed (chapter 16's
second half, the survey on a real model, stands on it).

Chapter 16 measured the survey's premises on the untrained SmolLM2 and found that three of four could not act: the
model writes prose, not the environments' formats. This chapter gives it the formats first. Per task, a short LoRA
warm start on the task's own demonstrators (the course's fast path: a bf16 sampler with LoRA merged, the update
under bf16 autocast, LoRA on the top blocks only; `docs/bring-your-own-model.md`), then the held-out rate of valid
actions and the held-out success, on distinct problems that no demonstration saw:

- `calculator`: chapter 04's word problems with a calculator that runs the policy's code (ToRL's setting);
- `key_door`: chapter 07's key-and-door grid in step mode (GiGPO's setting);
- `two_hop`: chapter 08's two-hop search questions (ARPO's setting);
- `lake`: chapters 09-10's FrozenLake with reasoning before each move (RAGEN-2's setting).

A warm start that leaves no room for RL (held-out success near 1) is shortened until it leaves some; the settings
each task uses, and why, are in `WARM_STARTS` and `docs/experiments/real-model-survey.md`.

`python -m course_lib.lab.real_survey warm-start --seeds 0 1 2 3 4 --record` runs and records them.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from course_lib import course_config
from course_lib.engine.prompt_format import ChatFormat
from course_lib.envs.base import TextEnv
from course_lib.rl import adapter_cache, checkpoint
from course_lib.rl.train import GRPOConfig, train_grpo
from course_lib.rl.warm_start import SFTConfig
from course_lib.tasks import (
    key_door_grid,
    lake_reasoning,
    real_premises,
    tool_arithmetic,
    two_hop_search,
    word_math_tool,
)

MODEL = "smollm2"
"""The real model (`python -m course_lib.data build smollm2`)."""
SMOLLM2 = tool_arithmetic.smollm2_config()
"""Chapter 00's design on SmolLM2 (docs/experiments/ch00-smollm2.md): the warm start and RL shape this study
starts from."""


LORA_BLOCKS_RESULTS = "ch16_lora_blocks"
"""`results/ch16_lora_blocks.json`: per seed, chapter 00's SmolLM2 design with LoRA on all blocks and on the top 8
(`all_*`, `top8_*`: `train_and_evaluate`'s numbers) and `top8_minus_all_gain`."""
MISMATCH_RESULTS = "ch16_mismatch"
"""`results/ch16_mismatch.json`: per seed, the bf16 sampler's log-probs against the update's forward
(`lab.fast_path.sampler_mismatch`)."""


def warm_start_results(task: str, steps: int | None = None) -> str:
    """`results/ch16_warm_start_<task>.json`: per seed, one task's warm-start numbers and premises, prefixed by its
    name (a file per task, so that each task's seeds are recorded, and can be added, on their own). With `steps`, a
    pilot's sizing try at that many steps: `ch16_warm_start_<task>_<steps>steps` (its `_pilot` added on recording)."""
    return f"ch16_warm_start_{task}" + ("" if steps is None else f"_{steps}steps")


def comparison_results(comparison: str) -> str:
    """`results/ch16_<comparison>.json`: per seed, `paired_arms`' numbers of a pre-registered comparison."""
    return f"ch16_{comparison}"


@dataclass(frozen=True)
class SurveyTask:
    """One of the survey's tasks as this chapter warm-starts and evaluates it: the task's cpu-preset config, its
    demonstrator and its held-out evaluation, each the task module's own."""

    name: str
    chapter: str
    """The chapter whose task it is (`ch04`, ...)."""
    config: Callable[[], object]
    """The task's config (its cpu preset): sampling, rollout mode and evaluation size."""
    demonstrations: Callable[[object, int, int], list]
    """`demonstrations(config, count, seed)`: `(prompt, completion)` pairs of the task's demonstrator on training
    problems."""
    evaluate: Callable[..., dict]
    """`evaluate(model, tokenizer, config, seed)`: held-out statistics (`success`, `invalid_rate`, ...)."""
    train_env: Callable[[object], Callable[[], TextEnv]]
    """`train_env(config)`: the factory of training environments RL draws from."""
    test_env: Callable[[object], Callable[[], TextEnv]]
    """`test_env(config)`: the factory of the held-out environments `evaluate` asks."""
    held_out: Callable[[object, int], list[int]]
    """`held_out(config, count)`: the seeds of the first `count` distinct held-out problems, as `evaluate` asks them."""


TASKS: dict[str, SurveyTask] = {
    task.name: task
    for task in (
        SurveyTask(
            "arithmetic", "ch00", lambda: tool_arithmetic.preset("cpu"),
            lambda c, n, seed: tool_arithmetic.demonstration_texts(n, seed, c.tool_share, c.direct_correct),
            tool_arithmetic.evaluate, lambda c: tool_arithmetic.make_env,
            lambda c: functools.partial(tool_arithmetic.make_env, "test"), lambda c, n: tool_arithmetic.test_seeds(n),
        ),
        SurveyTask(
            "calculator", "ch04", lambda: word_math_tool.preset("cpu"),
            lambda c, n, seed: word_math_tool.demonstration_texts(n, seed, c.tool_share, c.direct_correct),
            word_math_tool.evaluate, lambda c: functools.partial(word_math_tool.make_env, "train", c.max_tool_calls),
            lambda c: functools.partial(word_math_tool.make_env, "test", c.max_tool_calls),
            lambda c, n: word_math_tool.test_seeds(n),
        ),
        SurveyTask(
            "key_door", "ch07", lambda: key_door_grid.preset("cpu"),
            lambda c, n, seed: key_door_grid.demonstration_texts(n, seed, c), key_door_grid.evaluate,
            lambda c: key_door_grid.EnvFactory("train", c), lambda c: key_door_grid.EnvFactory("test", c),
            lambda c, n: key_door_grid.test_seeds(n, c),
        ),
        SurveyTask(
            "two_hop", "ch08", lambda: two_hop_search.preset("cpu"),
            lambda c, n, seed: two_hop_search.demonstration_texts(n, seed, c), two_hop_search.evaluate,
            lambda c: functools.partial(two_hop_search.make_env, "train", c),
            lambda c: functools.partial(two_hop_search.make_env, "test", c),
            lambda c, n: two_hop_search.test_seeds(n, c),
        ),
        SurveyTask(
            "lake", "ch10", lambda: lake_reasoning.preset("cpu"),
            lambda c, n, seed: lake_reasoning.demonstration_texts(n, seed, c), lake_reasoning.evaluate,
            lambda c: lake_reasoning.make_env, lambda c: functools.partial(lake_reasoning.make_env, "test"),
            lambda c, n: lake_reasoning.test_seeds(n),
        ),
    )
}  # fmt: skip
"""The survey's tasks, by name (chapter 00's arithmetic too: the fast path's effect on learning is measured there)."""


@dataclass(frozen=True)
class WarmStart:
    """A LoRA warm start of the real model on a task's demonstrations, and its held-out evaluation."""

    demonstrations: int = 512
    """Demonstration episodes drawn (a step-mode task makes one example per step)."""
    sft: SFTConfig = field(default_factory=lambda: dataclasses.replace(SMOLLM2.sft, autocast="bf16"))
    """The warm start: chapter 00's on SmolLM2 (30 steps of 8 at 1e-3), under bf16 autocast."""
    top_layers: int = 8
    """LoRA on the last `top_layers` blocks of 30 (0: every block)."""
    precision: str = "bf16"
    """The sampler's precision in evaluation (`SamplingConfig.precision`)."""
    eval_tasks: int = 64
    """Distinct held-out problems per evaluation."""


WARM_STARTS: dict[str, WarmStart] = {name: WarmStart() for name in TASKS} | {
    # The sizing tries on pilot seed 100 (results/ch16_warm_start_key_door_*steps_pilot.json): 60, 120 and 240 steps
    # give held-out success 0.000, 0.016 and 0.016; below 0.10 at the cap, the grid keeps 240 (the amendment).
    "key_door": WarmStart(sft=dataclasses.replace(SMOLLM2.sft, autocast="bf16", steps=240)),
    # results/ch16_warm_start_calculator_60steps_pilot.json: 60 steps lift the pilot's 0.031 to 0.141, inside the bounds
    "calculator": WarmStart(sft=dataclasses.replace(SMOLLM2.sft, autocast="bf16", steps=60)),
    # results/ch16_warm_start_lake_60steps_pilot.json: 60 steps lift the pilot's 0.062 to 0.141, inside the bounds
    "lake": WarmStart(sft=dataclasses.replace(SMOLLM2.sft, autocast="bf16", steps=60)),
}
"""Each task's warm start: chapter 00's on SmolLM2 unless the pre-registration's sizing rule, applied to a pilot,
says otherwise (docs/experiments/real-model-survey.md)."""


def warm_start(task: SurveyTask, settings: WarmStart, seed: int, model: str = MODEL, cache: str = "off"):
    """`(model, tokenizer, config, history)`: the real model `model` LoRA-warm-started on `settings.demonstrations`
    episodes of `task`'s demonstrator (drawn with `seed`, the adapter initialised with it; on the GPU under the gpu
    preset where one is visible, `course_config.device`), in the chat format with
    observations in the tool role; `config` is the task's, its sampling in this tokenizer's budgets
    (`checkpoint.chat_sampling`) and `settings.precision`, evaluating on `settings.eval_tasks` problems.

    `cache` (`rl.adapter_cache`): "write" fits the adapter and keeps it on disk, "read" takes a kept one where its
    key matches (else fits and keeps it), "off" neither."""
    if cache not in ("off", "write", "read"):
        raise ValueError(f"cache must be 'off', 'write' or 'read', got {cache!r}")
    config = task.config()
    texts = task.demonstrations(config, settings.demonstrations, seed)
    with checkpoint.using(model):  # a real model's name or a checkpoint folder, checked as --model checks it
        path = checkpoint.model_path()
    tokenizer = checkpoint.load_tokenizer(path)
    sampling = checkpoint.chat_sampling(config.sampling, tokenizer, texts[:512], "tool")
    device = course_config.device()  # a GPU under COURSE_SCALE=gpu where one is visible
    budget = checkpoint.micro_batch_tokens(len(tokenizer), device)
    sft = dataclasses.replace(settings.sft, micro_batch_tokens=settings.sft.micro_batch_tokens or budget)
    chat = ChatFormat(observation_role="tool")
    name = adapter_cache.key(path, texts, {"settings": dataclasses.asdict(settings), "sft": dataclasses.asdict(sft),
                                          "format": repr(chat)}, seed, str(device))  # fmt: skip
    if cache == "read" and adapter_cache.exists(name):
        course_config.seed_everything(seed)  # as the fit starts: the adapter's initialisation draws the same numbers
        trained, tokenizer = checkpoint.load_checkpoint(path, device)
        trained = checkpoint.add_adapter(trained, top_layers=settings.top_layers)
        history = adapter_cache.load(name, trained)
    else:
        trained, tokenizer, history = checkpoint.warm_start(
            path, texts, sft, seed, device=device, prompt_format=chat, lora_top_layers=settings.top_layers
        )
        if cache != "off":
            adapter_cache.save(name, trained, history)
    sampling = dataclasses.replace(sampling, precision=settings.precision)
    return trained, tokenizer, dataclasses.replace(config, sampling=sampling, eval_tasks=settings.eval_tasks), history


def warm_start_numbers(
    task_name: str,
    seed: int,
    settings: WarmStart | None = None,
    model: str = MODEL,
    premises: bool = False,
    cache: str = "off",
) -> dict:
    """One task's warm start on `seed` and its held-out evaluation (sampling seed `seed`): `success`,
    `valid_rate` (1 - the invalid-action rate), `turns`, the warm start's first and last loss, and minutes; with
    `premises`, also the task's premises measured on the warm-started model (`real_premises.measure`). `cache` as
    `warm_start`'s ("write" keeps the adapter for the comparisons that start from it)."""
    task = TASKS[task_name]
    settings = settings or WARM_STARTS[task_name]
    start = time.perf_counter()
    trained, tokenizer, config, history = warm_start(task, settings, seed, model, cache)
    warmed = time.perf_counter()
    stats = task.evaluate(trained, tokenizer, config, seed)
    return {
        "success": float(stats["success"]),
        "valid_rate": 1.0 - float(stats["invalid_rate"]),
        "turns": float(stats["turns"]),
        "loss_first": float(history[0]["loss"]),
        "loss_last": float(history[-1]["loss"]),
        "warm_start_minutes": (warmed - start) / 60,
        "eval_minutes": (time.perf_counter() - warmed) / 60,
    } | (real_premises.measure(task_name, trained, tokenizer, config, seed) if premises else {})


def train_and_evaluate(
    task_name: str,
    seed: int,
    settings: WarmStart,
    grpo: GRPOConfig,
    extra: Sequence[str] = (),
    model: str = MODEL,
    cache: str = "off",
) -> dict:
    """Warm-start on `seed` (`warm_start`), evaluate on the held-out problems (sampling seed `seed`), train with
    `grpo` (the warm start's sampling; the update micro-batched at the checkpoint budget unless `grpo` sets one),
    evaluate again (sampling seed `seed + 1`). Returns the success and invalid-action rate before and after
    (`before_success`, `after_invalid_rate`, ...; also each of the task's evaluation numbers named in `extra`, such
    as the calculator's `code_ratio`), the gain in success, the last iteration's training success, and minutes.
    `cache` as `warm_start`'s ("read": start from the adapter a warm-start record of the same task, settings and seed
    kept)."""
    task = TASKS[task_name]
    start = time.perf_counter()
    trained, tokenizer, config, _ = warm_start(task, settings, seed, model, cache)
    before = task.evaluate(trained, tokenizer, config, seed)
    unknown = [key for key in extra if key not in before]
    if unknown:  # said before training, not after it
        raise KeyError(f"{task_name}'s evaluation reports {sorted(before)}, not {unknown}")
    budget = checkpoint.micro_batch_tokens(len(tokenizer), next(trained.parameters()).device)
    grpo = dataclasses.replace(grpo, micro_batch_tokens=grpo.micro_batch_tokens or budget)
    history = train_grpo(trained, tokenizer, task.train_env(config), config.sampling, grpo, seed)
    after = task.evaluate(trained, tokenizer, config, seed + 1)
    numbers = {f"{when}_{key}": float(stats[key]) for when, stats in (("before", before), ("after", after))
               for key in ("success", "invalid_rate", *extra)}  # fmt: skip
    return numbers | {
        "gain": numbers["after_success"] - numbers["before_success"],
        "train_success_last": float([r for r in history if "loss" in r][-1]["success"]),
        "minutes": (time.perf_counter() - start) / 60,
    }


COMPARISONS: dict[str, tuple[str, dict[str, dict]]] = {
    "gigpo": ("key_door", {"grpo": {"advantage": "grpo"}, "gigpo": {"advantage": "gigpo"}}),
    "arpo": ("two_hop", {"grpo": {"sampler": "groups"}, "arpo": {"sampler": "tree"}}),
    "aepo": ("two_hop", {"arpo": {"sampler": "tree"},
                         "aepo": {"sampler": "tree", "tree": {"rule": "aepo"}, "policy_loss": "entropy_balanced"}}),
    "starpo_s": ("lake", {"starpo": {"batch_filter": "none"}, "starpo_s": {"batch_filter": "starpo_s"}}),
}  # fmt: skip
"""The pre-registered comparisons (docs/experiments/real-model-survey.md, section 3): name -> (task, {arm: changes
to the task's own GRPO config, `tree` to its tree's}), the baseline first; AEPO as chapter 11 trains it (its
tree's penalty rule and the entropy-balanced clip). Arms differ only in these fields, so the rollout budget (prompts
x group size per iteration) is the same."""


COMPARABLE_SUCCESS = 0.05
"""A seed compares its arms when one of them reaches this held-out success; a comparison none of whose deciding
seeds does is "not testable" (docs/experiments/real-model-survey.md, amendment of 2026-12-06)."""


def train_arms(
    comparison: str,
    seed: int,
    settings: WarmStart,
    rl: Mapping,
    model: str = MODEL,
    cache: str = "off",
    arms: Sequence[str] | None = None,
) -> dict[str, float]:
    """`comparison`'s arms (all, or those named in `arms`) from one warm start on `seed`: the warm start evaluated on
    the held-out problems (sampling seed `seed`), then each arm trained from a copy of it on the same training tasks
    (the seed's) and evaluated again (sampling seed `seed + 1`). Each arm's loop is the task's own GRPO config (a
    default one where the task has none: the lake's) with `rl` (its size and rate for this model: `iterations`,
    `prompts_per_iteration`, `group_size`, `learning_rate`) and the arm's changes. Returns `before_success` and each
    arm's `<arm>_success`, `<arm>_invalid_rate` and `<arm>_minutes`; an arm trained alone gets the numbers it gets
    beside the others. With `cache="read"` the warm start is the one a run kept under the same key (`warm_start`), or
    is fitted again and kept. A fit repeats itself on one machine; another CPU's matrix kernels may sum in another
    order, so `before_success` should equal the warm-start record's `success` where both ran on the same machine
    (`python -m course_lib.lab.real_survey check` compares them: in the survey's records, the 4 refits on their
    record's machine kind agree and the 4 that disagree crossed machines, docs/experiments/real-model-survey.md)."""
    task_name, table = COMPARISONS[comparison]
    unknown = sorted(set(arms or ()) - set(table))
    if unknown:
        raise ValueError(f"{comparison} has the arms {sorted(table)}, not {unknown}")
    task = TASKS[task_name]
    trained, tokenizer, config, _ = warm_start(task, settings, seed, model, cache)
    numbers = {"before_success": float(task.evaluate(trained, tokenizer, config, seed)["success"])}
    budget = checkpoint.micro_batch_tokens(len(tokenizer), next(trained.parameters()).device)
    for arm, changes in table.items():
        if arms is not None and arm not in arms:
            continue
        start = time.perf_counter()
        changes = dict(changes)
        base = getattr(config, "grpo", GRPOConfig())
        tree = dataclasses.replace(base.tree, **changes.pop("tree", {}))
        grpo = dataclasses.replace(base, **rl, **changes, tree=tree, autocast=settings.sft.autocast,
                                   micro_batch_tokens=budget, eval_every=10**6)  # fmt: skip
        sampling = dataclasses.replace(config.sampling, snapshot_envs=grpo.sampler == "tree")
        policy = copy.deepcopy(trained)
        train_grpo(policy, tokenizer, task.train_env(config), sampling, grpo, seed)
        after = task.evaluate(policy, tokenizer, config, seed + 1)
        numbers |= {f"{arm}_success": float(after["success"]), f"{arm}_invalid_rate": float(after["invalid_rate"]),
                    f"{arm}_minutes": (time.perf_counter() - start) / 60}  # fmt: skip
    return numbers


def paired_arms(
    comparison: str, seed: int, settings: WarmStart, rl: Mapping, model: str = MODEL, cache: str = "off"
) -> dict[str, float]:
    """`train_arms` of every arm of `comparison`, with `difference`, the second arm's success minus the first's,
    and `comparable`, 1 when an arm reached `COMPARABLE_SUCCESS`."""
    numbers = train_arms(comparison, seed, settings, rl, model, cache)
    baseline, method = COMPARISONS[comparison][1]
    successes = (numbers[f"{baseline}_success"], numbers[f"{method}_success"])
    return numbers | {
        "difference": successes[1] - successes[0],
        "comparable": float(max(successes) >= COMPARABLE_SUCCESS),
    }


PILOT_SIZING: dict[str, dict] = {
    # results/ch16_gigpo_pilot.json: pilot seed 100 took 49.4 minutes, over the 45-minute rule, so the iterations are
    # cut in proportion: 8 x 45 / 49.4 = 7.3, rounded down to 7 (docs/experiments/real-model-survey.md)
    "gigpo": {"iterations": 7},
}
"""Each comparison's changes to chapter 00's shape, from its first pilot seed's minutes, written before its other
pilot seeds run."""
RL_SHAPES: dict[str, dict] = {
    name: {key: getattr(SMOLLM2.grpo, key) for key in ("iterations", "prompts_per_iteration", "group_size",
                                                      "learning_rate")} | PILOT_SIZING.get(name, {})
    for name in COMPARISONS
}  # fmt: skip
"""Each comparison's RL for SmolLM2 on 2 cores: chapter 00's SmolLM2 shape, sized by its first pilot seed's timing
(`PILOT_SIZING`, the pre-registration's 45-minute rule)."""


GPU_RL_SHAPES: dict[str, dict] = {
    name: {"iterations": 30, "prompts_per_iteration": 8, "group_size": 8, "learning_rate": 2e-4} for name in COMPARISONS
}
"""Each comparison's RL under the gpu preset (`COURSE_SCALE=gpu`, `python -m course_lib.lab.gpu_preset --survey`):
four times chapter 00's iterations and twice its prompts, from the same warm starts. Prepared; no GPU has run it."""
