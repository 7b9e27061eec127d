"""`function_calling`: single-step tool calling scored by ToolRL's reward (chapter 05).

Eight tools with typed parameters (`TOOLS`). A query names one or two intents with their slot
values, e.g. `<question> weather in paris on monday and call anna </question>`; the answer is

    <think> ... </think> <tool_call> { name : get_weather , args : { city : paris , day : monday } }
    { name : call_contact , args : { person : anna } } </tool_call>

or, for a query no tool fits (`tell me a joke`), `<think> ... </think> <response> no tool fits
</response>`. As in ToolRL, no tool is executed: the predicted calls are compared with the true
ones inside the reward (`course_lib.envs.toolrl_reward`), and the episode ends after one action.

Three splits. For every tool, a quarter of its `(parameter, value)` pairs are held out: they occur
only in `novel` queries (every value itself is seen in training, in other tools or slots), so
`novel` success measures whether the policy puts a value into a slot where it never saw it (claim
C5.4). The other queries are split by a hash of their text into `train` and `test` (held-out
instances of seen pairs, claims C5.1 to C5.3). The five chit-chat queries that fit no tool occur in
every split.

The reward may depend on the training step (the scale schedules): it reads the environment's
`training_step`, which `train.train_grpo` sets to the GRPO iteration before each rollout.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import asdict, dataclass
from typing import Any

from course_lib.envs import register
from course_lib.envs.base import TextEnv, extract_tag
from course_lib.envs.toolrl_reward import (
    Call,
    RewardSpec,
    format_ok,
    parse_calls,
    render_call,
    same_calls,
    toolrl_reward,
)

VALUES: dict[str, tuple[str, ...]] = {
    "city": ("paris", "rome", "tokyo", "lima", "oslo", "cairo", "delhi", "quito"),
    "day": ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"),
    "hour": tuple(str(h) for h in range(1, 13)),
    "person": ("anna", "ben", "carla", "dev", "emma", "farid", "gina", "hugo"),
    "dish": ("pizza", "sushi", "curry", "ramen", "tacos", "salad"),
    "count": tuple(str(n) for n in range(13, 21)),
    "currency": ("usd", "eur", "yen", "gbp", "inr"),
}

# name -> ((parameter, type, cue word before the value in a query), ...), and the intent words.
TOOLS: dict[str, tuple[tuple[tuple[str, str, str], ...], str]] = {
    "get_weather": ((("city", "city", "in"), ("day", "day", "on")), "weather"),
    "book_taxi": ((("origin", "city", "from"), ("destination", "city", "to"), ("time", "hour", "at")), "taxi"),
    "set_alarm": ((("time", "hour", "at"), ("day", "day", "on")), "alarm"),
    "send_message": ((("recipient", "person", "to"), ("topic", "dish", "about")), "message"),
    "order_food": ((("dish", "dish", "of"), ("quantity", "count", "portions")), "order"),
    "convert_currency": (
        (("amount", "count", "convert"), ("source", "currency", "from"), ("target", "currency", "to")),
        "money",
    ),
    "find_restaurant": ((("cuisine", "dish", "for"), ("city", "city", "in")), "restaurant"),
    "call_contact": ((("person", "person", "call"),), "phone"),
}
CHITCHAT = ("tell me a joke", "how are you", "what is love", "sing a song", "who made you")
NO_TOOL = "no tool fits"
THOUGHTS = ("user", "wants", "needs", "asks", "the", "tool", "for", "and", "then", "so", "use", "call", "check")


def vocabulary() -> list[str]:
    """Every word the queries, answers and thoughts use, besides the tokenizer's tags."""
    words = ["{", "}", ":", ",", "name", "args", "?"]
    words += [w for values in VALUES.values() for w in values]
    for name, (params, intent) in TOOLS.items():
        words += [name, intent, *[p for p, _, _ in params], *[cue for _, _, cue in params]]
    words += [w for text in CHITCHAT for w in text.split()] + NO_TOOL.split() + list(THOUGHTS)
    return list(dict.fromkeys(words))


def held_out(tool: str, param: str, value: str, fraction: float = 0.25) -> bool:
    """Whether the pair `(tool.param, value)` is reserved for the test split."""
    return _hash_fraction(f"{tool}.{param}={value}") < fraction


@dataclass(frozen=True)
class Task:
    question: str
    calls: tuple[Call, ...]
    """True calls; empty when no tool fits."""


def _phrase(name: str, args: dict[str, str]) -> str:
    params, intent = TOOLS[name]
    parts = [intent]
    for param, _, cue in params:
        parts += [args[param], cue] if cue == "portions" else [cue, args[param]]
    return " ".join(parts)


