"""Planner-R1's validator and six reward terms against hand-computed values (chapter 03)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.envs.planner_reward import (
    COMMONSENSE,
    STAGES,
    TERMS,
    PlanCheck,
    Query,
    check_plan,
    curriculum,
    failure_category,
    parse_plan,
    reward_terms,
    schema_valid,
    staged_reward,
)
from course_lib.tools.travel import Accommodation, Restaurant, Transport, World

# A hand-made sandbox: two routes out of "a", two stays and four restaurants in "b", one in "c".
WORLD = World(
    transports={
        "f1": Transport("f1", "flight", "a", "b", 5),
        "g1": Transport("g1", "bus", "a", "b", 2),
        "f2": Transport("f2", "flight", "a", "c", 4),
    },
    accommodations={
        "s1": Accommodation("s1", "b", "private", 3, 1),
        "s2": Accommodation("s2", "b", "shared", 1, 2),
        "s3": Accommodation("s3", "c", "private", 1, 1),
    },
    restaurants={
        "r1": Restaurant("r1", "b", "thai", 2),
        "r2": Restaurant("r2", "b", "pasta", 1),
        "r3": Restaurant("r3", "b", "thai", 4),
        "r4": Restaurant("r4", "c", "sushi", 1),
    },
    attractions={},
)
# 3 days (2 nights) from a to b, budget 16, thai food, a private room, no flights: 4 hard constraints.
QUERY = Query("a", "b", 3, 16, cuisine="thai", room="private", transport="no_flight")


def check(plan: str, query: Query = QUERY) -> PlanCheck:
    return check_plan(plan, query, WORLD)


def test_a_passing_plan_scores_every_term():
    result = check("{ go : g1 , stay : s1 , eat : [ r1 , r2 , r3 ] }")
    assert result.cost == 2 + 2 * 3 + 2 + 1 + 4 == 15
    assert result.passed and all(result.commonsense.values()) and all(result.hard.values())
    assert reward_terms(result) == {term: 1.0 for term in TERMS}
    assert staged_reward(reward_terms(result), 1) == 6.0
    assert staged_reward(reward_terms(result), 2) == 2.0
    assert staged_reward(reward_terms(result), 3) == 1.0


def test_hand_computed_partial_plan():
    # flight (breaks no_flight), shared room (breaks room; min 2 nights = 2 nights: ok),
    # r1 twice (repeat), only two meals for three days; cost 5 + 2*1 + 2 + 2 = 11 within budget.
    result = check("{ go : f1 , stay : s2 , eat : [ r1 , r1 ] }")
    assert result.cost == 11
    assert result.commonsense == {
        "within_sandbox": True, "transport_route": True, "right_city": True,
        "one_meal_per_day": False, "no_repeat": False, "min_nights": True,
    }  # fmt: skip
    assert result.hard == {"budget": True, "cuisine": True, "room": False, "transport": False}
    terms = reward_terms(result)
    assert terms["cs_micro"] == pytest.approx(4 / 6)
    assert terms["hard_micro"] == pytest.approx(2 / 4)
    assert (terms["schema"], terms["cs_macro"], terms["hard_macro"], terms["pass"]) == (1.0, 0.0, 0.0, 0.0)
    assert staged_reward(terms, 1) == pytest.approx(1 + 4 / 6 + 2 / 4)
    assert staged_reward(terms, 2) == 0.0 and staged_reward(terms, 3) == 0.0


def test_commonsense_right_but_over_budget():
    tight = Query("a", "b", 3, 14, cuisine="thai", room="private", transport="no_flight")
    terms = reward_terms(check("{ go : g1 , stay : s1 , eat : [ r1 , r2 , r3 ] }", tight))
    assert terms == {
        "schema": 1.0,
        "cs_micro": 1.0,
        "cs_macro": 1.0,
        "hard_micro": 0.75,
        "hard_macro": 0.0,
        "pass": 0.0,
    }
    assert staged_reward(terms, 1) == pytest.approx(1 + 1 + 1 + 0.75)
    assert staged_reward(terms, 2) == 1.0


def test_only_specified_hard_constraints_count():
    loose = Query("a", "b", 2, 9)
    result = check("{ go : f1 , stay : s2 , eat : [ r2 , r4 ] }", loose)
    assert list(result.hard) == ["budget"]
    # s2 needs 2 nights but a 2-day trip has 1; r4 is in c; cost 5 + 1 + 1 + 1 = 8.
    assert not result.commonsense["min_nights"] and not result.commonsense["right_city"]
    assert result.hard == {"budget": True}
    assert reward_terms(result)["cs_micro"] == pytest.approx(4 / 6)
    assert failure_category(result) == "hallucinated entity"


def test_no_ground_restriction_and_wrong_route():
    query = Query("a", "b", 2, 30, transport="no_ground")
    assert check("{ go : f1 , stay : s1 , eat : [ r1 , r2 ] }", query).hard["transport"]
    bus = check("{ go : g1 , stay : s1 , eat : [ r1 , r2 ] }", query)
    assert not bus.hard["transport"] and failure_category(bus) == "wrong tool"
    wrong_route = check("{ go : f2 , stay : s1 , eat : [ r1 , r2 ] }", query)
    assert not wrong_route.commonsense["transport_route"] and wrong_route.hard["transport"]


@pytest.mark.parametrize(
    "plan",
    [
        None,
        "",
        "{",
        "{ go : g1 , stay : s1 , eat : [ r1 , r2",
        "{ go : g1 , stay : s1 , eat : [ r1 , r2 ] } }",
        "{ go : g1 , stay : s1 }",
        "{ go : g1 , stay : s1 , eat : [ r1 ] , extra : x }",
        "{ go : [ g1 ] , stay : s1 , eat : [ r1 ] }",
        "{ go : g1 , stay : s1 , eat : r1 }",
        "{ go : g1 , stay : { x : y } , eat : [ r1 ] }",
        "{ go : g1 , go : g1 , stay : s1 , eat : [ r1 ] }",
        "[ g1 , s1 ]",
        "g1 s1 r1",
        "{ go g1 , stay : s1 , eat : [ r1 ] }",
        "{ : : }",
        "[ " * 50 + "]" * 50,
        "{ go : g1 , stay : s1 , eat : [ r1 , , r2 ] }",
        42,
    ],
)
def test_malformed_plans_score_zero_and_never_raise(plan):
    result = check(plan)
    assert not result.schema and not result.passed
    assert reward_terms(result) == {term: 0.0 for term in TERMS}
    assert failure_category(result) == "format" and failure_category(None) == "format"
    assert all(staged_reward(reward_terms(result), stage) == 0.0 for stage in STAGES)


def test_unknown_entities_are_schema_valid_but_fail_commonsense_and_budget():
    result = check("{ go : g1 , stay : ritz , eat : [ r1 , nowhere , r3 ] }")
    assert result.schema and result.cost is None
    assert not result.commonsense["within_sandbox"] and not result.commonsense["right_city"]
    assert not result.commonsense["min_nights"] and not result.hard["budget"] and not result.hard["room"]
    assert result.hard["cuisine"] and result.hard["transport"]
    assert reward_terms(result)["cs_micro"] == pytest.approx(3 / 6)
    assert failure_category(result) == "hallucinated entity"


def test_failure_categories_in_order():
    assert failure_category(check("{ go : g1 , stay : s1 , eat : [ r1 , r2 , r3 ] }")) is None
    assert failure_category(check("{ go : g1 , stay : s1 , eat : [ r1 , r1 , r3 ] }")) == "commonsense bookkeeping"
    tight = Query("a", "b", 3, 14, cuisine="thai", room="private", transport="no_flight")
    assert failure_category(check("{ go : g1 , stay : s1 , eat : [ r1 , r2 , r3 ] }", tight)) == "budget"
    assert failure_category(check("{ go : g1 , stay : s2 , eat : [ r1 , r2 , r3 ] }")) == "preference"


def test_parse_plan_values():
    assert parse_plan("{ go : x , eat : [ a , b ] }") == {"go": "x", "eat": ["a", "b"]}
    assert parse_plan("[ ]") == [] and parse_plan("{ }") == {} and parse_plan("word") == "word"
    assert parse_plan("a b") is None and parse_plan("}") is None
    assert schema_valid({"go": "x", "stay": "y", "eat": []}) and not schema_valid({"go": "x", "stay": "y"})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["{", "}", "[", "]", ",", ":", "go", "stay", "eat", "g1", "s1", "r1"]), max_size=30))
def test_any_token_soup_scores_in_range(tokens):
    terms = reward_terms(check(" ".join(tokens)))
    assert all(0.0 <= value <= 1.0 for value in terms.values())
    assert terms["pass"] <= min(terms["cs_macro"], terms["hard_macro"], terms["schema"])


def test_every_check_counts_six_commonsense_constraints():
    assert len(check("{ go : g1 , stay : s1 , eat : [ ] }").commonsense) == len(COMMONSENSE) == 6


def test_stage_weights_follow_the_paper():
    assert STAGES[1] == {term: 1.0 for term in TERMS}
    assert set(STAGES[2]) == {"cs_macro", "hard_macro"} and set(STAGES[3]) == {"pass"}
    with pytest.raises(ValueError):
        staged_reward({term: 1.0 for term in TERMS}, 4)


def test_curriculum_runs_the_stages_in_thirds():
    stage = curriculum(9)
    assert [stage(i) for i in range(9)] == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert stage(-1) == 1 and stage(100) == 3
    assert [curriculum(4)(i) for i in range(4)] == [1, 1, 2, 3]
    with pytest.raises(ValueError):
        curriculum(0)
