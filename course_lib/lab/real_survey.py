"""The survey on a real model, its runs: SmolLM2 warm-started on each of the survey's tasks (`tasks.real_model`),
held-out success and valid actions per seed, printed and recorded seed by seed.

    python -m course_lib.lab.real_survey warm-start [--tasks calculator key_door two_hop lake] [--seeds 0 1 2 3 4]
        [--premises] [--record]   # results/ch16_warm_start_<task>.json, one record per seed (run again: replaced)
    python -m course_lib.lab.real_survey warm-start --tasks key_door --seeds 100 --pilot --steps 60 --record
        # a sizing try: results/ch16_warm_start_key_door_60steps_pilot.json
    python -m course_lib.lab.real_survey mismatch [--seeds 0 1 2 3 4] [--record]   # results/ch16_mismatch.json
    python -m course_lib.lab.real_survey lora-blocks [--seeds 100 101 102] [--record]   # results/ch16_lora_blocks.json
    python -m course_lib.lab.real_survey compare gigpo [--seeds 100 101 102 --pilot] [--record]  # ch16_gigpo*.json
    python -m course_lib.lab.real_survey check gigpo [--pilot]   # before-RL success against the warm-start records

`lora-blocks`: does LoRA on the top 8 of 30 blocks learn as LoRA on all of them does? Chapter 00's SmolLM2 design on
the fast path (warm start 30 steps of 8, GRPO 8 iterations of 4 x 8 at 2e-4, held-out success on 64 problems before
and after), once with each adapter, the same seed; per seed, each arm's numbers and the difference of their gains.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence

from course_lib import course_config
from course_lib.course import recorded
from course_lib.lab import fast_path
from course_lib.tasks.real_model import (
    COMPARISONS,
    GPU_RL_SHAPES,
    LORA_BLOCKS_RESULTS,
    MISMATCH_RESULTS,
    MODEL,
    RL_SHAPES,
    SMOLLM2,
    TASKS,
    WARM_STARTS,
    WarmStart,
    comparison_results,
    paired_arms,
    train_and_evaluate,
    warm_start_numbers,
    warm_start_results,
)

PILOT_SEEDS = 100
"""Pilot seeds are this and up; deciding seeds are below (docs/experiments/real-model-survey.md)."""


def record_seeds(
    name: str, seeds: Sequence[int], measure: Callable[[int], dict[str, float]], record: bool, pilot: bool = False
) -> dict[int, dict[str, float]]:
    """`measure(seed)` on every seed, printed, and with `record` written per seed as it finishes to
    `results/<name>.json` (`<name>_pilot.json` for a `pilot`): a stopped run keeps the seeds it finished."""
    if record:
        recorded.begin()
    out = {}
    for seed in seeds:
        start = time.perf_counter()
        out[seed] = numbers = measure(seed)
        print(f"seed {seed} {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in numbers.items()), flush=True)
        if record:
            recorded.record(name + ("_pilot" if pilot else ""), seed, (), numbers, (time.perf_counter() - start) / 60)
    return out


def prefixed(parts: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """`{part}_{key}` for every part's numbers."""
    return {f"{part}_{key}": value for part, numbers in parts.items() for key, value in numbers.items()}


def sized(task: str, steps: int | None) -> WarmStart:
    """`task`'s warm start (`WARM_STARTS`), with `steps` warm-start steps instead of its own when given."""
    settings = WARM_STARTS[task]
    if steps is None:
        return settings
    return dataclasses.replace(settings, sft=dataclasses.replace(settings.sft, steps=steps))


def warm_starts(
    tasks: Sequence[str],
    seeds: Sequence[int],
    record: bool = False,
    pilot: bool = False,
    premises: bool = False,
    steps: int | None = None,
) -> dict[int, dict[str, float]]:
    """`warm_start_numbers` of every task in `tasks` on every seed, task by task, each seed recorded as it finishes
    in the task's file (`results/ch16_warm_start_<task>.json`; a seed run again is replaced). With `steps` (a pilot's
    sizing try, docs/experiments/real-model-survey.md), each task warm-starts for that many steps and its records go
    to `results/ch16_warm_start_<task>_<steps>steps_pilot.json`. Each adapter is kept (`rl.adapter_cache`) for the
    comparisons that start from the same warm start. Returns every seed's numbers of all the tasks."""
    out: dict[int, dict[str, float]] = {seed: {} for seed in seeds}
    for task in tasks:
        name = warm_start_results(task, steps)

        def measure(seed: int, task: str = task) -> dict[str, float]:
            numbers = warm_start_numbers(task, seed, sized(task, steps), premises=premises, cache="write")
            return prefixed({task: numbers})

        for seed, numbers in record_seeds(name, seeds, measure, record, pilot).items():
            out[seed] |= numbers
    return out


