"""`two_hop_qa`: two-hop questions answered with a search tool, some of them ambiguous (chapter 08, ARPO).

ARPO (arXiv 2507.19849) branches a rollout where the policy's entropy rises after a tool response.
This task makes such a moment on purpose. A question names a company and its city and asks for an
attribute of one of its role holders:

    <question> where was the founder of arvex works in brenna born ? </question>
    <tool_call> search arvex works founder </tool_call>
        -> <tool_response> arvex works in penrith founder dov falk ;
                           arvex works in brenna founder jonas holm </tool_response>
    <tool_call> search jonas holm born_in </tool_call>
        -> <tool_response> jonas holm born_in ismere </tool_response>
    <answer> ismere </answer>

The facts live in the `search` tool (`course_lib.tools.knowledge_base`), so the policy must search
twice: hop 1 finds the role holder (the *bridge* entity), hop 2 that person's attribute. Hop 1 has
two forms. The imprecise `search NAME ROLE` (above) lists every company of that name; the precise
`search NAME in CITY ROLE` copies the name and the city from the question and lists only that
company:

    <tool_call> search arvex works in brenna founder </tool_call>
        -> <tool_response> arvex works in brenna founder jonas holm </tool_response>

Three templates, one per attribute, each with the role `founder` or `ceo`:

    where was the ROLE of NAME in CITY born ?     (born_in)
    where does the ROLE of NAME in CITY live ?    (lives_in)
    where did the ROLE of NAME in CITY study ?    (studied_in)

Ambiguity is induced by construction. A third of the company names are held by two companies in
different cities (so half of the companies, and half of the questions, are ambiguous), and the
imprecise search is by name: for a question about such a name it returns TWO candidates, each listed
with its company's city. Only the one in the city the question names is right, and the twins' role
holders differ on every attribute, so following the other always gives a wrong answer. The
question's `in CITY` is the disambiguating attribute; every question carries it, so the question's
form does not tell which questions are ambiguous, only the imprecise search's response does. A policy
that has not learned to match the city (e.g. one imitating `naive_actions`, which searches imprecisely
and picks a candidate at random) is uncertain exactly at the tokens after that tool response: the rise
in entropy ARPO branches on, here caused on purpose rather than observed in the wild. Candidates come
in the tool's fixed order, and over the twins' questions the right one is first as often as second, so
position does not give it away. `ambiguous_share` (default 0.5) is the probability that a drawn
question is ambiguous (it is drawn from the ambiguous pool, else from the unambiguous one).

The precise search removes the ambiguity before it arises: it lists one candidate, the right one, on
every question. It exists because a tiny model cannot learn the other way out, matching the city in a
two-candidate response and copying that candidate's two-word name: that was measured to fail on
held-out companies and people (the model memorises the training ones), while copying words from the
question and copying a single listed name generalise. A policy that learns, by RL, to search precisely
therefore solves held-out ambiguous questions too; `expert_actions` does so.

Reward: 1.0 for the right final answer, 0 otherwise (no format term): the outcome reward of the
GRPO-style training ARPO builds on. An answer ends the episode; no answer within `max_turns` earns 0.
At most `max_tool_calls` searches (default 3: two are needed, one is spare). A malformed action
(neither `<tool_call> search ENTITY RELATION </tool_call>` nor a non-empty `<answer>`) or a call over
the limit never raises: the observation is feedback, `info["valid"]` is False, the reward is
`invalid_penalty` (0.0 by default: a training loop that wants a penalty applies it, as with
`key_door`), and the turn counts. A well-formed search for an unknown entity or relation is valid
and returns `<tool_response> no result </tool_response>`, as does a precise search whose city is not
that of any company of the name.

Split: by company NAME (`split_of`). A fifth of the names, chosen by hash separately among the
shared and the unshared names so that both splits stay half ambiguous, are held out together with
all the companies that bear them, their people, and every question about them. A split by question
would leak sub-problems: the hop-1 search of a held-out question, `NAME ROLE` or `NAME in CITY
ROLE`, would be that of a training question about the same company (another attribute) or,
imprecise, its twin, and its hop-2 search `PERSON ATTRIBUTE` could be asked in training too. Split
by name, no hop-1 lookup of a held-out question (precise or imprecise) and no hop-2 lookup (the
bridge's or the wrong candidate's) is made by any training question. Entity *words* are shared by
both splits (a held-out company or person is a new combination of training words), so the model
never meets an untrained token. 1,278 questions (213 companies x 2 roles x 3 attributes): 1,020 for
training (504 ambiguous, 516 not), 258 held out (132 ambiguous, 126 not).

`info` carries `answer` (the right one), `bridge`, `ambiguous` (whether the question's company name is
shared, so that an imprecise hop 1 lists two candidates), `success` and `tool_calls` at reset and at
every step; a search step adds `tool_result` (the response's text) and `precise` (whether the call
was a precise company query). `expert_actions` (precise hop 1) and `naive_actions` (imprecise hop 1, a
random candidate) give demonstrations; `vocabulary()` lists every word the environment emits or
accepts (114: the precise query's words are the question's), besides the tokenizer's tags.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from course_lib import tools
from course_lib.envs import register
from course_lib.envs.base import Dialogue, TextEnv, calls_tool, extract_tag
from course_lib.tools import knowledge_base
from course_lib.tools.knowledge_base import ATTRIBUTES, KB, ROLES

TEMPLATES = {
    "born_in": "where was the {role} of {name} in {city} born ?",
    "lives_in": "where does the {role} of {name} in {city} live ?",
    "studied_in": "where did the {role} of {name} in {city} study ?",
}
"""Attribute -> question text (the role, name and city filled in)."""
TOOL = "search"
FEEDBACK_WORDS = ("invalid", "action", "tool", "limit")


@dataclass(frozen=True)
class Question:
    """`where ... the ROLE of NAME in CITY ...?`: the company (name, city), the role, the attribute."""

    name: str
    city: str
    role: str
    attribute: str

    def text(self) -> str:
        return TEMPLATES[self.attribute].format(role=self.role, name=self.name, city=self.city)

    @property
    def candidates(self) -> list[str]:
        """The role holders of every company called `name`, in the order hop 1 lists them."""
        return [company.staff[self.role] for company in KB.by_name[self.name]]

    @property
    def bridge(self) -> str:
        """The intermediate entity: the role holder of the company in `city`."""
        return KB.company(self.name, self.city).staff[self.role]

    @property
    def answer(self) -> str:
        return KB.people[self.bridge][self.attribute]

    @property
    def ambiguous(self) -> bool:
        """Whether hop 1 returns several candidates."""
        return len(KB.by_name[self.name]) > 1

    def hop_lookups(self) -> tuple[tuple[str, str], tuple[str, str]]:
        """Its sub-problems as `expert_actions` solves them: the (entity, relation) of hop 1 (the precise
        company query) and of hop 2."""
        return (f"{self.name} in {self.city}", self.role), (self.bridge, self.attribute)


def vocabulary() -> list[str]:
    """Every word this environment emits or accepts (questions, calls, results, feedback), besides the
    tokenizer's tags."""
    template_words = [w for text in TEMPLATES.values() for w in text.split() if not w.startswith("{")]
    return list(dict.fromkeys([*template_words, TOOL, *knowledge_base.words(), *FEEDBACK_WORDS]))


