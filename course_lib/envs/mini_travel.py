"""`mini_travel`: a miniature TravelPlanner episode with Planner-R1's seven tools (chapter 03).

The prompt is a trip request (see `planner_reward.Query`):

    <question> arden to belmar days 2 budget 14 cuisine thai room any transport no_flight </question>

The policy searches the sandbox (`course_lib.tools.travel`) with tool calls, then answers with a
plan; a good episode takes four turns:

    <tool_call> search_ground_transportation arden belmar </tool_call>
        -> <tool_response> gt9 bus 2 ; gt10 taxi 6 </tool_response>
    <tool_call> search_accommodations belmar </tool_call>
        -> <tool_response> ac3 private 4 min 1 ; ... </tool_response>
    <tool_call> search_restaurants belmar </tool_call>
        -> <tool_response> rs4 thai 2 ; ... </tool_response>
    <answer> { go : gt9 , stay : ac3 , eat : [ rs4 , rs6 ] } </answer>

A tool call is `<tool_call> TOOL ARGUMENTS </tool_call>`; a failing call (unknown tool, bad
arguments) returns `<tool_response> error </tool_response>`. An action that is neither a call nor
an answer gets feedback and `invalid_penalty`. The answer ends the episode with Planner-R1's
staged reward (`planner_reward`) of the chosen `stage`; `stage` may also be a function of
the training iteration (`training_step`, which `train_grpo` sets before each rollout), which is
how the 1 -> 2 -> 3 curriculum is run. No answer within `max_turns` earns 0.

Queries are drawn so that a feasible plan exists; the budget is the cheapest feasible plan's cost
plus a random slack (with no transport rule, the dearer of the cheapest flight-only and
ground-only plans, so that either kind of transport can fit). Queries are split into train and
test by a hash of their text.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Callable
from typing import Any

from course_lib import tools
from course_lib.envs import register
from course_lib.envs.base import InvalidAction, TextEnv, calls_tool, extract_tag, parse_call
from course_lib.envs.planner_reward import (
    PUNCTUATION,
    Query,
    check_plan,
    failure_category,
    reward_terms,
    staged_reward,
)
from course_lib.tools.travel import CITIES, CUISINES, GROUND_MODES, ROOM_TYPES, TOOL_NAMES, WORLD, World

DAYS = (2, 3)
TRANSPORT_RULES = ("any", "no_flight", "no_ground")
MAX_NUMBER = 60
QUERY_WORDS = ("to", "days", "budget", "cuisine", "room", "transport", "any", "no_flight", "no_ground")
PLAN_WORDS = ("go", "stay", "eat")
OTHER_WORDS = ("min", ";", "none", "flight", "error", "invalid", "action", "tool", "limit", "+", "-", "*")


def vocabulary(world: World = WORLD) -> list[str]:
    """Every word the environment, its tools and the demonstrations use, besides the tags."""
    numbers = [str(n) for n in range(MAX_NUMBER + 1)]
    return [
        *numbers, *CITIES, *ROOM_TYPES, *CUISINES, *GROUND_MODES, *TOOL_NAMES, *world.entity_names(),
        *QUERY_WORDS, *PLAN_WORDS, *PUNCTUATION, *OTHER_WORDS,
    ]  # fmt: skip


def cheapest_plan(query: Query, world: World = WORLD) -> tuple[int, dict] | None:
    """`(cost, plan)` of the cheapest plan meeting every constraint except the budget, or None."""
    best = None
    goes = {"any": world.flights, "no_ground": world.flights, "no_flight": world.ground}[query.transport]
    options = goes(query.origin, query.destination)
    if query.transport == "any":
        options = options + world.ground(query.origin, query.destination)
    stays = [
        a for a in world.stays(query.destination) if a.min_nights <= query.nights and query.room in ("any", a.room)
    ]
    meals = world.meals(query.destination)
    for go, stay, eat in itertools.product(options, stays, itertools.combinations(meals, query.days)):
        if query.cuisine != "any" and all(m.cuisine != query.cuisine for m in eat):
            continue
        cost = go.price + query.nights * stay.price + sum(m.price for m in eat)
        if best is None or cost < best[0]:
            best = (cost, {"go": go.name, "stay": stay.name, "eat": [m.name for m in eat]})
    return best


def split_of(query: Query, test_fraction: float = 0.2) -> str:
    digest = hashlib.sha256(query.text().encode()).digest()
    return "test" if int.from_bytes(digest[:4], "big") < test_fraction * 2**32 else "train"


def draw_query(seed: int, split: str = "train", max_slack: int = 8, constrain_share: float = 0.5) -> Query:
    """The feasible query of `split` for `seed`. Each of cuisine, room and transport is constrained
    with probability `constrain_share`; the budget is the cheapest feasible cost (see the module
    docstring) plus a slack in `[0, max_slack]`."""
    rng = random.Random(f"travel:{split}:{seed}")
    while True:
        origin, destination = rng.sample(CITIES, 2)
        days = rng.choice(DAYS)
        cuisine = rng.choice(CUISINES) if rng.random() < constrain_share else "any"
        room = rng.choice(ROOM_TYPES) if rng.random() < constrain_share else "any"
        transport = rng.choice(TRANSPORT_RULES[1:]) if rng.random() < constrain_share else "any"
        rules = [transport] if transport != "any" else ["no_ground", "no_flight"]
        cheapest = [cheapest_plan(Query(origin, destination, days, 0, cuisine, room, rule)) for rule in rules]
        if None in cheapest:
            continue
        # With no transport rule, either kind of transport can fit the budget.
        budget = max(cost for cost, _ in cheapest) + rng.randint(0, max_slack)
        if budget > MAX_NUMBER:
            continue
        query = Query(origin, destination, days, budget, cuisine, room, transport)
        if split_of(query) == split:
            return query


class MiniTravelEnv(TextEnv):
    """Search the travel sandbox, then answer with a plan (see the module docstring)."""

    stop_tags = ("</tool_call>", "</answer>")

    def __init__(
        self,
        split: str = "train",
        stage: int | Callable[[int], int] = 1,
        max_turns: int = 6,
        max_tool_calls: int = 5,
        invalid_penalty: float = -0.1,
        max_slack: int = 8,
        constrain_share: float = 0.5,
    ):
        super().__init__()
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        self.split, self.stage = split, stage
        self.max_turns, self.max_tool_calls = max_turns, max_tool_calls
        self.invalid_penalty = invalid_penalty
        self.max_slack, self.constrain_share = max_slack, constrain_share
        self.query = Query(CITIES[0], CITIES[1], DAYS[0], 0)
        self.calls: list[tuple[str, str, str]] = []
        self.past_tokens = 0

    def token_count(self) -> int:
        """Tokens of every episode this environment has run, the current one included (BOS, prompt,
        actions and observations; one token per word), for compute accounting."""
        words = sum(len(text.split()) for text in (*self.transcript.observations, *self.transcript.actions))
        return self.past_tokens + (words + 1 if self.transcript.observations else 0)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self.past_tokens = self.token_count()
        return super().reset(seed, options)

    def current_stage(self) -> int:
        """The reward stage of the running episode."""
        return self.stage(self.training_step) if callable(self.stage) else self.stage

    def _reset(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.query = options.get("query") or draw_query(seed, self.split, self.max_slack, self.constrain_share)
        self.calls = []
        return f"<question> {self.query.text()} </question>", {"query": self.query}

    def valid_action(self, rng: random.Random) -> str:
        """A plan (valid, though it fails the checks): the episode's one valid step that costs no tool call."""
        return "<answer> none </answer>"

    def anchor(self) -> tuple:
        return (self.query, tuple((tool, arguments) for tool, arguments, _ in self.calls))

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if calls_tool(action):
            return self._tool_call(action)
        plan = extract_tag(action, "answer")
        if plan is None:
            raise InvalidAction("invalid action")
        check = check_plan(plan, self.query)
        terms = reward_terms(check)
        info = {
            "success": check.passed,
            "check": check,
            "failure": failure_category(check),
            "stage": self.current_stage(),
            "tool_calls": len(self.calls),
            **{f"r_{k}": v for k, v in terms.items()},
        }
        return "", staged_reward(terms, self.current_stage()), True, info

    def _tool_call(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        tool, arguments = parse_call(action)
        if len(self.calls) >= self.max_tool_calls:
            raise InvalidAction("tool limit")
        result = tools.call(tool, arguments).strip() if tool in TOOL_NAMES else "error"
        if tool == "calculator" and not (result.isdigit() and int(result) <= MAX_NUMBER):
            result = "error"  # the vocabulary has a word for each integer in [0, MAX_NUMBER] only
        if result.startswith("error"):
            result = "error"
        self.calls.append((tool, arguments, result))
        return f"<tool_response> {result} </tool_response>", 0.0, False, {"tool_result": result, "tool": tool}


register("mini_travel", MiniTravelEnv)
