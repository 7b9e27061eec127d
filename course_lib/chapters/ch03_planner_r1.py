"""Chapter 03: Planner-R1 (arXiv 2509.25779), reward shaping for an agentic travel planner, in miniature.

Two sizes of policy (a small and a larger tiny Llama) are warm-started on demonstrations of the
`mini_travel` loop that are format-valid but constraint-naive: they call a transport search
(flights or ground, at random), the accommodation and restaurant searches, and answer with a plan
of randomly chosen listed items. Then GRPO trains them with Planner-R1's reward in three arms at
the same seed and budget: dense (stage 1, all six terms), sparse (stage 3, final pass only) and
the 1 -> 2 -> 3 curriculum. The chapter reports final-pass and schema rates on held-out queries,
training compute (6 * parameters * tokens) to gain a common number of points over each size's own
base, and a failure breakdown.

Bases are built by `python -m course_lib.data build ch03`.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import itertools
import math
import random
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from course_lib import course_config, data, envs
from course_lib.chapters import command, skeleton
from course_lib.course import leakage, recorded
from course_lib.course.claims import Claim, ClaimSpec, Setting, effect_at_least, evaluate_all
from course_lib.engine.rollout import SamplingConfig, Trajectory
from course_lib.envs.base import distinct_seeds
from course_lib.envs.mini_travel import draw_query, vocabulary
from course_lib.envs.planner_reward import FAILURE_CATEGORIES, TERMS, Query, curriculum
from course_lib.models import count_parameters
from course_lib.models import load as load_checkpoint
from course_lib.rl.train import GRPOConfig, evaluate_policy, train_grpo
from course_lib.rl.warm_start import SFTConfig
from course_lib.tasks import bases
from course_lib.tasks.tool_task import ToolTask, held_out_on_test
from course_lib.tokenizer import build_tokenizer
from course_lib.tools import call
from course_lib.tools.travel import WORLD

ENV_NAME = "mini_travel"
TASKS_NAME = "ch03_tasks"
BASE_NAMES = {"small": "ch03_base_small", "large": "ch03_base_large"}
ARMS = {"dense": 1, "sparse": 3, "curriculum": "1-2-3"}
"""Reward arm -> Planner-R1 stage (or the curriculum)."""


@dataclass
class Chapter03Config:
    """Everything chapter 03 varies, with the cpu preset's values as defaults."""

    model_presets: dict[str, str] = field(default_factory=lambda: {"small": "tiny", "large": "tiny_wide"})
    """Model size of each policy, keys of `models.MODEL_PRESETS`."""
    demonstrations: int = 20_000
    """Demonstration episodes of the warm start (format-valid, mostly constraint-naive)."""
    aware_share: float = 0.2
    """Probability that a demonstration makes each decision the constraint-aware way (0: fully naive)."""
    sft: SFTConfig = field(default_factory=lambda: SFTConfig(steps=600, batch_size=64, learning_rate=3e-3))
    """Warm start (the same for both sizes)."""
    grpo: GRPOConfig = field(
        default_factory=lambda: GRPOConfig(
            iterations=40, prompts_per_iteration=8, group_size=8, learning_rate=4e-4, eval_every=10
        )
    )
    """RL (no KL, one on-policy update per batch, tool responses masked). At lr 7e-4 the small dense
    run fell into a commonsense-for-budget trade on one seed of four (final pass 0.18 against
    0.23-0.30); at 4e-4 the four seeds ended at 0.25-0.28."""
    sampling: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(temperature=1.0, max_turn_tokens=24, max_total_tokens=112)
    )
    """Rollout sampling at temperature 1, in training and evaluation alike."""
    max_slack: int = 2
    """Budget = cheapest feasible plan's cost + a slack in [0, max_slack]."""
    constrain_share: float = 0.5
    """Probability that a query constrains each of cuisine, room type and transport."""
    eval_tasks: int = 500
    """Distinct held-out test queries per evaluation (`test_seeds`; the first 500 seeds of the test
    split pose only 333 different queries)."""
    arms: dict[str, tuple[str, ...]] = field(
        default_factory=lambda: {"small": ("dense", "sparse", "curriculum"), "large": ("dense", "sparse")}
    )
    """The reward arms trained for each size."""
    target_pass: float | None = None
    """Pass rate at which training compute is also compared (context beside C3.4, which compares gains).
    None (the default) takes the common level: the lower of the two dense runs' best evaluated pass
    rates, which both runs reach (a fixed 0.2 was never reached by the larger policy)."""


