"""The `lookup` tool and the `price_tools` environment of chapter 06: rewards by hand, hostile input."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import envs, tools
from course_lib.envs.price_tools import NUMBER_RANGE, draw_problem, solve, split_of, vocabulary
from course_lib.tools.lookup_table import PRICE_RANGE, TABLE, TABLE_SIZE, lookup


def test_lookup_returns_prices_and_errors_for_anything_else():
    name, price = next(iter(TABLE.items()))
    assert tools.call("lookup", name) == str(price)
    assert tools.call("lookup", f"  {name} ") == str(price)
    assert tools.call("lookup", "nosuchthing") == "error: unknown key"
    assert tools.call("lookup", "") == "error: lookup needs a name"
    assert tools.call("lookup", f"{name} {name}") == "error: lookup takes one name"
    assert lookup(None) == "error: arguments must be text"
    assert tools.call("lookup", "__import__('os')").startswith("error")


def test_table_is_fixed_word_level_and_in_range():
    assert len(TABLE) == TABLE_SIZE
    assert all(name.isalpha() and " " not in name for name in TABLE)
    assert all(PRICE_RANGE[0] <= p <= PRICE_RANGE[1] for p in TABLE.values())
    words = set(vocabulary())
    assert set(TABLE) <= words and {"lookup", "python", "error"} <= words


@given(st.text(max_size=200))
@settings(max_examples=100, deadline=None)
def test_lookup_never_raises(text):
    result = lookup(text)
    assert result.startswith("error") or result.isdigit()


def solved_actions(env):
    x, op, y = env.problem
    return [
        f"<think> {x} {op} {y} </think> <tool_call> lookup {x} </tool_call>",
        f"<tool_call> lookup {y} </tool_call>",
        f"<tool_call> python {TABLE[x]} {op} {TABLE[y]} </tool_call>",
        f"<answer> {solve(x, op, y)} </answer>",
    ]


def test_solved_episode_without_failures_earns_every_term():
    env = envs.make("price_tools", split="test", failure_rate=0.0)
    env.reset(seed=3)
    x, op, y = env.problem
    observations = [env.step(a) for a in solved_actions(env)]
    assert observations[0][0] == f"<tool_response> {TABLE[x]} </tool_response>"
    assert observations[2][0] == f"<tool_response> {solve(x, op, y)} </tool_response>"
    obs, reward, terminated, truncated, info = observations[-1]
    assert terminated and not truncated and info["success"]
    assert reward == pytest.approx(1.0 + 0.1 + 0.2)
    assert (info["r_answer"], info["r_format"], info["r_tool_exec"]) == (1.0, 1.0, 1.0)


def test_transient_failure_then_retry_goes_through_and_halves_the_exec_term():
    """With failure_rate 1 every new call fails once; the identical call made again succeeds."""
    env = envs.make("price_tools", split="train", failure_rate=1.0, w_tool=0.2)
    env.reset(seed=0)
    x, op, y = env.problem
    first = env.step(f"<think> {x} {op} {y} </think> <tool_call> lookup {x} </tool_call>")
    assert first[0] == "<tool_response> error </tool_response>" and first[4]["tool_result"] == "error"
    assert env.step(f"<tool_call> lookup {x} </tool_call>")[0] == f"<tool_response> {TABLE[x]} </tool_response>"
    _, reward, terminated, _, info = env.step(f"<answer> {solve(x, op, y)} </answer>")
    assert terminated and info["r_tool_exec"] == 0.5
    assert reward == pytest.approx(1.0 + 0.1 + 0.2 * 0.5)


def test_wrong_answer_missing_think_and_invalid_actions_cost_their_terms():
    env = envs.make("price_tools", split="test", failure_rate=0.0, w_tool=0.0)
    env.reset(seed=1)
    obs, reward, _, _, info = env.step("hello")
    assert not info["valid"] and reward == 0.0 and obs.startswith("<feedback>")
    _, reward, terminated, _, info = env.step(f"<answer> {solve(*env.problem) + 1} </answer>")
    assert terminated and not info["success"] and reward == 0.0 and info["r_format"] == 0.0


def test_policy_errors_unknown_tool_bad_key_bad_program():
    env = envs.make("price_tools", failure_rate=0.0)
    env.reset(seed=2)
    for call in ["search kamito", "lookup 17", "python 1 / 0", "python 99 * 99", "lookup", "python"]:
        assert env.step(f"<tool_call> {call} </tool_call>")[4]["tool_result"] == "error", call
    assert env.step("<tool_call> lookup kamito")[4]["valid"] is False  # no closing tag


def test_tool_limit_and_turn_limit():
    env = envs.make("price_tools", failure_rate=0.0, max_turns=9, max_tool_calls=2)
    env.reset(seed=4)
    x = env.problem[0]
    env.step(f"<tool_call> lookup {x} </tool_call>")
    env.step(f"<tool_call> lookup {x} </tool_call>")
    info = env.step(f"<tool_call> lookup {x} </tool_call>")[4]
    assert info["valid"] is False and info["error"] == "tool limit"
    env = envs.make("price_tools", max_turns=2)
    env.reset(seed=0)
    env.step("x")
    assert env.step("y")[3] is True


@given(st.text(max_size=300))
@settings(max_examples=100, deadline=None)
def test_hostile_actions_never_crash(action):
    env = envs.make("price_tools")
    env.reset(seed=0)
    obs, reward, _, _, info = env.step(action)
    assert isinstance(obs, str) and isinstance(reward, float) and "valid" in info


def test_splits_are_disjoint_and_deterministic():
    train = {draw_problem(s, "train") for s in range(300)}
    test = {draw_problem(s, "test") for s in range(300)}
    assert not train & test
    assert all(split_of(*p) == "test" for p in test)
    assert draw_problem(7, "test") == draw_problem(7, "test")


def test_every_answer_and_tool_result_is_a_word():
    words = set(vocabulary())
    for seed in range(200):
        problem = draw_problem(seed, "train")
        assert str(solve(*problem)) in words
        assert NUMBER_RANGE[0] <= solve(*problem) <= NUMBER_RANGE[1]


def test_failures_are_seeded_per_episode():
    def results(seed):
        env = envs.make("price_tools", failure_rate=0.5)
        env.reset(seed=seed)
        return [env.step(f"<tool_call> lookup {name} </tool_call>")[4]["tool_result"] for name in list(TABLE)[:6]]

    assert results(5) == results(5)
    assert "error" in results(5) + results(6)
