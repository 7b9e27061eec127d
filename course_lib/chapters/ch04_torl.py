"""Chapter 04: ToRL (arXiv 2503.23383), tool use emerging from RL on a base model, in miniature.

A "base model" is warm-started once on generic mixed traces of `word_math` problems (about 40% of
them write code, as ToRL's Qwen2.5-Math base does at step 0), then trained with GRPO exactly as
ToRL trains: reward +1/-1, no KL, temperature 1, tool output masked from the loss, at most C tool
calls per response. The chapter measures over training what ToRL's Fig. 5 plots (accuracy, code
ratio, executable-code ratio, ineffective calls) plus the tool success rate, and runs the paper's
ablations: tool output masked or not (C4.3), the -0.5 execution-error penalty, and C = 1 vs 2.

The task (its environments, demonstrations, measurements and data build) is `tasks.word_math_tool`. The base
checkpoint is built by `python -m course_lib.data build ch04` (`build_data`).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from course_lib import course_config
from course_lib.chapters import skeleton
from course_lib.course import leakage, recorded
from course_lib.course.claims import Claim, ClaimSpec, at_least, effect_at_least, evaluate_all
from course_lib.rl.train import train_grpo
from course_lib.tasks import bases, word_math_tool
from course_lib.tasks.tool_task import ToolTask, held_out_on_test
from course_lib.tasks.word_math_tool import (  # noqa: F401 (the notebook, exercises and data build read them here)
    BASE_NAME,
    ENV_NAME,
    TASKS_NAME,
    WordMathConfig,
    build_base,
    build_data,
    build_tokenizer_for_chapter,
    call_is_effective,
    demonstration_texts,
    evaluate,
    make_env,
    test_seeds,
    torl_stats,
)


@dataclass
class Chapter04Config(WordMathConfig):
    """Everything chapter 04 varies: its task's settings (`tasks.word_math_tool.WordMathConfig`)."""


def preset(scale: str | None = None) -> Chapter04Config:
    """The chapter's configuration for `COURSE_SCALE` (`cpu` or `gpu`)."""
    return word_math_tool.preset(scale, Chapter04Config)


# Experiments ------------------------------------------------------------------------------------
VARIANTS = {
    "masked": dict(),
    "unmasked": dict(mask_observations=False),
    "penalty": dict(penalty=True),
    "C=2": dict(max_tool_calls=2),
}
"""The main run (ToRL's recipe, C = 1) and the three ablations, as changes to it."""


def train(
    model, tokenizer, config: Chapter04Config, seed: int, mask_observations: bool = True,
    penalty: bool = False, max_tool_calls: int | None = None,
) -> dict:  # fmt: skip
    """GRPO from `model` (changed in place); returns the history, the final evaluation (another
    sampling seed) and the mean seconds per RL step."""
    calls = config.max_tool_calls if max_tool_calls is None else max_tool_calls
    error_penalty = config.execution_error_penalty if penalty else 0.0
    grpo = dataclasses.replace(config.grpo, mask_observations=mask_observations)
    history = train_grpo(
        model, tokenizer, lambda: make_env("train", calls, error_penalty), config.sampling, grpo, seed,
        evaluate=lambda m: evaluate(m, tokenizer, config, seed, calls),
    )  # fmt: skip
    steps = [r for r in history if "time_rollout" in r]
    seconds = float(np.mean([r["time_rollout"] + r["time_advantage"] + r["time_update"] for r in steps]))
    return {
        "history": history,
        "final": evaluate(model, tokenizer, config, seed + 1, calls),
        "seconds_per_step": seconds,
    }


def run(
    seed: int, config: Chapter04Config | None = None, variants: Sequence[str] | None = None,
    base_stats: Mapping | None = None,
) -> dict:  # fmt: skip
    """The whole chapter for one seed: evaluate the base, then train each variant of `variants` (default: all of
    `VARIANTS`) from it. `base_stats` (`evaluate(base, ..., seed)`, e.g. what a notebook already showed) saves
    evaluating the base again; the evaluation has its own generator and every variant reseeds, so the results are
    the same either way."""
    config = config or preset()
    start = time.perf_counter()
    course_config.seed_everything(seed)
    texts = functools.partial(demonstration_texts, config.demonstrations, 0, config.tool_share, config.direct_correct)
    base, tokenizer, config = bases.base_for(BASE_NAME, config, texts)
    stats = base_stats if base_stats is not None else evaluate(base, tokenizer, config, seed)
    results: dict = {"base": stats, "runs": {}}
    for name in variants or list(VARIANTS):
        course_config.seed_everything(seed)
        results["runs"][name] = train(copy.deepcopy(base), tokenizer, config, seed, **VARIANTS[name])
    results["minutes"] = (time.perf_counter() - start) / 60
    return results


