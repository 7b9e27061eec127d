"""Planner-R1's plan validator and staged, shaped reward (Zhu et al., arXiv 2509.25779; chapter 03).

A plan is a JSON-like object of words inside `<answer>`, for a trip from `origin` to `destination`:

    { go : fl7 , stay : ac3 , eat : [ rs5 , rs6 ] }

`go` is one transport (flight or ground), `stay` one accommodation for the whole trip (`days - 1`
nights), `eat` one restaurant per day. `check_plan` validates it against the sandbox, in
TravelPlanner's three layers:

* schema: the text parses, the keys are exactly `go`, `stay`, `eat`, `go`/`stay` are words and
  `eat` a list of words;
* commonsense (always N_cs = 6): every entity exists in the sandbox; the transport goes from the
  origin to the destination; the stay and every restaurant are in the destination; one restaurant
  per day; no restaurant twice; the stay's minimum nights are met;
* hard, the user's constraints (N_hard = 1 + number specified): total cost within budget, and
  where the query asks, a restaurant of the required cuisine, the required room type, and the
  transport restriction (`no_flight` or `no_ground`).

The six reward terms (paper's Section 3) and the total

    r_schema = 1[schema valid]            r_cs^micro = S_cs / N_cs         r_hard^micro = S_hard / N_hard
    r_cs^macro = 1[r_cs^micro = 1]        r_hard^macro = 1[r_hard^micro = 1]
    r_pass = 1[schema and every commonsense and every hard constraint]
    R = Σ_k λ_k r_k

An unparseable plan scores 0 on every term (its constraints cannot be checked). `STAGES` gives the
λ of the paper's three stages: 1 dense (all λ = 1), 2 macro terms only, 3 final pass only; the
exact λ table of the paper is unverified, these follow its description. `curriculum` maps a
training iteration to a stage for the 1 -> 2 -> 3 schedule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from course_lib.tools.travel import WORLD, World

TERMS = ("schema", "cs_micro", "cs_macro", "hard_micro", "hard_macro", "pass")
STAGES: dict[int, dict[str, float]] = {
    1: {term: 1.0 for term in TERMS},
    2: {"cs_macro": 1.0, "hard_macro": 1.0},
    3: {"pass": 1.0},
}
"""λ per stage (terms not listed have λ = 0)."""

COMMONSENSE = ("within_sandbox", "transport_route", "right_city", "one_meal_per_day", "no_repeat", "min_nights")
HARD = ("budget", "cuisine", "room", "transport")
PUNCTUATION = ("{", "}", "[", "]", ",", ":")
PLAN_KEYS = ("go", "stay", "eat")


@dataclass(frozen=True)
class Query:
    """A trip request: from `origin` to `destination` for `days` days within `budget`; `cuisine`,
    `room` and `transport` are `any` when the user does not constrain them."""

    origin: str
    destination: str
    days: int
    budget: int
    cuisine: str = "any"
    room: str = "any"
    transport: str = "any"
    """`any`, `no_flight` or `no_ground`."""

    @property
    def nights(self) -> int:
        return self.days - 1

    def text(self) -> str:
        return (
            f"{self.origin} to {self.destination} days {self.days} budget {self.budget} "
            f"cuisine {self.cuisine} room {self.room} transport {self.transport}"
        )

    def hard_constraints(self) -> list[str]:
        """Names of the active hard constraints (budget always)."""
        return ["budget"] + [name for name in HARD[1:] if getattr(self, name) != "any"]


@dataclass
class PlanCheck:
    """What `check_plan` found: schema validity and each constraint's outcome, in order."""

    schema: bool
    commonsense: dict[str, bool] = field(default_factory=dict)
    hard: dict[str, bool] = field(default_factory=dict)
    cost: int | None = None
    """Total cost when every entity exists, else None."""

    @property
    def passed(self) -> bool:
        return self.schema and all(self.commonsense.values()) and all(self.hard.values())


# Parsing -------------------------------------------------------------------------------------
def parse_plan(text: str | None) -> object | None:
    """The JSON-like value of `text` (dicts, lists, words), or None when it does not parse whole."""
    if not isinstance(text, str):
        return None
    tokens = text.split()
    try:
        value, end = _parse_value(tokens, 0, depth=0)
    except (IndexError, ValueError):
        return None
    return value if end == len(tokens) else None


def _parse_value(tokens: list[str], at: int, depth: int) -> tuple[object, int]:
    if depth > 8:
        raise ValueError("too deep")
    token = tokens[at]
    if token == "{":
        result: dict[str, object] = {}
        at += 1
        if tokens[at] == "}":
            return result, at + 1
        while True:
            key = tokens[at]
            if key in PUNCTUATION or tokens[at + 1] != ":" or key in result:
                raise ValueError("bad key")
            result[key], at = _parse_value(tokens, at + 2, depth + 1)
            if tokens[at] == "}":
                return result, at + 1
            if tokens[at] != ",":
                raise ValueError("expected ,")
            at += 1
    if token == "[":
        items: list[object] = []
        at += 1
        if tokens[at] == "]":
            return items, at + 1
        while True:
            item, at = _parse_value(tokens, at, depth + 1)
            items.append(item)
            if tokens[at] == "]":
                return items, at + 1
            if tokens[at] != ",":
                raise ValueError("expected ,")
            at += 1
    if token in PUNCTUATION:
        raise ValueError("unexpected punctuation")
    return token, at + 1


