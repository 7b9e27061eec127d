"""Chapter 03's glue: demonstrations, measurements, compute accounting, claims logic, the gpu preset."""

import dataclasses
import math

import pytest
import torch

from course_lib import envs, models
from course_lib.chapters import ch03_planner_r1 as ch03
from course_lib.engine.rollout import Trajectory
from course_lib.envs.planner_reward import FAILURE_CATEGORIES, Query, check_plan
from course_lib.tokenizer import encode


def test_demonstrations_replay_exactly_in_the_env():
    for prompt, completion in ch03.demonstration_texts(40, seed=1):
        env = envs.make("mini_travel")
        words = prompt.split()[1:-1]
        query = Query(words[0], words[2], int(words[4]), int(words[6]), words[8], words[10], words[12])
        assert env.reset(options={"query": query})[0] == prompt
        text = ""
        for chunk in completion.split("</tool_response>"):
            action = chunk.split("<tool_response>")[0].strip()
            obs, reward, terminated, _, info = env.step(action)
            text += f" {action} {obs}"
        assert terminated and info["r_schema"] == 1.0
        assert " ".join(text.split()) == completion


def demonstration_pass_rate(count: int, aware_share: float) -> float:
    config = ch03.Chapter03Config(aware_share=aware_share)
    passed = 0
    for prompt, completion in ch03.demonstration_texts(count, seed=0, config=config):
        words = prompt.split()[1:-1]
        query = Query(words[0], words[2], int(words[4]), int(words[6]), words[8], words[10], words[12])
        check = check_plan(completion.split("<answer>")[1].split("</answer>")[0], query)
        assert check.schema and check.commonsense["within_sandbox"] and check.commonsense["right_city"]
        passed += check.passed
    return passed / count


def test_demonstrations_are_schema_valid_but_rarely_pass():
    assert 0.03 < demonstration_pass_rate(600, ch03.Chapter03Config().aware_share) < 0.2
    assert demonstration_pass_rate(300, 0.0) < 0.1
    assert demonstration_pass_rate(200, 1.0) == 1.0


def test_every_demonstration_word_is_in_the_vocabulary():
    tokenizer = ch03.build_tokenizer_for_chapter()
    for prompt, completion in ch03.demonstration_texts(300, seed=2):
        ids = encode(tokenizer, f"{prompt} {completion}")
        assert tokenizer.unk_token_id not in ids and len(ids) < 110


def fake(info: dict | None) -> Trajectory:
    t = Trajectory(env=None, token_ids=[], loss_mask=[], logprobs=[], entropies=[], turn_ids=[])
    if info is not None:
        t.infos.append(info)
    return t


def test_failure_breakdown_counts_failed_episodes_only():
    check = check_plan("{ go : x , stay : y , eat : [ ] }", Query("arden", "belmar", 2, 10))
    trajectories = [
        fake(None),  # never acted
        fake({"tool_result": "error"}),  # ran out of turns after a call
        fake({"check": check, "failure": "hallucinated entity", "r_schema": 1.0}),
        fake({"check": check, "failure": "budget"}),
        fake({"check": check, "failure": None, "r_pass": 1.0}),
    ]
    shares = ch03.failure_breakdown(trajectories)
    assert set(shares) == {f"fail_{c}" for c in FAILURE_CATEGORIES}
    assert shares["fail_format"] == 0.5 and shares["fail_budget"] == 0.25
    assert shares["fail_hallucinated entity"] == 0.25 and sum(shares.values()) == pytest.approx(1.0)
    assert ch03.failure_breakdown([fake({"check": check, "failure": None})])["fail_format"] == 0.0
    assert ch03.plan_stats(trajectories)["r_schema"] == pytest.approx(1 / 5)


