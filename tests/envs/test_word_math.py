"""`word_math` (chapter 04): problems, splits, the tool loop with limit C, output formatting, rewards."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import envs
from course_lib.envs.word_math import (
    MAX_NUMBER,
    TEMPLATES,
    TRUNCATE_HALF,
    Problem,
    draw_problem,
    evaluate,
    format_output,
    split_of,
    vocabulary,
)
from course_lib.tokenizer import build_tokenizer, encode

PROBLEM = Problem(0, (7, 12, 9))  # a box has 7 pens . she buys 12 packs of 9 pens .


def make(**kwargs):
    return envs.make("word_math", **kwargs)


def test_problem_text_expression_and_steps():
    """Hand-computed: 7 + 12 * 9 = 115, step by step 12 * 9 = 108, 7 + 108 = 115."""
    assert PROBLEM.question == "a box has 7 pens . she buys 12 packs of 9 pens ."
    assert PROBLEM.expression == "7 + 12 * 9" and PROBLEM.answer == 115
    assert PROBLEM.step_expressions() == ["12 * 9", "7 + 108"]
    cards = Problem(2, (11, 4, 8))
    assert cards.expression == "( 11 + 4 ) * 8" and cards.answer == 120
    assert cards.step_expressions() == ["11 + 4", "15 * 8"]
    coins = Problem(3, (25, 13, 41, 7))
    assert coins.expression == "25 + 13 * 7 - 41" and coins.answer == 75
    assert coins.step_expressions() == ["13 * 7", "25 + 91", "116 - 41"]


def test_evaluate_refuses_anything_but_integer_expressions():
    with pytest.raises(ValueError):
        evaluate("__import__('os')")
    assert evaluate("( 2 + 3 ) * 4") == 20


def test_draws_are_deterministic_in_range_and_splits_disjoint():
    train = [draw_problem(s, "train") for s in range(400)]
    test = [draw_problem(s, "test") for s in range(400)]
    assert train == [draw_problem(s, "train") for s in range(400)]
    assert not set(train) & set(test)
    assert all(split_of(p) == "train" for p in train) and all(split_of(p) == "test" for p in test)
    for p in train + test:
        steps = [evaluate(s) for s in p.step_expressions()]
        assert 0 <= p.answer <= MAX_NUMBER and all(0 <= v <= MAX_NUMBER for v in steps)
        assert steps[-1] == p.answer
    assert {p.template for p in train} == set(range(len(TEMPLATES)))


def test_every_word_is_in_the_vocabulary():
    """Questions, expressions and every formatted output map to known tokens (no <unk>)."""
    tokenizer = build_tokenizer(vocabulary())
    texts = [draw_problem(s, "train").question for s in range(200)]
    texts += [format_output(r) for r in ["error: SyntaxError: invalid", "1\n2\n3\n4\n5\n6\n7\n8", "-1", "2.5", ""]]
    texts += ["<feedback> invalid action </feedback>", "( 1 + 2 ) * 3 - 4"]
    for text in texts:
        assert tokenizer.unk_token_id not in encode(tokenizer, text), text


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("115", "115"),
        ("error: SyntaxError: invalid syntax", "error SyntaxError"),
        ("error: NameError: name 'pens' is not defined", "error NameError"),
        ("error: step limit of 20000 exceeded", "error Error"),
        ("Traceback\nerror: ZeroDivisionError: division by zero", "error ZeroDivisionError"),
        ("", "empty"),
        ("601", "overflow"),
        ("-3", "overflow"),
        ("2.5", "overflow"),
        ("[1, 2, 3]", "1 2 3"),
        ("1\n2\n3\n4\n5\n6", "1 2 3 4 5 6"),
        ("1\n2\n3\n4\n5\n6\n7", "1 2 3 ... 5 6 7"),
    ],
)
def test_format_output(raw, expected):
    """Errors keep only the last line's error type; long outputs keep head and tail."""
    assert format_output(raw) == expected


def test_truncation_keeps_head_and_tail():
    words = format_output(" ".join(str(i) for i in range(100))).split()
    assert words == [*map(str, range(TRUNCATE_HALF)), "...", *map(str, range(100 - TRUNCATE_HALF, 100))]