def summary(results: Mapping[int, Mapping[str, float]], tasks: Sequence[str]) -> list[str]:
    """One line per task: the mean and range over seeds of held-out success and the valid-action rate."""
    lines = []
    for name in tasks:
        success = [numbers[f"{name}_success"] for numbers in results.values()]
        valid = [numbers[f"{name}_valid_rate"] for numbers in results.values()]
        lines.append(f"{name}: success {sum(success) / len(success):.3f} ({min(success):.3f}-{max(success):.3f}), "
                     f"valid actions {sum(valid) / len(valid):.3f} ({min(valid):.3f}-{max(valid):.3f}) over "
                     f"{len(success)} seeds")  # fmt: skip
    return lines


SMOLLM2_RL = dataclasses.replace(SMOLLM2.grpo, eval_every=10**6, autocast="bf16")
"""Chapter 00's SmolLM2 design's RL (8 iterations of 4 x 8 at 2e-4) on the fast path, without its evaluations."""


def lora_blocks(seeds: Sequence[int], record: bool = False) -> dict[int, dict[str, float]]:
    """Per seed, chapter 00's SmolLM2 design with LoRA on all blocks and on the top 8 (`LORA_BLOCKS_RESULTS`)."""

    def measure(seed: int) -> dict[str, float]:
        arms = {label: train_and_evaluate("arithmetic", seed, WarmStart(top_layers=blocks), SMOLLM2_RL)
                for label, blocks in (("all", 0), ("top8", 8))}  # fmt: skip
        return prefixed(arms) | {"top8_minus_all_gain": arms["top8"]["gain"] - arms["all"]["gain"]}

    return record_seeds(LORA_BLOCKS_RESULTS, seeds, measure, record)


def mismatch(seeds: Sequence[int], record: bool = False) -> dict[int, dict[str, float]]:
    """Per seed, the bf16 sampler's log-probs against the update's forward on one batch of chapter 00's task after
    the warm start (`fast_path.sampler_mismatch`, 32 episodes; `MISMATCH_RESULTS`)."""
    return record_seeds(MISMATCH_RESULTS, seeds, lambda seed: fast_path.sampler_mismatch(MODEL, seed=seed), record)


def rl_shape(comparison: str) -> dict:
    """`comparison`'s RL at the active scale: `RL_SHAPES` on the cpu preset, `GPU_RL_SHAPES` on the gpu preset."""
    return (GPU_RL_SHAPES if course_config.scale() == "gpu" else RL_SHAPES)[comparison]


def compare(comparison: str, seeds: Sequence[int], record: bool = False, pilot: bool = False) -> dict:
    """`paired_arms` of `comparison` on each seed, from the task's warm start (`WARM_STARTS`) with its RL at the active
    scale (`rl_shape`), recorded in `results/ch16_<comparison>.json` (`results/gpu/` on the gpu preset). A seed whose
    warm start a run kept under the same key (`rl.adapter_cache`) starts from that adapter instead of fitting it
    again; `before_success` should equal the warm-start record's `success` where both ran on the same machine
    (`warm_start_check`)."""
    settings, shape = WARM_STARTS[COMPARISONS[comparison][0]], rl_shape(comparison)

    def measure(seed: int) -> dict[str, float]:
        return paired_arms(comparison, seed, settings, shape, cache="read")

    return record_seeds(comparison_results(comparison), seeds, measure, record, pilot)


def warm_start_record(task: str, pilot: bool) -> str:
    """The name of the records of `task`'s warm start as the comparisons fit it, less its `_pilot`:
    `ch16_warm_start_<task>`, or for pilot seeds its sizing try's at `WARM_STARTS`' steps (`..._<steps>steps`) where
    the sizing rule changed chapter 00's steps."""
    steps = WARM_STARTS[task].sft.steps
    return warm_start_results(task, steps if pilot and steps != SMOLLM2.sft.steps else None)


