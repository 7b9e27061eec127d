"""Benchmarks that print measurements (speed targets live here, never in timed tests).

    python -m course_lib.lab.bench rollout [--batch 64] [--group 8] [--repeats 7] [--tasks ch00 ch03 ...]
    python -m course_lib.lab.bench rollout --model smollm2 [--batch 32] [--group 8] [--repeats 3]
    python -m course_lib.lab.bench trl [--pairs 7]
    python -m course_lib.lab.bench decoder [--batch 64] [--steps 24] [--repeats 7]
    python -m course_lib.lab.bench roofline [--presets tiny tiny_wide] [--batch 64] [--repeats 7]
    python -m course_lib.lab.bench update --model smollm2 [--rows 32] [--tokens 110] [--budgets 0 1024 ...]
    python -m course_lib.lab.bench iteration [--model smollm2] [--iterations 3] [--warm-steps 30] [--paths ...]

`rollout`:

Compares the rollout engine (lock-step batched decoding over a static KV cache, observations
appended as ids, identical prefixes prefilled once) with the obvious alternative: calling
`transformers`' `generate()` once per turn on the batch's live sequences, re-encoding each full
history. Both sample the same base model on the same tool task with the same stop tags and limits,
resets included in the timing; tokens per second counts the tokens the policy generated.

Chapter 00's `tool_arithmetic` is measured on two batches of 64: distinct tasks, and 8 tasks x 8
samples as a GRPO iteration draws them. The engine's own split of its time (model forwards,
sampling, `env.step`) gives upper bounds on any speedup: generate()'s time over the time the
engine cannot avoid (forwards and env steps), and over that plus sampling (whose log-probs and
entropies the trajectories must carry). The other tool tasks of the course (chapters 03-06,
each with its chapter's base model and sampling limits) follow, GRPO-shaped. Then three GRPO
iterations of chapter 00 are timed, with the share spent in rollout, advantages and the update.

This machine's timings drift by 10-30% from minute to minute, so engine and generate() runs are
interleaved in pairs, and each speedup is the median over the pairs, with its range. The last line,
`speedup_vs_generate=X.XX`, is chapter 00's GRPO-shaped batch.

With `--model` (a real model's name, `smollm2`, or a checkpoint folder): chapter 00's task in the chat format as
`--model` runs it, the engine against `generate()` over the chat template (`time_generate_chat`: the conversation
re-rendered and re-encoded every turn, stop tags as `stop_strings`) on the same GRPO-shaped batch, then the rollout's
and the micro-batched update's share of this CPU's matmul throughput at their shapes (`roofline_phases`). The last
line, `speedup_vs_generate=X.XX generation_of_matmul_peak=X update_of_matmul_peak=X`.

`trl`: one GRPO iteration of course_lib against one step of TRL's `GRPOTrainer` (`course_lib.lab.trl_pairs`).


`decoder`: what a model family without the lean decoder pays. The course's llama model (chapter 00's cpu preset, its
word-level tokenizer, random weights: speed does not depend on them) decodes the same left-padded batch (prompts of 8
to 16 tokens, then `--steps` single-token steps, chapter 00's 40-token budget) through `kv_decoder.KVDecoder` and
through `hf_decoder.HFDecoder` (the model's own forward over a `DynamicCache`, what any other family runs), in
interleaved pairs. The last line, `generic_step_slowdown=X.XX`, is the generic decoder's seconds per decode step over
the lean one's, the median over the pairs.

`roofline`: generation's and the update's FLOP/s against this CPU's matmul throughput (`course_lib.lab.roofline`).


`update`: what a real vocabulary costs the update. One GRPO update (clipped surrogate, token-mean) of a LoRA r 16
adapter on every linear layer of `--model` (default the course's real model, `python -m course_lib.data build
smollm2`), on `--rows` x `--tokens` random ids, for each `--budgets` value of `GRPOConfig.micro_batch_tokens` (0: the
whole batch in one forward), each in a fresh process: seconds per update and the process's peak resident memory.

`iteration`: a GRPO iteration of chapter 00's SmolLM2 shape in float32 against bf16's fast path, and the fast
sampler's mismatch with the update (`course_lib.lab.fast_path`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from course_lib import data
from course_lib.chapters import tool_tasks
from course_lib.engine.hf_decoder import left_pad, make_decoder
from course_lib.engine.rollout import RolloutEngine
from course_lib.lab import fast_path
from course_lib.lab.roofline import bench_roofline, roofline_phases
from course_lib.lab.trl_pairs import bench_trl
from course_lib.models import build_model, count_parameters
from course_lib.rl.train import policy_iteration
from course_lib.tasks import tool_arithmetic
from course_lib.tasks.tool_task import ToolTask
from course_lib.tokenizer import decode, encode


@dataclass
class Run:
    """One timed batch: policy tokens, seconds, mean turns per sequence, the engine's time split."""

    tokens: int
    seconds: float
    turns: float
    split: dict[str, float]

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds


def time_engine(model, tokenizer, task: ToolTask, seeds: Sequence[int], seed: int) -> Run:
    """The rollout engine on one batch."""
    engine = RolloutEngine(model, tokenizer, task.sampling)
    generator = torch.Generator().manual_seed(seed)
    envs = [task.make_env() for _ in seeds]
    start = time.perf_counter()
    trajectories = engine.rollout(envs, list(seeds), generator=generator)
    seconds = time.perf_counter() - start
    tokens = sum(sum(t.loss_mask) for t in trajectories)
    return Run(tokens, seconds, statistics.mean(t.num_turns for t in trajectories), dict(engine.timings))


def time_generate(model, tokenizer, task: ToolTask, seeds: Sequence[int], seed: int) -> Run:
    """Turn-by-turn `generate()`: each turn re-runs the whole history of every live sequence.

    The limits are the engine's: a turn ends at a stop tag or after `max_turn_tokens`, and a
    sequence that reaches `max_total_tokens` is cut without sending its unfinished turn."""
    sampling = task.sampling
    torch.manual_seed(seed)
    stop_ids = [tokenizer.convert_tokens_to_ids(tag) for tag in sampling.stop_tags]
    envs = [task.make_env() for _ in seeds]
    start = time.perf_counter()  # resets are timed, as in the engine's rollout()
    histories = [[tokenizer.bos_token_id, *encode(tokenizer, env.reset(seed=s)[0])] for env, s in zip(envs, seeds)]
    live, tokens, turns = list(range(len(seeds))), 0, 0
    while live:
        ids, mask = left_pad([histories[i] for i in live], tokenizer.pad_token_id)
        width = ids.shape[1]
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
            action_ids = new[: min(cut, sampling.max_total_tokens - len(histories[i]))]
            tokens += len(action_ids)
            histories[i] += action_ids
            if len(histories[i]) >= sampling.max_total_tokens:
                continue  # cut by the length cap, like the engine's `cut` sequences
            obs, _, terminated, truncated, _ = envs[i].step(decode(tokenizer, action_ids))
            turns += 1
            if not (terminated or truncated):
                histories[i] += encode(tokenizer, obs)
                if len(histories[i]) < sampling.max_total_tokens:
                    still_live.append(i)
        live = still_live
    seconds = time.perf_counter() - start
    return Run(tokens, seconds, turns / len(seeds), {})


def chat_task(model_name: str) -> tuple[torch.nn.Module, object, ToolTask]:
    """`(model, tokenizer, task)`: a real model (`smollm2`) or checkpoint folder on chapter 00's tool task, with the
    chapter's sampling in the chat format as `--model` runs it (`checkpoint.chat_sampling`: budgets measured on the
    chapter's demonstrations in this tokenizer, observations in the tool role). No warm start: speed does not depend
    on the weights, and both sides sample the same untrained policy (its turns end at its end-of-turn token)."""
    from course_lib.lab import gpu_preset
    from course_lib.rl import checkpoint

    model, tokenizer = checkpoint.load_checkpoint(gpu_preset.resolve_model(model_name))
    return (
        model,
        tokenizer,
        ToolTask(
            tool_arithmetic.ENV_NAME, model_name, tool_arithmetic.chat_sampling(tokenizer), tool_arithmetic.make_env
        ),
    )


