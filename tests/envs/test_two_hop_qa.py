"""`two_hop_qa` and its `search` tool (chapter 08, ARPO): the knowledge base, the precise and imprecise company
queries, episodes by hand, ambiguity, hostile actions, the tool budget, splits without shared sub-problems, and
the vocabulary."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hostile_actions import play_hostile
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import envs, tools
from course_lib.envs.base import distinct_seeds
from course_lib.envs.two_hop_qa import (
    Question,
    all_questions,
    draw_question,
    expert_actions,
    naive_actions,
    question_pool,
    split_of,
    vocabulary,
)
from course_lib.tokenizer import TAGS, build_tokenizer, encode
from course_lib.tools.knowledge_base import (
    ATTRIBUTES,
    CITIES,
    FAMILY_NAMES,
    GIVEN_NAMES,
    KB,
    PREFIXES,
    ROLES,
    SUFFIXES,
    build_knowledge_base,
    company_in_city,
    is_precise,
    search,
)

# Worked example of the module docstring: "arvex works" is the name of two companies.
AMBIGUOUS = Question("arvex works", "brenna", "founder", "born_in")
TWIN = Question("arvex works", "penrith", "founder", "born_in")
UNAMBIGUOUS = Question("arvex labs", "brenna", "ceo", "lives_in")


def make(**kwargs):
    return envs.make("two_hop_qa", **kwargs)


def play(env, actions):
    return [env.step(a) for a in actions]


def test_registry_and_constructor_checks():
    assert "two_hop_qa" in envs.names()
    env = make()
    settings_ = (env.split, env.ambiguous_share, env.max_tool_calls, env.max_turns, env.invalid_penalty)
    assert settings_ == ("train", 0.5, 3, 4, 0.0)
    for bad in ({"split": "dev"}, {"ambiguous_share": 1.5}, {"max_turns": 0}, {"max_tool_calls": -1}):
        with pytest.raises(ValueError):
            make(**bad)
    bad_questions = (
        ("arvex works", "ashby", "founder", "born_in"),
        ("arvex works", "brenna", "cto", "born_in"),
        ("x",),
    )
    for bad in bad_questions:
        with pytest.raises(ValueError, match="not a question"):  # no arvex works in ashby; no role cto; 1 field
            env.reset(options={"question": bad})
    with pytest.raises(ValueError, match="ambiguous_share"):
        draw_question(0, "train", ambiguous_share=-0.1)


def test_knowledge_base_is_deterministic_word_level_and_sized_as_documented():
    assert build_knowledge_base() == KB
    assert (len(KB.by_name), len(KB.companies), len(KB.people)) == (160, 213, 426)
    assert Counter(len(companies) for companies in KB.by_name.values()) == {1: 107, 2: 53}
    lists = (PREFIXES, SUFFIXES, GIVEN_NAMES, FAMILY_NAMES, CITIES, ROLES, ATTRIBUTES, ("in", ";", "no", "result"))
    flat = [w for words in lists for w in words]
    assert len(flat) == len(set(flat)) and all(w and " " not in w for w in flat)  # no word has two meanings
    holders = [person for c in KB.companies for person in c.staff.values()]
    assert len(holders) == len(set(holders)) == len(KB.people)  # every person holds exactly one role
    assert all(set(facts) == set(ATTRIBUTES) and set(facts.values()) <= set(CITIES) for facts in KB.people.values())


def test_twins_differ_in_city_and_on_every_attribute():
    """A wrong pick at the ambiguous step always changes the answer."""
    for companies in KB.by_name.values():
        if len(companies) == 2:
            a, b = companies
            assert a.city != b.city
            for role in ROLES:
                for attribute in ATTRIBUTES:
                    assert KB.people[a.staff[role]][attribute] != KB.people[b.staff[role]][attribute]


def test_search_tool_results_and_errors():
    assert tools.call("search", "arvex works founder") == (
        "arvex works in penrith founder dov falk ; arvex works in brenna founder jonas holm"
    )
    # the precise query lists only the company in that city, the imprecise one's fact for it
    assert tools.call("search", "arvex works in brenna founder") == "arvex works in brenna founder jonas holm"
    assert tools.call("search", "arvex works in penrith founder") == "arvex works in penrith founder dov falk"
    assert tools.call("search", " arvex  labs in brenna   ceo ") == tools.call("search", "arvex labs ceo")
    assert tools.call("search", "  jonas holm   born_in ") == "jonas holm born_in ismere"
    assert tools.call("search", "arvex labs ceo").count(";") == 0  # one company, one fact
    unknowns = (
        "nobody here born_in", "arvex works born_in", "jonas holm founder", "jonas holm age", "x y",
        "arvex works in ashby founder",  # no arvex works in ashby: the precise query with a wrong city
        "arvex labs in penrith ceo", "arvex works in brenna born_in", "in brenna founder", "zork in brenna ceo",
        "jonas holm in ismere born_in",
    )  # fmt: skip
    for unknown in unknowns:
        assert tools.call("search", unknown) == "no result", unknown
    assert tools.call("search", "founder").startswith("error")
    assert tools.call("search", "").startswith("error")
    assert search(None).startswith("error")  # type: ignore[arg-type]


def test_precise_query_form():
    assert company_in_city("arvex works in brenna") == ("arvex works", "brenna")
    assert company_in_city("arvex works") is None and company_in_city("in brenna") is None
    assert is_precise("arvex works in brenna founder") and is_precise("arvex works in ashby ceo")  # found or not
    for other in (
        "arvex works founder",
        "arvex works in brenna",
        "jonas holm born_in",
        "arvex works in brenna born_in",
    ):
        assert not is_precise(other), other
    # every company's precise query finds exactly that company's fact, twins included
    for company in KB.companies:
        for role in ROLES:
            fact = f"{company.name} in {company.city} {role} {company.staff[role]}"
            assert search(f"{company.name} in {company.city} {role}") == fact
            assert fact in search(f"{company.name} {role}").split(" ; ")


@given(st.text(max_size=120))
@settings(max_examples=100, deadline=None)
def test_search_never_raises(text):
    result = search(text)
    assert result == "no result" or result.startswith("error") or " ; " in result or len(result.split()) >= 3


def test_solved_ambiguous_episode_by_hand():
    env = make()
    obs, info = env.reset(options={"question": AMBIGUOUS})
    assert obs == "<question> where was the founder of arvex works in brenna born ? </question>"
    assert info["answer"] == "ismere" and info["bridge"] == "jonas holm" and info["ambiguous"]
    assert AMBIGUOUS.hop_lookups() == (("arvex works in brenna", "founder"), ("jonas holm", "born_in"))
    assert (info["success"], info["tool_calls"]) == (False, 0)
    assert expert_actions(AMBIGUOUS) == [
        "<tool_call> search arvex works in brenna founder </tool_call>",
        "<tool_call> search jonas holm born_in </tool_call>",
        "<answer> ismere </answer>",
    ]
    (o1, r1, t1, _, i1), (o2, r2, t2, _, i2), (o3, r3, t3, tr3, i3) = play(env, expert_actions(AMBIGUOUS))
    # the precise hop 1 (name and city copied from the question) lists only the company in brenna
    assert o1 == "<tool_response> arvex works in brenna founder jonas holm </tool_response>"
    assert o2 == "<tool_response> jonas holm born_in ismere </tool_response>"
    assert (r1, t1, r2, t2) == (0.0, False, 0.0, False) and i1["valid"] and i2["valid"] and i2["tool_calls"] == 2
    assert i1["tool_result"] == "arvex works in brenna founder jonas holm" and i1["precise"] and not i2["precise"]
    assert (o3, r3, t3, tr3) == ("", 1.0, True, False)
    assert i3["success"] and i3["tool_calls"] == 2 and i3["answer"] == "ismere" and i3["ambiguous"]
    assert env.transcript.actions == expert_actions(AMBIGUOUS) and len(env.transcript.observations) == 4
    assert len({hash(i["anchor"]) for i in (info, i1, i2)}) == 3 and env.problem_key() == AMBIGUOUS


def test_wrong_candidate_gives_a_wrong_answer():
    env = make()
    env.reset(options={"question": AMBIGUOUS})
    wrong = [a for a in AMBIGUOUS.candidates if a != AMBIGUOUS.bridge]
    assert AMBIGUOUS.candidates == ["dov falk", "jonas holm"] and wrong == ["dov falk"]
    obs, *_, info = env.step("<tool_call> search arvex works founder </tool_call>")
    # the imprecise hop 1 returns BOTH companies called arvex works: two candidates
    assert obs == (
        "<tool_response> arvex works in penrith founder dov falk ; arvex works in brenna founder jonas holm "
        "</tool_response>"
    )
    assert info["valid"] and not info["precise"]
    assert naive_actions(AMBIGUOUS, random.Random(0))[0] == "<tool_call> search arvex works founder </tool_call>"
    obs, *_ = env.step("<tool_call> search dov falk born_in </tool_call>")
    assert obs == "<tool_response> dov falk born_in farrowby </tool_response>"
    _, reward, terminated, _, info = env.step("<answer> farrowby </answer>")
    assert (reward, terminated, info["success"], info["given"]) == (0.0, True, False, "farrowby")
    assert TWIN.answer == "farrowby" and TWIN.bridge == "dov falk"  # the twin's right answer


def test_unambiguous_question_has_one_candidate():
    env = make()
    _, info = env.reset(options={"question": ("arvex labs", "brenna", "ceo", "lives_in")})
    assert not info["ambiguous"] and len(UNAMBIGUOUS.candidates) == 1
    obs, *_ = env.step(f"<tool_call> search {UNAMBIGUOUS.name} ceo </tool_call>")
    assert obs.count(";") == 0 and UNAMBIGUOUS.bridge in obs


def test_expert_solves_every_question_and_the_naive_demonstrator_half_the_ambiguous_ones():
    env, rng, naive = make(), random.Random(0), Counter()
    for question in all_questions():
        env.reset(options={"question": question})
        *_, (_, reward, terminated, _, info) = play(env, expert_actions(question))
        assert terminated and reward == 1.0 and info["success"]
        env.reset(options={"question": question})
        *_, (_, reward, _, _, _) = play(env, naive_actions(question, rng))
        naive[question.ambiguous, reward] += 1
    assert naive[False, 0.0] == 0 and naive[False, 1.0] == 642
    assert naive[True, 0.0] + naive[True, 1.0] == 636
    assert naive[True, 1.0] / 636 == pytest.approx(0.5, abs=0.06)


def test_right_candidate_is_first_as_often_as_second():
    positions = Counter(q.candidates.index(q.bridge) for q in all_questions() if q.ambiguous)
    assert positions[0] == positions[1] == 318


HOSTILE = [
    "",
    "x" * 100_000,
    "<tool_call> search </tool_call>",
    "<tool_call> search arvex </tool_call>",  # an entity without a relation
    "<tool_call> lookup arvex works founder </tool_call>",  # another tool
    "<tool_call> search arvex works founder",  # unclosed
    "<answer></answer>",
    "<answer>   </answer>",
    "</answer> ismere <answer>",
    '{"name": "search", "arguments": "arvex works founder"}',
    None,
    12345,
]


def check_hostile(action) -> None:
    """A hostile action never raises (`play_hostile`): feedback, valid False, reward 0 (the default penalty), the
    same info keys as any step, and the episode ends by truncation."""
    env = make()
    for obs, reward, _, _, info in play_hostile(env, action):
        assert obs.startswith("<feedback>") and reward == env.invalid_penalty == 0.0
        assert info["valid"] is False and {"answer", "bridge", "ambiguous", "success", "tool_calls"} <= set(info)
        assert info["tool_calls"] == 0 and not info["success"]


@pytest.mark.parametrize("action", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_actions(action):
    check_hostile(action)


@settings(max_examples=60, deadline=None)
@given(st.text(st.characters(exclude_categories=()), max_size=200) | st.text("<>/ _acehlnorstw", max_size=60))
def test_random_text_never_raises(action):
    env = make()
    env.reset(seed=2)
    obs, reward, _, _, info = env.step(action)
    assert isinstance(obs, str) and reward in (0.0, 1.0)
    assert info["valid"] or obs.startswith("<feedback>")


def test_unknown_entities_are_valid_calls_with_no_result():
    env = make(max_tool_calls=4, max_turns=5)
    env.reset(options={"question": AMBIGUOUS})
    calls = (
        "search zork industries founder",
        "search jonas holm shoe_size",
        "search arvex works born_in",
        "search arvex works in ashby founder",  # precise, but no arvex works is in ashby
    )
    for call in calls:
        obs, reward, terminated, _, info = env.step(f"<tool_call> {call} </tool_call>")
        assert obs == "<tool_response> no result </tool_response>" and info["valid"]
        assert (reward, terminated, info["precise"]) == (0.0, False, call.endswith("ashby founder"))
    assert info["tool_calls"] == 4


def test_tool_call_limit_gives_feedback_and_the_episode_goes_on():
    env = make(max_turns=6)
    env.reset(options={"question": AMBIGUOUS})
    hop1, hop2, answer = expert_actions(AMBIGUOUS)
    for action in (hop1, hop1, hop2):
        assert env.step(action)[4]["valid"]
    obs, reward, terminated, _, info = env.step(hop2)  # a 4th call with max_tool_calls = 3
    assert obs == "<feedback> tool limit </feedback>" and (reward, terminated) == (0.0, False)
    assert info["valid"] is False and info["error"] == "tool limit" and info["tool_calls"] == 3
    _, reward, terminated, _, info = env.step(answer)
    assert (reward, terminated, info["success"]) == (1.0, True, True)
    env = make(max_tool_calls=0)
    env.reset(seed=0)
    assert env.step(hop1)[0] == "<feedback> tool limit </feedback>"


def test_turn_limit_truncates_without_reward():
    env = make()
    env.reset(options={"question": AMBIGUOUS})
    steps = play(env, [expert_actions(AMBIGUOUS)[0]] * 4)
    assert [s[3] for s in steps] == [False, False, False, True] and sum(s[1] for s in steps) == 0.0 and env.done


def test_draw_question_is_deterministic_and_reset_poses_it():
    for split in ("train", "test"):
        first = [draw_question(s, split) for s in range(50)]
        assert first == [draw_question(s, split) for s in range(50)] and len(set(first)) > 40
        env = make(split=split)
        for seed in (0, 7, 123):
            obs, info = env.reset(seed=seed)
            question = draw_question(seed, split)
            assert obs == f"<question> {question.text()} </question>" and env.question == question
            assert info["answer"] == question.answer and info["ambiguous"] == question.ambiguous


def test_ambiguous_share():
    shares = {}
    for share in (0.0, 0.5, 1.0):
        draws = [draw_question(s, "train", share) for s in range(2000)]
        shares[share] = sum(q.ambiguous for q in draws) / len(draws)
    assert shares[0.0] == 0.0 and shares[1.0] == 1.0 and shares[0.5] == pytest.approx(0.5, abs=0.04)
    env = make(ambiguous_share=1.0)
    assert all(env.reset(seed=s)[1]["ambiguous"] for s in range(50))


def lookups(question: Question) -> set[tuple[str, str]]:
    """Every lookup a question's episodes can make: hop 1 imprecise and precise (for its own city and for its
    twin's), and hop 2 for each candidate (right or wrong)."""
    hop1 = {(question.name, question.role)} | {
        (f"{c.name} in {c.city}", question.role) for c in KB.by_name[question.name]
    }
    return hop1 | {(person, question.attribute) for person in question.candidates}


