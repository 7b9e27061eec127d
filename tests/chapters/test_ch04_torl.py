"""Chapter 04's glue: demonstrations, the ToRL measurements, presets (the gpu preset must not rot), claims."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from course_lib import models
from course_lib.chapters import ch04_torl as ch04
from course_lib.engine.rollout import Trajectory
from course_lib.envs.word_math import Problem, evaluate
from course_lib.tokenizer import encode


def test_demonstrations_mix_shapes_and_always_copy_tool_results():
    """About 40% write code; clean single calls mostly copy the tool's true result; every word is known."""
    texts = ch04.demonstration_texts(3000, seed=0, tool_share=0.4, direct_correct=0.2)
    with_code = [c for _, c in texts if "<tool_call>" in c]
    assert 0.36 < len(with_code) / len(texts) < 0.44
    chains = [c for c in with_code if c.count("<tool_call>") > 1]
    errors = [c for c in with_code if "error" in c]
    assert chains and errors
    tokenizer = ch04.build_tokenizer_for_chapter()
    for prompt, completion in texts[:300]:
        assert tokenizer.unk_token_id not in encode(tokenizer, f"{prompt} {completion}")
    copied = clean = 0
    for completion in with_code:
        words = completion.split()
        if completion.count("<tool_call>") == 1 and "error" not in completion:
            code = " ".join(words[words.index("<tool_call>") + 1 : words.index("</tool_call>")])
            result = words[words.index("<tool_response>") + 1]
            # the tool response is the true value of the code it answers, never a made-up number
            assert result == str(evaluate(code))
            clean += 1
            copied += words[words.index("<answer>") + 1] == result
    # of the clean single calls, 70 in 78 copy the result and 8 in 78 ignore it for a near miss (~0.897)
    assert clean > 500 and 0.85 < copied / clean < 0.94


def test_call_effectiveness():
    """Used results are effective; errors, skipped calls and ignored results are not."""
    assert ch04.call_is_effective(
        {"result": "115", "turn": 1}, ["<tool_call> 7 + 12 * 9 </tool_call>", "<answer> 115 </answer>"]
    )
    assert not ch04.call_is_effective({"result": "115"}, ["<tool_call> x </tool_call>", "<answer> 114 </answer>"])
    assert not ch04.call_is_effective({"result": "error"}, ["<answer> 115 </answer>"])
    assert not ch04.call_is_effective({"program": "1", "skipped": True}, ["<answer> 1 </answer>"])
    assert ch04.call_is_effective(
        {"result": "108"}, ["a", "<tool_call> 7 + 108 </tool_call>", "<answer> 115 </answer>"]
    )


def _trajectory(tokenizer, env, completion_words: list[tuple[str, int]]) -> Trajectory:
    ids = [tokenizer.bos_token_id]
    mask = [0]
    for word, m in completion_words:
        ids.append(tokenizer.convert_tokens_to_ids(word))
        mask.append(m)
    n = len(ids)
    return Trajectory(env=env, token_ids=ids, loss_mask=mask, logprobs=[0.0] * n, entropies=[0.0] * n, turn_ids=[0] * n)


def test_torl_stats_hand_computed():
    """Three responses: a used call, an error then an answer, and a hallucinated tool response."""
    tokenizer = ch04.build_tokenizer_for_chapter()
    problem = Problem(0, (7, 12, 9))
    good, failed, direct = (ch04.make_env("test") for _ in range(3))
    for env in (good, failed, direct):
        env.reset(seed=0, options={"problem": problem})
    good.step("<tool_call> 7 + 12 * 9 </tool_call>")
    good.step("<answer> 115 </answer>")
    failed.step("<tool_call> 7 + </tool_call>")
    failed.step("<answer> 100 </answer>")
    direct.step("<tool_response> 3 </tool_response> <answer> 3 </answer>")
    words = [("<tool_response>", 0), ("115", 0)]
    trajectories = [
        _trajectory(tokenizer, good, words),
        _trajectory(tokenizer, failed, words),
        _trajectory(tokenizer, direct, [("<tool_response>", 1), ("3", 1), ("<tool_response>", 1)]),
    ]
    stats = ch04.torl_stats(trajectories, tokenizer)
    assert stats["code_ratio"] == 2 / 3
    assert stats["executable_ratio"] == 1 / 2 and stats["tool_success"] == 1 / 2
    assert stats["ineffective_rate"] == 1 / 2 and stats["ineffective_per_response"] == 1 / 3
    assert stats["hallucination_rate"] == 1 / 3 and stats["hallucinated_tokens"] == 2 / 3
    assert stats["skipped_rate"] == 0.0 and stats["calls_per_response"] == 2 / 3