def _name_hash(name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"two_hop_qa:{name}".encode()).digest()[:8], "big")


@lru_cache(maxsize=4)
def held_out_names(test_fraction: float = 0.2) -> frozenset[str]:
    """The company names of the test split: among the names held by two companies, and separately
    among those held by one, the `round(test_fraction * count)` with the smallest hash. Stratified, so
    that both splits keep the knowledge base's even mix of ambiguous and unambiguous questions (a plain
    hash threshold gave a test split of 96 ambiguous and 144 unambiguous questions)."""
    held_out: set[str] = set()
    for shared in (True, False):
        stratum = sorted((n for n, cs in KB.by_name.items() if (len(cs) > 1) == shared), key=_name_hash)
        held_out.update(stratum[: round(test_fraction * len(stratum))])
    return frozenset(held_out)


def split_of(name: str, test_fraction: float = 0.2) -> str:
    """`test` for the questions about the company names of `held_out_names`, else `train` (see the
    module docstring for why the split is by name)."""
    if name not in KB.by_name:
        raise ValueError(f"no company is called {name!r}")
    return "test" if name in held_out_names(test_fraction) else "train"


@lru_cache(maxsize=1)
def all_questions() -> tuple[Question, ...]:
    """Every question: each company x role x attribute (1,278)."""
    return tuple(
        Question(company.name, company.city, role, attribute)
        for company in KB.companies
        for role in ROLES
        for attribute in ATTRIBUTES
    )