SPLITS = ("train", "test", "novel")


def _hash_fraction(text: str) -> float:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") / 2**32


def split_of(question: str, calls: list[tuple[str, dict[str, str]]]) -> str:
    """`novel` if a call uses a held-out pair, else `test` for a tenth of questions, else `train`."""
    if any(held_out(n, p, v) for n, a in calls for p, v in a.items()):
        return "novel"
    return "test" if _hash_fraction(question) < 0.1 else "train"


@dataclass(frozen=True)
class TaskMix:
    """Shares of query kinds: no tool fits, two calls, three calls (one call gets the rest)."""

    no_tool_share: float = 0.15
    two_call_share: float = 0.4
    three_call_share: float = 0.0

    def __post_init__(self):
        shares = (self.no_tool_share, self.two_call_share, self.three_call_share)
        if min(shares) < 0 or self.two_call_share + self.three_call_share > 1 or self.no_tool_share > 1:
            raise ValueError(f"task shares must be probabilities, got {self}")

    def draw(self, seed: int, split: str) -> Task:
        """`draw_task` with this mix's shares."""
        return draw_task(seed, split, **asdict(self))


def draw_task(
    seed: int, split: str, no_tool_share: float = 0.15, two_call_share: float = 0.4, three_call_share: float = 0.0
) -> Task:
    """The seed-th task of `split` (deterministic; see `split_of`). The shares are those of `TaskMix`;
    the call shares apply to queries a tool fits."""
    rng = random.Random(f"fc:{split}:{seed}")
    if rng.random() < no_tool_share:
        return Task(f"<question> {rng.choice(CHITCHAT)} </question>", ())
    draw = rng.random()
    count = 3 if draw < three_call_share else 2 if draw < three_call_share + two_call_share else 1
    while True:
        names = rng.sample(sorted(TOOLS), count)
        calls = []
        for name in names:
            params, _ = TOOLS[name]
            args: dict[str, str] = {}
            for param, kind, _ in params:
                choices = [v for v in VALUES[kind] if v not in args.values()]
                args[param] = rng.choice(choices)
            calls.append((name, args))
        question = f"<question> {' and '.join(_phrase(n, a) for n, a in calls)} </question>"
        if split_of(question, calls) == split:
            return Task(question, tuple((n, tuple(a.items())) for n, a in calls))


def answer_text(task: Task, thought: list[str]) -> str:
    """The canonical correct response with `thought` as its think content."""
    think = " ".join(["<think>", *thought, "</think>"])
    if not task.calls:
        return f"{think} <response> {NO_TOOL} </response>"
    return f"{think} <tool_call> {' '.join(render_call(n, a) for n, a in task.calls)} </tool_call>"


class FunctionCallingEnv(TextEnv):
    """One query, one response; reward = ToolRL's reward (`spec`) at `training_step`.

    `info` carries the reward components, `success` (format right and calls exactly right, or a
    well-formed direct response when no tool fits), `called` (whether a call block parsed) and
    `valid`: the response holds at least one parseable call or a non-empty `<response>` block. As in
    the other environments, empty or untagged text is not valid; unlike them, an invalid response is
    not penalised here beyond ToolRL's own reward (format low, correctness -3 when a call was due).
    """

    stop_tags = ("</tool_call>", "</response>")

    max_turns = 1

    def __init__(self, split: str = "train", spec: RewardSpec | None = None, mix: TaskMix | None = None):
        super().__init__()
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        self.split = split
        self.spec = spec or RewardSpec()
        self.mix = mix or TaskMix()
        self.task = Task("", ())

    def _reset(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.task = options["task"] if "task" in options else self.mix.draw(seed, self.split)
        return self.task.question, {"calls": self.task.calls}

    def valid_action(self, rng: random.Random) -> str:
        """A direct response (valid for every question; right only when no tool fits)."""
        return f"<response> {NO_TOOL} </response>"

    def anchor(self) -> tuple:
        return (self.task.question, self.turn)

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        truth = list(self.task.calls)
        parts = toolrl_reward(action, truth, self.spec, self.training_step)
        predicted = parse_calls(action)
        success = format_ok(action, "tool_call" if truth else "response") and (
            not truth or same_calls(truth, predicted or [])
        )
        # The base class would mark every action that does not raise as valid; raising `InvalidAction` instead
        # would swap ToolRL's reward for `invalid_penalty`, so the flag is set here and the reward left alone.
        valid = bool(predicted) or bool(extract_tag(action, "response"))
        info = {
            **{f"r_{k}": v for k, v in parts.items()},
            "success": success,
            "called": predicted is not None,
            "valid": valid,
        }
        return "", parts["total"], True, info


register("function_calling", FunctionCallingEnv)