def mean_eval_accuracy(history: list[dict]) -> float:
    """Mean held-out accuracy over a run's evaluations after the start (iteration > 0)."""
    return float(np.mean([r["eval_success"] for r in history if "eval_success" in r and r["iteration"] > 0]))


def claim_numbers(results: Mapping) -> dict[str, float]:
    """Every number chapter 04's claims use, flat: the base's and the masked (main) run's final held-out
    accuracy, code ratio and ineffective-call share, the silent-tool hallucination probe of the masked
    and unmasked runs, each run's mean held-out accuracy over its evaluations after iteration 0, and
    the differences the claims check; as context (no claim uses them), the penalty and C = 2 runs' final
    accuracy and each run's seconds per RL step when present."""
    base, runs = results["base"], results["runs"]
    masked, unmasked = runs["masked"]["final"], runs["unmasked"]["final"]
    numbers = {f"base_{key}": base[key] for key in ("success", "code_ratio", "ineffective_rate")}
    numbers |= {f"masked_{key}": masked[key]
                for key in ("success", "code_ratio", "ineffective_rate", "silent_tool_hallucination")}  # fmt: skip
    numbers["unmasked_silent_tool_hallucination"] = unmasked["silent_tool_hallucination"]
    numbers["masked_accuracy_gain"] = masked["success"] - base["success"]
    numbers["masked_code_ratio_gain"] = masked["code_ratio"] - base["code_ratio"]
    numbers["ineffective_rate_drop"] = base["ineffective_rate"] - masked["ineffective_rate"]
    numbers["masked_mean_eval_accuracy"] = mean_eval_accuracy(runs["masked"]["history"])
    numbers["unmasked_mean_eval_accuracy"] = mean_eval_accuracy(runs["unmasked"]["history"])
    numbers["mean_eval_accuracy_masked_minus_unmasked"] = (
        numbers["masked_mean_eval_accuracy"] - numbers["unmasked_mean_eval_accuracy"]
    )
    if "success" in unmasked:  # context for C4.3b: the final gap, which was within noise
        numbers["unmasked_success"] = unmasked["success"]
        numbers["final_accuracy_masked_minus_unmasked"] = masked["success"] - unmasked["success"]
    # context, no claim: the two other ablations' final accuracy and every run's cost per RL step
    for name, run_results in runs.items():
        key = RECORD_NAMES[name]
        if name in ("penalty", "C=2"):
            numbers[f"{key}_success"] = run_results["final"]["success"]
        if "seconds_per_step" in run_results:
            numbers[f"{key}_seconds_per_step"] = run_results["seconds_per_step"]
    return numbers


RECORD_NAMES = {"masked": "masked", "unmasked": "unmasked", "penalty": "penalty", "C=2": "c2"}
"""How each variant is spelled in recorded number and curve names (no `=` in keys)."""
CURVE_KEYS = (
    "eval_success", "eval_code_ratio", "eval_executable_ratio", "eval_ineffective_rate",
    "eval_silent_tool_hallucination", "tool_use", "tool_error_rate", "reward", "entropy",
)  # fmt: skip
"""History keys whose curves `--record` stores, per variant (`masked/eval_success`, `c2/reward`, ...)."""


def curves(results: Mapping) -> dict[str, list[tuple[float, float]]]:
    """Every run's learning curves, `{"<variant>/<key>": [(iteration, value), ...]}`, for `results.record`."""
    histories = {RECORD_NAMES[name]: run_results["history"] for name, run_results in results["runs"].items()}
    return recorded.history_curves(histories, CURVE_KEYS)


CLAIMS: tuple[ClaimSpec, ...] = (
    ClaimSpec(
        "C4.1",
        "RL raises held-out accuracy by at least 15 points and the code ratio by at least 20 (each on average over "
        "the seeds, 95% t-interval above 0)",
        "ToRL (Fig. 5): code ratio rises from about 40% to about 80%; ToRL-7B reaches 43.3% on AIME24",
        "masked_accuracy_gain",
        lambda n: at_least(n["masked_accuracy_gain"], 0.15) and at_least(n["masked_code_ratio_gain"], 0.20),
        effects=(("masked_accuracy_gain", 0.15), ("masked_code_ratio_gain", 0.20)),
    ),
    effect_at_least(
        "C4.2",
        "the share of ineffective tool calls falls by at least 10 points during RL",
        "ToRL (Fig. 5): the share of effective code rises during RL (self-regulation of ineffective code)",
        "ineffective_rate_drop",
        0.10,
    ),
    ClaimSpec(
        "C4.3a",
        "with the tool silent, the unmasked policy writes tool responses itself in at least 8% of answers, "
        "the masked one in under 2%",
        "ToRL masks tool output from the loss; unmasked, a policy can learn to write observations itself",
        "unmasked_silent_tool_hallucination",
        lambda n: (
            at_least(n["unmasked_silent_tool_hallucination"], 0.08) and n["masked_silent_tool_hallucination"] < 0.02
        ),
    ),
    effect_at_least(
        "C4.3b",
        "unmasked RL is worse: its mean held-out accuracy over the run's evaluations after iteration 0 is at "
        "least 5 points lower than the masked run's",
        "ToRL masks tool output from the loss for stable training (no unmasked number published)",
        "mean_eval_accuracy_masked_minus_unmasked",
        0.05,
    ),
)