@lru_cache(maxsize=8)
def question_pool(split: str, ambiguous: bool | None = None) -> tuple[Question, ...]:
    """The questions of `split`; only the (un)ambiguous ones when `ambiguous` is given."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    return tuple(
        q for q in all_questions() if split_of(q.name) == split and (ambiguous is None or q.ambiguous == ambiguous)
    )


def draw_question(seed: int, split: str, ambiguous_share: float = 0.5) -> Question:
    """The question of `split` for `seed` (deterministic): ambiguous with probability `ambiguous_share`,
    uniform within the ambiguous or the unambiguous pool."""
    if not 0.0 <= ambiguous_share <= 1.0:
        raise ValueError(f"ambiguous_share must lie in [0, 1], got {ambiguous_share}")
    rng = random.Random(f"two_hop_qa:{split}:{seed}")
    pool = question_pool(split, rng.random() < ambiguous_share)
    return pool[rng.randrange(len(pool))]


def check_question(question: Question | tuple | list) -> Question:
    """`question` as a `Question` (a 4-tuple (name, city, role, attribute) is accepted); ValueError
    unless it asks about a company of the knowledge base with a known role and attribute."""
    try:
        q = question if isinstance(question, Question) else Question(*question)
        known = KB.company(q.name, q.city) is not None and q.role in ROLES and q.attribute in ATTRIBUTES
    except TypeError:  # not four fields, or unhashable ones
        known = False
    if not known:
        raise ValueError(f"not a question of the knowledge base: {question!r}")
    return q


def expert_actions(question: Question) -> list[str]:
    """The shortest solution, which copies only single names: hop 1 precise (the company's name and city
    copied from the question), hop 2 on the one person it lists, the answer."""
    return _actions(f"{question.name} in {question.city}", question, question.bridge)


def naive_actions(question: Question, rng: random.Random) -> list[str]:
    """Hop 1 imprecise (the name only), hop 2 on a candidate drawn uniformly from hop 1's results, ignoring
    the question's city, and the answer that search returns: right on every unambiguous question, on half
    of the ambiguous ones."""
    return _actions(question.name, question, rng.choice(question.candidates))


def demonstrator_actions(question: Question, rng: random.Random, precise_share: float) -> list[str]:
    """The imperfect demonstrator's actions on `question`: hop 1, hop 2 and the answer, with probability
    `precise_share` those of `expert_actions` (a precise hop 1, then its single candidate), else those of
    `naive_actions` (an imprecise hop 1, then a uniformly drawn candidate: the wrong one on half of the
    ambiguous questions). On an unambiguous question both answer right; only hop 1's query differs."""
    return expert_actions(question) if rng.random() < precise_share else naive_actions(question, rng)


def _actions(company: str, question: Question, person: str) -> list[str]:
    return [
        f"<tool_call> {TOOL} {company} {question.role} </tool_call>",
        f"<tool_call> {TOOL} {person} {question.attribute} </tool_call>",
        f"<answer> {KB.people[person][question.attribute]} </answer>",
    ]