def time_generate_chat(model, tokenizer, task: ToolTask, seeds: Sequence[int], seed: int) -> Run:
    """Turn-by-turn `generate()` in the chat format, what a script around a chat model does: each turn renders the
    conversation so far with the chat template (observations as tool messages), encodes it, left-pads the live
    sequences and generates; a turn ends at a stop tag (`stop_strings`) or the end-of-turn token, within the
    engine's `max_turn_tokens`, and a conversation that reaches `max_total_tokens` is cut, as in the engine."""
    from course_lib.engine import prompt_format

    sampling = task.sampling
    role = prompt_format.resolve(sampling.prompt_format).observation_role
    torch.manual_seed(seed)
    envs = [task.make_env() for _ in seeds]
    start = time.perf_counter()  # resets are timed, as in the engine's rollout()
    chats = [[{"role": "user", "content": env.reset(seed=s)[0]}] for env, s in zip(envs, seeds)]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    live, tokens, turns = list(range(len(seeds))), 0, 0
    while live:
        histories = [tokenizer.apply_chat_template(chats[i], add_generation_prompt=True, tokenize=True) for i in live]
        histories = [list(h["input_ids"]) if isinstance(h, Mapping) else list(h) for h in histories]
        ids, mask = left_pad(histories, pad)
        width = ids.shape[1]
        with torch.no_grad():
            out = model.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=sampling.max_turn_tokens, do_sample=True,
                temperature=sampling.temperature, top_k=0, top_p=1.0, eos_token_id=tokenizer.eos_token_id,
                stop_strings=list(sampling.stop_tags), tokenizer=tokenizer, pad_token_id=pad,
            )  # fmt: skip
        still_live = []
        for row, i in enumerate(live):
            new = out[row, width:].tolist()
            # generate() pads a row after its end-of-turn token or stop string: the turn is what came before
            ended = next((k + 1 for k, token in enumerate(new) if token == tokenizer.eos_token_id), len(new))
            while ended and new[ended - 1] == pad and pad != tokenizer.eos_token_id:
                ended -= 1
            action = new[: min(ended, max(0, sampling.max_total_tokens - len(histories[row])))]
            tokens += len(action)
            if len(histories[row]) + len(action) >= sampling.max_total_tokens:
                continue  # cut by the length cap, like the engine's `cut` sequences
            text = tokenizer.decode(action, skip_special_tokens=True)
            obs, _, terminated, truncated, _ = envs[i].step(text)
            turns += 1
            chats[i].append({"role": "assistant", "content": text})
            if not (terminated or truncated):
                chats[i].append({"role": role, "content": obs})
                still_live.append(i)
        live = still_live
    seconds = time.perf_counter() - start
    return Run(tokens, seconds, turns / len(seeds), {})


@dataclass
class Comparison:
    engine: list[Run]
    generate: list[Run]

    @property
    def speedups(self) -> list[float]:
        """Engine over generate() tokens per second, one per interleaved pair of runs."""
        return [e.rate / g.rate for e, g in zip(self.engine, self.generate, strict=True)]

    @property
    def speedup(self) -> float:
        return statistics.median(self.speedups)

    def describe(self) -> str:
        speedups = self.speedups
        spread = f"range {min(speedups):.2f}-{max(speedups):.2f} over {len(speedups)} pairs"
        return f"speedup {self.speedup:.2f} ({spread})"


def median(runs: list[Run], value: Callable[[Run], float]) -> float:
    return statistics.median(value(run) for run in runs)


