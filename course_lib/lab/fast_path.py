"""What bf16 buys a real model on a CPU: one GRPO iteration of chapter 00's shape on SmolLM2, float32 against the fast
path, and what the fast path's sampler costs in fidelity.

    python -m course_lib.lab.bench iteration [--model smollm2] [--iterations 3] [--warm-steps 30] [--paths ...]

Each path runs in a fresh process (its peak resident memory is its own): SmolLM2 with a LoRA r 16 adapter
warm-started for `--warm-steps` steps on chapter 00's demonstrations (so that its episodes have the task's format and
length), then GRPO iterations of 4 prompts x 8 samples on chapter 00's task in the chat format (chapter 00's SmolLM2
design), the update micro-batched at the checkpoint budget (512 tokens of SmolLM2's vocabulary) unless the path
says otherwise. The first iteration warms up; the others are timed (the median). Paths:

- `fp32`: the sampler and the update in float32 (what chapter 00's SmolLM2 runs recorded);
- `bf16`: the sampler on a bfloat16 copy with LoRA merged (`SamplingConfig.precision`), the update under bf16
  autocast with float32 trainable weights (`GRPOConfig.autocast`), its old log-probs from its own forward;
- `bf16_top8`: that, with LoRA on the top 8 of 30 blocks only (`checkpoint.add_adapter(top_layers=8)`);
- `bf16_top8_x4`, `bf16_top8_x8`: that, with micro-batches of 2,048 or 4,096 tokens instead of 512 (fewer, larger
  matrix products, more memory).

The policy tokens an episode are printed beside each path's time: the paths sample different tokens (the same seeds
through different arithmetic), so their episodes' lengths differ by chance.

Then the sampler-against-update mismatch, the known failure the fast path must avoid: on one bf16 batch, each policy
token's log-prob as the bf16 sampler stored it against the update's own forward, float32 and bf16 autocast; the
ratio exp(update - sampler) a first update would see if it took the sampler's log-probs as old (against a clip range
of 0.2), and what the update's own old log-probs give instead (exactly 1). The last line,
`iteration_seconds_fp32=X iteration_seconds_fast=X speedup=X peak_gib_fast=X`.
"""

from __future__ import annotations

import dataclasses
import json
import resource
import statistics
import subprocess
import sys
from collections.abc import Sequence

import torch

PATHS = {
    "fp32": {"precision": "fp32", "autocast": "none", "top_layers": 0, "budget": 1},
    "bf16": {"precision": "bf16", "autocast": "bf16", "top_layers": 0, "budget": 1},
    "bf16_top8": {"precision": "bf16", "autocast": "bf16", "top_layers": 8, "budget": 1},
    "bf16_top8_x4": {"precision": "bf16", "autocast": "bf16", "top_layers": 8, "budget": 4},
    "bf16_top8_x8": {"precision": "bf16", "autocast": "bf16", "top_layers": 8, "budget": 8},
}
"""The paths the benchmark compares: the sampler's precision, the update's autocast, the LoRA blocks (0: all) and
the update's micro-batch budget in multiples of the checkpoint budget (512 tokens of SmolLM2's vocabulary)."""
WARM_STEPS = 30
"""Warm-start steps before the timed iterations (chapter 00's on SmolLM2), so that the policy writes the task's
format and its episodes have the length a run trains on (the untrained model writes about 85 tokens a turn)."""


def setup(model_name: str, path: str, warm_steps: int = WARM_STEPS, seed: int = 0):
    """`(model, tokenizer, sampling, config)`: `model_name` warm-started on chapter 00's task as the survey does
    (`tasks.real_model.warm_start` with `seed`) for `warm_steps` steps of 8, with the adapter, precisions and
    micro-batches `path` asks for; chapter 00's SmolLM2 GRPO shape, without evaluations."""
    from course_lib.rl import checkpoint
    from course_lib.tasks import real_model

    options = PATHS[path]
    with checkpoint.using(model_name):
        tokenizer = checkpoint.load_tokenizer(checkpoint.model_path())
    budget = checkpoint.micro_batch_tokens(len(tokenizer)) * options["budget"]
    sft = dataclasses.replace(real_model.SMOLLM2.sft, steps=warm_steps, autocast=options["autocast"],
                              micro_batch_tokens=budget)  # fmt: skip
    settings = real_model.WarmStart(sft=sft, top_layers=options["top_layers"], precision=options["precision"])
    model, tokenizer, task, _ = real_model.warm_start(real_model.TASKS["arithmetic"], settings, seed, model_name)
    config = dataclasses.replace(real_model.SMOLLM2.grpo, eval_every=10**6, autocast=options["autocast"],
                                 micro_batch_tokens=budget)  # fmt: skip
    return model, tokenizer, task.sampling, config


