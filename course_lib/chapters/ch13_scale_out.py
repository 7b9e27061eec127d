"""Chapter 13 (appendix): scale-out. Chapter 00's tool environment trained by TRL's `GRPOTrainer`, beside the course's
own loop at the same budget.

The environment, its reward and its loss mask travel to TRL unchanged through `course_lib.integrations.course_trl`
(`rollout_func` + `env_mask`); what TRL brings is its trainer (accelerate, DeepSpeed/FSDP, vLLM generation). The
chapter checks that the hand-over is exact on a real batch (TRL's loss mask is the environment's, token for token;
its advantages are GRPO's group-normalised episode rewards) and that TRL, given the course's environment, learns
what chapter 00's loop learns at the same budget, on the same held-out problems. Then the survey's methods on TRL
(`course_lib.integrations.trl_checks`): GiGPO in step and trajectory mode, ARPO's and AEPO's trees, StarPO-S and the
SNR filter, each compared with the course's loop on the same episodes (C13.5). verl's side is
`course_lib.integrations.course_verl` and its `verl_*` modules, checked by `make test-verl` in verl's own environment
(`docs/scale-out.md`); training on verl needs GPUs.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from course_lib import course_config, data
from course_lib.chapters import skeleton
from course_lib.course import chance, leakage
from course_lib.course.claims import Claim, ClaimSpec, at_least, evaluate_all
from course_lib.engine.bookkeeping import expected_tokens
from course_lib.integrations import course_trl, trl_checks
from course_lib.rl.train import GRPOConfig, train_grpo
from course_lib.tasks import tool_arithmetic


@dataclass
class Chapter13Config:
    """Everything the appendix varies, with the cpu preset's values as defaults: chapter 00's budget."""

    trl: course_trl.TRLSettings = field(
        default_factory=lambda: course_trl.TRLSettings(steps=50, prompts=8, group=8, learning_rate=5e-4)
    )
    """TRL's run: 50 steps of 8 prompts x 8 completions at chapter 00's learning rate (chapter 00: 50 iterations)."""
    check_prompts: int = 8
    """Prompts in the batch the exact checks (C13.1, C13.2) read; `trl.group` completions each."""
    chapter00: tool_arithmetic.ArithmeticConfig = field(default_factory=tool_arithmetic.ArithmeticConfig)
    """Chapter 00's settings: its sampling, its evaluation (held-out problems) and its own loop's budget."""


def preset(scale: str | None = None) -> Chapter13Config:
    """The chapter's configuration for `COURSE_SCALE` (`cpu` or `gpu`): chapter 00's budget at that scale."""
    scale = scale or course_config.scale()
    base = tool_arithmetic.preset(scale)
    grpo = base.grpo
    settings = course_trl.TRLSettings(grpo.iterations, grpo.prompts_per_iteration, grpo.group_size, grpo.learning_rate)
    return Chapter13Config(trl=settings, chapter00=base)


def course_budget(config: Chapter13Config) -> GRPOConfig:
    """Chapter 00's loop at TRL's budget (equal to chapter 00's own at both presets)."""
    return dataclasses.replace(
        config.chapter00.grpo,
        iterations=config.trl.steps,
        prompts_per_iteration=config.trl.prompts,
        group_size=config.trl.group,
        learning_rate=config.trl.learning_rate,
    )


def handover_checks(model, tokenizer, config: Chapter13Config, seed: int) -> dict[str, float]:
    """What TRL builds from one batch of the adapter's rollouts, checked exactly (C13.1, C13.2).

    The loss mask TRL trains with (`completion_mask * tool_mask`) is compared token by token with the mask rebuilt
    from each trajectory's environment transcript (`bookkeeping.expected_tokens`), padding included; TRL's advantages
    with GRPO's, computed here from the environment's episode rewards per group (unbiased std + 1e-4, TRL's epsilon).
    """
    settings = dataclasses.replace(config.trl, steps=1, prompts=config.check_prompts, seed=seed)
    kept: list = []
    trainer = course_trl.rollout_trainer(
        tool_arithmetic.tool_task(), settings, copy.deepcopy(model), tokenizer, keep=kept
    )
    prompts = list(course_trl.training_prompts(tool_arithmetic.tool_task(), settings.prompts))
    inputs = [{"prompt": p} for p in prompts for _ in range(settings.group)]
    with course_trl.quiet_deprecations():
        batch = trainer._generate_and_score_completions(inputs)  # what TRL's training step computes first
    loss_mask = (batch["completion_mask"] * batch["tool_mask"]).tolist()
    mask_errors = 0
    for row, trajectory in zip(loss_mask, kept, strict=True):
        _, expected = expected_tokens(trajectory, tokenizer)
        completion = expected[trajectory.prefix_length(0) :]
        padded = completion + [0] * (len(row) - len(completion))
        mask_errors += sum(a != b for a, b in zip(row, padded, strict=True))
    rewards = torch.tensor([t.total_reward for t in kept]).view(settings.prompts, settings.group)
    advantages = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)
    trl_advantages = batch["advantages"].view(settings.prompts, settings.group).float()
    return {
        "completions": float(len(kept)),
        "policy_tokens": float(sum(sum(row) for row in loss_mask)),
        "environment_tokens": float(sum(len(t.token_ids) - sum(t.loss_mask) for t in kept)),
        "tool_calls": float(sum("tool_result" in info for t in kept for info in t.infos)),
        "mask_errors": float(mask_errors),
        "advantage_error": float((trl_advantages - advantages).abs().max()),
    }