def test_claims_follow_the_numbers():
    base = {"success": 0.25, "code_ratio": 0.4, "ineffective_rate": 0.3}
    masked = {"success": 0.6, "code_ratio": 0.9, "ineffective_rate": 0.1, "silent_tool_hallucination": 0.0}
    unmasked = {"success": 0.5, "code_ratio": 0.9, "ineffective_rate": 0.1, "silent_tool_hallucination": 0.3}

    def history(*accuracies):
        return [{"iteration": 10 * i, "eval_success": a} for i, a in enumerate(accuracies)]

    runs = {
        "masked": {"final": masked, "history": history(0.25, 0.6, 0.7)},
        "unmasked": {"final": unmasked, "history": history(0.25, 0.5, 0.6)},
    }
    assert abs(ch04.mean_eval_accuracy(runs["masked"]["history"]) - 0.65) < 1e-9  # iteration 0 is left out
    assert [c.passed for c in ch04.claims({"base": base, "runs": runs})] == [True, True, True, True]
    runs["masked"]["final"] = {**masked, "success": 0.3, "ineffective_rate": 0.25}
    runs["unmasked"]["final"] = {**unmasked, "silent_tool_hallucination": 0.05}
    runs["unmasked"]["history"] = history(0.25, 0.58, 0.7)
    assert [c.passed for c in ch04.claims({"base": base, "runs": runs})] == [False, False, False, False]


@pytest.mark.slow
def test_gpu_preset_runs_on_cpu_for_a_few_steps(tmp_path):
    """The gpu preset's model size, the base builder and every variant run end to end (shrunk)."""
    config = ch04.preset("gpu")
    config = dataclasses.replace(
        config,
        demonstrations=64,
        sft=dataclasses.replace(config.sft, steps=2, batch_size=8),
        grpo=dataclasses.replace(config.grpo, iterations=1, prompts_per_iteration=2, group_size=4, eval_every=1),
        eval_tasks=8,
    )
    assert config.model_preset == "small"
    ch04.build_base(tmp_path, seed=0, progress=False, config=config)
    model, tokenizer = models.load(tmp_path)
    assert models.count_parameters(model) > 1_000_000
    for name, variant in ch04.VARIANTS.items():
        result = ch04.train(models.load(tmp_path)[0], tokenizer, config, seed=0, **variant)
        assert "eval_success" in result["history"][0] and "eval_code_ratio" in result["history"][-1], name
        assert result["seconds_per_step"] > 0 and 0.0 <= result["final"]["success"] <= 1.0
    stats = ch04.evaluate(model, tokenizer, config, seed=0)
    assert set(ch04.SUMMARY_KEYS) <= set(stats)
    assert torch.isfinite(torch.tensor(list(stats.values()))).all()


def test_record_curves_and_context_numbers():
    """`--record` stores every variant's curves under a key without `=`, and the ablations' final accuracy
    and cost per step as context numbers (no claim uses them)."""
    base = {"success": 0.25, "code_ratio": 0.4, "ineffective_rate": 0.3}
    final = {"success": 0.6, "code_ratio": 0.9, "ineffective_rate": 0.1, "silent_tool_hallucination": 0.0}
    history = [{"iteration": 0, "eval_success": 0.25, "reward": -0.5}, {"iteration": 1, "reward": 0.1},
               {"iteration": 2, "eval_success": 0.6}]  # fmt: skip
    runs = {name: {"final": {**final, "success": 0.5 + i / 10}, "history": history, "seconds_per_step": 0.2 + i}
            for i, name in enumerate(ch04.VARIANTS)}  # fmt: skip
    numbers = ch04.claim_numbers({"base": base, "runs": runs})
    assert numbers["penalty_success"] == 0.7 and numbers["c2_success"] == 0.8
    assert numbers["masked_seconds_per_step"] == 0.2 and numbers["c2_seconds_per_step"] == 3.2
    curves = ch04.curves({"runs": runs})
    assert curves["c2/eval_success"] == [(0.0, 0.25), (2.0, 0.6)] and curves["unmasked/reward"] == [
        (0.0, -0.5),
        (1.0, 0.1),
    ]
    assert not any("=" in name for name in curves)
    assert "masked/entropy" not in curves  # absent from every row: not recorded as an empty curve


def test_command_line_variants_without_claims(capsys, tmp_path, monkeypatch):
    """`--variants` without both claimed runs prints no claims, and refuses `--record` before running anything."""
    import argparse

    import pytest

    from course_lib.course import recorded

    # a folder of the test's own, so that the refusal tested here does not depend on whether the tree is committed
    monkeypatch.setattr(recorded, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(recorded, "_run_provenance", None)
    with pytest.raises(SystemExit):
        ch04.CHAPTER.main(["--seeds", "0", "--variants", "penalty", "--record"])
    assert "--record needs the variants its claims use" in capsys.readouterr().err
    parser = argparse.ArgumentParser()
    partial = ch04._configure(ch04.CHAPTER, argparse.Namespace(variants=["penalty"], record=False), parser)
    assert partial.claims == () and partial.claim_numbers({}) == {}
    full = ch04._configure(ch04.CHAPTER, argparse.Namespace(variants=list(ch04.VARIANTS), record=True), parser)
    assert full.claims == ch04.CLAIMS and full.run.keywords == {"variants": list(ch04.VARIANTS)}
