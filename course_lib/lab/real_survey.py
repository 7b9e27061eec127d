"""The survey on a real model, its runs: SmolLM2 warm-started on each of the survey's tasks (`tasks.real_model`),
held-out success and valid actions per seed, printed and recorded seed by seed.

    python -m course_lib.lab.real_survey warm-start [--tasks calculator key_door two_hop lake] [--seeds 0 1 2 3 4]
        [--premises] [--record]   # results/ch18_warm_start.json, one record per seed (run again: replaced)
    python -m course_lib.lab.real_survey lora-blocks [--seeds 100 101 102] [--record]   # results/ch18_lora_blocks.json
    python -m course_lib.lab.real_survey compare gigpo [--seeds 100 101 102 --pilot] [--record]  # ch18_gigpo*.json

`lora-blocks`: does LoRA on the top 8 of 30 blocks learn as LoRA on all of them does? Chapter 00's SmolLM2 design on
the fast path (warm start 30 steps of 8, GRPO 8 iterations of 4 x 8 at 2e-4, held-out success on 64 problems before
and after), once with each adapter, the same seed; per seed, each arm's numbers and the difference of their gains.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence

from course_lib.course import recorded
from course_lib.rl.train import GRPOConfig
from course_lib.tasks.real_model import (
    COMPARISONS,
    TASKS,
    WARM_STARTS,
    WarmStart,
    paired_arms,
    train_and_evaluate,
    warm_start_numbers,
)

PILOT_SEEDS = 100
"""Pilot seeds are this and up; deciding seeds are below (docs/experiments/real-model-survey.md)."""
WARM_START_RESULTS = "ch18_warm_start"
"""`results/ch18_warm_start.json`: per seed, every task's warm-start numbers, prefixed by the task's name."""


def warm_starts(
    tasks: Sequence[str], seeds: Sequence[int], record: bool = False, pilot: bool = False, premises: bool = False
) -> dict[int, dict[str, float]]:
    """`warm_start_numbers` of every task in `tasks` on every seed, printed, and with `record` written per seed to
    `results/ch18_warm_start.json` (`_pilot.json` for a `pilot`). A seed's record holds the tasks run with it, and a
    later run of the same seed replaces it: run a seed's tasks together."""
    if record:
        recorded.begin()
    out: dict[int, dict[str, float]] = {}
    for seed in seeds:
        start, numbers = time.perf_counter(), {}
        for name in tasks:
            found = warm_start_numbers(name, seed, premises=premises)
            print(f"seed {seed} {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in found.items()), flush=True)
            numbers |= {f"{name}_{key}": value for key, value in found.items()}
        if record:
            name = WARM_START_RESULTS + ("_pilot" if pilot else "")
            recorded.record(name, seed, (), numbers, (time.perf_counter() - start) / 60)
        out[seed] = numbers
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


LORA_BLOCKS_RESULTS = "ch18_lora_blocks"
"""`results/ch18_lora_blocks.json`: per seed, `all_*` and `top8_*` (`train_and_evaluate`'s numbers) and
`top8_minus_all_gain`."""
CH00_SMOLLM2_GRPO = GRPOConfig(iterations=8, prompts_per_iteration=4, group_size=8, learning_rate=2e-4,
                               eval_every=10**6, autocast="bf16")  # fmt: skip
"""Chapter 00's SmolLM2 design's RL (docs/experiments/ch00-smollm2.md) on the fast path, without its evaluations."""


def lora_blocks(seeds: Sequence[int], record: bool = False) -> dict[int, dict[str, float]]:
    """Per seed, chapter 00's SmolLM2 design with LoRA on all blocks and on the top 8 (`LORA_BLOCKS_RESULTS`)."""
    if record:
        recorded.begin()
    out = {}
    for seed in seeds:
        start, numbers = time.perf_counter(), {}
        for label, blocks in (("all", 0), ("top8", 8)):
            found = train_and_evaluate("arithmetic", seed, WarmStart(top_layers=blocks), CH00_SMOLLM2_GRPO)
            print(f"seed {seed} LoRA on {label}: " + ", ".join(f"{k} {v:.3f}" for k, v in found.items()), flush=True)
            numbers |= {f"{label}_{key}": value for key, value in found.items()}
        numbers["top8_minus_all_gain"] = numbers["top8_gain"] - numbers["all_gain"]
        if record:
            recorded.record(LORA_BLOCKS_RESULTS, seed, (), numbers, (time.perf_counter() - start) / 60)
        out[seed] = numbers
    return out


RL_SHAPES: dict[str, dict] = {name: {"iterations": 8, "prompts_per_iteration": 4, "group_size": 8,
                                     "learning_rate": 2e-4} for name in COMPARISONS}  # fmt: skip
"""Each comparison's RL for SmolLM2 on 2 cores: chapter 00's SmolLM2 shape until the pilot's timings size it
(docs/experiments/real-model-survey.md)."""


def compare(comparison: str, seeds: Sequence[int], record: bool = False, pilot: bool = False) -> dict:
    """`paired_arms` of `comparison` on each seed, from the task's warm start (`WARM_STARTS`) with `RL_SHAPES`,
    printed and with `record` written per seed to `results/ch18_<comparison>.json` (`_pilot.json` for a
    `pilot`)."""
    if record:
        recorded.begin()
    out = {}
    task = COMPARISONS[comparison][0]
    for seed in seeds:
        start = time.perf_counter()
        numbers = paired_arms(comparison, seed, WARM_STARTS[task], RL_SHAPES[comparison])
        print(f"seed {seed} {comparison}: " + ", ".join(f"{k} {v:.3f}" for k, v in numbers.items()), flush=True)
        if record:
            name = f"ch18_{comparison}" + ("_pilot" if pilot else "")
            recorded.record(name, seed, (), numbers, (time.perf_counter() - start) / 60)
        out[seed] = numbers
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.lab.real_survey", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    warm = sub.add_parser("warm-start", help="warm-start SmolLM2 on each task and evaluate it on held-out problems")
    warm.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    warm.add_argument("--seeds", nargs="+", type=int, default=[0])
    warm.add_argument("--record", action="store_true", help="write results/ch18_warm_start.json, seed by seed")
    warm.add_argument("--pilot", action="store_true", help="pilot seeds (100 and up), recorded apart (_pilot.json)")
    warm.add_argument("--premises", action="store_true", help="also measure each task's premises on its warm start")
    blocks = sub.add_parser("lora-blocks", help="chapter 00's SmolLM2 design with LoRA on all blocks and on the top 8")
    blocks.add_argument("--seeds", nargs="+", type=int, default=[100, 101, 102])
    blocks.add_argument("--record", action="store_true", help="write results/ch18_lora_blocks.json, seed by seed")
    pair = sub.add_parser("compare", help="a pre-registered comparison's paired arms, seed by seed")
    pair.add_argument("comparison", choices=list(COMPARISONS))
    pair.add_argument("--seeds", nargs="+", type=int, default=[100, 101, 102])
    pair.add_argument("--record", action="store_true", help="write results/ch18_<comparison>.json, seed by seed")
    pair.add_argument("--pilot", action="store_true", help="pilot seeds (100 and up), recorded apart (_pilot.json)")
    args = parser.parse_args(argv)
    if args.command in ("warm-start", "compare") and args.pilot != all(seed >= PILOT_SEEDS for seed in args.seeds):
        parser.error(f"pilot seeds are {PILOT_SEEDS} and up, deciding seeds below (--pilot says which these are)")
    if args.command == "compare":
        compare(args.comparison, args.seeds, args.record, args.pilot)
        return 0
    if args.command == "lora-blocks":
        lora_blocks(args.seeds, args.record)
        return 0
    results = warm_starts(args.tasks, args.seeds, args.record, args.pilot, args.premises)
    print("\n".join(summary(results, args.tasks)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