def claims(results: Mapping) -> list[Claim]:
    """Chapter 04's claims, evaluated on `claim_numbers(results)`. C4.3 is checked in two parts, C4.3a
    (hallucinated tool responses) and C4.3b (accuracy). C4.3b's metric, the mean held-out accuracy over
    the run, was chosen after the final accuracy gap was seen to be within noise: it needs fresh seeds."""
    return evaluate_all(CLAIMS, claim_numbers(results))


SUMMARY_KEYS = (
    "success", "code_ratio", "executable_ratio", "tool_success", "ineffective_rate", "skipped_rate",
    "hallucination_rate", "silent_tool_hallucination",
)  # fmt: skip


def summary_rows(results: dict) -> list[tuple[str, dict[str, float], float | None]]:
    """`(name, final stats, seconds per step)` for the base and each trained variant."""
    rows = [("base", results["base"], None)]
    rows += [(name, r["final"], r["seconds_per_step"]) for name, r in results["runs"].items()]
    return rows


def format_summary(results: dict) -> str:
    names = ("accuracy", "code", "executable", "tool ok", "ineffective", "skipped", "halluc.", "halluc.|silent")
    header = f"{'':10}" + "".join(f"{k:>15}" for k in names) + f"{'s/step':>8}"
    lines = [header]
    for name, stats, seconds in summary_rows(results):
        cells = "".join(f"{stats[k]:>15.3f}" for k in SUMMARY_KEYS)
        lines.append(f"{name:10}{cells}{'' if seconds is None else f'{seconds:>8.2f}'}")
    return "\n".join(lines)


CLAIMED = {"masked", "unmasked"}
"""The variants the claims compare: without both, a run prints its table and no claims."""


def report(results: Mapping) -> list[str]:
    """What the command line prints for a seed, before its claims: the table and, with both claimed variants,
    their mean held-out accuracy over the run."""
    lines = format_summary(results).splitlines()
    if CLAIMED <= set(results["runs"]):
        means = {name: mean_eval_accuracy(results["runs"][name]["history"]) for name in ("masked", "unmasked")}
        lines.append("mean held-out accuracy over the run: " + ", ".join(f"{k} {v:.3f}" for k, v in means.items()))
    return lines


# Leakage audit ----------------------------------------------------------------------------------
def held_out_audit() -> list[leakage.SplitAudit]:
    """The test split against GRPO's draws and the base's demonstrations."""
    config = preset("cpu")
    demos = demonstration_texts(
        config.demonstrations, leakage.base_seed(BASE_NAME), config.tool_share, config.direct_correct
    )
    # Every variant (`VARIANTS`) changes masking, penalty or C, never the GRPO sizes: the same task seeds.
    draws = leakage.grpo_draws("ch04", config.grpo)
    return leakage.held_out_split("ch04", make_env, test_seeds(config.eval_tasks), draws, leakage.prompts_of(demos))


# The task the integrations train, and the golden run's case --------------------------------------
def tool_task() -> ToolTask:
    """The word-problem task with one code call at the cpu preset (TRL, verl and the golden run train on it)."""
    return ToolTask(ENV_NAME, BASE_NAME, preset("cpu").sampling, make_env, held_out_on_test(test_seeds, make_env))


def golden_cases() -> dict:
    """A GRPO batch of the committed base."""
    from course_lib.course import golden_cases

    return {"ch04 rollouts": golden_cases.rollout_case(tool_task())}


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))


def _configure(
    chapter: skeleton.Chapter, args: argparse.Namespace, parser: argparse.ArgumentParser
) -> skeleton.Chapter:
    """The chapter with `--variants` applied; without both claimed variants, no claims (and no `--record`)."""
    chapter = dataclasses.replace(chapter, run=functools.partial(run, variants=args.variants))
    if CLAIMED <= set(args.variants):
        return chapter
    if args.record:
        parser.error("--record needs the variants its claims use: masked and unmasked")
    return dataclasses.replace(chapter, claim_numbers=lambda results: {}, claims=())


CHAPTER = skeleton.Chapter(
    "ch04", "Chapter 04, ToRL", run, claim_numbers, CLAIMS, curves=curves, report=report, checkpoint=True,
    audit=held_out_audit, task=tool_task, golden=golden_cases, options=_options, configure=_configure
)  # fmt: skip


if __name__ == "__main__":
    CHAPTER.main()