class TwoHopQAEnv(TextEnv):
    """One two-hop question per reset (see the module docstring for rules, ambiguity and rewards).

    `reset(seed)` poses question `seed` of the split; `options={"question": q}` poses `q` (a
    `Question` or a (name, city, role, attribute) tuple).
    """

    stop_tags = ("</tool_call>", "</answer>")

    invalid_penalty = 0.0  # a training loop that wants an invalid-action penalty applies it

    def __init__(self, split: str = "train", ambiguous_share: float = 0.5, max_tool_calls: int = 3, max_turns: int = 4):
        super().__init__()
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        if not 0.0 <= ambiguous_share <= 1.0:
            raise ValueError(f"ambiguous_share must lie in [0, 1], got {ambiguous_share}")
        if max_tool_calls < 0 or max_turns < 1:
            raise ValueError(f"need max_tool_calls >= 0 and max_turns >= 1, got {max_tool_calls}, {max_turns}")
        self.split, self.ambiguous_share = split, ambiguous_share
        self.max_tool_calls, self.max_turns = max_tool_calls, max_turns
        self.question = draw_question(0, split, ambiguous_share)
        self.calls: list[tuple[str, str]] = []  # (arguments, result) of each search made

    def _reset(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if "question" in options:
            self.question = check_question(options["question"])
        else:
            self.question = draw_question(seed, self.split, self.ambiguous_share)
        self.calls = []
        return f"<question> {self.question.text()} </question>", self._info()

    def _info(self, **extra: Any) -> dict[str, Any]:
        q = self.question
        info = {"answer": q.answer, "bridge": q.bridge, "ambiguous": q.ambiguous, "success": False}
        return {**info, "tool_calls": len(self.calls), **extra}

    def valid_action(self, rng: random.Random) -> str:
        """The expert's next action (`expert_actions`: the precise hop 1, hop 2, then the answer), or with
        probability one half an answer drawn from the question's words (valid, and most likely wrong)."""
        if rng.random() < 0.5:
            return f"<answer> {rng.choice(self.question.text().split())} </answer>"
        return expert_actions(self.question)[min(len(self.calls), 2)]

    def reward_range(self) -> tuple[float, float]:
        """1 on success, 0 otherwise, or the invalid-action penalty."""
        return (min(self.invalid_penalty, 0.0), 1.0)

    def anchor(self) -> tuple:
        return (self.question, tuple(self.calls))

    def problem_key(self) -> Question:
        return self.question

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if calls_tool(action):
            return self._search(action)
        given = extract_tag(action, "answer")
        if not given:
            return self._invalid("invalid action")
        correct = " ".join(given.split()) == self.question.answer
        return "", float(correct), True, self._info(success=correct, given=given)

    def _search(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        words = (extract_tag(action, "tool_call") or "").split()
        if len(words) < 3 or words[0] != TOOL:  # the tool's name, an entity, a relation
            return self._invalid("invalid action")
        if len(self.calls) >= self.max_tool_calls:
            return self._invalid("tool limit")
        arguments = " ".join(words[1:])
        result = tools.call(TOOL, arguments)
        if result.startswith("error"):  # cannot happen with 2+ argument words; kept out of the vocabulary
            return self._invalid("invalid action")
        self.calls.append((arguments, result))
        info = self._info(tool_result=result, precise=knowledge_base.is_precise(arguments))
        return f"<tool_response> {result} </tool_response>", 0.0, False, info

    def _invalid(self, message: str) -> tuple[str, float, bool, dict[str, Any]]:
        # Returned rather than raised as InvalidAction so that info carries the same keys as every step.
        return self.feedback(message), self.invalid_penalty, False, self._info(valid=False, error=message)


register("two_hop_qa", TwoHopQAEnv)


def demonstrator_episodes(env: TwoHopQAEnv, task_seeds: list[int], seed: int, precise_share: float) -> list[Dialogue]:
    """Chapter 08's imperfect demonstrator (`demonstrator_actions`) played in `env` on `task_seeds` (deterministic
    for `seed`): two searches, each answered by the tool, then the answer."""
    rng, episodes = random.Random(seed), []
    for task_seed in task_seeds:
        prompt, _ = env.reset(seed=task_seed)
        episode = [("user", prompt)]
        for action in demonstrator_actions(env.question, rng, precise_share):
            observation, *_ = env.step(action)
            episode += [("assistant", action)] + ([("tool", observation)] if observation else [])
        episodes.append(episode)
    return episodes