def test_pools_and_splits_are_disjoint_with_no_shared_sub_problems():
    sizes = {(split, amb): len(question_pool(split, amb)) for split in ("train", "test") for amb in (True, False)}
    assert sizes == {("train", True): 504, ("train", False): 516, ("test", True): 132, ("test", False): 126}
    assert not set(question_pool("train")) & set(question_pool("test"))
    draws = {split: [draw_question(s, split) for s in range(2000)] for split in ("train", "test")}
    assert all(split_of(q.name) == split for split, qs in draws.items() for q in qs)
    assert len(set(draws["train"])) > 800 and len(set(draws["test"])) > 250  # draws with replacement
    train_lookups = {lookup for q in draws["train"] for lookup in lookups(q)}
    test_lookups = {lookup for q in draws["test"] for lookup in lookups(q)}
    assert not train_lookups & test_lookups
    # over the whole pools too
    pool_lookups = {split: {x for q in question_pool(split) for x in lookups(q)} for split in ("train", "test")}
    assert not pool_lookups["train"] & pool_lookups["test"]
    assert all(q.hop_lookups()[0] in lookups(q) for q in all_questions())
    with pytest.raises(ValueError, match="no company"):
        split_of("acme corp")


def test_held_out_entities_are_new_combinations_of_training_words():
    """Every word of a held-out episode also occurs in training episodes: no untrained token at test time."""

    def episode_words(pool):
        words = set()
        for q in pool:
            words.update(q.text().split())
            for person in q.candidates:
                words.update(person.split())
                words.add(KB.people[person][q.attribute])
        return words

    assert episode_words(question_pool("test")) <= episode_words(question_pool("train"))


