"""Chapter 05's module: demonstrations, the RL and SFT arms on a tiny model, claims."""

import dataclasses

import pytest
import torch

from course_lib.chapters import ch05_toolrl as ch
from course_lib.envs.function_calling import draw_task
from course_lib.models import build_model
from course_lib.rollout import SamplingConfig
from course_lib.train import GRPOConfig

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


def test_noise_free_demonstrations_are_correct(tokenizer):
    clean = ch.Noise(format=0, name=0, key=0, value=0, missing=0, no_tool_call=0)
    import random

    from course_lib.algos.rewards import toolrl_reward

    rng = random.Random(0)
    for seed in range(50):
        task = draw_task(seed, "train")
        best = 4.0 if task.calls else 1.0
        assert toolrl_reward(ch.noisy_answer(task, rng, clean), list(task.calls))["total"] == best


def test_noisy_demonstrations_make_every_kind_of_mistake():
    import random

    from course_lib.algos.rewards import toolrl_reward

    rng = random.Random(0)
    scores = []
    for seed in range(400):
        task = draw_task(seed, "train")
        if task.calls:
            scores.append(toolrl_reward(ch.noisy_answer(task, rng, ch.Noise()), list(task.calls)))
    assert any(s["format"] == 0 for s in scores)
    assert any(-3 < s["correct"] < 3 for s in scores)
    assert 0.1 < sum(s["total"] == 4.0 for s in scores) / len(scores) < 0.6


def test_missing_call_noise_drops_the_last_call_of_a_multi_call_answer():
    import random

    from course_lib.algos.rewards import parse_calls

    only_missing = ch.Noise(format=0, name=0, key=0, value=0, missing=1, no_tool_call=0)
    rng = random.Random(0)
    for seed in range(20):
        task = draw_task(seed, "train", no_tool_share=0.0, two_call_share=0.5, three_call_share=0.5)
        calls = parse_calls(ch.noisy_answer(task, rng, only_missing))
        assert [name for name, _ in calls] == [name for name, _ in task.calls[:-1]]


def test_examples_mask_only_the_response(tokenizer):
    ids, mask = ch.demonstration_examples(tokenizer, 1, 0, ch.Noise())[0]
    first = mask.index(1)
    assert tokenizer.convert_ids_to_tokens(ids[first]) in ("<think>", "<tool_call>", "<response>")
    assert all(mask[first:])


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
    assert [c.id for c in ch.claims(results)] == ["C5.1", "C5.2", "C5.3", "C5.4"]


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


def fake_results(fine, coarse, length, dynamic, sft):
    curve = lambda final: [{"iteration": 0, "eval_success": 0.1}, {"iteration": 1, "eval_success": final}]  # noqa: E731
    arms = dict(fine=fine, coarse=coarse, length=length, dynamic=dynamic)
    return {
        **{a: {"success": v} for a, v in arms.items()},
        "sft": {"success": sft},
        "fine_novel": {"success": fine},
        "sft_novel": {"success": sft},
        "histories": {a: curve(v) for a, v in arms.items()},
    }


def test_claims_pass_and_fail():
    good = ch.claims(fake_results(0.6, 0.4, 0.5, 0.65, 0.45))
    assert [c.passed for c in good] == [True, True, True, True]
    bad = ch.claims(fake_results(0.5, 0.5, 0.5, 0.5, 0.5))
    assert not any(c.passed for c in bad)


def test_sampling_stops_on_both_answer_kinds():
    assert set(ch.preset("cpu").sampling.stop_tags) == {"</tool_call>", "</response>"}
    assert isinstance(ch.preset("gpu").grpo, GRPOConfig) and isinstance(ch.preset("gpu").sampling, SamplingConfig)
