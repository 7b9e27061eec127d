"""Benchmarks that print measurements (speed targets live here, never in timed tests).

    python -m course_lib.bench rollout [--batch 64] [--repeats 5]

Compares the rollout engine (lock-step batched decoding over a static KV cache, observations
appended as ids, identical prefixes prefilled once) with the obvious alternative: calling
`transformers`' `generate()` once per turn on the batch's live sequences, re-encoding each full
history. Both sample chapter 00's base model on the same `tool_arithmetic` tasks with the same stop
tags and limits, resets included in the timing; tokens per second counts the tokens the policy
generated. Two batches of 64: distinct tasks, and 8 tasks x 8 samples as a GRPO iteration draws them.
For each, the engine's own split of its time (model forwards, sampling, `env.step`) gives an upper
bound on any speedup: generate()'s time over the time the engine cannot avoid (forwards and env
steps). Then three GRPO iterations are timed, with the share spent in rollout, advantages and the
update. The last line, `speedup_vs_generate=X.XX`, is the GRPO-shaped batch's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from course_lib import data
from course_lib.chapters import ch00_tool_agent as ch00
from course_lib.models import count_parameters
from course_lib.rollout import RolloutEngine
from course_lib.tokenizer import decode, encode
from course_lib.train import grpo_iteration


def engine_tokens_per_second(model, tokenizer, sampling, seeds: list[int], seed: int) -> tuple[float, float, dict]:
    """Policy tokens per second, seconds, and the engine's own split of those seconds."""
    engine = RolloutEngine(model, tokenizer, sampling)
    generator = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    trajectories = engine.rollout([ch00.make_env() for _ in seeds], seeds, generator=generator)
    seconds = time.perf_counter() - start
    tokens = sum(sum(t.loss_mask) for t in trajectories)
    return tokens / seconds, seconds, engine.timings


def generate_tokens_per_second(model, tokenizer, sampling, seeds: list[int], seed: int) -> tuple[float, float]:
    """Turn-by-turn `generate()`: each turn re-runs the whole history of every live sequence."""
    torch.manual_seed(seed)
    stop_ids = [tokenizer.convert_tokens_to_ids(tag) for tag in sampling.stop_tags]
    envs = [ch00.make_env() for _ in seeds]
    start = time.perf_counter()  # resets are timed, as in the engine's rollout()
    histories = [[tokenizer.bos_token_id, *encode(tokenizer, env.reset(seed=s)[0])] for env, s in zip(envs, seeds)]
    live, tokens = list(range(len(seeds))), 0
    while live:
        width = max(len(histories[i]) for i in live)
        ids = torch.full((len(live), width), tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, i in enumerate(live):  # left padding, as generate() expects for decoder-only models
            ids[row, width - len(histories[i]) :] = torch.tensor(histories[i])
            mask[row, width - len(histories[i]) :] = 1
        with torch.no_grad():
            out = model.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=sampling.max_turn_tokens, do_sample=True,
                temperature=sampling.temperature, top_k=0, top_p=1.0, eos_token_id=stop_ids,
                pad_token_id=tokenizer.pad_token_id,
            )  # fmt: skip
        still_live = []
        for row, i in enumerate(live):
            new = out[row, width:].tolist()
            cut = next((k + 1 for k, token in enumerate(new) if token in stop_ids), len(new))
            action_ids = new[:cut]
            tokens += len(action_ids)
            histories[i] += action_ids
            obs, _, terminated, truncated, _ = envs[i].step(decode(tokenizer, action_ids))
            if not (terminated or truncated) and len(histories[i]) < sampling.max_total_tokens:
                histories[i] += encode(tokenizer, obs)
                still_live.append(i)
        live = still_live
    seconds = time.perf_counter() - start
    return tokens / seconds, seconds


def compare(model, tokenizer, sampling, seeds: list[int], repeats: int) -> tuple[float, float]:
    """Median policy tokens per second of the engine and of turn-by-turn generate(); prints both,
    the engine's own time split, and the speedup bound that split implies."""
    engine_tokens_per_second(model, tokenizer, sampling, seeds, 0)  # warm-up
    generate_tokens_per_second(model, tokenizer, sampling, seeds, 0)
    engine = [engine_tokens_per_second(model, tokenizer, sampling, seeds, s) for s in range(repeats)]
    generate = [generate_tokens_per_second(model, tokenizer, sampling, seeds, s) for s in range(repeats)]
    engine_rate, engine_seconds = (statistics.median(run[i] for run in engine) for i in (0, 1))
    generate_rate, generate_seconds = (statistics.median(run[i] for run in generate) for i in (0, 1))
    for name, rate, seconds in (
        ("rollout engine:", engine_rate, engine_seconds),
        ("generate() turn by turn:", generate_rate, generate_seconds),
    ):
        print(f"  {name:25}{rate:8.0f} policy tokens/s  ({seconds:.3f} s per batch)")
    split = {key: statistics.median(run[2][key] for run in engine) for key in engine[0][2]}
    shares = ", ".join(f"{key} {value / engine_seconds:.0%}" for key, value in split.items())
    print(f"  engine time: {shares}, bookkeeping and resets the rest")
    # Even an engine with no overhead at all would still run the model and the environments.
    bound = generate_seconds / (split["model"] + split["env"])
    print(f"  speedup {engine_rate / generate_rate:.2f} (at most {bound:.2f} with zero engine overhead)")
    return engine_rate, generate_rate


def bench_rollout(batch: int, group: int, repeats: int) -> float:
    model, tokenizer = data.load_base(ch00.BASE_NAME)
    config = ch00.preset("cpu")
    sampling = config.sampling
    print(f"tool_arithmetic, chapter 00 base ({count_parameters(model):,} parameters)")
    print(f"{batch} distinct tasks:")
    compare(model, tokenizer, sampling, list(range(batch)), repeats)
    print(f"{batch // group} tasks x {group} samples (a GRPO batch; the engine prefills each prompt once):")
    engine_rate, generate_rate = compare(model, tokenizer, sampling, [i // group for i in range(batch)], repeats)

    grpo = config.grpo
    optimizer = torch.optim.AdamW(model.parameters(), lr=grpo.learning_rate)
    envs = [ch00.make_env() for _ in range(grpo.prompts_per_iteration * grpo.group_size)]
    generator = torch.Generator().manual_seed(0)
    phases = {"time_rollout": 0.0, "time_advantage": 0.0, "time_update": 0.0}
    for iteration in range(3):
        metrics = grpo_iteration(
            model, RolloutEngine(model, tokenizer, sampling), envs, grpo, 0, iteration, generator, optimizer
        )
        for key in phases:
            phases[key] += metrics[key]
    total = sum(phases.values())
    shares = ", ".join(f"{key.removeprefix('time_')} {value / total:.0%}" for key, value in phases.items())
    print(f"GRPO iteration ({grpo.prompts_per_iteration}x{grpo.group_size} rollouts): {total / 3:.3f} s; {shares}")
    speedup = engine_rate / generate_rate
    print(f"speedup_vs_generate={speedup:.2f}")
    return speedup


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.bench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rollout = sub.add_parser("rollout", help="rollout engine vs turn-by-turn generate()")
    rollout.add_argument("--batch", type=int, default=64)
    rollout.add_argument("--group", type=int, default=8, help="samples per task in the GRPO-shaped batch")
    rollout.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    bench_rollout(args.batch, args.group, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
