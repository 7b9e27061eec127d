"""Chapter 06's glue: demonstrations, the self-correction measure, claims logic, the gpu preset."""

import dataclasses

import pytest
import torch

from course_lib import envs, models
from course_lib.chapters import ch06_artist as ch06
from course_lib.engine.rollout import Trajectory
from course_lib.tokenizer import encode
from course_lib.tools.lookup_table import TABLE


def test_demonstrations_fail_like_the_env_and_recover_half_the_time():
    texts = ch06.demonstration_texts(3000, seed=0, failure_rate=0.3, retry_share=0.5)
    failures = sum(c.count("error") for _, c in texts)
    calls = sum(c.count("<tool_call>") for _, c in texts)
    gave_up = sum(c.count("error") > c.count("<tool_call>") - 3 for _, c in texts)
    assert 0.15 < failures / (calls - failures + failures) < 0.35
    assert 0.35 < gave_up / failures < 0.65


def test_demonstrations_replay_exactly_in_the_env():
    """Every demonstration is a transcript the environment itself would produce (up to failures)."""
    for prompt, completion in ch06.demonstration_texts(50, seed=1, failure_rate=0.0, retry_share=0.5):
        env = envs.make("price_tools", failure_rate=0.0)
        x, op, y = prompt.split()[1:4]
        assert env.reset(options={"problem": (x, op, y)})[0] == prompt
        actions = [a + ("</tool_call>" if "<tool_call>" in a else "") for a in completion.split("</tool_call>")]
        text = ""
        for action in actions:
            action = action.split("</tool_response>")[-1].strip()
            obs, reward, terminated, _, _ = env.step(action)
            text += f" {action} {obs}"
        assert terminated and reward == pytest.approx(1.3)
        assert " ".join(text.split()) == completion


def test_every_demonstration_word_is_in_the_vocabulary():
    tokenizer = ch06.build_tokenizer_for_chapter()
    for prompt, completion in ch06.demonstration_texts(500, seed=2, failure_rate=0.3, retry_share=0.5):
        assert tokenizer.unk_token_id not in encode(tokenizer, f"{prompt} {completion}")


def fake(results, success):
    """A trajectory whose steps returned `results` (None: an answer step)."""
    t = Trajectory(env=None, token_ids=[], loss_mask=[], logprobs=[], entropies=[], turn_ids=[])
    for result in results:
        t.infos.append({} if result is None else {"tool": result[0], "tool_result": result[1]})
    t.infos[-1]["success"] = success
    return t


def test_self_correction_by_hand():
    trajectories = [
        # failed lookup, retried successfully; then a calculator failure, retried but failing again
        fake([("lookup", "error"), ("lookup", "12"), ("python", "error"), ("python", "error"), None], False),
        # failed lookup, gives up with an answer
        fake([("lookup", "error"), None], False),
        # failed lookup followed by a successful call of the *other* tool: not a retry
        fake([("lookup", "error"), ("python", "7"), None], True),
        # no failure at all
        fake([("lookup", "3"), None], True),
        # a failure as the very last step is not followed by anything
        fake([("lookup", "error")], False),
    ]
    stats = ch06.self_correction(trajectories)
    assert stats["failed_calls"] == 5  # the trailing failure is not counted
    assert stats["retry_rate"] == pytest.approx(1 / 5)
    assert stats["episodes_with_failure"] == 4
    assert stats["recovered"] == pytest.approx(1 / 4)
    assert stats["tool_calls"] == pytest.approx((4 + 1 + 2 + 1 + 1) / 5)


def test_self_correction_with_no_failures_is_zero_not_nan():
    stats = ch06.self_correction([fake([("lookup", "3"), None], True)])
    assert stats["retry_rate"] == 0.0 and stats["recovered"] == 0.0 and stats["failed_calls"] == 0


def test_claims_follow_the_numbers():
    base = {"success": 0.40, "retry_rate": 0.45, "failed_calls": 100}
    good = {"success": 0.70, "retry_rate": 0.95, "failed_calls": 90}
    assert [c.passed for c in ch06.claims({"base": base, "trained": good})] == [True, True]
    weak = {"success": 0.50, "retry_rate": 0.60, "failed_calls": 90}
    assert [c.passed for c in ch06.claims({"base": base, "trained": weak})] == [False, False]
    unmeasured = {**good, "failed_calls": 5}
    assert [c.passed for c in ch06.claims({"base": base, "trained": unmeasured})] == [True, False]


def test_env_weights_follow_the_config():
    env = ch06.make_env("test", ch06.Chapter06Config(), w_tool=0.0)
    assert env.w_tool == 0.0 and env.failure_rate == 0.3
    assert ch06.make_env().w_tool == 0.2


@pytest.mark.slow
def test_gpu_preset_runs_on_cpu_for_a_few_steps(tmp_path):
    """The gpu preset's model size and loop run end to end (shrunk budgets, CPU)."""
    config = ch06.preset("gpu")
    config = dataclasses.replace(
        config,
        demonstrations=64,
        # 60 warm-start steps (not 2) so that the seeded GRPO batch has reward variance: a base that
        # fails every task the same way gives all-zero advantages and an update that cannot move anything
        sft=dataclasses.replace(config.sft, steps=60, batch_size=8, warmup_steps=1),
        grpo=dataclasses.replace(config.grpo, iterations=1, prompts_per_iteration=2, group_size=4, eval_every=1),
        eval_tasks=8,
    )
    assert config.model_preset == "small"
    ch06.build_base(tmp_path, seed=0, progress=False, config=config)
    model, tokenizer = models.load(tmp_path)
    assert models.count_parameters(model) > 1_000_000
    before = [p.detach().clone() for p in model.parameters()]
    history = ch06.train(model, tokenizer, config, seed=0, w_tool=config.w_tool)
    assert "eval_success" in history[0] and "eval_retry_rate" in history[-1]
    assert history[0]["reward_std"] > 0, "the seeded batch must have reward variance, or the update is untested"
    changed = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert changed, "non-zero advantages must move the weights"
    assert set(TABLE) <= set(tokenizer.get_vocab())


def test_record_curves_for_both_runs():
    history = [{"iteration": 0, "success": 0.4, "eval_retry_rate": 0.2}, {"iteration": 10, "eval_retry_rate": 0.9}]
    curves = ch06.curves({"history": history, "history_no_tool": history[:1]})
    assert curves["tool/eval_retry_rate"] == [(0.0, 0.2), (10.0, 0.9)]
    assert curves["no_tool/eval_retry_rate"] == [(0.0, 0.2)] and curves["no_tool/success"] == [(0.0, 0.4)]


def test_cpu_preset_evaluates_often_enough_for_a_retry_curve():
    config = ch06.preset("cpu")
    assert config.grpo.iterations // config.grpo.eval_every >= 4
    assert config.retry_share == 0.2  # the notebook's prose says "a fifth"
