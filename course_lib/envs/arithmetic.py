"""`tool_arithmetic`: three-digit addition and subtraction with a `python` tool (chapter 00).

A question such as `<question> 347 + 512 </question>` has one right answer. A 2-layer model with
one token per integer cannot add in its head (it would have to memorise 900x900 sums), but it can
copy the question into `<tool_call> 347 + 512 </tool_call>`, read `<tool_response> 859
</tool_response>` and copy the result into `<answer> 859 </answer>`. Whether to call the tool is
the decision RL has to learn.

Problems are split into train and held-out test sets by a hash of the problem, so no test problem
is ever seen in training. `reset(seed)` draws the seed-th problem of the split deterministically.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from course_lib import tools
from course_lib.envs import register
from course_lib.envs.base import Dialogue, InvalidAction, TextEnv, calls_tool, extract_tag

OPERAND_RANGE = (100, 999)
MAX_RESULT = 2 * OPERAND_RANGE[1]
OPERATORS = ("+", "-")
FEEDBACK_WORDS = ("invalid", "action", "error", "tool", "limit")


def vocabulary() -> list[str]:
    """Every word this environment and its demonstrations use, besides the tokenizer's tags."""
    return [str(n) for n in range(MAX_RESULT + 1)] + list(OPERATORS) + list(FEEDBACK_WORDS)


def split_of(a: int, op: str, b: int, test_fraction: float = 0.1) -> str:
    """`test` for a fixed pseudo-random tenth of all problems, else `train`."""
    digest = hashlib.sha256(f"{a}{op}{b}".encode()).digest()
    return "test" if int.from_bytes(digest[:4], "big") < test_fraction * 2**32 else "train"


def draw_problem(seed: int, split: str) -> tuple[int, str, int]:
    """The problem `(a, op, b)` of `split` for `seed` (deterministic; `a >= b` for subtraction)."""
    rng = random.Random(f"{split}:{seed}")
    while True:
        a, b = rng.randint(*OPERAND_RANGE), rng.randint(*OPERAND_RANGE)
        op = rng.choice(OPERATORS)
        if op == "-" and a < b:
            a, b = b, a
        if split_of(a, op, b) == split:
            return a, op, b


def solve(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b


class ToolArithmeticEnv(TextEnv):
    """One question; the policy may call `python` up to `max_tool_calls` times, then answers.

    Rewards: 1 for a correct `<answer>`, 0 for a wrong one, `invalid_penalty` for an action that is
    neither a tool call nor an answer (or a tool call over the limit). The episode is truncated
    after `max_turns` actions.
    """

    stop_tags = ("</tool_call>", "</answer>")

    def __init__(self, split: str = "train", max_tool_calls: int = 1, max_turns: int = 3):
        super().__init__()
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        self.split = split
        self.max_tool_calls = max_tool_calls
        self.max_turns = max_turns
        self.problem = (0, "+", 0)
        self.tool_calls = 0
        self.tool_errors = 0
        self.last_result: str | None = None

    def _reset(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.problem = tuple(options["problem"]) if "problem" in options else draw_problem(seed, self.split)
        self.tool_calls = self.tool_errors = 0
        self.last_result = None
        a, op, b = self.problem
        return f"<question> {a} {op} {b} </question>", {"answer": solve(*self.problem)}

    def valid_action(self, rng: random.Random) -> str:
        """An answer (valid, right or wrong): the episode's one valid step that costs no tool call."""
        return f"<answer> {rng.randrange(10)} </answer>"

    def reward_range(self) -> tuple[float, float]:
        """1 on success, 0 otherwise, or the invalid-action penalty."""
        return (min(self.invalid_penalty, 0.0), 1.0)

    def anchor(self) -> tuple:
        return (*self.problem, self.tool_calls, self.last_result)

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if calls_tool(action):
            return self._tool_call(action)
        answer = extract_tag(action, "answer")
        if not answer:
            raise InvalidAction("invalid action")
        success = answer == str(solve(*self.problem))
        info = {"success": success, "tool_calls": self.tool_calls, "tool_errors": self.tool_errors}
        return "", float(success), True, info

    def _tool_call(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        program = extract_tag(action, "tool_call")
        if program is None:
            raise InvalidAction("invalid action")
        if self.tool_calls >= self.max_tool_calls:
            raise InvalidAction("tool limit")
        self.tool_calls += 1
        result = tools.call("python", program).strip()
        # The tiny vocabulary has a word for every integer result and for "error", nothing else.
        if not (result.isdigit() and int(result) <= MAX_RESULT):
            self.tool_errors += 1
            result = "error"
        self.last_result = result
        return f"<tool_response> {result} </tool_response>", 0.0, False, {"tool_result": result}


register("tool_arithmetic", ToolArithmeticEnv)


def demonstrator_episodes(count: int, seed: int, tool_share: float, direct_correct: float) -> list[Dialogue]:
    """`count` episodes of chapter 00's demonstrator played in a training environment (deterministic for `seed`;
    problem `seed * 10_000_019 + index`): with probability `tool_share` a tool call whose result it copies, else a
    direct answer, right with probability `direct_correct` and otherwise off by 1..50."""
    rng, env, episodes = random.Random(seed), ToolArithmeticEnv(split="train"), []
    for index in range(count):
        prompt, info = env.reset(seed=seed * 10_000_019 + index)
        episode, result = [("user", prompt)], info["answer"]
        if rng.random() < tool_share:
            a, op, b = env.problem
            action = f"<tool_call> {a} {op} {b} </tool_call>"
            observation, *_ = env.step(action)
            episode += [("assistant", action), ("tool", observation)]
        elif rng.random() >= direct_correct:
            result = max(0, min(MAX_RESULT, result + rng.choice([-1, 1]) * rng.randint(1, 50)))
        answer = f"<answer> {result} </answer>"
        env.step(answer)
        episodes.append([*episode, ("assistant", answer)])
    return episodes
