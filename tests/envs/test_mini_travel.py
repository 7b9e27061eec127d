"""The travel sandbox's seven tools and the `mini_travel` environment (chapter 03)."""

import pytest

from course_lib import envs, tools
from course_lib.envs.mini_travel import cheapest_plan, draw_query, split_of, vocabulary
from course_lib.envs.planner_reward import Query, check_plan
from course_lib.tokenizer import build_tokenizer, encode
from course_lib.tools.travel import CITIES, TOOL_NAMES, WORLD

SEARCHES = [name for name in TOOL_NAMES if name != "calculator"]


def test_the_seven_tools_are_registered():
    assert len(TOOL_NAMES) == 7 and set(TOOL_NAMES) <= set(tools.names())


def test_tools_return_compact_listings():
    assert tools.call("get_cities", "").split() == list(CITIES)
    flights = tools.call("search_flights", "arden belmar").split(" ; ")
    assert len(flights) == 2 and all(len(item.split()) == 2 for item in flights)
    for item in flights:
        name, price = item.split()
        assert WORLD.transports[name].price == int(price) and WORLD.transports[name].mode == "flight"
    ground = tools.call("search_ground_transportation", "belmar arden").split(" ; ")
    assert [item.split()[1] for item in ground] == ["bus", "taxi"]
    for item in tools.call("search_accommodations", "faro").split(" ; "):
        name, room, price, word, nights = item.split()
        stay = WORLD.accommodations[name]
        assert (stay.city, stay.room, stay.price, word, stay.min_nights) == (
            "faro",
            room,
            int(price),
            "min",
            int(nights),
        )
    assert len(tools.call("search_restaurants", "corvis").split(" ; ")) == 4
    assert len(tools.call("search_attractions", "corvis").split(" ; ")) == 2
    assert tools.call("calculator", "3 + 4 * 2") == "11"


@pytest.mark.parametrize("tool", SEARCHES)
@pytest.mark.parametrize(
    "arguments", ["", "paris", "arden arden", "arden belmar corvis", "x" * 5000, "{ } : ;", 7, None]
)
def test_bad_arguments_give_short_errors(tool, arguments):
    result = tools.call(tool, arguments)
    if tool == "get_cities" and arguments == "":
        assert result.split() == list(CITIES)
    elif tool in ("search_accommodations", "search_restaurants", "search_attractions") and arguments == "paris":
        assert result.startswith("error")
    else:
        assert result.startswith("error") or tool == "get_cities" and arguments == ""
    assert len(result) < 80


def test_every_world_and_tool_word_is_in_the_vocabulary():
    tokenizer = build_tokenizer(vocabulary())
    texts = [tools.call(t, a) for t in SEARCHES for a in ["", *CITIES, "arden faro", "faro arden"]]
    for text in texts:
        if not text.startswith("error"):
            assert tokenizer.unk_token_id not in encode(tokenizer, text), text


def test_queries_are_feasible_split_and_deterministic():
    for split in ("train", "test"):
        for seed in range(60):
            query = draw_query(seed, split)
            assert query == draw_query(seed, split) and split_of(query) == split
            cost, plan = cheapest_plan(query)
            assert cost <= query.budget
            text = f"{{ go : {plan['go']} , stay : {plan['stay']} , eat : [ {' , '.join(plan['eat'])} ] }}"
            assert check_plan(text, query).passed


def test_an_impossible_query_has_no_cheapest_plan():
    assert cheapest_plan(Query("arden", "belmar", 3, 0, cuisine="nothing")) is None


def play(env, actions):
    return [env.step(action) for action in actions]


def test_a_solved_episode():
    env = envs.make("mini_travel", split="test", stage=1)
    obs, info = env.reset(seed=3)
    query = info["query"]
    assert obs == f"<question> {query.text()} </question>"
    tool = "search_ground_transportation" if query.transport == "no_flight" else "search_flights"
    steps = play(env, [
        f"<tool_call> {tool} {query.origin} {query.destination} </tool_call>",
        f"<tool_call> search_accommodations {query.destination} </tool_call>",
        f"<tool_call> search_restaurants {query.destination} </tool_call>",
    ])  # fmt: skip
    assert all(s[0].startswith("<tool_response>") and s[4]["tool_result"] != "error" for s in steps)
    _, plan = cheapest_plan(query)
    obs, reward, terminated, truncated, info = env.step(
        f"<answer> {{ go : {plan['go']} , stay : {plan['stay']} , eat : [ {' , '.join(plan['eat'])} ] }} </answer>"
    )
    assert terminated and not truncated and info["success"] and reward == 6.0 and info["failure"] is None
    assert info["tool_calls"] == 3 and env.token_count() > 40


@pytest.mark.parametrize("stage, expected", [(1, 1 + 1 + 1 + 1 + 1 + 1), (2, 2.0), (3, 1.0)])
def test_stages_set_the_reward(stage, expected):
    env = envs.make("mini_travel", stage=stage)
    _, info = env.reset(seed=0)
    _, plan = cheapest_plan(info["query"])
    answer = f"<answer> {{ go : {plan['go']} , stay : {plan['stay']} , eat : [ {' , '.join(plan['eat'])} ] }} </answer>"
    assert env.step(answer)[1] == expected


def test_the_curriculum_follows_the_training_step():
    env = envs.make("mini_travel", stage=lambda step: 1 + min(step, 2))
    stages = []
    for step in range(4):
        env.training_step = step
        env.reset(seed=0)
        stages.append(env.current_stage())
        info = env.step("<answer> { } </answer>")[4]
        assert info["stage"] == stages[-1]
    assert stages == [1, 2, 3, 3]
    env.reset(seed=0)  # resetting alone does not advance the curriculum
    assert env.current_stage() == 3


@pytest.mark.parametrize(
    "action",
    ["", "hello", "<answer>", "<tool_call> search_flights arden", "</answer>", "<tool_response> 3 </tool_response>",
     "\x00" * 10, "<answer> " * 3000, 17, None],
)  # fmt: skip
def test_malformed_actions_get_feedback_and_a_penalty(action):
    env = envs.make("mini_travel")
    env.reset(seed=1)
    obs, reward, terminated, truncated, info = env.step(action)
    if not info["valid"]:
        assert obs.startswith("<feedback>") and reward == pytest.approx(-0.1) and not terminated
    else:  # an unclosed answer tag followed by another is an (unparseable) answer
        assert terminated and reward == 0.0


def test_bad_tool_calls_return_error_and_episode_ends_at_the_turn_limit():
    env = envs.make("mini_travel", max_turns=6, max_tool_calls=5)
    env.reset(seed=2)
    results = [env.step(a)[4].get("tool_result") for a in [
        "<tool_call> fly_me arden </tool_call>", "<tool_call> search_flights paris rome </tool_call>",
        "<tool_call> calculator 999 * 999 </tool_call>", "<tool_call> calculator __import__('os') </tool_call>",
        "<tool_call> calculator 7 - 2 </tool_call>",
    ]]  # fmt: skip
    assert results == ["error", "error", "error", "error", "5"]
    obs, reward, terminated, truncated, info = env.step("<tool_call> get_cities </tool_call>")
    assert not info["valid"] and "tool limit" in obs and truncated and not terminated


def test_transcript_tokens_are_counted_across_episodes():
    env = envs.make("mini_travel")
    env.reset(seed=0)
    first = env.token_count()
    env.step("<answer> { } </answer>")
    env.reset(seed=0)
    assert env.token_count() == 2 * first + len("<answer> { } </answer>".split())