def preset(scale: str | None = None) -> Chapter03Config:
    """The chapter's configuration for `COURSE_SCALE` (`cpu` or `gpu`)."""
    gpu = Chapter03Config(
        model_presets={"small": "small", "large": "medium"},
        demonstrations=50_000,
        sft=SFTConfig(steps=3000, batch_size=128, learning_rate=2e-3),
        grpo=GRPOConfig(iterations=200, prompts_per_iteration=32, group_size=16, learning_rate=3e-4, eval_every=20),
        eval_tasks=1000,
        arms={"small": tuple(ARMS), "large": tuple(ARMS)},
    )
    return course_config.by_scale(Chapter03Config(), gpu, scale)


def stage_of(arm: str, iterations: int):
    """The env's `stage` argument for a reward arm: an int, or the curriculum's function."""
    stage = ARMS[arm]
    return curriculum(iterations) if stage == "1-2-3" else stage


def make_env(split: str = "train", config: Chapter03Config | None = None, stage=1) -> envs.TextEnv:
    config = config or Chapter03Config()
    return envs.make(
        ENV_NAME, split=split, stage=stage, max_slack=config.max_slack, constrain_share=config.constrain_share
    )


# Demonstrations: the warm start --------------------------------------------------------------
def listed_names(response: str) -> list[str]:
    """Entity names of a search tool's listing (the first word of each `;`-separated item)."""
    return [item.split()[0] for item in response.split(";") if item.split() and item.split()[0] != "none"]


def aware_choices(query: Query, listings: list[list[str]]) -> tuple[str, str, list[str]]:
    """The plan a constraint-aware agent writes from the three listings: the cheapest one that meets
    every constraint (cheapest transport, cheapest fitting stay, cheapest repeat-free meals with the
    cuisine). It passes whenever the right transport search was made."""
    go = min(listings[0], key=lambda name: WORLD.transports[name].price)
    stays = {name: WORLD.accommodations[name] for name in listings[1]}
    fitting = [name for name, a in stays.items() if a.min_nights <= query.nights and query.room in ("any", a.room)]
    stay = min(fitting, key=lambda name: WORLD.accommodations[name].price)
    options = [
        eat for eat in itertools.combinations(listings[2], query.days)
        if query.cuisine == "any" or any(WORLD.restaurants[name].cuisine == query.cuisine for name in eat)
    ]  # fmt: skip
    eat = min(options, key=lambda names: sum(WORLD.restaurants[name].price for name in names))
    return go, stay, list(eat)


def demonstration_texts(count: int, seed: int, config: Chapter03Config | None = None) -> list[tuple[str, str]]:
    """`(prompt, completion)` episodes on train queries, tool responses included.

    The call order is fixed: transport search -> accommodations -> restaurants -> answer. Each of
    the four decisions (which transport search, which transport, which stay, which meals) is made
    the constraint-aware way (`aware_choices`, and the search the transport rule allows) with
    probability `config.aware_share`, independently, and otherwise blindly: a transport search at
    random, listed items uniformly at random, restaurants with replacement. Every plan is
    schema-valid; few meet every constraint.
    """
    config = config or Chapter03Config()
    rng = random.Random(seed)
    texts = []
    for index in range(count):
        query = draw_query(seed * 10_000_019 + index, "train", config.max_slack, config.constrain_share)
        aware = [rng.random() < config.aware_share for _ in range(4)]
        if aware[0] and query.transport != "any":
            transport = "search_flights" if query.transport == "no_ground" else "search_ground_transportation"
        else:
            transport = "search_flights" if rng.random() < 0.5 else "search_ground_transportation"
        calls = [
            (transport, f"{query.origin} {query.destination}"),
            ("search_accommodations", query.destination),
            ("search_restaurants", query.destination),
        ]
        parts, listings = [], []
        for tool, arguments in calls:
            result = call(tool, arguments)
            listings.append(listed_names(result))
            parts.append(f"<tool_call> {tool} {arguments} </tool_call> <tool_response> {result} </tool_response>")
        best = aware_choices(query, listings)
        go = best[0] if aware[1] else rng.choice(listings[0])
        stay = best[1] if aware[2] else rng.choice(listings[1])
        eat = best[2] if aware[3] else [rng.choice(listings[2]) for _ in range(query.days)]
        parts.append(f"<answer> {{ go : {go} , stay : {stay} , eat : [ {' , '.join(eat)} ] }} </answer>")
        texts.append((f"<question> {query.text()} </question>", " ".join(parts)))
    return texts