def compare(
    model, tokenizer, task: ToolTask, seeds: Sequence[int], repeats: int, baseline: Callable[..., Run] | None = None
) -> Comparison:
    """`repeats` interleaved pairs of engine and generate() runs (after one warm-up of each); the
    order within a pair alternates so that drift in the machine's speed falls on both alike. `baseline` is the
    generate() loop (default `time_generate`, the word-level one; `time_generate_chat` for a chat model)."""
    baseline = baseline or time_generate
    time_engine(model, tokenizer, task, seeds, 0)
    baseline(model, tokenizer, task, seeds, 0)
    engine, generate = [], []
    for repeat in range(repeats):
        order = (time_engine, baseline) if repeat % 2 == 0 else (baseline, time_engine)
        for measure in order:
            run = measure(model, tokenizer, task, seeds, repeat)
            (engine if measure is time_engine else generate).append(run)
    return Comparison(engine, generate)


def bounds(result: Comparison) -> tuple[float, float]:
    """The largest speedups any engine could reach over generate() on this batch: with zero overhead (only the
    model and the environments run), and with the sampling step kept (its full-vocabulary log-probs and entropies
    are part of the data model)."""
    generate_seconds = median(result.generate, lambda r: r.seconds)
    split = {key: median(result.engine, lambda r, key=key: r.split[key]) for key in result.engine[0].split}
    return (
        generate_seconds / (split["model"] + split["env"]),
        generate_seconds / (split["model"] + split["env"] + split["sampling"]),
    )


def print_comparison(result: Comparison) -> None:
    """Rates, the engine's time split, the speedup with its range, and the zero-overhead bound."""
    engine_seconds = median(result.engine, lambda r: r.seconds)
    generate_seconds = median(result.generate, lambda r: r.seconds)
    for name, runs, seconds in (
        ("rollout engine:", result.engine, engine_seconds),
        ("generate() turn by turn:", result.generate, generate_seconds),
    ):
        print(f"  {name:25}{median(runs, lambda r: r.rate):8.0f} policy tokens/s  ({seconds:.3f} s per batch)")
    split = {key: median(result.engine, lambda r, key=key: r.split[key]) for key in result.engine[0].split}
    shares = ", ".join(f"{key} {value / engine_seconds:.0%}" for key, value in split.items())
    print(f"  engine time: {shares}, bookkeeping and resets the rest")
    bound, sampled_bound = bounds(result)
    print(
        f"  {result.describe()}; at most {bound:.2f} with zero engine overhead, {sampled_bound:.2f} if sampling is kept"
    )


