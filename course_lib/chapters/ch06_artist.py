"""Chapter 06: ARTIST, one GRPO loop over reasoning interleaved with several tool calls (arXiv 2505.01441).

The policy thinks, looks up two prices, calls the calculator, and answers, over four or more turns
of `price_tools`; tool responses are masked from the loss; the reward is ARTIST's answer + format +
tool-execution fraction. The chapter measures task success, tool calls per problem, response length
and self-correction (what the policy does right after a failed tool call), before and after RL, and
ablates the tool-execution term. The base is built by `python -m course_lib.data build ch06`.
"""

from __future__ import annotations

import copy
import functools
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from course_lib import course_config, data, envs
from course_lib.chapters import skeleton
from course_lib.course import leakage, recorded
from course_lib.course.claims import Claim, ClaimSpec, at_least, effect_at_least, evaluate_all
from course_lib.engine.rollout import SamplingConfig, Trajectory
from course_lib.envs.price_tools import NUMBER_RANGE, draw_problem, solve, vocabulary
from course_lib.rl.train import GRPOConfig, evaluate_policy, train_grpo
from course_lib.rl.warm_start import SFTConfig
from course_lib.tasks import bases
from course_lib.tasks.tool_task import ToolTask, held_out_on_test
from course_lib.tokenizer import build_tokenizer
from course_lib.tools.lookup_table import TABLE

ENV_NAME = "price_tools"
BASE_NAME = "ch06_base"


@dataclass
class Chapter06Config:
    """Everything chapter 06 varies, with the cpu preset's values as defaults."""

    model_preset: str = "tiny"
    """Model size, a key of `models.MODEL_PRESETS`."""
    demonstrations: int = 20_000
    """Number of demonstration episodes for the warm start."""
    failure_rate: float = 0.3
    """Probability that a call the episode has not made before fails transiently (env and demonstrations)."""
    retry_share: float = 0.2
    """In the demonstrations, the share of failed calls followed by a retry (the rest give up and guess)."""
    w_tool: float = 0.2
    """Weight of ARTIST's tool-execution term (successful calls / calls); 0 is the ablation."""
    sft: SFTConfig = field(default_factory=lambda: SFTConfig(steps=1000, batch_size=64, learning_rate=3e-3))
    """Warm start."""
    grpo: GRPOConfig = field(
        default_factory=lambda: GRPOConfig(iterations=40, prompts_per_iteration=8, group_size=8, eval_every=10)
    )
    """RL (tool responses masked from the loss). Held-out evaluation every 10 iterations draws the retry-rate
    curve; evaluations use their own generator, so the trained weights are the same as with fewer of them."""
    sampling: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(temperature=1.0, max_turn_tokens=12, max_total_tokens=80)
    )
    """Rollout sampling (temperature 1, as RL samples); room for nine turns."""
    eval_tasks: int = 200
    """Distinct held-out test problems per evaluation (`test_seeds`). The test split holds only 699
    problems (15% of the 48 x 47 x 2 ordered pairs of goods and operators), so no preset asks for more."""


def preset(scale: str | None = None) -> Chapter06Config:
    """The chapter's configuration for `COURSE_SCALE` (`cpu` or `gpu`)."""
    gpu = Chapter06Config(
        model_preset="small",
        demonstrations=50_000,
        sft=SFTConfig(steps=3000, batch_size=128, learning_rate=2e-3),
        grpo=GRPOConfig(iterations=100, prompts_per_iteration=32, group_size=16, learning_rate=3e-4, eval_every=20),
        eval_tasks=699,  # every test problem: the split has no 1000 different ones
    )
    return course_config.by_scale(Chapter06Config(), gpu, scale)


def make_env(split: str = "train", config: Chapter06Config | None = None, w_tool: float | None = None) -> envs.TextEnv:
    config = config or Chapter06Config()
    w_tool = config.w_tool if w_tool is None else w_tool
    return envs.make(ENV_NAME, split=split, failure_rate=config.failure_rate, w_tool=w_tool)


def demonstration_texts(count: int, seed: int, failure_rate: float, retry_share: float) -> list[tuple[str, str]]:
    """`(prompt, completion)` demonstrations on train problems, tool responses included.

    Each call fails with probability `failure_rate` (as in the environment); after a failure the
    demonstration retries the same call with probability `retry_share`, and otherwise gives up
    with a guessed answer. So the base has seen recovery, but only `retry_share` of the time (a fifth in
    both presets).
    """
    rng = random.Random(seed)
    low, high = NUMBER_RANGE
    texts = []
    for index in range(count):
        x, op, y = draw_problem(seed * 10_000_019 + index, "train")
        result = solve(x, op, y)
        calls = [(f"lookup {x}", TABLE[x]), (f"lookup {y}", TABLE[y]), (f"python {TABLE[x]} {op} {TABLE[y]}", result)]
        parts = [f"<think> {x} {op} {y} </think>"]
        gave_up = False
        for call, value in calls:
            if rng.random() < failure_rate:
                parts.append(f"<tool_call> {call} </tool_call> <tool_response> error </tool_response>")
                if rng.random() >= retry_share:
                    parts.append(f"<answer> {rng.randint(low, high)} </answer>")
                    gave_up = True
                    break
            parts.append(f"<tool_call> {call} </tool_call> <tool_response> {value} </tool_response>")
        if not gave_up:
            parts.append(f"<answer> {result} </answer>")
        texts.append((f"<question> {x} {op} {y} </question>", " ".join(parts)))
    return texts