def test_distinct_held_out_questions():
    seeds = distinct_seeds(lambda: make(split="test"), 200)
    env = make(split="test")
    assert len({env.reset(seed=s)[1]["anchor"][0] for s in seeds}) == 200


def test_vocabulary_covers_every_word_of_300_episodes():
    """Expert, naive and junk episodes (a `no result`, an invalid action, a call over the limit): every
    word the env emits, and every word of the demonstrations, is in `vocabulary()` or a tokenizer tag."""
    vocab, rng = set(vocabulary()), random.Random(0)
    assert len(vocab) == len(vocabulary()) == 114
    tokenizer = build_tokenizer(vocabulary())
    seen: set[str] = set()
    for i in range(300):
        env = make(split=("train", "test")[i % 2], max_turns=5)
        env.reset(seed=i)
        hop1, hop2, answer = demo = expert_actions(env.question) if i % 3 else naive_actions(env.question, rng)
        if i % 3 == 2:
            play(env, [hop1, "<tool_call> search ada abel founder </tool_call>", "junk", hop2, hop2])
        else:
            play(env, demo)
            seen.update(w for action in demo for w in action.split())
        for text in env.transcript.observations:
            seen.update(text.split())
            assert tokenizer.unk_token_id not in encode(tokenizer, text), text
    assert seen <= vocab | set(TAGS)
    assert {"no", "result", "invalid", "action", "tool", "limit", ";"} <= seen
