"""`word_math`: multi-step arithmetic word problems with a `python` tool, as in ToRL (chapter 04).

ToRL (arXiv 2503.23383) lets a base model interleave text with code: generation stops at a code
block, a sandbox runs it, and the output is appended before generation resumes. This miniature keeps
the pieces that shape learning:

- a question from a few templates of words, e.g. `<question> a box has 7 pens . she buys 12 packs
  of 9 pens . </question>`, whose answer needs two or three operations (`7 + 12 * 9`), which a
  2-layer model with one token per integer cannot do in its head;
- the restricted `python` tool (`course_lib.tools`): `<tool_call> 7 + 12 * 9 </tool_call>` is
  answered with `<tool_response> 115 </tool_response>`;
- a tool-call limit `max_tool_calls` (ToRL's C): a call beyond it is not executed and gets no
  response, so the policy simply continues writing text (ToRL removes the stop string);
- long outputs are cut to their first and last `TRUNCATE_HALF` words around `...` (ToRL keeps the
  first and last 128 of 256 or more characters); errors come back as their last line only, reduced
  to `error <ErrorType>`; an empty output becomes `empty` (ToRL substitutes a timeout message);
- reward +1 for a correct `<answer>`, -1 otherwise (wrong answer, or no answer within `max_turns`),
  plus an optional `execution_error_penalty` (ToRL's -0.5, off by default) when any executed call
  failed.

Every word the environment writes is in `vocabulary()`; numbers are single tokens `0..MAX_NUMBER`
and every answer lies in that range. Problems are split into train and held-out test sets by a
hash of the problem.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any

from course_lib import tools
from course_lib.envs import register
from course_lib.envs.base import InvalidAction, TextEnv, calls_tool, extract_tag

MAX_NUMBER = 600
"""Largest number word; every operand, intermediate and final answer is in 0..MAX_NUMBER."""
TRUNCATE_HALF = 3
"""An output longer than 2 * TRUNCATE_HALF words keeps its first and last TRUNCATE_HALF words."""
OPERATORS = ("+", "-", "*", "(", ")")
ERROR_TYPES = ("SyntaxError", "NameError", "ZeroDivisionError", "TypeError", "ValueError", "IndexError", "Error")
OUTPUT_WORDS = ("error", "empty", "overflow", "...", *ERROR_TYPES)
FEEDBACK_WORDS = ("invalid", "action")


@dataclass(frozen=True)
class Template:
    """A question pattern: `text` with slots `{x}`, `{y}`, `{z}`, `{w}` and the expression answering it."""

    text: str
    expression: str
    steps: tuple[str, ...]
    """The same computation one operation at a time (`r` is the previous step's result)."""
    ranges: tuple[tuple[int, int], ...]
    """Inclusive ranges of x, y, z (and w)."""


TEMPLATES = (
    Template("a box has {x} pens . she buys {y} packs of {z} pens .", "{x} + {y} * {z}",
             ("{y} * {z}", "{x} + r"), ((2, 99), (2, 19), (2, 19))),
    Template("he has {y} bags of {z} nuts and eats {x} nuts .", "{y} * {z} - {x}",
             ("{y} * {z}", "r - {x}"), ((2, 99), (2, 19), (2, 19))),
    Template("there are {x} red and {y} blue cards in each of {z} packs .", "( {x} + {y} ) * {z}",
             ("{x} + {y}", "r * {z}"), ((2, 29), (2, 29), (2, 9))),
    Template("tom has {x} coins , wins {y} coins {w} times and loses {z} coins .", "{x} + {y} * {w} - {z}",
             ("{y} * {w}", "{x} + r", "r - {z}"), ((2, 99), (2, 19), (2, 99), (2, 9))),
)  # fmt: skip


def template_words() -> list[str]:
    words: list[str] = []
    for template in TEMPLATES:
        for word in template.text.split():
            if not word.startswith("{") and word not in words:
                words.append(word)
    return words


def vocabulary() -> list[str]:
    """Every word this environment and its demonstrations use, besides the tokenizer's tags."""
    return (
        [str(n) for n in range(MAX_NUMBER + 1)]
        + list(OPERATORS)
        + template_words()
        + list(OUTPUT_WORDS)
        + list(FEEDBACK_WORDS)
    )


@dataclass(frozen=True)
class Problem:
    template: int
    values: tuple[int, ...]
    """x, y, z (and w for templates with four numbers)."""

    @property
    def slots(self) -> dict[str, int]:
        return dict(zip("xyzw", self.values, strict=False))

    @property
    def question(self) -> str:
        return TEMPLATES[self.template].text.format(**self.slots)

    @property
    def expression(self) -> str:
        return TEMPLATES[self.template].expression.format(**self.slots)

    def step_expressions(self) -> list[str]:
        """The computation split into one-operation expressions, each using the previous result."""
        result, out = None, []
        for step in TEMPLATES[self.template].steps:
            text = step.format(**self.slots).replace("r", str(result))
            out.append(text)
            result = evaluate(text)
        return out

    @property
    def answer(self) -> int:
        return evaluate(self.expression)


def evaluate(expression: str) -> int:
    """Value of a space-separated integer expression (only `+ - * ( )` and numbers)."""
    if any(word not in OPERATORS and not word.isdigit() for word in expression.split()):
        raise ValueError(f"not an integer expression: {expression!r}")
    return int(eval(expression, {"__builtins__": {}}))  # noqa: S307 (words checked above)


def _in_range(problem: Problem) -> bool:
    values = [problem.answer] + [evaluate(step) for step in problem.step_expressions()]
    return all(0 <= v <= MAX_NUMBER for v in values)


def split_of(problem: Problem, test_fraction: float = 0.1) -> str:
    """`test` for a fixed pseudo-random tenth of all problems, else `train`."""
    digest = hashlib.sha256(f"{problem.template}:{problem.values}".encode()).digest()
    return "test" if int.from_bytes(digest[:4], "big") < test_fraction * 2**32 else "train"


def draw_problem(seed: int, split: str) -> Problem:
    """The problem of `split` for `seed` (deterministic; every intermediate result in range)."""
    rng = random.Random(f"word_math:{split}:{seed}")
    while True:
        index = rng.randrange(len(TEMPLATES))
        values = tuple(rng.randint(low, high) for low, high in TEMPLATES[index].ranges)
        problem = Problem(index, values)
        if _in_range(problem) and split_of(problem) == split:
            return problem


def format_output(raw: str, vocabulary_numbers: int = MAX_NUMBER) -> str:
    """The tool's raw text as the words the policy sees (always words of `vocabulary()`).

    Errors keep their last line only, as `error <ErrorType>`. Numbers outside `0..MAX_NUMBER` (and
    anything else that is not a number) become `overflow`. Brackets and commas of printed lists are
    dropped. More than `2 * TRUNCATE_HALF` words keep the head and the tail around `...`.
    """
    text = raw.strip()
    last = text.splitlines()[-1] if text else ""
    if text.startswith("error:") or last.startswith("error:"):
        last = last.removeprefix("error:").strip()
        kind = last.split(":")[0].strip()
        return f"error {kind if kind in ERROR_TYPES else 'Error'}"
    words = text.replace("[", " ").replace("]", " ").replace(",", " ").split()
    if not words:
        return "empty"
    words = [w if w.isdigit() and int(w) <= vocabulary_numbers else "overflow" for w in words]
    if len(words) > 2 * TRUNCATE_HALF:
        words = [*words[:TRUNCATE_HALF], "...", *words[-TRUNCATE_HALF:]]
    return " ".join(words)


class WordMathEnv(TextEnv):
    """One word problem; up to `max_tool_calls` executed `python` calls, then an `<answer>`.

    `info` of a tool step holds `tool_result` (`"error"` for a failed call, else the observation's
    words) or, for a call over the limit, `skipped=True`. The final step's info holds `success`,
    the number of calls, the results of executed calls and the answer text.
    """

    stop_tags = ("</tool_call>", "</answer>")

    invalid_penalty = 0.0

    def __init__(
        self,
        split: str = "train",
        max_tool_calls: int = 1,
        max_turns: int | None = None,
        execution_error_penalty: float = 0.0,
    ):
        super().__init__()
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        if max_tool_calls < 0:
            raise ValueError("max_tool_calls must be >= 0")
        self.split = split
        self.max_tool_calls = max_tool_calls
        self.max_turns = max_turns if max_turns is not None else max_tool_calls + 2
        self.execution_error_penalty = execution_error_penalty
        self.problem = Problem(0, (2, 2, 2))
        self.calls: list[dict[str, Any]] = []

    def _reset(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.problem = options["problem"] if "problem" in options else draw_problem(seed, self.split)
        self.calls = []
        return f"<question> {self.problem.question} </question>", {"answer": self.problem.answer}

    def valid_action(self, rng: random.Random) -> str:
        """An answer (valid, right or wrong): the episode's one valid step that costs no tool call."""
        return f"<answer> {rng.randrange(10)} </answer>"

    def reward_range(self) -> tuple[float, float]:
        """+1 or -1 at the end, less the execution-error penalty; 0 for a turn that calls the tool."""
        return (min(-1.0 - self.execution_error_penalty, self.invalid_penalty), 1.0)

    def anchor(self) -> tuple:
        return (self.problem, tuple(c.get("result") for c in self.calls))

    def _final(self, success: bool, answer: str | None) -> tuple[float, dict[str, Any]]:
        errored = any(c.get("result") == "error" for c in self.calls)
        reward = (1.0 if success else -1.0) - (self.execution_error_penalty if errored else 0.0)
        info = {"success": success, "answer": answer, "calls": list(self.calls)}
        return reward, info

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        try:
            return self._parse_and_act(action)
        except InvalidAction:
            if self.turn < self.max_turns:
                raise
            reward, final = self._final(False, None)  # the last turn passed without an answer
            return "", reward, True, {**final, "valid": False}

    def _parse_and_act(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if calls_tool(action):
            obs, info = self._tool_call(action)
            if self.turn >= self.max_turns:  # the last turn passed without an answer
                reward, final = self._final(False, None)
                return obs, reward, True, {**final, **info}
            return obs, 0.0, False, info
        answer = extract_tag(action, "answer")
        if answer is None:
            raise InvalidAction("invalid action")
        reward, info = self._final(answer == str(self.problem.answer), answer)
        return "", reward, True, info

    def _tool_call(self, action: str) -> tuple[str, dict[str, Any]]:
        program = extract_tag(action, "tool_call")
        if program is None:
            raise InvalidAction("invalid action")
        if len(self.calls) >= self.max_tool_calls:
            # ToRL: over the limit C the code is not executed; the policy continues in text only.
            self.calls.append({"program": program, "skipped": True, "turn": self.turn})
            return "", {"skipped": True}
        words = format_output(tools.call("python", program))
        result = "error" if words.startswith("error") else words
        self.calls.append({"program": program, "result": result, "turn": self.turn})
        return f"<tool_response> {words} </tool_response>", {"tool_result": result}


register("word_math", WordMathEnv)