def time_iterations(model_name: str, path: str, iterations: int, warm_steps: int = WARM_STEPS) -> dict[str, float]:
    """`iterations` GRPO iterations on `path` in this process: the median seconds of the timed ones (all but the
    first), split into rollout and update, the policy tokens sampled per iteration, and the process's peak memory."""
    from course_lib.rl.train import train_grpo
    from course_lib.tasks import tool_arithmetic

    model, tokenizer, sampling, config = setup(model_name, path, warm_steps)
    config = dataclasses.replace(config, iterations=iterations)
    history = [r for r in train_grpo(model, tokenizer, tool_arithmetic.make_env, sampling, config, 0) if "loss" in r]
    timed = history[1:] or history

    def median(key: str) -> float:
        return statistics.median(r[key] for r in timed)

    rollout, update = median("time_rollout"), median("time_update")
    return {
        "seconds": statistics.median(r["time_rollout"] + r["time_advantage"] + r["time_update"] for r in timed),
        "rollout": rollout,
        "update": update,
        "policy_tokens": statistics.median(r["policy_tokens"] for r in timed),  # per episode
        "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }


def sampler_mismatch(
    model_name: str, episodes: int = 32, warm_steps: int = WARM_STEPS, seed: int = 0
) -> dict[str, float]:
    """On one bf16-sampled batch of chapter 00's task (the warm start, its demonstrations and the batch drawn with
    `seed`): the mean and largest |log-prob difference| per policy token between the bf16 sampler and the update's
    forward in float32 and under bf16 autocast, and the 95th percentile of the ratio's distance from 1,
    |exp(update - sampler) - 1|, that an update taking the sampler's log-probs as old would start from, with chapter
    15's `ratio_stats` (`outside_clip`: the share of policy tokens PPO's clip would cut at the first step)."""
    from course_lib.course.pitfalls import ratio_stats
    from course_lib.engine.rollout import RolloutEngine, collate
    from course_lib.rl import micro_batch
    from course_lib.tasks import tool_arithmetic

    model, tokenizer, sampling, config = setup(model_name, "bf16", warm_steps, seed)
    engine = RolloutEngine(model, tokenizer, sampling)
    tasks = [seed * 1_000_003 + episode // 8 for episode in range(episodes)]  # groups of 8, as an iteration samples
    trajectories = engine.rollout([tool_arithmetic.make_env() for _ in tasks], tasks,
                                  generator=torch.Generator().manual_seed(seed))  # fmt: skip
    batch = collate(trajectories, tokenizer.pad_token_id)
    policy = batch.loss_mask.bool()
    numbers = {"policy_tokens": float(policy.sum())}
    for autocast in ("none", "bf16"):
        with torch.no_grad(), micro_batch.memory_options(model, autocast=autocast):
            update, _ = micro_batch.logprobs_and_entropy(
                model, batch.input_ids, batch.attention_mask, sampling.temperature, config.micro_batch_tokens
            )
        gap = (update - batch.old_logprobs)[policy]
        numbers[f"mean_abs_gap_{autocast}"] = float(gap.abs().mean())
        numbers[f"ratio_p95_off_one_{autocast}"] = float(torch.quantile((gap.exp() - 1).abs().double(), 0.95))
        stats = ratio_stats(update, batch.old_logprobs, batch.loss_mask, config.clip_high)  # chapter 15's monitor
        numbers |= {f"{key}_{autocast}": value for key, value in stats.items()}
    return numbers


def in_fresh_process(call: str, module: str = "course_lib.lab.fast_path") -> dict[str, float]:
    """The JSON that `call`, a function of `module` with its arguments, prints, run in a new Python process (its peak
    resident memory is its own)."""
    package, name = module.rsplit(".", 1)
    code = f"import json; from {package} import {name}; print(json.dumps({name}.{call}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_iteration(model_name: str, iterations: int, paths: Sequence[str], warm_steps: int = WARM_STEPS) -> None:
    """Print each path's seconds per iteration, its split and peak memory, then the sampler mismatch."""
    print(f"{model_name}: GRPO iterations of chapter 00's SmolLM2 shape (4 prompts x 8 samples, LoRA r 16, after "
          f"{warm_steps} warm-start steps), "
          f"{torch.get_num_threads()} threads, " + (f"median of {iterations - 1} after a warm-up" if iterations > 1
          else "one iteration, no warm-up"))  # fmt: skip
    results = {}
    for path in paths:
        results[path] = r = in_fresh_process(f"time_iterations({model_name!r}, {path!r}, {iterations}, {warm_steps})")
        print(f"{path:>10}: {r['seconds']:6.1f} s per iteration (rollout {r['rollout']:5.1f}, update "
              f"{r['update']:5.1f}), {r['policy_tokens']:.1f} policy tokens an episode, "
              f"peak {r['peak_gib']:.2f} GiB")  # fmt: skip
    m = in_fresh_process(f"sampler_mismatch({model_name!r}, warm_steps={warm_steps})")
    print(f"the bf16 sampler's log-probs as old ones, against the update's forward, on {m['policy_tokens']:.0f} "
          "policy tokens of one batch (chapter 15's staleness monitor, pitfalls.ratio_stats):")  # fmt: skip
    for autocast, label in (("none", "float32 update"), ("bf16", "bf16-autocast update")):
        print(f"  {label:>20}: mean |gap| {m[f'mean_abs_gap_{autocast}']:.3f} nats, largest "
              f"{m[f'max_log_ratio_{autocast}']:.2f}; ratio off 1 by {m[f'ratio_p95_off_one_{autocast}']:.3f} at the "
              f"95th percentile, {m[f'outside_clip_{autocast}']:.1%} of tokens outside the clip range, "
              f"KL {m[f'kl_{autocast}']:.5f}")  # fmt: skip
    print("  the update's own old log-probs (GRPOConfig.old_logprobs): ratio exactly 1 (tests/rl/test_train.py)")
    fast = min((p for p in results if p != "fp32"), key=lambda p: results[p]["seconds"], default=None)
    if "fp32" in results and fast:
        base, best = results["fp32"], results[fast]
        print(f"iteration_seconds_fp32={base['seconds']:.1f} iteration_seconds_fast={best['seconds']:.1f} "
              f"speedup={base['seconds'] / best['seconds']:.2f} "
              f"peak_gib_fast={best['peak_gib']:.2f} ({fast})")  # fmt: skip
