"""The course's GRPO iteration against TRL's (`python -m course_lib.lab.bench trl`).

One GRPO iteration of course_lib against one step of TRL's `GRPOTrainer` (`course_lib.integrations.course_trl`), same
base, same task, same batch, same optimizer settings (AdamW at chapter 00's learning rate, token-mean clipped loss, no
KL, the whole model trained, one update per batch), interleaved in pairs inside one TRL run: a trainer callback runs the
course's iteration before or after each TRL step, alternating. First, chapter 05's single-turn function calling, where
TRL generates with `generate()` and a reward function plays the completion in the chapter's environment; then chapter
00's tool task, where TRL gets its completions from the course's engine through `rollout_func`, so only TRL's scoring
and update differ. Phases: generation, scoring (the environment's reward, plus the course's advantage), update (TRL: the
log-prob forward pass, loss, backward and optimizer step; the first pair is a warm-up and is dropped). The last line,
`iteration_speedup_vs_trl=X.XX`, is TRL's seconds per iteration over the course's on chapter 05, the median over the
pairs.
"""

from __future__ import annotations

import statistics
import time

import torch

from course_lib import data
from course_lib.engine.rollout import RolloutEngine
from course_lib.rl.train import policy_iteration
from course_lib.tasks.tool_task import ToolTask

PHASES = ("generation", "scoring", "update")


def course_iteration(model, tokenizer, task: ToolTask, grpo, iteration: int, generator, optimizer) -> dict[str, float]:
    """One course GRPO iteration (`train.policy_iteration`) split into the benchmark's phases, in seconds."""
    engine = RolloutEngine(model, tokenizer, task.sampling)
    envs = [task.make_env() for _ in range(grpo.prompts_per_iteration * grpo.group_size)]
    metrics = policy_iteration(model, engine, envs, grpo, 0, iteration, generator, optimizer)
    env_seconds = engine.timings["env"]  # the environment computes the reward inside `step`
    return {
        "generation": metrics["time_rollout"] - env_seconds,
        "scoring": env_seconds + metrics["time_advantage"],
        "update": metrics["time_update"],
    }


def paired_trl_run(chapter: str, native: bool, pairs: int, prompts: int, group: int) -> tuple[list[dict], list[dict]]:
    """`pairs + 1` TRL steps on a copy of chapter `chapter`'s base, each paired with one course iteration on another
    copy (before the step on odd pairs, after it on even ones); per pair, each side's phases in seconds. The
    first pair (a warm-up: TRL builds its optimizer and data loader in its first step) is dropped."""
    import copy

    from transformers import TrainerCallback

    from course_lib.integrations import course_trl
    from course_lib.rl.train import GRPOConfig

    task = course_trl.chapter_task(chapter)
    base, tokenizer = data.load_base(task.base)
    # TRL logs once, at the end, as a long run nearly does (logging every step measured no different here).
    settings = course_trl.TRLSettings(pairs + 1, prompts, group, learning_rate=5e-4, logging_steps=pairs + 1)
    make = course_trl.native_trainer if native else course_trl.rollout_trainer
    trainer = make(chapter, settings, copy.deepcopy(base), tokenizer)
    grpo = GRPOConfig(iterations=pairs + 1, prompts_per_iteration=prompts, group_size=group, learning_rate=5e-4)
    course_model = copy.deepcopy(base)
    optimizer = torch.optim.AdamW(course_model.parameters(), lr=grpo.learning_rate)
    generator = torch.Generator().manual_seed(0)
    trl_phases: list[dict] = []
    course_phases: list[dict] = []
    current: dict[str, float] = {}

    def timed(method, phase: str):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                current[phase] = current.get(phase, 0.0) + time.perf_counter() - start

        return wrapper

    # Instance attributes shadow the trainer's methods: generation and reward scoring are timed where TRL calls them.
    trainer._generate = timed(trainer._generate, "generation")
    trainer._calculate_rewards = timed(trainer._calculate_rewards, "scoring")
    trainer._generate_and_score_completions = timed(trainer._generate_and_score_completions, "prepared")

    class Pairing(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step % 2 == 1:
                course_phases.append(course_iteration(course_model, tokenizer, task, grpo, state.global_step,
                                                      generator, optimizer))  # fmt: skip
            current.clear()
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            total = time.perf_counter() - self.start
            generation, scoring = current.get("generation", 0.0), current.get("scoring", 0.0)
            # TRL scores inside `_generate_and_score_completions`, after `_generate`: scoring is not in generation.
            # `prepared` (generation, scoring, then padding, advantages and metrics) is reported inside the update.
            preparation = current.get("prepared", 0.0) - generation - scoring
            trl_phases.append({"generation": generation, "scoring": scoring, "update": total - generation - scoring,
                               "preparation": preparation})  # fmt: skip
            if (state.global_step - 1) % 2 == 0:
                course_phases.append(course_iteration(course_model, tokenizer, task, grpo, state.global_step - 1,
                                                      generator, optimizer))  # fmt: skip

    trainer.add_callback(Pairing())
    course_trl.quiet_train(trainer)
    return trl_phases[1:], course_phases[1:]


def print_trl_pairs(label: str, trl_phases: list[dict], course_phases: list[dict]) -> float:
    """Median phases of each side, and the median (with range) of TRL's seconds over the course's per pair."""

    def seconds(phases: dict) -> float:
        return sum(phases[phase] for phase in PHASES)

    ratios = [seconds(t) / seconds(c) for t, c in zip(trl_phases, course_phases, strict=True)]
    print(f"{label}, {len(ratios)} interleaved pairs (median seconds per iteration):")
    for name, phases in (("course_lib", course_phases), ("TRL GRPOTrainer", trl_phases)):
        split = {phase: statistics.median(p[phase] for p in phases) for phase in PHASES}
        total = statistics.median(seconds(p) for p in phases)
        parts = ", ".join(f"{phase} {split[phase]:.3f}" for phase in PHASES)
        if "preparation" in phases[0]:
            parts += f" (of which {statistics.median(p['preparation'] for p in phases):.3f} batch preparation)"
        print(f"  {name:16} {total:.3f} s: {parts}")
    speedup = statistics.median(ratios)
    print(f"  course_lib is {speedup:.2f}x faster per iteration (range {min(ratios):.2f}-{max(ratios):.2f})")
    return speedup


def bench_trl(pairs: int, prompts: int = 16, group: int = 4, tool_prompts: int = 8, tool_group: int = 8) -> float:
    """`python -m course_lib.lab.bench trl`: chapter 05 single-turn (TRL generating), then chapter 00 multi-turn (TRL
    through the course's `rollout_func`); returns chapter 05's median speedup."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.set_verbosity_error()
    single = print_trl_pairs(
        f"chapter 05 function calling, single turn, {prompts} prompts x {group}, TRL generating",
        *paired_trl_run("05", True, pairs, prompts, group),
    )
    print_trl_pairs(
        f"chapter 00 tool arithmetic, multi-turn, {tool_prompts} prompts x {tool_group}, TRL through rollout_func "
        "(the course's engine)",
        *paired_trl_run("00", False, pairs, tool_prompts, tool_group),
    )
    print(f"iteration_speedup_vs_trl={single:.2f}")
    return single