def test_compute_to_reach_interpolates_between_evaluations():
    history = [
        {"iteration": 0, "eval_success": 0.1, "eval_train_flops": 0.0},
        {"iteration": 5},
        {"iteration": 10, "eval_success": 0.35, "eval_train_flops": 6e9},
        {"iteration": 20, "eval_success": 0.5, "eval_train_flops": 1.2e10},
    ]
    # 0.3 lies 0.2 / 0.25 of the way from 0.1 (0 FLOPs) to 0.35 (6e9 FLOPs): 4.8e9
    assert ch03.compute_to_reach(history, 0.3) == pytest.approx(4.8e9)
    assert ch03.compute_to_reach(history, 0.35) == pytest.approx(6e9)
    assert ch03.compute_to_reach(history, 0.425) == pytest.approx(9e9)
    assert ch03.compute_to_reach(history, 0.05) == 0.0
    assert ch03.compute_to_reach(history, 0.9) == float("inf")


def results_with(small: dict, large: dict, small_cost=1e9, large_cost=2e9, format_share=0.1) -> dict:
    """Two evaluations per run: the base's pass rate at 0 FLOPs, the arm's final pass rate at `cost`."""

    def entry(passes, cost):
        def arm(p):
            history = [
                {"iteration": 0, "eval_success": passes["base"], "eval_train_flops": 0.0},
                {"iteration": 40, "eval_success": p, "eval_train_flops": cost},
            ]
            return {"history": history, "final": {"eval_success": p, "eval_fail_format": format_share}}

        return {"base": {"success": passes["base"]}, **{k: arm(v) for k, v in passes.items() if k != "base"}}

    return {"sizes": {"small": entry(small, small_cost), "large": entry(large, large_cost)}}


def test_common_gain_is_reached_by_both_runs():
    config = ch03.Chapter03Config()
    results = results_with({"base": 0.08, "dense": 0.5, "sparse": 0.12}, {"base": 0.1, "dense": 0.3, "sparse": 0.3})
    numbers = ch03.claim_numbers(results, config)
    assert numbers["common_gain"] == pytest.approx(0.2)  # the larger run's +0.2 < the small run's +0.42
    assert numbers["large_flops_to_gain"] == pytest.approx(2e9)  # reached at its best (last) evaluation
    assert numbers["small_flops_to_gain"] == pytest.approx(0.2 / 0.42 * 1e9)  # 0.28 on the line 0.08 -> 0.5
    assert numbers["small_over_large_flops_to_gain"] == pytest.approx(0.1 / 0.42)
    assert ch03.claims(results, config)[3].passed
    # the larger run would win if it got there with less compute
    slow = results_with(
        {"base": 0.08, "dense": 0.5, "sparse": 0.12}, {"base": 0.1, "dense": 0.3, "sparse": 0.3}, small_cost=5e9
    )
    assert ch03.claim_numbers(slow, config)["small_over_large_flops_to_gain"] == pytest.approx(0.2 / 0.42 * 5e9 / 2e9)
    assert not ch03.claims(slow, config)[3].passed


def test_gains_take_out_the_small_bases_head_start():
    """A small base that starts near the common level wins the level race but not the gain race."""
    config = ch03.Chapter03Config()
    results = results_with({"base": 0.2, "dense": 0.3, "sparse": 0.3}, {"base": 0.05, "dense": 0.3, "sparse": 0.3})
    numbers = ch03.claim_numbers(results, config)
    assert numbers["target_pass"] == pytest.approx(0.3)
    assert numbers["small_over_large_flops_to_target"] == pytest.approx(0.5)
    # gain 0.1: the small run needs all of its 1e9, the larger one 0.1 / 0.25 of its 2e9
    assert numbers["common_gain"] == pytest.approx(0.1)
    assert numbers["small_over_large_flops_to_gain"] == pytest.approx(1e9 / 0.8e9)
    assert not ch03.claims(results, config)[3].passed


def test_common_level_is_reached_by_both_runs():
    results = results_with({"base": 0.08, "dense": 0.5, "sparse": 0.12}, {"base": 0.1, "dense": 0.3, "sparse": 0.3})
    assert ch03.Chapter03Config().target_pass is None
    assert ch03.compute_target(results, ch03.Chapter03Config()) == pytest.approx(0.3)
    assert ch03.compute_target(results, ch03.Chapter03Config(target_pass=0.2)) == 0.2
    numbers = ch03.claim_numbers(results, ch03.Chapter03Config())
    assert numbers["small_flops_to_target"] == pytest.approx(0.22 / 0.42 * 1e9)
    assert numbers["large_flops_to_target"] == pytest.approx(2e9)