def run(seed: int, config: Chapter13Config | None = None) -> dict:
    """The appendix for one seed: chapter 00's base evaluated, the hand-over checked, TRL's run and chapter 00's
    loop at the same budget from the same base. The base and both trained policies are evaluated on chapter 00's
    held-out problems with one sampling seed (`seed + 1`), so a gain compares policies, not sampling draws."""
    config = config or preset()
    start = time.perf_counter()
    course_config.seed_everything(seed)
    model, tokenizer = data.load_base(tool_arithmetic.BASE_NAME, course_config.device())
    results = {"base": tool_arithmetic.evaluate(model, tokenizer, config.chapter00, seed + 1)}
    results["checks"] = handover_checks(model, tokenizer, config, seed)
    results["methods"] = trl_checks.method_checks(seed)

    trl_model = copy.deepcopy(model)
    trainer = course_trl.rollout_trainer(
        tool_arithmetic.tool_task(), dataclasses.replace(config.trl, seed=seed), trl_model, tokenizer
    )
    trl_start = time.perf_counter()
    course_trl.quiet_train(trainer)
    results["trl_seconds"] = time.perf_counter() - trl_start
    results["trl_history"] = [row for row in trainer.state.log_history if "reward" in row]
    trl_model.eval()
    results["trl"] = tool_arithmetic.evaluate(trl_model, tokenizer, config.chapter00, seed + 1)

    course_model = copy.deepcopy(model)
    course_config.seed_everything(seed)
    course_start = time.perf_counter()
    results["course_history"] = train_grpo(
        course_model, tokenizer, tool_arithmetic.make_env, config.chapter00.sampling, course_budget(config), seed
    )
    results["course_seconds"] = time.perf_counter() - course_start
    results["course"] = tool_arithmetic.evaluate(course_model, tokenizer, config.chapter00, seed + 1)
    results["minutes"] = (time.perf_counter() - start) / 60
    results["trl_model"], results["course_model"], results["tokenizer"] = trl_model, course_model, tokenizer
    return results


def claim_numbers(results: Mapping) -> dict[str, float]:
    """Every number the appendix's claims use: held-out success of the base, of TRL's run and of chapter 00's loop,
    and the hand-over checks."""
    base, trl, course = results["base"]["success"], results["trl"]["success"], results["course"]["success"]
    numbers = {
        "base_success": base,
        "trl_success": trl,
        "course_success": course,
        "trl_gain": trl - base,
        "trl_minus_course": trl - course,
        "trl_seconds": results["trl_seconds"],
        "course_seconds": results["course_seconds"],
    }
    numbers |= {f"checks_{key}": value for key, value in results["checks"].items()}
    return numbers | {f"methods_{key}": value for key, value in results["methods"].items()}


CLAIMS: tuple[ClaimSpec, ...] = (
    ClaimSpec(
        "C13.1",
        "TRL's loss mask is the environment's, token for token (exact, on a real batch with tool calls)",
        "TRL 1.16 `GRPOTrainer`: `rollout_func`'s `env_mask` becomes its `tool_mask`; the course's C0.3 under TRL",
        "checks_mask_errors",
        lambda n: n["checks_mask_errors"] == 0 and n["checks_tool_calls"] > 0 and n["checks_policy_tokens"] > 0,
        kind="mechanism",
        chance=chance.compared_exactly(
            "TRL's mask is compared with the environment's token by token", "checks_tool_calls"
        ),
    ),
    ClaimSpec(
        "C13.2",
        "TRL's advantages are GRPO's group-normalised episode rewards of the environment (to float rounding)",
        "DeepSeekMath section 4.1 (GRPO's outcome advantage); TRL's `scale_rewards='group'` with std + 1e-4",
        "checks_advantage_error",
        lambda n: n["checks_advantage_error"] <= 1e-5,
        kind="mechanism",
        chance=chance.exact("both advantages are computed from the same rewards and compared to float rounding"),
    ),
    ClaimSpec(
        "C13.3",
        "TRL trained through the adapter raises held-out success by at least 15 points, chapter 00's bar",
        "no paper: the environment travels to another engine and still teaches; threshold from C0.2",
        "trl_gain",
        lambda n: at_least(n["trl_gain"], 0.15),
        # the course's own engines, not a paper's finding: a mechanism, with the gain far above the bar
        kind="mechanism",
        chance=chance.next_seed("trl_gain", 0.15),
    ),
    ClaimSpec(
        "C13.4",
        "at the same budget, TRL's held-out success is within 10 points of chapter 00's loop",
        "no paper: two engines, one environment; a margin set after two TRL pilot seeds, before any course run here",
        "trl_minus_course",
        lambda n: abs(n["trl_minus_course"]) <= 0.10,
        kind="mechanism",
        chance=chance.any_of(
            chance.next_seed("trl_minus_course", 0.10, above=False), chance.next_seed("trl_minus_course", -0.10)
        ),
    ),
    ClaimSpec(
        "C13.5",
        "TRL trains the survey's methods as the course's loop does on the same episodes: GiGPO's advantages (step and "
        "trajectory mode, bit for bit), ARPO's and AEPO's tree leaves, StarPO-S's and the SNR filter's kept groups, "
        "and the loss and gradient on them (0 mismatched rows, and the trees branched)",
        "GiGPO (2505.10978), ARPO (2507.19849), AEPO (2510.14545), RAGEN (2504.20073), RAGEN-2: the course's loop "
        "(`course_lib.rl.seams`) against `trl_methods.CourseMethodTrainer`",
        "methods_mismatches",
        lambda n: (
            n["methods_mismatches"] == 0 and n["methods_arpo_tree_branches"] + n["methods_aepo_tree_branches"] > 0
        ),
        kind="mechanism",
        chance=chance.compared_exactly(
            "rows, advantages, leaves, losses and gradients are compared on the very same episodes",
            "methods_arpo_tree_branches",
        ),
    ),
)