def warm_start_check(comparison: str, pilot: bool = False) -> list[str]:
    """Per recorded seed of `comparison` (its pilots with `pilot`), the before-RL success beside the success its
    task's warm-start record measured on the same seed, and whether the two ran on the same machine (CPU, kernels,
    threads: `recorded.machine`): the check that a warm start fitted again gives its record's number
    (docs/experiments/real-model-survey.md). Reads records only."""
    task = COMPARISONS[comparison][0]
    suffix = "_pilot" if pilot else ""
    runs = recorded.load(comparison_results(comparison) + suffix)["seeds"]
    name = warm_start_record(task, pilot) + suffix
    try:
        warm = recorded.load(name)["seeds"]
    except recorded.ResultsMissing:
        warm = {}
    lines = []
    for seed in sorted(runs, key=int):
        before, run_machine = runs[seed]["numbers"]["before_success"], recorded.machine(runs[seed]["provenance"])
        if seed not in warm:
            lines.append(f"seed {seed}: before RL {before:.3f} ({run_machine}); no record in results/{name}.json")
            continue
        then, then_machine = warm[seed]["numbers"][f"{task}_success"], recorded.machine(warm[seed]["provenance"])
        where = (
            "the same machine"
            if then_machine == run_machine
            else f"another machine: {then_machine}, then {run_machine}"
        )
        lines.append(f"seed {seed}: before RL {before:.3f}, warm-start record {then:.3f}: "
                     f"{'equal' if before == then else 'differ'}, {where}")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.lab.real_survey", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    warm = sub.add_parser("warm-start", help="warm-start SmolLM2 on each task and evaluate it on held-out problems")
    warm.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    warm.add_argument("--seeds", nargs="+", type=int, default=[0])
    warm.add_argument("--record", action="store_true", help="write results/ch16_warm_start_<task>.json, seed by seed")
    warm.add_argument("--pilot", action="store_true", help="pilot seeds (100 and up), recorded apart (_pilot.json)")
    warm.add_argument("--premises", action="store_true", help="also measure each task's premises on its warm start")
    warm.add_argument("--steps", type=int, help="a pilot's sizing try: this many warm-start steps for every task")
    blocks = sub.add_parser("lora-blocks", help="chapter 00's SmolLM2 design with LoRA on all blocks and on the top 8")
    blocks.add_argument("--seeds", nargs="+", type=int, default=[100, 101, 102])
    blocks.add_argument("--record", action="store_true", help="write results/ch16_lora_blocks.json, seed by seed")
    gap = sub.add_parser("mismatch", help="the bf16 sampler's log-probs against the update's, after the warm start")
    gap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    gap.add_argument("--record", action="store_true", help="write results/ch16_mismatch.json, seed by seed")
    pair = sub.add_parser("compare", help="a pre-registered comparison's paired arms, seed by seed")
    pair.add_argument("comparison", choices=list(COMPARISONS))
    pair.add_argument("--seeds", nargs="+", type=int, default=[100, 101, 102])
    pair.add_argument("--record", action="store_true", help="write results/ch16_<comparison>.json, seed by seed")
    pair.add_argument("--pilot", action="store_true", help="pilot seeds (100 and up), recorded apart (_pilot.json)")
    check = sub.add_parser("check", help="each recorded seed's before-RL success against its warm-start record")
    check.add_argument("comparison", choices=list(COMPARISONS))
    check.add_argument("--pilot", action="store_true", help="the comparison's pilot seeds")
    args = parser.parse_args(argv)
    if args.command == "check":
        try:
            print("\n".join(warm_start_check(args.comparison, args.pilot)))
        except recorded.ResultsMissing as missing:
            parser.exit(1, f"{missing}\n")
        return 0
    if args.command in ("warm-start", "compare") and args.pilot != all(seed >= PILOT_SEEDS for seed in args.seeds):
        parser.error(f"pilot seeds are {PILOT_SEEDS} and up, deciding seeds below (--pilot says which these are)")
    if args.command == "warm-start" and args.steps is not None and not args.pilot:
        parser.error("--steps sizes a warm start on pilot seeds only; deciding seeds use WARM_STARTS")
    if args.command == "compare":
        compare(args.comparison, args.seeds, args.record, args.pilot)
        return 0
    if args.command == "mismatch":
        mismatch(args.seeds, args.record)
        return 0
    if args.command == "lora-blocks":
        lora_blocks(args.seeds, args.record)
        return 0
    results = warm_starts(args.tasks, args.seeds, args.record, args.pilot, args.premises, args.steps)
    print("\n".join(summary(results, args.tasks)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
