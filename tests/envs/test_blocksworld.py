"""Blocksworld legality, rendering, parsing of hostile or malformed text, and problem generation."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import envs
from course_lib.envs.base import InvalidAction
from course_lib.envs.blocksworld import (
    BLOCKS,
    all_arrangements,
    apply_action,
    distances_to,
    draw_problem,
    goal_fraction,
    legal_actions,
    make_state,
    optimal_actions,
    optimal_path_states,
    parse_goal,
    parse_state,
    render_state,
    split_of,
)


def test_render_is_canonical_and_round_trips():
    state = make_state([["c"], ["a", "b"]], "d")
    assert render_state(state) == "a b | c | hand d"
    assert parse_state("a b | c | hand d") == state
    assert parse_state("  a  b |c | hand   d ") == state


@pytest.mark.parametrize(
    "text",
    [
        "",
        "hand",
        "a b | hand",
        "a | a | hand empty",
        "a | hand a",
        "a z | hand empty",
        "a | b",
        "| a | hand empty",
        "a | hand empty empty",
        "hand empty | a",
        None,
        "a | hand x",
    ],
)
def test_malformed_states_parse_to_none(text):
    assert parse_state(text) is None


def test_parse_checks_block_set():
    assert parse_state("a b | hand empty", ("a", "b", "c")) is None
    assert parse_state("a b | c | hand empty", ("a", "b", "c")) is not None


def test_arrangement_counts():
    assert [len(all_arrangements(BLOCKS[:n])) for n in (3, 4, 5)] == [13, 73, 501]


def test_legal_actions_and_transitions():
    state = make_state([["a", "b"], ["c"]])
    assert legal_actions(state) == ["pick-up c", "unstack b a"]
    held = apply_action(state, "unstack b a")
    assert held == make_state([["a"], ["c"]], "b")
    assert legal_actions(held) == ["put-down b", "stack b a", "stack b c"]
    assert apply_action(held, "stack b c") == make_state([["a"], ["c", "b"]])
    for bad in ["pick-up a", "stack b", "unstack a b", "put-down c", "fly a", "", "stack b b", "pick-up"]:
        with pytest.raises(InvalidAction):
            apply_action(held if bad.startswith(("stack", "put")) else state, bad)


def test_goal_fraction_counts_supports():
    goal = make_state([["a", "b", "c"]])
    assert goal_fraction(goal, goal) == 1.0
    assert goal_fraction(make_state([["a"], ["b"], ["c"]]), goal) == pytest.approx(1 / 3)
    assert goal_fraction(make_state([["a", "b"]], "c"), goal) == pytest.approx(2 / 3)


@pytest.mark.parametrize("length", [2, 4, 6])
def test_problems_have_the_requested_optimal_length_and_split(length):
    for seed in range(5):
        for split in ("train", "test"):
            init, goal = draw_problem(seed, split, length)
            assert distances_to(goal)[init] == length and split_of(init, goal) == split
            state, steps = init, 0
            while state != goal:
                state = apply_action(state, optimal_actions(state, goal)[0])
                steps += 1
            assert steps == length


def test_optimal_path_states_are_the_start_and_every_state_inside_an_optimal_plan():
    # a and b on the table, goal a on b: pick-up a, stack a b (one optimal plan)
    init, goal = parse_state("a | b | hand empty"), parse_goal("b a")
    assert optimal_path_states(init, goal) == {init, parse_state("b | hand a")}
    # b on a, c alone, goal all on the table: unstack b a, put-down b; c is never touched
    init, goal = parse_state("a b | c | hand empty"), parse_goal("a | b | c")
    assert optimal_path_states(init, goal) == {init, parse_state("a | c | hand b")}
    # two optimal plans (either block first) share no inner state: both paths are listed
    init, goal = parse_state("a b | c d | hand empty"), parse_goal("a | b | c | d")
    states = optimal_path_states(init, goal)
    assert parse_state("a | c d | hand b") in states and parse_state("a b | c | hand d") in states
    assert goal not in states and all(distances_to(goal)[s] <= 4 for s in states)


def test_env_reset_step_and_hostile_actions():
    env = envs.make("blocksworld", split="test", length=2, max_turns=6)
    obs, info = env.reset(seed=1)
    assert obs == render_state(env.state) and info["anchor"] == env.state
    assert parse_goal(info["goal"]) == env.goal
    for action in ["", "x" * 10_000, "stack", "pick-up z", "<answer> a </answer>", "unstack a a", None]:
        before = env.state
        obs, reward, terminated, truncated, info = env.step(action)
        assert not info["valid"] and reward < 0 and obs.startswith("<feedback>") and env.state == before
        if truncated:
            break
    env.reset(seed=1)
    plan = []
    state = env.state
    while state != env.goal:
        plan.append(optimal_actions(state, env.goal)[0])
        state = apply_action(state, plan[-1])
    for action in plan:
        obs, reward, terminated, truncated, info = env.step(action)
        assert info["valid"] and info["anchor"] == parse_state(obs)
    assert terminated and reward == 1.0 and info["goal_fraction"] == 1.0


def test_env_options_validate():
    env = envs.make("blocksworld")
    env.reset(options={"init": "a | b | hand empty", "goal": "a b"})
    assert env.step("pick-up b")[0] == "a | hand b"
    with pytest.raises(ValueError):
        env.reset(options={"init": "a | b | hand empty", "goal": "a b c"})


@settings(max_examples=50, deadline=None)
@given(st.text(max_size=60))
def test_random_text_never_crashes_parser_or_env(text):
    parse_state(text)
    env = envs.make("blocksworld", length=2)
    env.reset(seed=0)
    env.step(text)
