"""Chapter 05's module: demonstrations, the RL and SFT arms on a tiny model, claims."""

import dataclasses
import math

import pytest
import torch

from course_lib.chapters import ch05_toolrl as ch
from course_lib.engine.rollout import SamplingConfig
from course_lib.models import build_model
from course_lib.rl.train import GRPOConfig

TINY = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)


@pytest.fixture(scope="module")
def tokenizer():
    return ch.build_tokenizer_for_chapter()


@pytest.fixture
def base(tokenizer):
    torch.manual_seed(0)
    return build_model(tokenizer, "tiny", max_positions=96, **TINY).eval()


def shrink(config: ch.Chapter05Config) -> ch.Chapter05Config:
    grpo = dataclasses.replace(config.grpo, iterations=2, prompts_per_iteration=2, group_size=2, eval_every=1)
    sampling = dataclasses.replace(config.sampling, max_turn_tokens=8, max_total_tokens=24)
    return dataclasses.replace(config, grpo=grpo, sampling=sampling, eval_tasks=4)


@pytest.mark.parametrize("scale", ["cpu", "gpu"])
def test_presets_run_a_couple_of_steps_on_cpu(base, tokenizer, scale):
    config = shrink(ch.preset(scale))
    model, history = ch.train_rl_arm(base, tokenizer, "dynamic", config, seed=0)
    assert len(history) == 3 and "eval_success" in history[-1] and "kl" in history[0]
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) < sum(p.numel() for p in base.parameters())
    sft = ch.train_sft_arm(base, tokenizer, config, seed=0)
    assert 0.0 <= ch.evaluate(sft, tokenizer, config, 0)["success"] <= 1.0


def test_run_reuses_a_given_base_and_its_evaluation(base, tokenizer, monkeypatch):
    """With `base` and `base_stats` given, `run` neither loads a checkpoint nor re-evaluates the base,
    and returns every key the claims read."""
    monkeypatch.setattr(ch.data, "load_base", lambda *a, **k: pytest.fail("run loaded a checkpoint"))
    stats = {"base": {"success": 0.25}, "base_novel": {"success": 0.125}}
    results = ch.run(0, shrink(ch.preset("cpu")), base=(base, tokenizer), base_stats=stats)
    assert results["base"] == {"success": 0.25} and results["base_novel"] == {"success": 0.125}
    for key in (*ch.ARMS, "sft", "fine_novel", "sft_novel"):
        assert 0.0 <= results[key]["success"] <= 1.0
    assert set(results["histories"]) == set(ch.ARMS)
    assert [c.id for c in ch.claims(results)] == ["C5.1", "C5.2", "C5.3", "C5.4", "C5.5", "C5.6"]


def test_sft_arm_samples_from_sft_traces_fixed_traces(base, tokenizer, monkeypatch):
    seen = []
    monkeypatch.setattr(ch, "supervised_warm_start", lambda model, examples, *a, **k: seen.append(len(examples)))
    config = shrink(ch.preset("cpu"))
    ch.train_sft_arm(base, tokenizer, config, seed=0)
    ch.train_sft_arm(base, tokenizer, dataclasses.replace(config, sft_traces=3), seed=0)
    assert seen == [config.grpo.iterations * config.grpo.prompts_per_iteration * config.grpo.group_size, 3]


def test_lora_memory_is_smaller(base):
    (full_name, full, full_bytes), (lora_name, lora, lora_bytes) = ch.memory_table(base, ch.preset("cpu"))
    assert lora < full and lora_bytes < full_bytes and full_bytes == 16 * full


def test_arm_specs():
    config = ch.preset("cpu")
    assert ch.arm_spec("coarse", config).coarse and ch.arm_spec("length", config).length_target > 0
    assert ch.arm_spec("dynamic", config).horizon == config.grpo.iterations


def fake_results(fine, coarse, length, dynamic, sft, base=0.2, coarse_auc_gap=0.0):
    """A run's results with the given final successes; the coarse arm's first evaluation is
    `coarse_auc_gap` below the fine arm's (so fine - coarse mean over training is half of it)."""
    curve = lambda first, final: [{"iteration": 0, "eval_success": first}, {"iteration": 1, "eval_success": final}]  # noqa: E731
    arms = dict(fine=fine, coarse=coarse, length=length, dynamic=dynamic)
    firsts = dict(fine=0.1, coarse=0.1 - coarse_auc_gap, length=0.1, dynamic=0.1)
    return {
        **{a: {"success": v} for a, v in arms.items()},
        "base": {"success": base},
        "sft": {"success": sft},
        "fine_novel": {"success": fine},
        "sft_novel": {"success": sft},
        "histories": {a: curve(firsts[a], v) for a, v in arms.items()},
    }


def record_of(runs: list[dict]) -> dict:
    """What `results.load("ch05")` returns for these runs recorded as seeds 0, 1, ..."""
    return {"seeds": {str(i): {"numbers": ch.claim_numbers(r)} for i, r in enumerate(runs)}}


def statuses(claims) -> dict[str, bool]:
    return {c.id: c.passed for c in claims}