def claims(results: Mapping) -> list[Claim]:
    """The appendix's claims, evaluated on `claim_numbers(results)`."""
    return evaluate_all(CLAIMS, claim_numbers(results))


def report(results: Mapping) -> list[str]:
    """What the command line prints for a seed, before its claims."""
    n = claim_numbers(results)
    return [
        f"held-out success: base {n['base_success']:.3f}, TRL {n['trl_success']:.3f} "
        f"({n['trl_seconds']:.1f} s), course_lib {n['course_success']:.3f} ({n['course_seconds']:.1f} s)",
        f"hand-over: {results['checks']}",
        f"methods on TRL: {results['methods']['mismatches']:.0f} mismatched of {results['methods']['rows']:.0f} rows",
    ]


def reward_histories(results: Mapping) -> dict[str, list[dict[str, float]]]:
    """Mean training reward per step of each engine, as `{"TRL": rows, "course_lib": rows}` with rows
    `{"iteration": k, "reward": r}` (k from 1, TRL's step numbering)."""
    return {
        "TRL": [{"iteration": float(row["step"]), "reward": float(row["reward"])} for row in results["trl_history"]],
        "course_lib": [
            {"iteration": float(row["iteration"] + 1), "reward": float(row["reward"])}
            for row in results["course_history"]
            if "loss" in row
        ],
    }


def curves(results: Mapping) -> dict[str, list[tuple[float, float]]]:
    """Training reward per step of each engine (`trl/reward`, `course/reward`), for seed bands in the notebook."""
    histories = reward_histories(results)
    return {
        f"{prefix}/reward": [(row["iteration"], row["reward"]) for row in histories[arm]]
        for arm, prefix in (("TRL", "trl"), ("course_lib", "course"))
    }


# Leakage audit ----------------------------------------------------------------------------------
def held_out_audit() -> list[leakage.SplitAudit]:
    """Chapter 00's held-out problems against what the appendix trains on: TRL's prompts (its whole dataset, and the
    check batch, its first prompts) and chapter 00's loop at the same budget. Skipped without `trl` (an optional
    extra), which the appendix and its prompts need."""
    if importlib.util.find_spec("trl") is None:
        return [leakage.SplitAudit("ch13", "test", 0, 0, skipped="trl is not installed: pip install -e .[trl]")]
    from course_lib.integrations.course_trl import dataset_prompts, training_prompts

    config = preset("cpu")
    keys = leakage.problem_keys(
        lambda: tool_arithmetic.make_env("test"), tool_arithmetic.test_seeds(config.chapter00.eval_tasks)
    )
    trl = config.trl
    task = tool_arithmetic.tool_task()
    prompt_seeds = {**dataset_prompts(task, trl), **training_prompts(task, config.check_prompts)}
    draws = [*prompt_seeds.values(), *leakage.grpo_task_seeds(trl.steps, trl.prompts, leakage.run_seeds("ch13"))]
    training = set(leakage.problem_keys(tool_arithmetic.make_env, draws))
    chapter00 = config.chapter00
    demos = leakage.prompts_of(
        tool_arithmetic.demonstration_texts(
            chapter00.demonstrations,
            leakage.base_seed(tool_arithmetic.BASE_NAME),
            chapter00.tool_share,
            chapter00.direct_correct,
        )
    )
    return [leakage.split_audit("ch13", "test", keys, leakage.problem_overlaps(keys, training, demos))]


CHAPTER = skeleton.Chapter(
    "ch13", "Chapter 13 (appendix), chapter 00 under TRL", run, claim_numbers, CLAIMS, curves=curves, report=report,
    audit=held_out_audit
)  # fmt: skip


if __name__ == "__main__":
    CHAPTER.main()
