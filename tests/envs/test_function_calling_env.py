"""The `function_calling` environment (chapter 05): tasks, splits, rewards, hostile input."""

import pytest

from course_lib import envs
from course_lib.chapters.ch05_toolrl import build_tokenizer_for_chapter
from course_lib.envs.function_calling import (
    CHITCHAT,
    SPLITS,
    TOOLS,
    FunctionCallingEnv,
    TaskMix,
    answer_text,
    draw_task,
    held_out,
)
from course_lib.envs.toolrl_reward import RewardSpec


def test_registered():
    assert "function_calling" in envs.names()
    assert isinstance(envs.make("function_calling", split="test"), FunctionCallingEnv)


def test_tasks_are_deterministic_and_splits_are_disjoint():
    assert draw_task(3, "train") == draw_task(3, "train")
    questions = {split: {draw_task(s, split).question for s in range(400)} for split in SPLITS}
    chitchat = {f"<question> {c} </question>" for c in CHITCHAT}
    assert not (questions["train"] & questions["test"]) - chitchat
    assert not (questions["train"] | questions["test"]) & questions["novel"] - chitchat
    for seed in range(300):
        train, test, novel = (draw_task(seed, split) for split in SPLITS)
        assert not any(held_out(n, k, v) for task in (train, test) for n, a in task.calls for k, v in a)
        if novel.calls:
            assert any(held_out(n, k, v) for n, a in novel.calls for k, v in a)
            assert all(n in TOOLS for n, _ in novel.calls)


def test_task_mix_sets_the_kinds_of_query():
    def counts(mix):
        tasks = [draw_task(seed, "train", **vars(mix)) for seed in range(400)]
        return [sum(len(t.calls) == n for t in tasks) for n in range(4)]

    assert counts(TaskMix(0.0, 0.0, 1.0)) == [0, 0, 0, 400]
    assert counts(TaskMix(1.0, 0.5, 0.5)) == [400, 0, 0, 0]
    none, one, two, three = counts(TaskMix(0.1, 0.3, 0.4))
    assert 20 < none < 60 and 70 < one < 130 and 80 < two < 140 and 110 < three < 180
    for seed in range(50):
        task = draw_task(seed, "test", no_tool_share=0.0, three_call_share=1.0)
        assert len({name for name, _ in task.calls}) == 3
    # the default mix has no three-call queries, and three_call_share=0 leaves the tasks as they were
    assert all(draw_task(s, "train") == draw_task(s, "train", three_call_share=0.0) for s in range(100))
    for bad in [(-0.1, 0.4, 0.0), (0.1, 0.7, 0.4), (1.5, 0.0, 0.0)]:
        with pytest.raises(ValueError):
            TaskMix(*bad)


def test_env_draws_from_its_mix_and_scores_three_calls():
    env = FunctionCallingEnv("train", mix=TaskMix(0.0, 0.0, 1.0))
    env.reset(seed=5)
    assert len(env.task.calls) == 3
    _, reward, _, _, info = env.step(answer_text(env.task, ["user"]))
    assert reward == 4.0 and info["success"]
    env.reset(seed=5)
    two_of_three = answer_text(type(env.task)(env.task.question, env.task.calls[:2]), ["user"])
    _, reward, _, _, info = env.step(two_of_three)
    assert not info["success"] and 1.0 < reward < 4.0


def test_every_word_is_in_the_vocabulary():
    tokenizer = build_tokenizer_for_chapter()
    for seed in range(200):
        task = draw_task(seed, "novel")
        for text in (task.question, answer_text(task, ["user", "wants"])):
            ids = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids
            assert tokenizer.unk_token_id not in ids, text


def test_correct_answer_gets_the_maximum_and_success():
    env = FunctionCallingEnv("train")
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(answer_text(env.task, ["user"]))
    assert (obs, reward, terminated, info["success"], info["r_format"]) == ("", 4.0, True, True, 1.0)


def test_direct_response_when_no_tool_fits():
    env = FunctionCallingEnv("train")
    seed = next(s for s in range(100) if not draw_task(s, "train").calls)
    env.reset(seed=seed)
    _, reward, _, _, info = env.step("<think> </think> <response> no tool fits </response>")
    assert reward == 1.0 and info["success"]


@pytest.mark.parametrize("action", ["", "<tool_call>", "{ } } :", "<response> </tool_call> " * 500, None, "\x00"])
def test_hostile_actions_never_raise(action):
    env = FunctionCallingEnv("novel")
    env.reset(seed=1)
    _, reward, terminated, _, info = env.step(action)
    assert terminated and not info["success"] and -3.0 <= reward <= 4.0


@pytest.mark.parametrize(
    "action",
    ["", "hello there", "<think> user wants </think>", "<tool_call>", "<tool_call> </tool_call>", "{ } } :",
     "<tool_call> { name : get_weather } </tool_call>", "<response> </response>", "<think> </think> <response>"],
)  # fmt: skip
def test_untagged_or_unparseable_responses_are_invalid(action):
    """Like every other environment, text that is neither a parseable call nor a response is not valid."""
    env = FunctionCallingEnv("train")
    env.reset(seed=0)
    assert env.step(action)[4]["valid"] is False


def test_calls_and_responses_are_valid_even_when_wrong():
    """Validity is about shape, not correctness: a wrong call, a call without the think block and a
    direct response to a query that needs a tool are all valid; rewards are ToolRL's, unchanged."""
    env = FunctionCallingEnv("train")
    seed = next(s for s in range(100) if draw_task(s, "train").calls)
    env.reset(seed=seed)
    right = answer_text(env.task, ["user"])
    wrong_value = right.replace(env.task.calls[0][1][0][1], "?", 1)
    for action in (
        right,
        wrong_value,
        right.split("</think> ")[1],
        "<think> </think> <response> no tool fits </response>",
    ):
        env.reset(seed=seed)
        _, reward, _, _, info = env.step(action)
        assert info["valid"], action
    assert not info["success"] and reward == 0.0 - 3.0  # wrong shape (format 0) and no call (R_min): as before


def test_dynamic_scale_follows_the_training_step():
    """A right call with a broken format earns format min + correctness max, which the dynamic
    scale (horizon 2) moves from -2 + 2 at step 0 to -1 + 2.5 at step 1 and -1 + 3 at step 2."""
    env = FunctionCallingEnv("train", RewardSpec(schedule="dynamic", horizon=2))
    rewards = []
    for step in range(3):
        env.training_step = step
        env.reset(seed=0)
        rewards.append(env.step(answer_text(env.task, []).replace("</think> ", ""))[1])
    assert rewards == [0.0, 1.5, 2.0]


def test_bad_split():
    with pytest.raises(ValueError):
        FunctionCallingEnv("validation")