def bench_rollout(batch: int, group: int, repeats: int, task_names: Sequence[str]) -> float:
    tasks = tool_tasks()
    arithmetic = tasks["ch00"]
    model, tokenizer = data.load_base(arithmetic.base)
    print(f"{arithmetic.label} (chapter 00 base, {count_parameters(model):,} parameters), {repeats} interleaved pairs")
    print(f"{batch} distinct tasks:")
    print_comparison(compare(model, tokenizer, arithmetic, list(range(batch)), repeats))
    print(f"{batch // group} tasks x {group} samples (a GRPO batch; the engine prefills each prompt once):")
    result = compare(model, tokenizer, arithmetic, [i // group for i in range(batch)], repeats)
    print_comparison(result)

    others = [name for name in task_names if name != "ch00"]
    if others:
        print(f"Other tool tasks of the course, {batch // group} tasks x {group} samples:")
    for name in others:
        task = tasks[name]
        other_model, other_tokenizer = data.load_base(task.base)
        other = compare(other_model, other_tokenizer, task, [i // group for i in range(batch)], repeats)
        tokens = median(other.engine, lambda r: r.tokens) / batch
        turns = median(other.engine, lambda r: r.turns)
        bound, sampled_bound = bounds(other)
        print(
            f"  {task.label} ({name}, {count_parameters(other_model):,} parameters, {turns:.1f} turns and "
            f"{tokens:.0f} policy tokens per sequence): {other.describe()}; at most {bound:.2f} with zero engine "
            f"overhead, {sampled_bound:.2f} if sampling is kept"
        )

    grpo = tool_arithmetic.preset("cpu").grpo
    optimizer = torch.optim.AdamW(model.parameters(), lr=grpo.learning_rate)
    envs = [tool_arithmetic.make_env() for _ in range(grpo.prompts_per_iteration * grpo.group_size)]
    generator = torch.Generator().manual_seed(0)
    phases = {"time_rollout": 0.0, "time_advantage": 0.0, "time_update": 0.0}
    for iteration in range(3):
        metrics = policy_iteration(
            model, RolloutEngine(model, tokenizer, arithmetic.sampling), envs, grpo, 0, iteration, generator, optimizer
        )
        for key in phases:
            phases[key] += metrics[key]
    total = sum(phases.values())
    shares = ", ".join(f"{key.removeprefix('time_')} {value / total:.0%}" for key, value in phases.items())
    print(f"GRPO iteration ({grpo.prompts_per_iteration}x{grpo.group_size} rollouts): {total / 3:.3f} s; {shares}")
    print(f"speedup_vs_generate={result.speedup:.2f}")
    return result.speedup


def bench_real_rollout(model_name: str, batch: int, group: int, repeats: int, min_seconds: float = 0.2) -> float:
    """`python -m course_lib.lab.bench rollout --model smollm2`: the engine against `time_generate_chat` on the same
    GRPO-shaped batch of chapter 00's episodes in the chat format, then both phases against this CPU's matmul
    throughput (the update micro-batched as a checkpoint's run does it, `checkpoint.micro_batch_tokens`)."""
    from course_lib.rl import checkpoint

    model, tokenizer, task = chat_task(model_name)
    sampling = task.sampling
    limits = f"turns of up to {sampling.max_turn_tokens} tokens, episodes of up to {sampling.max_total_tokens}"
    print(f"{model_name} ({count_parameters(model):,} parameters, vocabulary {model.config.vocab_size:,}) on chapter "
          f"00's tool task in the chat format ({limits}), {torch.get_num_threads()} threads, {repeats} interleaved "
          "pairs")  # fmt: skip
    print(f"{batch // group} tasks x {group} samples (a GRPO batch; the engine prefills each prompt once):")
    result = compare(model, tokenizer, task, [i // group for i in range(batch)], repeats, time_generate_chat)
    print_comparison(result)
    budget = checkpoint.micro_batch_tokens(model.config.vocab_size)
    generation, update, detail = roofline_phases(model, tokenizer, task.sampling, batch, 2, min_seconds, budget)
    for name, phase in (("generation", generation), ("update", update)):
        achieved, ceiling = statistics.median(phase.achieved) / 1e9, statistics.median(phase.ceiling) / 1e9
        print(f"  {name:11} {achieved:8.2f} GFLOP/s of {ceiling:8.2f} GFLOP/s matmul at its shapes: "
              f"{phase.fraction:.3g} (range {min(phase.fractions):.3g}-{max(phase.fractions):.3g})")  # fmt: skip
    print(f"    {detail}")
    print(f"speedup_vs_generate={result.speedup:.2f} generation_of_matmul_peak={generation.fraction:.3g} "
          f"update_of_matmul_peak={update.fraction:.3g}")  # fmt: skip
    return result.speedup


def time_decoder(
    model, ids: torch.Tensor, mask: torch.Tensor, steps: torch.Tensor, generic: bool
) -> tuple[float, float]:
    """Seconds of the prefill and per decode step of one decoder over prompts `ids` `[B, L]` and `steps` `[N, B]`."""
    decoder = make_decoder(model, ids.shape[0], ids.shape[1] + steps.shape[0], generic=generic)
    start = time.perf_counter()
    decoder.prefill(ids, mask)
    prefilled = time.perf_counter()
    for tokens in steps:
        decoder.step(tokens)
    return prefilled - start, (time.perf_counter() - prefilled) / steps.shape[0]


def bench_decoder(batch: int, steps: int, repeats: int) -> float:
    tokenizer = tool_arithmetic.word_tokenizer()
    torch.manual_seed(0)
    model = build_model(tokenizer, tool_arithmetic.preset("cpu").model_preset, max_positions=64).eval()
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(8, 17, (batch,), generator=generator).tolist()
    width = max(lengths)
    ids = torch.full((batch, width), tokenizer.pad_token_id)
    mask = torch.zeros_like(ids)
    for row, length in enumerate(lengths):
        ids[row, width - length :] = torch.randint(4, len(tokenizer), (length,), generator=generator)
        mask[row, width - length :] = 1
    tokens = torch.randint(4, len(tokenizer), (steps, batch), generator=generator)
    print(
        f"llama {tool_arithmetic.preset('cpu').model_preset} ({count_parameters(model):,} parameters), batch {batch}, "
        f"prompts of 8-16 tokens, {steps} decode steps, {repeats} interleaved pairs (after one warm-up pair)"
    )
    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for pair in range(repeats + 1):
        for generic in (False, True) if pair % 2 else (True, False):
            timing = time_decoder(model, ids, mask, tokens, generic)
            if pair:
                runs[generic].append(timing)
    for generic, label in ((False, "KVDecoder (lean)"), (True, "HFDecoder (generic)")):
        prefill = statistics.median(t[0] for t in runs[generic]) * 1e3
        step = statistics.median(t[1] for t in runs[generic]) * 1e3
        print(f"  {label}: prefill {prefill:.2f} ms, decode step {step:.2f} ms")
    ratios = [g[1] / k[1] for k, g in zip(runs[False], runs[True])]
    print(f"  generic over lean per decode step: range {min(ratios):.2f}-{max(ratios):.2f} over {repeats} pairs")
    slowdown = statistics.median(ratios)
    print(f"generic_step_slowdown={slowdown:.2f}")
    return slowdown


def time_update(model_name: str, rows: int, tokens: int, budget: int, repeats: int) -> dict[str, float]:
    """One GRPO update (clipped surrogate, token-mean, random advantages) of a LoRA r 16 adapter on `model_name`
    (a real model's name or a checkpoint folder), on `rows` x `tokens` random ids, micro-batched by `budget`
    (`course_lib.rl.micro_batch`; 0 is the whole batch at once): seconds per update (median of `repeats` after a
    warm-up) and this process's peak resident memory. Run once per process: the peak is the process's."""
    import resource

    from course_lib.lab import gpu_preset
    from course_lib.rl import checkpoint, micro_batch, seams
    from course_lib.rl.train import GRPOConfig

    torch.manual_seed(0)
    model, _ = checkpoint.load_checkpoint(gpu_preset.resolve_model(model_name))
    model = checkpoint.add_adapter(model, rank=16)
    model.train()
    vocabulary = model.config.vocab_size
    ids = torch.randint(vocabulary, (rows, tokens))
    attention = torch.ones_like(ids)
    mask = attention.float()
    mask[:, : tokens // 4] = 0  # a prompt
    with torch.no_grad():
        old, _ = micro_batch.logprobs_and_entropy(model, ids, attention, 1.0, budget or rows * tokens)
    advantages = torch.randn(rows)[:, None] * mask
    config = GRPOConfig()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)

    def loss_of(logprobs, entropy):
        return seams.clipped(logprobs, old, advantages, mask, config)

    seconds = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        micro_batch.backward(model, ids, attention, 1.0, loss_of, budget)
        optimizer.step()
        seconds.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB on Linux
    return {"seconds": statistics.median(seconds[1:]), "peak_gib": peak}


def bench_update(model_name: str, rows: int, tokens: int, budgets: Sequence[int], repeats: int) -> None:
    """`time_update` for each budget, each in a fresh process (a peak RSS belongs to its process)."""
    print(f"{model_name}: one update of a LoRA r 16 adapter on {rows} x {tokens} tokens, {torch.get_num_threads()} "
          f"threads; seconds per update (median of {repeats}) and the process's peak memory")  # fmt: skip
    for budget in budgets:
        call = f"time_update({model_name!r}, {rows}, {tokens}, {budget}, {repeats})"
        result = fast_path.in_fresh_process(call, "course_lib.lab.bench")
        label = "whole batch" if budget == 0 else f"{budget} tokens"
        print(f"micro-batch {label:>12}: {result['seconds']:6.1f} s per update, peak {result['peak_gib']:5.2f} GiB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.lab.bench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rollout = sub.add_parser("rollout", help="rollout engine vs turn-by-turn generate()")
    rollout.add_argument("--batch", type=int)
    rollout.add_argument("--group", type=int, default=8, help="samples per task in the GRPO-shaped batches")
    rollout.add_argument("--repeats", type=int, default=7, help="interleaved pairs of engine and generate() runs")
    rollout.add_argument(
        "--model", help="a real model (smollm2) or checkpoint folder on chapter 00's task in the chat format, against "
        "generate() over the chat template, with both phases' share of the matmul roofline (default --batch 32)",
    )  # fmt: skip
    rollout.add_argument(
        "--tasks", nargs="+", default=["ch00", "ch03", "ch04", "ch05", "ch06"],
        choices=["ch00", "ch03", "ch04", "ch05", "ch06"], help="tool tasks to measure (chapter 00's always runs)",
    )  # fmt: skip
    trl = sub.add_parser("trl", help="one course_lib GRPO iteration vs one step of TRL's GRPOTrainer")
    trl.add_argument("--pairs", type=int, default=7, help="interleaved pairs of iterations, after one warm-up pair")
    decoder = sub.add_parser("decoder", help="the generic decoder (any family) vs the lean KVDecoder, per decode step")
    decoder.add_argument("--batch", type=int, default=64)
    decoder.add_argument("--steps", type=int, default=24, help="single-token decode steps after the prefill")
    decoder.add_argument("--repeats", type=int, default=7, help="interleaved pairs of lean and generic runs")
    roofline = sub.add_parser("roofline", help="achieved FLOP/s of generation and the update vs matmul throughput")
    roofline.add_argument("--presets", nargs="+", default=["tiny", "tiny_wide"], help="model presets to measure")
    roofline.add_argument("--batch", type=int, default=64, help="episodes in the rollout batch (and update rows)")
    roofline.add_argument("--repeats", type=int, default=7, help="timed rollouts and updates, after one warm-up")
    roofline.add_argument("--matmul-seconds", type=float, default=0.2, help="minimum seconds per timed matmul block")
    update = sub.add_parser("update", help="one GRPO update of a real model's LoRA: time and peak memory per budget")
    update.add_argument("--model", default="smollm2", help="a real model's name or a checkpoint folder")
    update.add_argument("--rows", type=int, default=32)
    update.add_argument("--tokens", type=int, default=110)
    update.add_argument("--budgets", type=int, nargs="+", default=[0, 2048, 1024], help="micro_batch_tokens values")
    update.add_argument("--repeats", type=int, default=2)
    iteration = sub.add_parser("iteration", help="a GRPO iteration on a real model: float32 against bf16's fast path")
    iteration.add_argument("--model", default="smollm2", help="a real model's name or a checkpoint folder")
    iteration.add_argument("--iterations", type=int, default=3, help="per path, the first a warm-up")
    iteration.add_argument("--paths", nargs="+", default=list(fast_path.PATHS), choices=list(fast_path.PATHS))
    iteration.add_argument("--warm-steps", type=int, default=fast_path.WARM_STEPS, help="warm-start steps of 8 first")
    args = parser.parse_args(argv)
    if args.command == "iteration":
        fast_path.bench_iteration(args.model, args.iterations, args.paths, args.warm_steps)
    elif args.command == "update":
        bench_update(args.model, args.rows, args.tokens, args.budgets, args.repeats)
    elif args.command == "roofline":
        bench_roofline(args.presets, args.batch, args.repeats, args.matmul_seconds)
    elif args.command == "trl":
        bench_trl(args.pairs)
    elif args.command == "decoder":
        bench_decoder(args.batch, args.steps, args.repeats)
    elif args.model:
        bench_real_rollout(args.model, args.batch or 32, args.group, args.repeats)
    else:
        bench_rollout(args.batch or 64, args.group, args.repeats, args.tasks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
