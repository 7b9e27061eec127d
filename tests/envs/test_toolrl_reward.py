"""ToolRL's reward (chapter 05): hand-computed values of R = R_format + R_correct and its variants."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.envs.toolrl_reward import (
    RewardSpec,
    correctness,
    format_ok,
    length_reward,
    match_score,
    multiset_jaccard,
    parse_calls,
    render_call,
    reward_ranges,
    toolrl_reward,
)

W = ("get_weather", (("city", "paris"), ("day", "monday")))
C_ANNA = ("call_contact", (("person", "anna"),))
C_BEN = ("call_contact", (("person", "ben"),))


def response(*calls, think="user wants"):
    return f"<think> {think} </think> <tool_call> {' '.join(render_call(n, a) for n, a in calls)} </tool_call>"


def test_render_and_parse_round_trip():
    text = response(W, C_ANNA)
    assert text.count("{") == 4
    assert parse_calls(text) == [W, C_ANNA]


@pytest.mark.parametrize(
    "text",
    [
        "<think> x </think> <response> hi </response>",  # no tool_call block
        "<tool_call> { name : get_weather , args : { city paris } } </tool_call>",  # missing colon
        "<tool_call> { name : get_weather , args : { city : paris , } } </tool_call>",  # dangling comma
        "<tool_call> { name : get_weather , args : { city : paris } </tool_call>",  # unclosed
        "<tool_call> { name : get_weather args : { } } </tool_call>",  # missing comma
        "<tool_call> { name : get_weather , args : { city : } } } </tool_call>",  # value is a brace
        "<tool_call> paris </tool_call>",
    ],
)
def test_malformed_calls_do_not_parse(text):
    assert parse_calls(text) is None
    assert correctness([W], text) == -3.0


def test_empty_call_block_parses_to_no_calls_and_scores_minimum():
    assert parse_calls("<tool_call> </tool_call>") == []
    assert correctness([W], "<think> </think> <tool_call> </tool_call>") == -3.0


def test_multiset_jaccard():
    assert multiset_jaccard(["a", "a", "b"], ["a", "b", "b"]) == pytest.approx(2 / 4)
    assert multiset_jaccard([], []) == 1.0
    assert multiset_jaccard(["a"], []) == 0.0


def test_exact_match_in_any_order_is_max():
    assert correctness([W, C_ANNA], response(C_ANNA, W)) == 3.0


def test_wrong_value():
    # r_name 1; best = r_param 1 + r_value 1 -> S 3, S_max 1 + (1 + 2) = 4 -> 6*3/4 - 3
    pred = ("get_weather", (("city", "paris"), ("day", "tuesday")))
    assert match_score([W], [pred]) == (3.0, 4.0)
    assert correctness([W], response(pred)) == pytest.approx(1.5)


def test_wrong_parameter_name():
    # keys [origin, day] vs [city, day]: Jaccard 1/3; value of day right -> S = 1 + 1/3 + 1, S_max 4
    pred = ("get_weather", (("origin", "paris"), ("day", "monday")))
    assert correctness([W], response(pred)) == pytest.approx(6 * (7 / 3) / 4 - 3)


def test_missing_call():
    # r_name |{w}| / |{w, c}| = 1/2; best(w) 3, best(c) 0 -> S 3.5, S_max 1 + 3 + 2 = 6
    assert correctness([W, C_ANNA], response(W)) == pytest.approx(0.5)


def test_extra_call():
    # r_name 1/2; best(w) 3 -> S 3.5, S_max 4
    assert correctness([W], response(W, C_ANNA)) == pytest.approx(2.25)


def test_duplicate_names_use_each_prediction_once():
    # names {call: 2} both sides -> 1; anna takes the first anna (2), ben gets the second anna (1 + 0)
    assert match_score([C_ANNA, C_BEN], [C_ANNA, C_ANNA]) == (4.0, 5.0)
    assert correctness([C_ANNA, C_BEN], response(C_ANNA, C_ANNA)) == pytest.approx(1.8)
    assert correctness([C_ANNA, C_BEN], response(C_BEN, C_ANNA)) == 3.0


def test_wrong_tool_scores_minimum():
    assert correctness([W], response(("set_alarm", (("time", "5"), ("day", "monday"))))) == -3.0


def test_no_tool_ground_truth_scores_only_format():
    direct = "<think> </think> <response> no tool fits </response>"
    assert toolrl_reward(direct, [])["total"] == 1.0
    assert toolrl_reward(response(W), []) == {"format": 0.0, "correct": 0.0, "length": 0.0, "total": 0.0}


def test_format_shapes():
    assert format_ok(response(W), "tool_call")
    assert not format_ok(response(W), "response")
    assert not format_ok(response(W).replace("<think> user wants </think> ", ""), "tool_call")
    assert not format_ok(response(W).replace("</think>", ""), "tool_call")
    assert not format_ok(response(W) + " <tool_call> </tool_call>", "tool_call")
    assert format_ok("<think> </think> <response> no tool fits </response>", "response")


def test_total_reward_and_range():
    assert toolrl_reward(response(W), [W])["total"] == 4.0
    broken = response(W).replace("<think> user wants </think> ", "")
    assert toolrl_reward(broken, [W]) == {"format": 0.0, "correct": 3.0, "length": 0.0, "total": 3.0}
    assert toolrl_reward("", [W])["total"] == -3.0


def test_coarse_gives_no_partial_credit():
    pred = ("get_weather", (("city", "paris"), ("day", "tuesday")))
    assert toolrl_reward(response(pred), [W], RewardSpec(coarse=True))["correct"] == -3.0
    assert toolrl_reward(response(W), [W], RewardSpec(coarse=True))["correct"] == 3.0


def test_length_reward():
    assert length_reward(response(W, think="a b c d e f"), 12) == 0.5
    assert length_reward(response(W, think=" ".join(["w"] * 20)), 12) == 1.0
    assert length_reward("<tool_call> </tool_call>", 12) == 0.0
    spec = RewardSpec(length_target=384, length_target_end=640, horizon=105)
    text = response(W, think=" ".join(["w"] * 320))
    assert toolrl_reward(text, [W], spec, step=0)["length"] == pytest.approx(320 / 384)
    assert toolrl_reward(text, [W], spec, step=105)["length"] == pytest.approx(320 / 640)


def test_schedules():
    assert reward_ranges("equal_max", 0).correct_high == 1.0
    early, late = reward_ranges("two_stage", 29), reward_ranges("two_stage", 30)
    assert (early.correct_low, early.correct_high, early.format_high) == (-1.0, 1.0, 1.0)
    assert (late.correct_low, late.correct_high, late.format_high) == (-3.0, 3.0, 0.5)
    start, middle, end = (reward_ranges("dynamic", s) for s in (0, 75, 150))
    assert (start.format_low, start.format_high, start.correct_low, start.correct_high) == (-2.0, 2.0, -2.0, 2.0)
    assert (middle.format_low, middle.format_high, middle.correct_low, middle.correct_high) == (-1, 1.5, -2.5, 2.5)
    assert (end.format_low, end.format_high, end.correct_low, end.correct_high) == (-1.0, 1.0, -3.0, 3.0)
    assert reward_ranges("dynamic", 10_000) == end
    with pytest.raises(ValueError):
        reward_ranges("sideways", 0)


def test_partial_credit_follows_the_scale():
    pred = ("get_weather", (("city", "paris"), ("day", "tuesday")))
    parts = toolrl_reward(response(pred), [W], RewardSpec(schedule="equal_max"))
    assert parts["correct"] == pytest.approx(2 * 3 / 4 - 1)
    broken = response(W).replace("</think>", "")
    assert toolrl_reward(broken, [W], RewardSpec(schedule="dynamic"), step=0)["format"] == -2.0


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=list("{}:,<>/ abnmeargs_toolcthinkp"), max_size=120))
def test_never_crashes_and_stays_in_range(text):
    parts = toolrl_reward(text, [W, C_ANNA])
    assert -3.0 <= parts["total"] <= 4.0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["{", "}", ":", ",", "name", "args", "city", "paris", "get_weather"]), max_size=40))
def test_never_crashes_on_token_soup(words):
    text = "<think> </think> <tool_call> " + " ".join(words) + " </tool_call>"
    assert -3.0 <= toolrl_reward(text, [W])["total"] <= 4.0