def test_paired_interval_is_the_student_t_interval():
    mean, low, high = ch.paired_interval([0.01, 0.02, 0.03])
    half = 0.01 * 4.302652729911275 / 3**0.5  # sd 0.01, t(0.975, 2) from tables to 16 digits
    assert mean == pytest.approx(0.02) and low == pytest.approx(0.02 - half) and high == pytest.approx(0.02 + half)
    # one seed has no interval: every check on it is False
    mean, low, high = ch.paired_interval([0.3])
    assert mean == 0.3 and math.isnan(low) and math.isnan(high)


def test_claims_pool_the_recorded_seeds():
    # ten seeds on which fine beats coarse, length and SFT by 8-12 points, dynamic beats fine by 5-7, and
    # coarse's learning curve lags fine's by 8-10 points on average
    good = [fake_results(0.5 + d, 0.42, 0.42, 0.55 + 2 * d, 0.4, coarse_auc_gap=0.08 + d) for d in
            (0.0, 0.01, 0.02, 0.0, 0.01, 0.02, 0.0, 0.01, 0.02, 0.01)]  # fmt: skip
    recorded = record_of(good)
    numbers = ch.claim_numbers(good[0], recorded)
    assert numbers["pooled_seeds"] == 10 and numbers["fine_minus_base"] == pytest.approx(0.3)
    assert statuses(ch.claims(good[0], recorded)) == {
        "C5.1": True, "C5.2": True, "C5.3": True, "C5.4": True, "C5.5": True,
        "C5.6": False,  # fine - coarse over training is 8-10 points: a real effect, outside 5 points
    }  # fmt: skip
    # the same run without the recorded seeds: one seed, no interval, nothing pooled passes
    assert not any(c.passed for c in ch.claims(good[0]))


def test_required_claims_fail_on_a_small_or_unresolved_effect():
    # RL lifts the base by 6-10 points only, and fine - coarse over training swings by 4-10 points either way
    runs = [fake_results(0.25 + g, 0.25, 0.25, 0.25, 0.25, base=0.22, coarse_auc_gap=s) for g, s in
            ((0.05, 0.16), (0.03, -0.16), (0.07, 0.12), (0.05, -0.12))]  # fmt: skip
    claims = {c.id: c for c in ch.claims(runs[0], record_of(runs))}
    assert claims["C5.5"].required and claims["C5.6"].required
    assert claims["C5.5"].status == "FAIL" and claims["C5.6"].status == "FAIL"
    # a resolved null (differences within a point of 0 on ten seeds) passes C5.6, and classes C5.1 "resolved absent"
    null = [fake_results(0.5, 0.5 + d, 0.5, 0.5, 0.5, coarse_auc_gap=d) for d in (0.01, -0.01) * 5]
    recorded = record_of(null)
    assert statuses(ch.claims(null[0], recorded))["C5.6"] is True
    pooled = ch.pooled_numbers(ch.recorded_seed_numbers(recorded))
    assert ch.outcome(pooled, "fine_minus_coarse") == "resolved absent"
    row = next(r for r in ch.interval_table(recorded).splitlines() if r.startswith("| fine - coarse, final success |"))
    assert row.startswith("| fine - coarse, final success | 10 |") and row.endswith("| +5 | resolved absent |")


def test_repool_rewrites_every_record_from_all_seeds(tmp_path, monkeypatch):
    from course_lib.course import recorded

    monkeypatch.setattr(recorded, "RESULTS_DIR", tmp_path)
    recorded.begin()
    runs = [fake_results(0.5, 0.5 + d, 0.5, 0.5, 0.5, coarse_auc_gap=d) for d in (0.01, -0.01, 0.0)]
    for seed, run in enumerate(runs):  # what `main --record` writes after each seed
        recorded.record("ch05", seed, ch.CLAIMS, ch.claim_numbers(run), 1.0, {"fine/eval_success": [(0, 0.1)]})
    first = recorded.load("ch05")["seeds"]["0"]
    assert first["numbers"]["pooled_seeds"] == 1 and first["passed"]["C5.6"] is False
    ch.repool("ch05")
    for seed, record in recorded.load("ch05")["seeds"].items():
        assert record["numbers"]["pooled_seeds"] == 3 and record["passed"]["C5.6"] is True, seed
        assert record["curves"] == {"fine/eval_success": [[0.0, 0.1]]} and record["minutes"] == 1.0
        assert record["numbers"]["fine_minus_coarse"] == pytest.approx(-[0.01, -0.01, 0.0][int(seed)])


def test_sampling_stops_on_both_answer_kinds():
    assert set(ch.preset("cpu").sampling.stop_tags) == {"</tool_call>", "</response>"}
    assert isinstance(ch.preset("gpu").grpo, GRPOConfig) and isinstance(ch.preset("gpu").sampling, SamplingConfig)


def test_command_line_prints_no_per_seed_verdicts(monkeypatch, capsys):
    """Without `--record` each seed prints its summary and no claims (they pool over recorded seeds)."""
    fake = dataclasses.replace(ch.CHAPTER, run=lambda seed: {"seed": seed, "minutes": 0.0},
                               claim_numbers=lambda r: {}, report=lambda r: [f"summary of {r['seed']}"])  # fmt: skip
    monkeypatch.setattr(ch, "CHAPTER", fake)
    ch.CHAPTER.main(["--seeds", "3"])
    assert capsys.readouterr().out.splitlines() == [
        "seed 3 (0.00 min)",
        "  summary of 3",
        "(claims pool over recorded seeds: run with --record)",
    ]