def schema_valid(plan: object) -> bool:
    """Keys exactly `go`, `stay`, `eat`; `go` and `stay` words; `eat` a list of words."""
    return (
        isinstance(plan, dict)
        and sorted(plan) == sorted(PLAN_KEYS)
        and isinstance(plan["go"], str)
        and isinstance(plan["stay"], str)
        and isinstance(plan["eat"], list)
        and all(isinstance(item, str) for item in plan["eat"])
    )


# Validation ----------------------------------------------------------------------------------
def check_plan(text: str | None, query: Query, world: World = WORLD) -> PlanCheck:
    """Validate the plan `text` (the content of `<answer>`) for `query`; never raises."""
    plan = parse_plan(text)
    if not schema_valid(plan):
        return PlanCheck(schema=False)
    go = world.transports.get(plan["go"])
    stay = world.accommodations.get(plan["stay"])
    meals = [world.restaurants.get(name) for name in plan["eat"]]
    exists = go is not None and stay is not None and all(m is not None for m in meals)
    commonsense = {
        "within_sandbox": exists,
        "transport_route": go is not None and (go.origin, go.destination) == (query.origin, query.destination),
        "right_city": stay is not None
        and stay.city == query.destination
        and all(m is not None and m.city == query.destination for m in meals),
        "one_meal_per_day": len(meals) == query.days,
        "no_repeat": len(set(plan["eat"])) == len(plan["eat"]),
        "min_nights": stay is not None and stay.min_nights <= query.nights,
    }
    cost = go.price + query.nights * stay.price + sum(m.price for m in meals) if exists else None
    outcomes = {
        "budget": cost is not None and cost <= query.budget,
        "cuisine": any(m is not None and m.cuisine == query.cuisine for m in meals),
        "room": stay is not None and stay.room == query.room,
        "transport": go is not None
        and (go.mode != "flight" if query.transport == "no_flight" else go.mode == "flight"),
    }
    hard = {name: outcomes[name] for name in query.hard_constraints()}
    return PlanCheck(schema=True, commonsense=commonsense, hard=hard, cost=cost)


# Reward ----------------------------------------------------------------------------------------
def reward_terms(check: PlanCheck) -> dict[str, float]:
    """The six terms of the paper's Section 3 (all 0 for a schema-invalid plan)."""
    if not check.schema:
        return {term: 0.0 for term in TERMS}
    cs_micro = sum(check.commonsense.values()) / len(check.commonsense)
    hard_micro = sum(check.hard.values()) / len(check.hard)
    return {
        "schema": 1.0,
        "cs_micro": cs_micro,
        "cs_macro": float(cs_micro == 1.0),
        "hard_micro": hard_micro,
        "hard_macro": float(hard_micro == 1.0),
        "pass": float(check.passed),
    }


def staged_reward(terms: dict[str, float], stage: int) -> float:
    """R = Σ λ_k r_k with the λ of `stage` (1 dense, 2 macro, 3 pass only)."""
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {sorted(STAGES)}, got {stage!r}")
    return sum(weight * terms[term] for term, weight in STAGES[stage].items())


def curriculum(iterations: int, stages: tuple[int, ...] = (1, 2, 3)) -> Callable[[int], int]:
    """Stage of each training iteration: `stages` in equal consecutive thirds (or parts) of `iterations`."""
    if iterations < 1 or not stages:
        raise ValueError("curriculum needs at least one iteration and one stage")

    def stage_at(iteration: int) -> int:
        part = min(max(iteration, 0) * len(stages) // iterations, len(stages) - 1)
        return stages[part]

    return stage_at


# Failure breakdown (C3.5) ---------------------------------------------------------------------
FAILURE_CATEGORIES = ("format", "hallucinated entity", "wrong tool", "commonsense bookkeeping", "budget", "preference")


def failure_category(check: PlanCheck | None) -> str | None:
    """The first reason a plan fails, in this order; None for a passing plan.

    `format`: no answer (None) or schema invalid; `hallucinated entity`: a name outside the sandbox
    or in the wrong city or route; `wrong tool`: the transport breaks the restriction (the policy
    searched the forbidden mode); `commonsense bookkeeping`: meals per day, a repeated restaurant,
    minimum nights; `budget`: over budget; `preference`: cuisine or room type.
    """
    if check is None or not check.schema:
        return "format"
    if check.passed:
        return None
    cs, hard = check.commonsense, check.hard
    if not (cs["within_sandbox"] and cs["transport_route"] and cs["right_city"]):
        return "hallucinated entity"
    if not hard.get("transport", True):
        return "wrong tool"
    if not all(cs.values()):
        return "commonsense bookkeeping"
    if not hard["budget"]:
        return "budget"
    return "preference"
