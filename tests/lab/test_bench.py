"""The benchmarks run end to end (their numbers are measurements, never asserted) and count what they claim."""

from __future__ import annotations

import math
import re

import pytest
import torch

from course_lib.lab import bench

pytestmark = pytest.mark.slow  # the whole file: see its docstring


def test_rollout_benchmark_prints_its_measurements(capsys):
    status = bench.main(["rollout", "--batch", "8", "--group", "4", "--repeats", "2", "--tasks", "ch00", "ch05"])
    out = capsys.readouterr().out
    assert status == 0
    assert "8 distinct tasks:" in out and "2 tasks x 4 samples" in out
    assert re.search(r"engine time: model \d+%, sampling \d+%, env \d+%", out)
    assert re.search(
        r"speedup \d+\.\d\d \(range \d+\.\d\d-\d+\.\d\d over 2 pairs\); at most \d+\.\d\d with zero engine "
        r"overhead, \d+\.\d\d if sampling is kept",
        out,
    )
    assert re.search(
        r"function_calling \(ch05, [\d,]+ parameters, 1\.0 turns and \d+ policy tokens per sequence\): speedup "
        r"\d+\.\d\d .*; at most \d+\.\d\d with zero engine overhead",  # every task prints its bound
        out,
    )
    assert "mini_travel" not in out  # only the tasks asked for
    assert re.fullmatch(r"speedup_vs_generate=\d+\.\d\d", out.strip().splitlines()[-1])


def test_interleaved_runs_pair_up_and_give_a_median_speedup():
    """Each pair's speedup is engine over generate() tokens per second; the headline is their median."""

    def run(tokens: int, seconds: float) -> bench.Run:
        return bench.Run(tokens=tokens, seconds=seconds, turns=1.0, split={})

    result = bench.Comparison(engine=[run(100, 1.0), run(100, 2.0), run(300, 1.0)], generate=[run(50, 1.0)] * 3)
    assert result.speedups == [2.0, 1.0, 6.0]
    assert result.speedup == 2.0
    assert result.describe() == "speedup 2.00 (range 1.00-6.00 over 3 pairs)"


def test_roofline_prints_positive_fractions(capsys):
    status = bench.main(
        ["roofline", "--presets", "micro", "--batch", "4", "--repeats", "2", "--matmul-seconds", "0.002"]
    )
    out = capsys.readouterr().out
    assert status == 0
    rows = re.findall(r"^  micro +(generation|update) +(\S+) +(\S+) +(\S+)  (\S+)-(\S+)$", out, re.MULTILINE)
    assert [row[0] for row in rows] == ["generation", "update"]
    for _, achieved, peak, fraction, low, high in rows:
        assert 0 < float(achieved) < math.inf and 0 < float(peak) < math.inf
        assert 0 < float(low) <= float(fraction) <= float(high) < math.inf  # the median of 2 pairs lies in their range
    last = re.fullmatch(r"generation_of_matmul_peak=(\S+) update_of_matmul_peak=(\S+)", out.splitlines()[-1])
    assert last and [float(value) for value in last.groups()] == [float(row[3]) for row in rows]


def test_the_real_model_rollout_benchmark_runs_on_a_chat_checkpoint(tmp_path, capsys):
    """`rollout --model`: the engine against generate() over the chat template on the same episodes, and both
    phases against the matmul roofline, on a stand-in (a Llama with a BPE tokenizer and ChatML) in place of SmolLM2."""
    from course_lib.course import standins

    folder = standins.build_standin(tmp_path / "llama", "llama", max_positions=512)
    status = bench.main(["rollout", "--model", str(folder), "--batch", "4", "--group", "2", "--repeats", "2"])
    out = capsys.readouterr().out
    assert status == 0
    assert "in the chat format" in out and "2 tasks x 2 samples" in out
    assert re.search(r"speedup \d+\.\d\d \(range \d+\.\d\d-\d+\.\d\d over 2 pairs\)", out)
    for phase in ("generation", "update"):
        assert re.search(rf"  {phase} +\S+ GFLOP/s of +\S+ GFLOP/s matmul at its shapes: \S+ \(range", out)
    last = re.fullmatch(r"speedup_vs_generate=(\S+) generation_of_matmul_peak=(\S+) update_of_matmul_peak=(\S+)",
                        out.strip().splitlines()[-1])  # fmt: skip
    assert last and all(0 < float(value) < math.inf for value in last.groups())


def test_the_chat_generate_baseline_plays_the_same_episodes_as_the_engine(tmp_path):
    """Both sides take the same number of turns per episode on a policy that always ends its turn at once (a stand-in
    whose only likely token is the end-of-turn token): generate() over the template is a fair baseline."""
    from course_lib.course import standins

    folder = standins.build_standin(tmp_path / "llama", "llama", max_positions=512)
    model, tokenizer, task = bench.chat_task(str(folder))
    with torch.no_grad():  # every position predicts the end-of-turn token
        model.lm_head.weight.zero_()
        model.lm_head.weight[tokenizer.eos_token_id] = 100.0 * torch.ones(model.config.hidden_size) / 10
        model.model.norm.weight.fill_(1.0)
    engine = bench.time_engine(model, tokenizer, task, [0, 1], 0)
    generate = bench.time_generate_chat(model, tokenizer, task, [0, 1], 0)
    assert engine.turns == generate.turns == 3  # an empty action is invalid: the episode runs to its 3 turns
    assert engine.tokens == generate.tokens == 6  # one end-of-turn token per turn, two episodes


@pytest.mark.slow
def test_the_iteration_benchmark_compares_float32_with_the_fast_path(tmp_path, capsys):
    """`iteration --model`: float32 and bf16's fast path each time GRPO iterations of chapter 00's SmolLM2 shape in a
    process of their own, then the bf16 sampler's mismatch with the update is measured by chapter 15's monitor; on a
    stand-in (a two-block Llama with a BPE tokenizer and ChatML) in place of SmolLM2."""
    from course_lib.course import standins

    folder = standins.build_standin(tmp_path / "llama", "llama", max_positions=512)
    status = bench.main(["iteration", "--model", str(folder), "--iterations", "1", "--paths", "fp32", "bf16"])
    out = capsys.readouterr().out
    assert status == 0
    for path in ("fp32", "bf16"):
        assert re.search(rf"{path}: +\d+\.\d s per iteration \(rollout +\d+\.\d, update +\d+\.\d\), \d+\.\d policy "
                         r"tokens an episode, peak \d+\.\d\d GiB", out)  # fmt: skip
    for label in ("float32 update", "bf16-autocast update"):
        assert re.search(rf"{label}: mean \|gap\| \d\.\d{{3}} nats, largest \d+\.\d\d; ratio off 1 by \d", out)
    last = re.fullmatch(r"iteration_seconds_fp32=(\S+) iteration_seconds_fast=(\S+) speedup=(\S+) "
                        r"peak_gib_fast=(\S+) \(bf16\)", out.strip().splitlines()[-1])  # fmt: skip
    assert last and all(0 < float(value) < math.inf for value in last.groups())