def build_tokenizer_for_chapter():
    return build_tokenizer(vocabulary())


build_base = bases.base_builder(
    preset, vocabulary, 96, lambda c, seed: demonstration_texts(c.demonstrations, seed, c.failure_rate, c.retry_share)
)
"""`build_base(out_dir, seed, scale, progress, config)`: a fresh model warm-started on the demonstrations, saved."""


def build_data(data_dir: Path, seed: int = 0, progress: bool = True, scale: str = "cpu") -> None:
    """`python -m course_lib.data build ch06 [--scale gpu]`: the task set and the warm-started base of
    `preset(scale)`."""

    def columns(problems: list) -> dict[str, list]:
        return {"question": [" ".join(p) for p in problems], "answer": [solve(*p) for p in problems]}

    data.write_task_set("ch06_tasks", bases.task_splits(draw_problem, columns), seed, data_dir, scale)
    bases.write_base(BASE_NAME, build_base, data_dir, seed, progress, scale)


# Measurements ----------------------------------------------------------------------------------
def self_correction(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """What happens right after a failed tool call (C6.2).

    `failed_calls`: tool calls whose result was `error` and that were followed by another action.
    `retry_rate`: share of those followed at once by a call to the same tool that succeeds.
    `recovered`: success rate of the episodes that had at least one failed call.
    """
    followed = retried = 0
    with_failure = []
    for t in trajectories:
        failed = False
        for step, info in enumerate(t.infos):
            if info.get("tool_result") != "error":
                continue
            failed = True
            if step + 1 < len(t.infos):
                followed += 1
                after = t.infos[step + 1]
                retried += after.get("tool") == info.get("tool") and after.get("tool_result", "error") != "error"
        if failed:
            with_failure.append(t.success)
    return {
        "failed_calls": float(followed),
        "retry_rate": retried / max(followed, 1),
        "episodes_with_failure": float(len(with_failure)),
        "recovered": float(np.mean(with_failure)) if with_failure else 0.0,
        "tool_calls": float(np.mean([sum("tool_result" in i for i in t.infos) for t in trajectories])),
    }


test_seeds = bases.held_out_seeds(lambda: make_env("test"))
"""`test_seeds(count)`: seeds of the held-out problems used for evaluation (the test split's first `count`
seeds with pairwise different problems; cached)."""


def evaluate(model, tokenizer, config: Chapter06Config, seed: int) -> dict[str, float]:
    """Held-out success, tool use, response length and self-correction, sampled at temperature 1."""
    stats, trajectories = evaluate_policy(
        model, tokenizer, lambda: make_env("test", config), test_seeds(config.eval_tasks), config.sampling, seed
    )
    return {**stats, **self_correction(trajectories)}


def train(model, tokenizer, config: Chapter06Config, seed: int, w_tool: float, progress: bool = False) -> list[dict]:
    """GRPO on `price_tools` with tool-execution weight `w_tool` (the model is trained in place)."""
    return train_grpo(
        model, tokenizer, lambda: make_env("train", config, w_tool), config.sampling, config.grpo, seed,
        evaluate=lambda m: evaluate(m, tokenizer, config, seed), progress=progress,
    )  # fmt: skip


def run(seed: int, config: Chapter06Config | None = None, progress: bool = False) -> dict:
    """The whole chapter for one seed: evaluate the base, train with ARTIST's reward and with the
    tool-execution term ablated (same seed and budget), evaluate both. Returns every number used."""
    config = config or preset()
    start = time.perf_counter()
    course_config.seed_everything(seed)
    texts = functools.partial(demonstration_texts, config.demonstrations, 0, config.failure_rate, config.retry_share)
    model, tokenizer, config = bases.base_for(BASE_NAME, config, texts)
    base_model = copy.deepcopy(model)
    results: dict = {"base": evaluate(model, tokenizer, config, seed + 1)}
    results["history"] = train(model, tokenizer, config, seed, config.w_tool, progress)
    results["trained"] = evaluate(model, tokenizer, config, seed + 1)
    ablated = copy.deepcopy(base_model)
    results["history_no_tool"] = train(ablated, tokenizer, config, seed, 0.0, progress)
    results["no_tool_term"] = evaluate(ablated, tokenizer, config, seed + 1)
    results["minutes"] = (time.perf_counter() - start) / 60
    results["model"], results["base_model"], results["tokenizer"] = model, base_model, tokenizer
    return results


CURVE_KEYS = (
    "success", "tool_error_rate", "turns", "policy_tokens",
    "eval_success", "eval_retry_rate", "eval_recovered", "eval_tool_calls",
)  # fmt: skip
"""History keys whose curves `--record` stores, per run: `tool/<key>` (ARTIST's reward) and `no_tool/<key>`
(the tool-execution term ablated)."""


def curves(results: Mapping) -> dict[str, list[tuple[float, float]]]:
    """Both runs' learning curves, `{"tool/<key>" or "no_tool/<key>": [(iteration, value), ...]}`."""
    histories = {"tool": results["history"], "no_tool": results["history_no_tool"]}
    return recorded.history_curves(histories, CURVE_KEYS)


def summary(results: dict) -> list[tuple[str, dict]]:
    """(label, evaluation) rows of the policies a run compares."""
    return [
        ("base", results["base"]),
        ("GRPO, R = answer + format + tool", results["trained"]),
        ("GRPO, R = answer + format", results["no_tool_term"]),
    ]


MIN_FAILED_CALLS = 30
"""C6.2 is measured only when the base and the trained policy each meet at least this many failed calls."""


def claim_numbers(results: Mapping) -> dict[str, float]:
    """Every number chapter 06's claims use, flat: held-out success, retry rate after a failed call and
    the number of failed calls it is measured on, for the base and for the policy trained with ARTIST's
    reward, plus the ablated run's success and the differences the claims check."""
    base, trained = results["base"], results["trained"]
    numbers = {}
    for name, stats in (("base", base), ("trained", trained)):
        for key in ("success", "retry_rate", "failed_calls"):
            numbers[f"{name}_{key}"] = stats[key]
    if "no_tool_term" in results:
        numbers["no_tool_term_success"] = results["no_tool_term"]["success"]
    numbers["success_gain"] = trained["success"] - base["success"]
    numbers["retry_rate_gain"] = trained["retry_rate"] - base["retry_rate"]
    return numbers


CLAIMS: tuple[ClaimSpec, ...] = (
    effect_at_least(
        "C6.1",
        "GRPO on the multi-turn loop raises held-out task success by at least 15 points",
        "ARTIST: up to 22 points absolute over the base model; tau-bench Airline about 0.12 to 0.26",
        "success_gain",
        0.15,
    ),
    ClaimSpec(
        "C6.2",
        f"after a failed call the trained policy retries correctly at least 25 points more often on average over "
        f"the seeds (95% t-interval above 0; measured on at least {MIN_FAILED_CALLS} failed calls of each policy)",
        "ARTIST: self-correction after tool errors emerges with RL (qualitative, no rate published)",
        "retry_rate_gain",
        lambda n: (
            n["base_failed_calls"] >= MIN_FAILED_CALLS
            and n["trained_failed_calls"] >= MIN_FAILED_CALLS
            and at_least(n["retry_rate_gain"], 0.25)
        ),
        effects=(("retry_rate_gain", 0.25),),
    ),
)


def claims(results: Mapping) -> list[Claim]:
    """Chapter 06's claims, evaluated on `claim_numbers(results)`."""
    return evaluate_all(CLAIMS, claim_numbers(results))


REPORT_KEYS = ("success", "retry_rate", "failed_calls", "recovered", "tool_calls", "tool_error_rate", "policy_tokens")


def report(results: Mapping) -> list[str]:
    """What the command line prints for a seed, before its claims: a line per policy compared."""
    return [f"{label:34} " + " ".join(f"{k} {stats[k]:.3f}" for k in REPORT_KEYS) for label, stats in summary(results)]


# Leakage audit ----------------------------------------------------------------------------------
def held_out_audit() -> list[leakage.SplitAudit]:
    """The test split against GRPO's draws and the base's demonstrations."""
    config = preset("cpu")
    demos = demonstration_texts(
        config.demonstrations, leakage.base_seed(BASE_NAME), config.failure_rate, config.retry_share
    )
    # ARTIST's reward and the ablation without the tool term train on the same task seeds.
    draws = leakage.grpo_draws("ch06", config.grpo)
    split_env = functools.partial(make_env, config=config)
    return leakage.held_out_split("ch06", split_env, test_seeds(config.eval_tasks), draws, leakage.prompts_of(demos))


# The task the integrations train, and the golden run's case --------------------------------------
def tool_task() -> ToolTask:
    """The price-tools task with failing tools at the cpu preset (TRL, verl and the golden run train on it)."""
    config = preset("cpu")
    split_env = functools.partial(make_env, config=config)
    return ToolTask(ENV_NAME, BASE_NAME, config.sampling, split_env, held_out_on_test(test_seeds, split_env))


def golden_cases() -> dict:
    """A GRPO batch of the committed base."""
    from course_lib.course import golden_cases

    return {"ch06 rollouts": golden_cases.rollout_case(tool_task())}


CHAPTER = skeleton.Chapter(
    "ch06", "Chapter 06, ARTIST", run, claim_numbers, CLAIMS, curves=curves, report=report, checkpoint=True,
    audit=held_out_audit, task=tool_task, golden=golden_cases
)  # fmt: skip


if __name__ == "__main__":
    CHAPTER.main()
