"""The text-environment API and `tool_arithmetic`: determinism, splits, rewards, hostile actions."""

from __future__ import annotations

import pytest
from hostile_actions import play_hostile
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import envs
from course_lib.envs.arithmetic import draw_problem, solve, split_of


def make(**kwargs):
    return envs.make("tool_arithmetic", **kwargs)


def test_registry():
    """The environment is registered; unknown names raise KeyError."""
    assert "tool_arithmetic" in envs.names()
    with pytest.raises(KeyError):
        envs.make("no_such_env")


def test_reset_is_deterministic_per_seed():
    """The same seed gives the same question (even on another instance); seeds differ."""
    first = [make().reset(seed=s)[0] for s in range(20)]
    assert first == [make().reset(seed=s)[0] for s in range(20)]
    assert len(set(first)) > 15
    obs, info = make().reset(seed=3)
    a, op, b = draw_problem(3, "train")
    assert obs == f"<question> {a} {op} {b} </question>" and info["answer"] == solve(a, op, b)


def test_train_and_test_problems_are_disjoint():
    """300 seeds of each split: every problem belongs to its split by hash and none is shared."""
    train = {draw_problem(s, "train") for s in range(300)}
    test = {draw_problem(s, "test") for s in range(300)}
    assert all(split_of(*p) == "train" for p in train)
    assert all(split_of(*p) == "test" for p in test)
    assert not train & test
    assert all(100 <= a <= 999 and 100 <= b <= 999 and solve(a, op, b) >= 0 for a, op, b in train | test)


def test_correct_tool_then_answer_episode():
    """Tool call, copy the result: reward 1, success, and the transcript records everything."""
    env = make()
    obs, _ = env.reset(seed=0, options={"problem": (347, "+", 512)})
    obs1, r1, term1, trunc1, info1 = env.step("<tool_call> 347 + 512 </tool_call>")
    assert (obs1, r1, term1, trunc1) == ("<tool_response> 859 </tool_response>", 0.0, False, False)
    assert info1["valid"] and info1["tool_result"] == "859"
    obs2, r2, term2, _, info2 = env.step("<answer> 859 </answer>")
    assert (r2, term2, info2["success"], info2["tool_calls"]) == (1.0, True, True, 1)
    assert env.transcript.actions == ["<tool_call> 347 + 512 </tool_call>", "<answer> 859 </answer>"]
    assert env.transcript.observations == [obs, obs1, obs2]
    start = env.reset(seed=0, options={"problem": (347, "+", 512)})[1]["anchor"]
    assert len({start, info1["anchor"], info2["anchor"]}) == 2  # hashable; the tool call changed the state


def test_wrong_answer_and_tool_limit():
    """A wrong answer ends with reward 0; a second tool call is over the limit (penalty)."""
    env = make()
    env.reset(seed=0, options={"problem": (500, "-", 123)})
    env.step("<tool_call> 500 - 123 </tool_call>")
    _, reward, terminated, _, info = env.step("<tool_call> 1 + 1 </tool_call>")
    assert (reward, terminated, info["valid"]) == (env.invalid_penalty, False, False)
    _, reward, terminated, _, info = env.step("<answer> 376 </answer>")
    assert (reward, terminated, info["success"]) == (0.0, True, False)


HOSTILE = [
    "",
    "x" * 100_000,
    "<tool_call> 1 +",
    "<tool_call><tool_call>",
    "</answer> 5 <answer>",
    '{"name": "python", "arguments": {"code": "1+1"}}',
    "<answer> 5",
    None,
    12345,
]


def check_hostile(action) -> None:
    """A hostile action never raises (`play_hostile`); it is invalid with the penalty or a tool call that returns
    text, never a reward; the episode still ends by the turn limit."""
    env = make()
    for _, reward, _, _, info in play_hostile(env, action):
        assert info["valid"] is False and reward == env.invalid_penalty or "tool_result" in info


@pytest.mark.parametrize("action", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_actions(action):
    check_hostile(action)


@settings(max_examples=60, deadline=None)
@given(
    st.text(st.characters(exclude_categories=()), max_size=300) | st.text("<>/ _acilnorstuwe0123456789+-", max_size=80)
)
def test_random_text_actions(action):
    """Random unicode (surrogates included) and random strings over the tag alphabet obey the
    hostile-action contract, unless they happen to contain a well-formed answer."""
    if "<answer>" in action and "</answer>" in action.split("<answer>", 1)[1]:
        return
    check_hostile(action)


def test_tool_errors_are_reported_not_raised():
    """A failing program in a tool call gives `error` as the tool response."""
    env = make()
    env.reset(seed=0)
    obs, reward, _, _, info = env.step("<tool_call> import os </tool_call>")
    assert obs == "<tool_response> error </tool_response>" and reward == 0.0 and info["tool_result"] == "error"


def test_empty_answer_is_invalid():
    """`<answer></answer>` holds no answer: invalid, with the penalty."""
    env = make()
    env.reset(seed=0)
    _, reward, _, _, info = env.step("<answer></answer>")
    assert info["valid"] is False and reward == env.invalid_penalty


def test_step_after_end_raises():
    """Stepping a finished episode is a programming error: RuntimeError."""
    env = make()
    env.reset(seed=0)
    env.step("<answer> 1 </answer>")
    with pytest.raises(RuntimeError):
        env.step("<answer> 1 </answer>")
    env.reset(seed=0)
    env.step("<answer> 1 </answer>")  # reset makes it usable again


def test_invalid_split():
    with pytest.raises(ValueError):
        make(split="validation")


def test_every_built_in_environment_is_made_from_its_module():
    """The lazy registry's name -> module map is right: making each name imports the module that registers it."""
    import importlib

    from course_lib.envs import _BUILT_IN

    for name, module in _BUILT_IN.items():
        importlib.import_module(f"course_lib.envs.{module}")
        assert name in envs._REGISTRY, f"course_lib.envs.{module} does not register {name!r}"
    assert set(_BUILT_IN) <= set(envs.names())


# The demonstrators beside their environments (`demonstrator_episodes`) --------------------------------------
def _demonstrated(name: str, count: int, seed: int):
    from course_lib.envs import arithmetic, key_door, two_hop_qa

    if name == "tool_arithmetic":
        return arithmetic.demonstrator_episodes(count, seed, tool_share=0.5, direct_correct=0.5)
    if name == "key_door":
        return key_door.demonstrator_episodes(list(range(count)), seed, 6, 30, 0.1, "</action>")
    return two_hop_qa.demonstrator_episodes(two_hop_qa.TwoHopQAEnv("train"), list(range(count)), seed, 0.5)


@pytest.mark.parametrize("name", ["tool_arithmetic", "key_door", "two_hop_qa"])
def test_a_demonstrator_plays_whole_deterministic_episodes_as_chat_messages(name):
    episodes = _demonstrated(name, 12, 3)
    assert episodes == _demonstrated(name, 12, 3) and episodes != _demonstrated(name, 12, 4)
    for episode in episodes:
        roles = [role for role, _ in episode]
        assert roles[0] == "user" and "assistant" in roles and set(roles) <= {"user", "assistant", "tool"}
        assert all(content for _, content in episode)
    # the last action ends the episode: an answer (tool tasks) or the grid's final observation after an action
    ends = [episode[-1] if name != "key_door" else episode[-2] for episode in episodes]
    assert all(role == "assistant" for role, _ in ends)
    if name != "key_door":
        assert all(content.startswith("<answer>") for _, content in ends)