def test_tool_then_answer_is_rewarded_plus_one():
    env = make()
    obs, info = env.reset(seed=0, options={"problem": PROBLEM})
    assert obs == f"<question> {PROBLEM.question} </question>" and info["answer"] == 115
    obs, reward, done, _, info = env.step("<tool_call> 7 + 12 * 9 </tool_call>")
    assert (obs, reward, done, info["tool_result"]) == ("<tool_response> 115 </tool_response>", 0.0, False, "115")
    _, reward, done, _, info = env.step("<answer> 115 </answer>")
    assert (reward, done, info["success"]) == (1.0, True, True)


def test_wrong_answer_is_minus_one_and_penalty_applies_only_with_failed_code():
    env = make(execution_error_penalty=0.5)
    env.reset(seed=0, options={"problem": PROBLEM})
    obs, _, _, _, info = env.step("<tool_call> 7 + 12 * </tool_call>")
    assert obs == "<tool_response> error SyntaxError </tool_response>" and info["tool_result"] == "error"
    _, reward, _, _, _ = env.step("<answer> 115 </answer>")
    assert reward == 0.5  # right answer, but the response contains failing code: 1 - 0.5
    env.reset(seed=0, options={"problem": PROBLEM})
    _, reward, _, _, _ = env.step("<answer> 114 </answer>")
    assert reward == -1.0  # no code, no penalty
    plain = make()
    plain.reset(seed=0, options={"problem": PROBLEM})
    plain.step("<tool_call> pens </tool_call>")
    assert plain.step("<answer> 3 </answer>")[1] == -1.0


def test_calls_over_the_limit_are_skipped_silently():
    """C = 1: a second call is not executed and gets no response; C = 2 executes it."""
    env = make(max_tool_calls=1)
    env.reset(seed=0, options={"problem": PROBLEM})
    env.step("<tool_call> 12 * 9 </tool_call>")
    obs, reward, done, _, info = env.step("<tool_call> 7 + 108 </tool_call>")
    assert (obs, reward, done, info["valid"], info["skipped"]) == ("", 0.0, False, True, True)
    assert "tool_result" not in info
    _, reward, done, _, info = env.step("<answer> 115 </answer>")
    assert (reward, done, info["success"]) == (1.0, True, True)
    two = make(max_tool_calls=2)
    two.reset(seed=0, options={"problem": PROBLEM})
    two.step("<tool_call> 12 * 9 </tool_call>")
    obs, *_ = two.step("<tool_call> 7 + 108 </tool_call>")
    assert obs == "<tool_response> 115 </tool_response>"
    assert two.max_turns == 4


def test_no_answer_within_max_turns_is_minus_one():
    env = make(max_tool_calls=1)
    env.reset(seed=0, options={"problem": PROBLEM})
    env.step("hello")
    env.step("<tool_call> 1 + 1 </tool_call>")
    _, reward, terminated, truncated, info = env.step("still no answer")
    assert reward == -1.0 and terminated and not truncated and not info["success"]
    env.reset(seed=0, options={"problem": PROBLEM})
    env.step("<tool_call> 1 </tool_call>")
    env.step("<tool_call> 2 </tool_call>")
    _, reward, terminated, _, _ = env.step("<tool_call> 3 </tool_call>")
    assert reward == -1.0 and terminated


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300))
def test_hostile_actions_never_raise(action):
    env = make(max_tool_calls=2)
    env.reset(seed=1)
    total, done = 0.0, False
    while not done:
        _, reward, terminated, truncated, info = env.step(action)
        total += reward
        done = terminated or truncated
    assert total in (-1.0, 1.0) or total == 0.0


@pytest.mark.parametrize(
    "program",
    [
        "__import__('os').system('ls')",
        "9 ** 9 ** 9",
        "for i in range(10 ** 9):\n    pass",
        "open('x')",
        "[1] * 10 ** 9",
    ],
)
def test_hostile_code_comes_back_as_an_error_word(program):
    env = make()
    env.reset(seed=0, options={"problem": PROBLEM})
    obs, _, _, _, info = env.step(f"<tool_call> {program} </tool_call>")
    assert info["tool_result"] == "error" and obs.startswith("<tool_response> error ")


def test_constructor_validation():
    with pytest.raises(ValueError):
        make(split="dev")
    with pytest.raises(ValueError):
        make(max_tool_calls=-1)