def test_runs_that_never_improve():
    config = ch03.Chapter03Config()
    flat_large = results_with({"base": 0.1, "dense": 0.3, "sparse": 0.1}, {"base": 0.1, "dense": 0.1, "sparse": 0.1})
    numbers = ch03.claim_numbers(flat_large, config)
    assert numbers["common_gain"] == 0.0 and numbers["small_over_large_flops_to_gain"] == 0.0
    assert ch03.claims(flat_large, config)[3].passed  # only the small run improved
    # both bases already at the common level 0.1: 0 / 0 FLOPs is no comparison
    assert math.isnan(numbers["small_over_large_flops_to_target"])
    flat_small = results_with({"base": 0.1, "dense": 0.1, "sparse": 0.1}, {"base": 0.1, "dense": 0.3, "sparse": 0.1})
    assert ch03.claim_numbers(flat_small, config)["small_over_large_flops_to_gain"] == float("inf")
    assert not ch03.claims(flat_small, config)[3].passed


def test_flops_ratio_edge_cases():
    assert ch03.flops_ratio(1.0, 4.0) == 0.25
    assert ch03.flops_ratio(1.0, 0.0) == float("inf") and ch03.flops_ratio(0.0, 1.0) == 0.0
    assert math.isnan(ch03.flops_ratio(0.0, 0.0)) and math.isnan(ch03.flops_ratio(float("inf"), float("inf")))
    assert ch03.flops_ratio(float("inf"), 1.0) == float("inf") and ch03.flops_ratio(1.0, float("inf")) == 0.0


def test_curves_name_every_run_and_key():
    small = {"base": 0.1, "dense": 0.3, "sparse": 0.2, "curriculum": 0.25}
    results = results_with(small, {"base": 0.1, "dense": 0.2, "sparse": 0.15})
    found = ch03.curves(results)
    runs = ["small dense", "small sparse", "small curriculum", "large dense", "large sparse"]
    assert set(found) == {f"{run}/{key}" for run in runs for key in ch03.CURVE_KEYS}
    assert found["small curriculum/eval_success"] == [(0.0, 0.1), (40.0, 0.25)]
    assert found["large dense/eval_train_flops"] == [(0.0, 0.0), (40.0, 2e9)]


def test_claims_pass_and_fail_on_the_right_numbers():
    config = ch03.Chapter03Config(target_pass=0.3)
    good = results_with({"base": 0.08, "dense": 0.5, "sparse": 0.12}, {"base": 0.1, "dense": 0.5, "sparse": 0.3})
    assert [c.passed for c in ch03.claims(good, config)] == [True] * 5
    assert [c.required for c in ch03.claims(good, config)] == [False, False, False, True, True]
    bad = results_with(
        {"base": 0.08, "dense": 0.15, "sparse": 0.2}, {"base": 0.1, "dense": 0.5, "sparse": 0.15},
        small_cost=7e9, format_share=0.6,
    )  # fmt: skip
    assert [c.passed for c in ch03.claims(bad, config)] == [False] * 5


def test_curriculum_arm_changes_stage_per_iteration():
    stage = ch03.stage_of("curriculum", 30)
    assert [stage(i) for i in (0, 9, 10, 19, 20, 29)] == [1, 1, 2, 2, 3, 3]
    assert ch03.stage_of("dense", 30) == 1 and ch03.stage_of("sparse", 30) == 3