def build_tokenizer_for_chapter():
    return build_tokenizer(vocabulary())


def build_base(
    out_dir: str | Path, size: str = "small", seed: int = 0, scale: str = "cpu", progress: bool = True,
    config: Chapter03Config | None = None,
) -> list[dict]:  # fmt: skip
    """Warm-start a fresh model of `size` on the demonstrations and save it with `save_pretrained`."""
    config = config or preset(scale)
    texts = functools.partial(demonstration_texts, config.demonstrations, seed, config)
    return bases.warm_start_base(
        out_dir, vocabulary(), config.model_presets[size], 128, texts, config.sft, seed, progress
    )


def build_data(data_dir: Path, seed: int = 0, progress: bool = True, scale: str = "cpu") -> None:
    """`python -m course_lib.data build ch03 [--scale gpu]`: the query set and the two warm-started bases of
    `preset(scale)`."""
    config = preset(scale)

    def rows(split: str, count: int) -> dict[str, list]:
        queries = [draw_query(s, split, config.max_slack, config.constrain_share) for s in range(count)]
        return {"seed": list(range(count)), "query": [q.text() for q in queries]}

    splits = {"train": rows("train", 2000), "test": rows("test", 1000)}
    data.write_task_set(TASKS_NAME, splits, seed, data_dir, scale)
    for size, name in BASE_NAMES.items():
        data.write_artifact(
            name,
            lambda folder, size=size: build_base(folder, size, seed=seed, scale=scale, progress=progress),
            seed,
            data_dir,
            scale,
        )


