"""`price_tools`: a multi-turn task with two tools, a price table and a calculator (chapter 06, ARTIST).

A question names two goods and an operation, `<question> tamivo + rusaka </question>`. The policy
cannot know the prices (they live in the `lookup` tool's table) and cannot add two-digit numbers in
its head (one token per integer), so a solved episode takes four turns:

    <think> tamivo + rusaka </think> <tool_call> lookup tamivo </tool_call>  -> <tool_response> 23 </tool_response>
    <tool_call> lookup rusaka </tool_call>                                   -> <tool_response> 41 </tool_response>
    <tool_call> python 23 + 41 </tool_call>                                  -> <tool_response> 64 </tool_response>
    <answer> 64 </answer>

A tool call is `<tool_call> TOOL ARGUMENTS </tool_call>` with TOOL `lookup` or `python`. Calls fail
with `<tool_response> error </tool_response>` when the policy makes them wrongly (unknown tool or
key, malformed expression) and, to make recovery matter, *transiently*: a call the episode has not
made before fails with probability `failure_rate` (think of a rate-limited service); the same call
made again goes through. These induced failures are part of both training and evaluation.

ARTIST's reward (arXiv 2505.01441; constants ours) is paid when the policy answers:

    R = w_answer * [answer correct] + w_format * [well-formed episode] + w_tool * (successful calls / calls)

A well-formed episode opens with a `<think>` block and every action parses. No answer within
`max_turns` actions earns 0. Problems are split into train and test sets by a hash of the problem.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from course_lib import tools
from course_lib.envs import register
from course_lib.envs.base import InvalidAction, TextEnv, calls_tool, extract_tag, parse_call
from course_lib.tools.lookup_table import PRICE_RANGE, TABLE

OPERATORS = ("+", "-")
TOOL_NAMES = ("lookup", "python")
NUMBER_RANGE = (PRICE_RANGE[0] - PRICE_RANGE[1], 2 * PRICE_RANGE[1])
FEEDBACK_WORDS = ("invalid", "action", "error", "tool", "limit")


def vocabulary() -> list[str]:
    """Every word this environment and its demonstrations use, besides the tokenizer's tags."""
    numbers = [str(n) for n in range(NUMBER_RANGE[0], NUMBER_RANGE[1] + 1)]
    return numbers + list(TABLE) + list(OPERATORS) + list(TOOL_NAMES) + list(FEEDBACK_WORDS)


def split_of(x: str, op: str, y: str, test_fraction: float = 0.15) -> str:
    """`test` for a fixed pseudo-random share of all problems, else `train`."""
    digest = hashlib.sha256(f"{x}{op}{y}".encode()).digest()
    return "test" if int.from_bytes(digest[:4], "big") < test_fraction * 2**32 else "train"


def draw_problem(seed: int, split: str) -> tuple[str, str, str]:
    """The problem `(x, op, y)` of `split` for `seed`: two different goods and an operator."""
    rng = random.Random(f"prices:{split}:{seed}")
    names = sorted(TABLE)
    while True:
        x, y = rng.sample(names, 2)
        op = rng.choice(OPERATORS)
        if split_of(x, op, y) == split:
            return x, op, y


def solve(x: str, op: str, y: str) -> int:
    return TABLE[x] + TABLE[y] if op == "+" else TABLE[x] - TABLE[y]


class PriceToolsEnv(TextEnv):
    """Look up two prices, combine them with the calculator, answer (see the module docstring)."""

    stop_tags = ("</tool_call>", "</answer>")

    invalid_penalty = 0.0  # the format term of the reward already charges for malformed actions

    def __init__(
        self,
        split: str = "train",
        failure_rate: float = 0.3,
        max_turns: int = 9,
        max_tool_calls: int = 7,
        w_answer: float = 1.0,
        w_format: float = 0.1,
        w_tool: float = 0.2,
    ):
        super().__init__()
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        if not 0.0 <= failure_rate <= 1.0:
            raise ValueError("failure_rate must be in [0, 1]")
        self.split, self.failure_rate = split, failure_rate
        self.max_turns, self.max_tool_calls = max_turns, max_tool_calls
        self.w_answer, self.w_format, self.w_tool = w_answer, w_format, w_tool
        self.problem = ("", "+", "")
        self._reset_state(0)

    def _reset_state(self, seed: int) -> None:
        self.rng = random.Random(f"failures:{self.split}:{seed}")
        self.calls: list[tuple[str, str, str]] = []  # (tool, arguments, result) per executed call
        self.invalid_actions = 0
        self.opened_with_think = False

    def _reset(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.problem = tuple(options["problem"]) if "problem" in options else draw_problem(seed, self.split)
        self._reset_state(seed)
        x, op, y = self.problem
        return f"<question> {x} {op} {y} </question>", {"answer": solve(*self.problem)}

    def valid_action(self, rng: random.Random) -> str:
        """An answer (valid, right or wrong): the episode's one valid step that costs no tool call."""
        return f"<answer> {rng.randrange(10)} </answer>"

    def anchor(self) -> tuple:
        return (*self.problem, tuple(result for _, _, result in self.calls))

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.turn == 0 and isinstance(action, str):
            self.opened_with_think = action.lstrip().startswith("<think>") and "</think>" in action
        obs, reward, terminated, truncated, info = super().step(action)
        self.invalid_actions += not info["valid"]
        return obs, reward, terminated, truncated, info

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if calls_tool(action):
            return self._tool_call(action)
        answer = extract_tag(action, "answer")
        if answer is None or not answer.lstrip("-").isdigit():
            raise InvalidAction("invalid action")
        return self._finish(int(answer) == solve(*self.problem))

    def _tool_call(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        tool, arguments = parse_call(action)
        if len(self.calls) >= self.max_tool_calls:
            raise InvalidAction("tool limit")
        repeated = any(t == tool and a == arguments for t, a, _ in self.calls)
        if not repeated and self.rng.random() < self.failure_rate:
            result = "error"  # transient failure: the same call made again will go through
        elif tool not in TOOL_NAMES:
            result = "error"
        else:
            result = tools.call(tool, arguments).strip()
            # The vocabulary has a word for every integer in range and for "error", nothing else.
            if not (result.lstrip("-").isdigit() and NUMBER_RANGE[0] <= int(result) <= NUMBER_RANGE[1]):
                result = "error"
        self.calls.append((tool, arguments, result))
        return f"<tool_response> {result} </tool_response>", 0.0, False, {"tool_result": result, "tool": tool}

    def reward_terms(self, correct: bool) -> dict[str, float]:
        """The three reward terms (unweighted) of an episode that answers now."""
        executed = sum(result != "error" for _, _, result in self.calls)
        well_formed = self.opened_with_think and self.invalid_actions == 0
        return {
            "answer": float(correct),
            "format": float(well_formed),
            "tool_exec": executed / len(self.calls) if self.calls else 0.0,
        }

    def _finish(self, correct: bool) -> tuple[str, float, bool, dict[str, Any]]:
        terms = self.reward_terms(correct)
        reward = self.w_answer * terms["answer"] + self.w_format * terms["format"] + self.w_tool * terms["tool_exec"]
        info = {"success": correct, "tool_calls": len(self.calls), **{f"r_{k}": v for k, v in terms.items()}}
        return "", reward, True, info


register("price_tools", PriceToolsEnv)