def test_gpu_preset_runs_a_few_steps_on_cpu():
    """The gpu preset's models, sampling and loop, with budgets shrunk so it runs in seconds."""
    config = ch03.preset("gpu")
    assert set(config.arms["large"]) == set(ch03.ARMS)
    tokenizer = ch03.build_tokenizer_for_chapter()
    config = dataclasses.replace(
        config,
        grpo=dataclasses.replace(config.grpo, iterations=2, prompts_per_iteration=2, group_size=2, eval_every=1),
        eval_tasks=2,
    )
    torch.manual_seed(0)
    model = models.build_model(tokenizer, config.model_presets["small"], max_positions=128)
    history = ch03.train(model, tokenizer, config, seed=0, arm="curriculum", base_stats={"success": -1.0})
    assert len(history) == 3 and history[0]["eval_success"] == -1.0 and history[-1]["eval_success"] >= 0
    assert history[-1]["eval_train_tokens"] > history[0]["eval_train_tokens"] == 0
    assert history[-1]["eval_train_flops"] == 6 * models.count_parameters(model) * history[-1]["eval_train_tokens"]


def test_rare_success_numbers_and_verdicts():
    """docs/experiments/ch03-rare-success.md: C3.2 and C3.3 on the designed bases, and the precondition."""
    results = results_with({"base": 0.04, "dense": 0.3, "sparse": 0.05}, {"base": 0.02, "dense": 0.25, "sparse": 0.2})
    numbers = ch03.rare_success_numbers(results)
    assert numbers["small_dense_minus_sparse"] == pytest.approx(0.25)
    assert numbers["large_dense_minus_sparse"] == pytest.approx(0.05)
    assert numbers["sparse_cost_small_minus_large"] == pytest.approx(0.2)
    assert numbers["small_base_rare"] == 1.0 and numbers["large_sparse_success"] == 0.2
    claims = ch03.evaluate_all(ch03.RARE_SUCCESS_CLAIMS, numbers)
    assert [c.id for c in claims] == ["C3.2d", "C3.3d"] and [c.passed for c in claims] == [True, True]
    assert not any(spec.required for spec in ch03.RARE_SUCCESS_CLAIMS)  # the main claims stay on the main base
    # dense ahead by 12 points for the small policy, but the larger one loses as much: C3.2 only
    results = results_with({"base": 0.06, "dense": 0.32, "sparse": 0.2}, {"base": 0.02, "dense": 0.32, "sparse": 0.2})
    numbers = ch03.rare_success_numbers(results)
    assert [c.passed for c in ch03.evaluate_all(ch03.RARE_SUCCESS_CLAIMS, numbers)] == [True, False]
    assert numbers["small_base_rare"] == 0.0  # 0.06 > 0.05: not the intended regime
    edge = results_with({"base": 0.05, "dense": 0.1, "sparse": 0.1}, {"base": 0.0, "dense": 0.1, "sparse": 0.1})
    assert ch03.rare_success_numbers(edge)["small_base_rare"] == 1.0  # at most 0.05 counts as rare
    config = ch03.rare_success_config()
    assert config.aware_share == 0.0 and config.arms == {"small": ("dense", "sparse"), "large": ("dense", "sparse")}
    assert (config.sft, config.grpo, config.eval_tasks) == (ch03.preset("cpu").sft, ch03.preset("cpu").grpo, 500)


def test_rare_success_pipeline_on_a_miniature(tmp_path, monkeypatch):
    """The designed experiment end to end with three SFT steps, two GRPO iterations and four queries:
    both bases are built and loaded from a temporary folder, and nothing is recorded when told not to."""
    from course_lib.course import recorded
    from course_lib.rl.train import GRPOConfig
    from course_lib.rl.warm_start import SFTConfig

    monkeypatch.setattr(recorded, "RESULTS_DIR", tmp_path)
    config = dataclasses.replace(
        ch03.rare_success_config(), demonstrations=40, sft=SFTConfig(steps=3, batch_size=4), eval_tasks=4,
        grpo=GRPOConfig(iterations=2, prompts_per_iteration=2, group_size=2, eval_every=1),
    )  # fmt: skip
    numbers = ch03.rare_success([0], config, record=False)[0]
    assert all(0 <= numbers[f"{size}_{arm}_success"] <= 1 for size in ("small", "large") for arm in ("dense", "sparse"))
    assert numbers["small_base_rare"] == float(numbers["small_base_success"] <= 0.05)
    assert numbers["base_training_minutes"] > 0 and not list(tmp_path.iterdir())