# Measurements -----------------------------------------------------------------------------------
def failure_breakdown(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Share of the failed episodes in each of `FAILURE_CATEGORIES` (C3.5); an episode that never
    answers counts as `format`."""
    counts: Counter[str] = Counter()
    for t in trajectories:
        last = t.infos[-1] if t.infos else {}
        category = last.get("failure", "format") if "check" in last else "format"
        if category is not None:
            counts[category] += 1
    failed = sum(counts.values())
    return {f"fail_{c}": counts[c] / failed if failed else 0.0 for c in FAILURE_CATEGORIES}


def plan_stats(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Mean of each reward term over episodes (0 for an episode without an answer)."""
    return {
        f"r_{term}": float(np.mean([t.infos[-1].get(f"r_{term}", 0.0) if t.infos else 0.0 for t in trajectories]))
        for term in TERMS
    }


@functools.lru_cache(maxsize=8)
def test_seeds(count: int, max_slack: int, constrain_share: float) -> list[int]:
    """Seeds of the held-out queries used for evaluation: the test split's first `count` seeds with
    pairwise different queries (`envs.base.distinct_seeds`), for a query distribution set by
    `max_slack` and `constrain_share`. Cached, as every evaluation during training asks again."""
    config = Chapter03Config(max_slack=max_slack, constrain_share=constrain_share)
    return distinct_seeds(lambda: make_env("test", config), count)


def evaluate(model, tokenizer, config: Chapter03Config, seed: int) -> dict[str, float]:
    """Held-out final pass (`success`), reward terms and failure breakdown, sampled at temperature 1."""
    seeds = test_seeds(config.eval_tasks, config.max_slack, config.constrain_share)
    stats, trajectories = evaluate_policy(
        model, tokenizer, lambda: make_env("test", config), seeds, config.sampling, seed
    )
    return {**stats, **plan_stats(trajectories), **failure_breakdown(trajectories)}


def train(
    model, tokenizer, config: Chapter03Config, seed: int, arm: str, base_stats: dict | None = None,
    progress: bool = False,
) -> list[dict]:  # fmt: skip
    """GRPO on `mini_travel` with the reward of `arm` (model trained in place).

    Each evaluation record also carries `train_tokens` (tokens of every training episode so far)
    and `train_flops` = 6 * parameters * train_tokens, the usual estimate of training compute.
    `base_stats`, the untrained model's `evaluate(..., seed + 1)`, saves recomputing it at iteration 0."""
    stage = stage_of(arm, config.grpo.iterations)
    train_envs: list = []
    parameters = count_parameters(model)

    def factory():
        env = make_env("train", config, stage)
        train_envs.append(env)
        return env

    def evaluation(m) -> dict[str, float]:
        tokens = float(sum(env.token_count() for env in train_envs))
        stats = base_stats if base_stats is not None and tokens == 0 else evaluate(m, tokenizer, config, seed + 1)
        return {**stats, "train_tokens": tokens, "train_flops": 6 * parameters * tokens}

    return train_grpo(
        model, tokenizer, factory, config.sampling, config.grpo, seed, evaluate=evaluation, progress=progress
    )


REACH_TOLERANCE = 1e-9
"""Pass rates are multiples of 1 / (evaluation queries), far coarser than this."""


def compute_to_reach(history: Sequence[dict], target: float) -> float:
    """Training FLOPs at which the pass rate first reaches `target` (inf if it never does).

    The evaluations give pass rate against training FLOPs at a few points; between the last one below
    the target and the first one at or above it the curve is taken as linear, so the answer does not
    jump to the next evaluation's compute (which made a coarse grid decide the comparison). A pass rate
    within `REACH_TOLERANCE` of the target counts as reaching it: targets built as base + gain differ
    from the evaluated rate they came from in the last bits."""
    points = [(r["eval_train_flops"], r["eval_success"]) for r in history if "eval_success" in r]
    for index, (flops, success) in enumerate(points):
        if success >= target - REACH_TOLERANCE:
            if index == 0:
                return flops
            before_flops, before_success = points[index - 1]
            share = (target - before_success) / (success - before_success)
            return before_flops + share * (flops - before_flops)
    return float("inf")


def best_pass(history: Sequence[dict]) -> float:
    """The highest held-out pass rate among a run's evaluations."""
    return max(r["eval_success"] for r in history if "eval_success" in r)


def compute_target(results: Mapping, config: Chapter03Config) -> float:
    """The common pass-rate level (context beside C3.4): `config.target_pass`, or by default the lower of
    the two dense runs' best evaluated pass rates (a rate both runs reach). The small base starts higher
    than the larger one, so part of the small run's lead at a common level is its head start."""
    if config.target_pass is not None:
        return config.target_pass
    return min(best_pass(results["sizes"][size]["dense"]["history"]) for size in ("small", "large"))


def best_gain(results: Mapping, size: str) -> float:
    """How far the dense run of `size` got above its own base: best evaluated pass minus base pass."""
    entry = results["sizes"][size]
    return best_pass(entry["dense"]["history"]) - entry["base"]["success"]


def common_gain(results: Mapping) -> float:
    """C3.4's target gain: the smaller of the two dense runs' best gains over their own bases, a gain
    both runs reach. Comparing gains rather than levels takes out the bases' different starting points
    (the small SFT base passes more queries than the larger one, a head start RL compute did not buy)."""
    return min(best_gain(results, size) for size in ("small", "large"))


def compute_to_gain(results: Mapping, size: str, gain: float) -> float:
    """Training FLOPs at which the dense run of `size` first passes `gain` more than its base
    (interpolated between evaluations, `compute_to_reach`)."""
    entry = results["sizes"][size]
    return compute_to_reach(entry["dense"]["history"], entry["base"]["success"] + gain)


def flops_ratio(small: float, large: float) -> float:
    """`small / large` training FLOPs, defined where plain division is not: both 0 or both inf -> nan
    (no comparison, so a `< 1` check fails), only `large` 0 -> inf."""
    if (small == large == 0.0) or (math.isinf(small) and math.isinf(large)):
        return float("nan")
    if large == 0.0:
        return float("inf")
    return small / large


def gain_ratio(results: Mapping) -> float:
    """C3.4's number: small over large dense-run FLOPs to reach the common gain. When a run never rose
    above its base the common gain is 0 and there is nothing to interpolate: the small policy is then
    the better buy (0) if it gained and the larger one did not, and not (inf) otherwise."""
    gain = common_gain(results)
    if gain <= 0:
        return 0.0 if best_gain(results, "small") > 0 else float("inf")
    return flops_ratio(compute_to_gain(results, "small", gain), compute_to_gain(results, "large", gain))


def run(
    seed: int, config: Chapter03Config | None = None, progress: bool = False, base_stats: Mapping | None = None,
    bases: Mapping[str, str | Path] | None = None,
) -> dict:  # fmt: skip
    """The whole chapter for one seed: evaluate both bases, then train each size with each of its
    reward arms from the same base, seed and budget. Returns every number used. `base_stats` (size ->
    `evaluate(base, ..., seed + 1)`, e.g. what a notebook already showed) saves evaluating the bases again;
    the evaluation has its own generator, so the results are the same either way. `bases` (size -> folder
    written by `build_base`) replaces the committed `BASE_NAMES` checkpoints (`rare_success` uses it)."""
    config = config or preset()
    start = time.perf_counter()
    results: dict = {"sizes": {}}
    for size, arms in config.arms.items():
        course_config.seed_everything(seed)
        if bases is None:
            base, tokenizer = data.load_base(BASE_NAMES[size], course_config.device())
        else:
            base, tokenizer = load_checkpoint(bases[size], course_config.device())
        stats = base_stats[size] if base_stats is not None else evaluate(base, tokenizer, config, seed + 1)
        entry = {"parameters": count_parameters(base), "base": stats}
        for arm in arms:
            model = copy.deepcopy(base)
            course_config.seed_everything(seed)
            entry[arm] = {"history": train(model, tokenizer, config, seed, arm, entry["base"], progress)}
            entry[arm]["final"] = entry[arm]["history"][-1]
            entry[arm]["model"] = model
        entry["base_model"], results["tokenizer"] = base, tokenizer
        results["sizes"][size] = entry
    results["minutes"] = (time.perf_counter() - start) / 60
    return results


def final_pass(results: dict, size: str, arm: str) -> float:
    return results["sizes"][size][arm]["final"]["eval_success"]


def summary(results: dict) -> list[tuple[str, dict]]:
    """(label, evaluation) rows: each base and each trained policy (final evaluation, `eval_` stripped)."""
    rows = []
    for size, entry in results["sizes"].items():
        rows.append((f"{size} base (SFT only)", entry["base"]))
        for arm in ARMS:
            if arm in entry:
                final = {k.removeprefix("eval_"): v for k, v in entry[arm]["final"].items()}
                rows.append((f"{size} GRPO {arm}", final))
    return rows


CURVE_KEYS = ("eval_success", "eval_train_flops")
"""What `--record` keeps of each run's evaluations: held-out final pass and the training FLOPs so far."""


def curves(results: Mapping) -> dict[str, list[tuple[float, float]]]:
    """Each run's evaluation curves against the RL iteration, named `"<size> <arm>/<key>"` (e.g.
    `"small dense/eval_success"`), as `results.make_record` stores them and `results.load_curves` reads them."""
    histories = {
        f"{size} {arm}": entry[arm]["history"]
        for size, entry in results["sizes"].items()
        for arm in ARMS
        if arm in entry
    }
    return recorded.history_curves(histories, CURVE_KEYS)


def figure(results: Mapping, chapter: str = "ch03"):
    """Section 5's 2x2 figure. Top: held-out final pass against the RL iteration for each arm of the small
    (left) and the larger policy (right), mean and min-max band over the seeds recorded in
    `results/<chapter>.json`. Bottom left: training compute against the iteration, both dense runs, recorded
    seeds. Bottom right: this run's dense runs, pass gained over their own base against training compute,
    with C3.4's common gain and the interpolated point where each run reaches it."""
    from course_lib.diagnostics import plots  # matplotlib only when a figure is asked for

    fig, axes = plots.grid(4)
    for axis, size in zip(axes[:2], ("small", "large"), strict=True):
        series = {
            arm: recorded.load_curves(chapter, f"{size} {arm}/eval_success")
            for arm in ARMS
            if arm in results["sizes"][size]
        }
        plots.curves_with_bands(series, axis, y_label="held-out final pass", title=f"{size} policy, recorded seeds")
    low = min(axis.get_ylim()[0] for axis in axes[:2])
    high = max(axis.get_ylim()[1] for axis in axes[:2])
    for axis in axes[:2]:  # one scale, so the two sizes compare by eye
        axis.set_ylim(low, high)
    flops = {
        f"{size} dense": {
            seed: [(x, y / 1e12) for x, y in points]
            for seed, points in recorded.load_curves(chapter, f"{size} dense/eval_train_flops").items()
        }
        for size in ("small", "large")
    }
    plots.curves_with_bands(flops, axes[2], y_label="training compute (TFLOPs)", title="6 · N · tokens so far")
    gain = common_gain(results)
    for size in ("small", "large"):
        entry = results["sizes"][size]
        points = [(r["eval_train_flops"] / 1e12, r["eval_success"] - entry["base"]["success"])
                  for r in entry["dense"]["history"] if "eval_success" in r]  # fmt: skip
        (line,) = axes[3].plot(*zip(*points, strict=True), marker="o", ms=3, label=f"{size} dense")
        if gain > 0:
            axes[3].plot(compute_to_gain(results, size, gain) / 1e12, gain, "x", ms=9, color=line.get_color())
    axes[3].axhline(gain, color="gray", linestyle=":", label=f"common gain +{gain:.3f} (C3.4)")
    axes[3].set(xlabel="training compute (TFLOPs)", ylabel="final pass minus own base")
    axes[3].set_title("this run: gain per unit of compute", fontsize=10)
    axes[3].grid(alpha=0.3)
    axes[3].legend(fontsize=8)
    fig.suptitle("Chapter 03: dense, sparse and curriculum GRPO on held-out queries")
    fig.tight_layout()
    return fig


def claim_numbers(results: Mapping, config: Chapter03Config | None = None) -> dict[str, float]:
    """Every number chapter 03's claims use, flat: held-out final pass of both bases and of each trained
    arm, the differences C3.1-C3.3 check, each dense run's best gain over its base and the training FLOPs
    to reach the common gain (C3.4; inf when never reached), the same at the common pass-rate level
    (context), and the trained small policy's formatting-failure share (C3.5)."""
    config = config or preset()
    small, large = results["sizes"]["small"], results["sizes"]["large"]
    numbers = {"small_base_success": small["base"]["success"], "large_base_success": large["base"]["success"]}
    target = compute_target(results, config)
    gain = common_gain(results)
    for size in ("small", "large"):
        for arm in ARMS:
            if arm in results["sizes"][size]:
                numbers[f"{size}_{arm}_success"] = final_pass(results, size, arm)
        numbers[f"{size}_dense_minus_sparse"] = numbers[f"{size}_dense_success"] - numbers[f"{size}_sparse_success"]
        numbers[f"{size}_dense_best_success"] = best_pass(results["sizes"][size]["dense"]["history"])
        numbers[f"{size}_dense_best_gain"] = best_gain(results, size)
        numbers[f"{size}_flops_to_gain"] = compute_to_gain(results, size, gain) if gain > 0 else float("nan")
        numbers[f"{size}_flops_to_target"] = compute_to_reach(results["sizes"][size]["dense"]["history"], target)
    s_dense = numbers["small_dense_success"]
    numbers["small_dense_over_own_base"] = s_dense - numbers["small_base_success"]
    # Context only: the larger SFT base is weaker than the small one, so beating it adds nothing to C3.1.
    numbers["small_dense_over_large_base"] = s_dense - numbers["large_base_success"]
    numbers["large_base_minus_small_base"] = numbers["large_base_success"] - numbers["small_base_success"]
    numbers["sparse_cost_small_minus_large"] = numbers["small_dense_minus_sparse"] - numbers["large_dense_minus_sparse"]
    numbers["common_gain"] = gain
    numbers["small_over_large_flops_to_gain"] = gain_ratio(results)
    # Context only: at a common level the small run is also credited with its base's head start.
    numbers["target_pass"] = target
    numbers["small_over_large_flops_to_target"] = flops_ratio(
        numbers["small_flops_to_target"], numbers["large_flops_to_target"]
    )
    numbers["small_dense_format_failure_share"] = small["dense"]["final"]["eval_fail_format"]
    return numbers


CLAIMS: tuple[ClaimSpec, ...] = (
    effect_at_least(
        "C3.1",
        "dense GRPO lifts the small policy's final pass at least 10 points above its own supervised base",
        "Planner-R1 (TravelPlanner): 8B reaches 56.4% final pass with shaped-reward RL, 32B 56.9%; GPT-5 21.2%",
        "small_dense_over_own_base",
        0.10,
        required=False,
    ),
    effect_at_least(
        "C3.2",
        "the small policy ends at least 10 points higher with the dense staged reward than with final pass alone",
        "Planner-R1: the 8B model is highly responsive to reward shaping (sparse-reward curve not published)",
        "small_dense_minus_sparse",
        0.10,
        required=False,
    ),
    effect_at_least(
        "C3.3",
        "going from dense to sparse reward costs the larger policy at least 10 points less than the small one",
        "Planner-R1: 32B is more robust under sparse rewards than 8B",
        "sparse_cost_small_minus_large",
        0.10,
        required=False,
    ),
    ClaimSpec(
        "C3.4",
        "with dense reward the small policy gains the common number of points over its own base (the smaller "
        "of the two runs' best gains) with less training compute than the larger one (FLOPs interpolated "
        "between evaluations every 10 iterations)",
        "Planner-R1: with dense shaping 8B is 3.5x more compute-efficient than 32B",
        "small_over_large_flops_to_gain",
        lambda n: n["small_over_large_flops_to_gain"] < 1.0,
        # Holds by how the experiment is built: both sizes train for the same iterations, the small one costs less
        # per iteration, and the larger one peaks at its last evaluation on every recorded seed, so the small one
        # reaches the common gain with less compute unless the larger one peaks early. A design, not a finding.
        kind="design",
    ),
    ClaimSpec(
        "C3.5",
        "at most a quarter of the trained small policy's failures are formatting errors",
        "Planner-R1: remaining failures are constraint bookkeeping, not formatting",
        "small_dense_format_failure_share",
        lambda n: n["small_dense_format_failure_share"] <= 0.25,
        # Met before any RL: the warm-started small base's failures are already about 2% formatting (the notebook's
        # failure table), so the check shows what the warm start built. A design, not a finding.
        kind="design",
    ),
)


CLAIM_COLUMNS: tuple[tuple[str, str], ...] = (
    ("small_dense_over_own_base", "C3.1 small dense − base"),
    ("small_dense_minus_sparse", "C3.2 small dense − sparse"),
    ("sparse_cost_small_minus_large", "C3.3 sparse cost, small − larger"),
    ("common_gain", "C3.4 common gain"),
    ("small_over_large_flops_to_gain", "C3.4 compute, small / larger"),
    ("small_over_large_flops_to_target", "same at the common level"),
    ("small_dense_format_failure_share", "C3.5 format share"),
)
"""(number, label) columns of the notebook's per-seed table of what the claims test (`results.seed_table`)."""


def claims(results: Mapping, config: Chapter03Config | None = None) -> list[Claim]:
    """Chapter 03's claims, computed from `run`'s results (C3.2 and C3.3 are marked not reproduced at
    this scale, `required=False`; the recorded numbers per seed are in `results/ch03.json`)."""
    return evaluate_all(CLAIMS, claim_numbers(results, config))


# A designed attempt at C3.2 and C3.3 where exact success is rare (docs/experiments/ch03-rare-success.md) ------
RARE_SUCCESS_RESULTS = "ch03_rare_success"
"""`results/ch03_rare_success.json`: the designed experiment's numbers, per seed."""
RARE_BASE_PASS = 0.05
"""The design's precondition: the small base passes at most this share of held-out queries."""
RARE_SUCCESS_CLAIMS: tuple[ClaimSpec, ...] = tuple(
    dataclasses.replace(
        spec, id=spec.id + "d", statement="with bases warm-started on fully naive demonstrations: " + spec.statement
    )
    for spec in CLAIMS
    if spec.id in ("C3.2", "C3.3")
)
"""C3.2d and C3.3d: C3.2 and C3.3 with the chapter's checks and margins, read on the designed bases
(`required=False`)."""
SETTINGS = (Setting(RARE_SUCCESS_RESULTS, RARE_SUCCESS_CLAIMS, "docs/experiments/ch03-rare-success.md"),)
"""Chapter 03's designed setting, decided on its own file (`course_lib.lab.verdicts`)."""


def rare_success_config() -> Chapter03Config:
    """The design's setting: the cpu preset with `aware_share = 0` and no curriculum arm."""
    return Chapter03Config(aware_share=0.0, arms={"small": ("dense", "sparse"), "large": ("dense", "sparse")})


def rare_success_numbers(results: Mapping) -> dict[str, float]:
    """One seed's numbers from `run`'s results: base and final passes, the two differences C3.2 and C3.3
    check, and the precondition (`small_base_rare`: 1.0 when the small base passes at most 0.05)."""
    numbers = {f"{size}_base_success": results["sizes"][size]["base"]["success"] for size in ("small", "large")}
    for size in ("small", "large"):
        for arm in ("dense", "sparse"):
            numbers[f"{size}_{arm}_success"] = final_pass(results, size, arm)
        numbers[f"{size}_dense_minus_sparse"] = numbers[f"{size}_dense_success"] - numbers[f"{size}_sparse_success"]
    numbers["sparse_cost_small_minus_large"] = numbers["small_dense_minus_sparse"] - numbers["large_dense_minus_sparse"]
    numbers["small_base_rare"] = float(numbers["small_base_success"] <= RARE_BASE_PASS)
    return numbers


def rare_success(seeds: Sequence[int], config: Chapter03Config | None = None, record: bool = False,
                 progress: bool = False) -> dict[int, dict[str, float]]:  # fmt: skip
    """Run the pre-registered design of docs/experiments/ch03-rare-success.md once: warm-start both bases
    on `config`'s demonstrations (default `rare_success_config()`) into a temporary folder, then per seed
    `run` the dense and sparse arms of both sizes from them; print and (with `record`) write each seed's
    numbers and learning curves to `results/ch03_rare_success.json`."""
    config = config or rare_success_config()
    if record:
        recorded.begin()  # stamp the code and machine before anything runs
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        folders = {size: Path(tmp) / name for size, name in BASE_NAMES.items()}
        for size, folder in folders.items():
            build_base(folder, size, seed=0, progress=progress, config=config)
        trained = (time.perf_counter() - start) / 60
        print(f"bases warm-started in {trained:.1f} min")
        for seed in seeds:
            results = run(seed, config, progress, bases=folders)
            numbers = rare_success_numbers(results) | {"base_training_minutes": trained}
            line = ", ".join(f"{key} {value:.3f}" for key, value in numbers.items())
            print(f"seed {seed} ({results['minutes']:.1f} min): {line}")
            rare = "met" if numbers["small_base_rare"] else "NOT met"
            print(f"  precondition (small base pass <= {RARE_BASE_PASS}): {rare}")
            for claim in evaluate_all(RARE_SUCCESS_CLAIMS, numbers):
                print(f"  {claim.id} {claim.status} {claim.name}")
            if record:
                recorded.record(
                    RARE_SUCCESS_RESULTS, seed, RARE_SUCCESS_CLAIMS, numbers, results["minutes"], curves(results)
                )
            out[seed] = numbers
    return out


REPORT_KEYS = ("success", "r_schema", "r_cs_macro", "r_hard_macro", "invalid_rate", "policy_tokens")


def report(results: Mapping) -> list[str]:
    """What the command line prints for a seed, before its claims: a line per policy, then per size its training
    FLOPs to the common gain and to the common pass level, and its failure breakdown."""
    lines = [f"{label:26} " + " ".join(f"{k} {stats[k]:.3f}" for k in REPORT_KEYS) for label, stats in summary(results)]
    numbers = claim_numbers(results)
    for size, entry in results["sizes"].items():
        fails = entry["dense"]["final"]
        lines.append(
            f"{size}: params {entry['parameters']:,} FLOPs to +{numbers['common_gain']:.3f} over its base: "
            f"{numbers[size + '_flops_to_gain']:.3g}, to pass>={numbers['target_pass']:.3f}: "
            f"{numbers[size + '_flops_to_target']:.3g}; failures "
            + " ".join(f"{c} {fails['eval_fail_' + c]:.2f}" for c in FAILURE_CATEGORIES)
        )
    return lines


# Leakage audit ----------------------------------------------------------------------------------
def held_out_audit() -> list[leakage.SplitAudit]:
    """The test split against GRPO's draws and both bases' demonstrations."""
    config = preset("cpu")
    seeds = test_seeds(config.eval_tasks, config.max_slack, config.constrain_share)
    # Every reward arm and both sizes train from the same task seeds; the stage does not change the query.
    draws = leakage.grpo_draws("ch03", config.grpo)
    small, large = (leakage.base_seed(BASE_NAMES[size]) for size in ("small", "large"))
    demos = leakage.prompts_of(demonstration_texts(config.demonstrations, small, config))
    if large != small:
        demos |= leakage.prompts_of(demonstration_texts(config.demonstrations, large, config))
    return leakage.held_out_split("ch03", functools.partial(make_env, config=config), seeds, draws, demos)


# The task the integrations train, and the golden run's case --------------------------------------
def tool_task() -> ToolTask:
    """The travel-planning task at the cpu preset, the small base (TRL, verl and the golden run train on it)."""
    config = preset("cpu")
    split_env = functools.partial(make_env, config=config)
    seeds = functools.partial(test_seeds, max_slack=config.max_slack, constrain_share=config.constrain_share)
    return ToolTask(ENV_NAME, BASE_NAMES["small"], config.sampling, split_env, held_out_on_test(seeds, split_env))


def golden_cases() -> dict:
    """A GRPO batch of the committed small base."""
    from course_lib.course import golden_cases

    return {"ch03 rollouts": golden_cases.rollout_case(tool_task())}


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rare-success", action="store_true",
        help="run the designed C3.2/C3.3 experiment instead (--record writes results/ch03_rare_success.json)",
    )  # fmt: skip


CHAPTER = skeleton.Chapter(
    "ch03", "Chapter 03, Planner-R1", run, claim_numbers, CLAIMS, curves=curves, report=report, audit=held_out_audit,
    task=tool_task, golden=golden_cases, options=_options,
    configure=command.designed_experiment("rare_success", rare_success)
)  # fmt: skip


if __name__ == "__main__":
    CHAPTER.main()
