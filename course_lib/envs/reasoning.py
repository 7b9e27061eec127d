"""The reasoning-then-action turn format of chapters 09-10 (RAGEN): `<think> ... </think> <answer> ... </answer>`.

RAGEN's agents write free reasoning before each action, and its collapse is a collapse of that reasoning: it
turns repetitive, then stops depending on the input. The course keeps the channel short (at most
`max_think_words` words), so a tiny model can learn it and MI can be estimated by scoring every reasoning under
every input (`diagnostics.teacher_forced_logp`). `parse_turn` checks the format and returns both parts; a
malformed turn raises `InvalidAction`, which the environment turns into feedback and RAGEN's format penalty
(-0.1), never an exception.
"""

from __future__ import annotations

import re

from course_lib.envs.base import InvalidAction

TURN = re.compile(r"^\s*<think>(?P<think>.*?)</think>\s*<answer>(?P<answer>.*?)</answer>\s*$", flags=re.DOTALL)
FORMAT_PENALTY = -0.1
"""RAGEN's penalty for a turn that breaks the format."""
FEEDBACK_WORDS = ("bad", "format", ":", "think", "then", "answer", "too", "long", "one", "word", "of", "arms", "or",
                  "up", "down", "left", "right")  # fmt: skip
"""Every word of the feedback the chapters' environments give for a bad turn (their vocabularies include it)."""


def parse_turn(text: str, max_think_words: int = 8) -> tuple[list[str], str]:
    """`(reasoning words, answer)` of one turn; `InvalidAction` if the format is broken, the reasoning is longer
    than `max_think_words` words, or the answer is not one word."""
    match = TURN.match(text or "")
    if match is None:
        raise InvalidAction("bad format : think then answer")
    think = match.group("think").split()
    if len(think) > max_think_words:
        raise InvalidAction("bad format : think too long")
    answer = match.group("answer").split()
    if len(answer) != 1:
        raise InvalidAction("bad format : answer one word")
    return think, answer[0]


def turn_text(think: list[str] | str, answer: str) -> str:
    """The turn `parse_turn` reads back: `<think> WORDS </think> <answer> ANSWER </answer>`."""
    words = think if isinstance(think, str) else " ".join(think)
    return f"<think> {words} </think> <answer> {answer} </answer>"
