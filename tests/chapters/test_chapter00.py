"""Chapter 00's glue: demonstrations, presets (the gpu preset must not rot), claims logic."""

import dataclasses

import pytest
import torch

from course_lib import models
from course_lib.chapters import ch00_tool_agent as ch00
from course_lib.envs.arithmetic import solve
from course_lib.rl.train import evaluate_policy, train_grpo
from course_lib.rl.warm_start import demonstration_examples
from course_lib.tasks import tool_arithmetic


def test_demonstrations_mix_tool_and_direct_answers():
    """About 40% of demonstrations use the tool and always copy the right result."""
    texts = ch00.demonstration_texts(2000, seed=0, tool_share=0.4, direct_correct=0.3)
    with_tool = [c for _, c in texts if "<tool_call>" in c]
    assert 0.35 < len(with_tool) / len(texts) < 0.45
    for prompt, completion in texts[:200]:
        a, op, b = prompt.split()[1:4]
        if "<tool_call>" in completion:
            assert f"<answer> {solve(int(a), op, int(b))} </answer>" in completion


def test_demonstration_mask_covers_only_policy_tokens():
    tokenizer = tool_arithmetic.word_tokenizer()
    texts = [
        (
            "<question> 100 + 200 </question>",
            "<tool_call> 100 + 200 </tool_call> <tool_response> 300 </tool_response> <answer> 300 </answer>",
        )
    ]
    ids, mask = demonstration_examples(tokenizer, texts)[0]
    learned = " ".join(tokenizer.convert_ids_to_tokens([i for i, m in zip(ids, mask) if m]))
    assert learned == "<tool_call> 100 + 200 </tool_call> <answer> 300 </answer>"


@pytest.mark.slow
def test_gpu_preset_runs_on_cpu_for_a_few_steps(tmp_path):
    """The gpu preset's model size and loop run end to end (shrunk budgets, CPU)."""
    config = ch00.preset("gpu")
    config = dataclasses.replace(
        config,
        demonstrations=64,
        # 30 warm-start steps (not 2) so that the seeded GRPO batch has reward variance: a base that
        # fails every task the same way gives all-zero advantages and an update that cannot move anything
        sft=dataclasses.replace(config.sft, steps=30, batch_size=8, warmup_steps=1),
        grpo=dataclasses.replace(config.grpo, iterations=1, prompts_per_iteration=2, group_size=4, eval_every=1),
        eval_tasks=8,
    )
    assert config.model_preset == "small"
    ch00.build_base(tmp_path, seed=0, progress=False, config=config)
    model, tokenizer = models.load(tmp_path)
    assert models.count_parameters(model) > 1_000_000
    before = [p.detach().clone() for p in model.parameters()]
    history = train_grpo(
        model,
        tokenizer,
        ch00.make_env,
        config.sampling,
        config.grpo,
        seed=0,
        evaluate=lambda m: tool_arithmetic.evaluate(m, tokenizer, config, 0),
    )
    assert "eval_success" in history[0] and "eval_success" in history[-1]
    assert "success" in history[0]
    stats, _ = evaluate_policy(model, tokenizer, lambda: ch00.make_env("test"), [0, 1], config.sampling, 0)
    assert 0.0 <= stats["success"] <= 1.0
    assert history[0]["reward_std"] > 0, "the seeded batch must have reward variance, or the update is untested"
    changed = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert changed, "non-zero advantages must move the weights"


def test_claims_follow_the_numbers():
    """C0.1/C0.2 thresholds and the exact checks decide PASS/FAIL."""
    checks = {"mask_errors": 0, "id_errors": 0, "text_errors": 0, "policy_tokens": 10, "tool_calls": 3}
    good = ch00.claims({"base": {"success": 0.4}, "trained": {"success": 0.6}, "checks": checks})
    assert all(c.passed for c in good)
    bad = ch00.claims({"base": {"success": 0.9}, "trained": {"success": 0.95}, "checks": {**checks, "mask_errors": 1}})
    assert [c.passed for c in bad] == [False, False, False, True]


def test_claims_report_prints_and_raises(capsys):
    """Required failures raise after every line is printed; documented non-reproductions do not."""
    import pytest

    from course_lib.course.claims import Claim, ClaimFailed, report

    report([Claim("C9.9", "holds", True), Claim("C9.8", "too small here", False, required=False)])
    assert capsys.readouterr().out.splitlines() == [
        "C9.9   finding   this run PASS  holds",
        "C9.8   finding   this run not reproduced at this scale  too small here",
    ]
    with pytest.raises(ClaimFailed, match="C9.7"):
        report([Claim("C9.7", "broken", False), Claim("C9.6", "fine", True)])
    assert capsys.readouterr().out.splitlines() == [
        "C9.7   finding   this run FAIL  broken",
        "C9.6   finding   this run PASS  fine",
    ]


def test_base_build_is_deterministic(tmp_path):
    """Two builds with the same seed write byte-identical weights (the manifest's hashes stay valid)."""
    from course_lib.data import sha256

    config = dataclasses.replace(
        ch00.preset("cpu"), demonstrations=64, sft=dataclasses.replace(ch00.preset().sft, steps=3)
    )
    for name in ("a", "b"):
        ch00.build_base(tmp_path / name, seed=0, progress=False, config=config)
    assert sha256(tmp_path / "a" / "model.safetensors") == sha256(tmp_path / "b" / "model.safetensors")


def test_clip_acts_only_after_the_first_update_on_a_batch():
    """One update per batch never clips (ratio 1 when the sampling policy is the updated one); later updates
    on the same batch do. The default path's numbers are not touched: no per-update keys with one update."""
    from course_lib import data

    config = ch00.preset("cpu")
    model, tokenizer = data.load_base(ch00.BASE_NAME, "cpu")
    before = [p.detach().clone() for p in model.parameters()]
    fractions = ch00.clip_activity(model, tokenizer, config, seed=0, updates=3, iterations=2)
    assert len(fractions) == 2 and all(len(row) == 3 for row in fractions)
    assert all(row[0] == 0.0 for row in fractions)
    assert fractions[0][2] > fractions[0][1] > 0.0, fractions  # the ratios drift further with each update
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters())), "clip_activity trains a copy"
    history = train_grpo(
        model, tokenizer, ch00.make_env, config.sampling,
        dataclasses.replace(config.grpo, iterations=1), seed=0,
    )  # fmt: skip
    assert history[0]["clip_fraction"] == 0.0 and not any(k.startswith("clip_fraction_update") for k in history[0])


def test_curves_for_the_record():
    history = [{"iteration": 0, "success": 0.5, "eval_success": 0.4, "tool_use": 0.5, "entropy": 0.8},
               {"iteration": 1, "success": 0.7, "tool_use": 0.9, "entropy": 0.5},
               {"iteration": 2, "eval_success": 0.8}]  # fmt: skip
    curves = ch00.curves({"history": history})
    assert curves["grpo/eval_success"] == [(0.0, 0.4), (2.0, 0.8)]
    assert curves["grpo/success"] == [(0.0, 0.5), (1.0, 0.7)]
    assert set(curves) == {f"grpo/{k}" for k in ch00.CURVE_KEYS}
