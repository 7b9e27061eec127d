"""`envs.check_env`: every course environment keeps the contract, and each way of breaking it is caught by name."""

from __future__ import annotations

import inspect
import random

import pytest

from course_lib import envs
from course_lib.envs.base import InvalidAction, TextEnv
from course_lib.envs.check import EnvContractError, check_env
from course_lib.envs.function_calling import CHITCHAT


def factory(name: str):
    takes_split = "split" in inspect.signature(type(envs.make(name)).__init__).parameters
    if takes_split:
        return lambda split="train": envs.make(name, split=split)
    return lambda: envs.make(name)


@pytest.mark.parametrize("name", envs.names())
def test_every_course_environment_keeps_the_contract(name):
    """Chapter 05's five chit-chat questions are in every split by design (the audit discloses them); nothing else
    is shared between splits, and every other check passes as is."""
    shared = [f"<question> {text} </question>" for text in CHITCHAT] if name == "function_calling" else []
    report = check_env(factory(name), seeds=20, shared_problems=shared)
    assert {"reset", "anchor", "hostile", "termination"} <= set(report.passed) and not report.failed


def test_the_chit_chat_overlap_is_caught_when_not_disclosed():
    report = check_env(factory("function_calling"), seeds=20, raise_on_failure=False)
    assert set(report.failed) == {"splits"} and "also in train" in report.failed["splits"]


class Walk(TextEnv):
    """A minimal environment to break one way at a time: move `<move> n </move>` from 0 to a goal."""

    max_turns = 6

    def __init__(self, split: str = "train", flaw: str = ""):
        super().__init__()
        self.split, self.flaw = split, flaw

    def _reset(self, seed, options):
        rng = random.Random() if self.flaw == "random_reset" else random.Random(f"{self.split}:{seed}")
        self.goal = rng.randrange(10) * 2 + (self.split == "test" and self.flaw != "leaky_split")
        self.position = 0
        return f"goal {self.goal}", {}

    def _step(self, action):
        if self.flaw == "crash":
            int(action)  # raises ValueError on text: not an InvalidAction
        text = action.strip()
        if not (text.startswith("<move>") and text.endswith("</move>")):
            if self.flaw == "lenient":
                return "ok", 0.0, False, {}
            raise InvalidAction("write <move> n </move>")
        self.position += int(text[6:-7])
        return f"at {self.position}", float(self.position == self.goal), self.position == self.goal, {}

    def anchor(self):
        return [self.position] if self.flaw == "unhashable" else self.position


def test_a_well_made_environment_passes_and_reports_each_check():
    report = check_env(lambda split="train": Walk(split), vocabulary=["goal", "at", "<feedback>", "</feedback>",
                       "write", "<move>", "n", "</move>", *map(str, range(40))])  # fmt: skip
    assert list(report.passed) == ["reset", "anchor", "splits", "hostile", "termination", "vocabulary"]
    assert check_env(Walk()).passed["termination"] == "within max_turns=6"


@pytest.mark.parametrize(
    ("flaw", "check", "message"),
    [
        ("random_reset", "reset", "two resets gave different observations"),
        ("unhashable", "anchor", "unhashable type"),
        ("leaky_split", "splits", "also in train"),
        ("crash", "hostile", "ValueError"),
        ("lenient", "hostile", "labelled valid"),
    ],
)
def test_each_flaw_fails_its_check(flaw, check, message):
    with pytest.raises(EnvContractError, match=check):
        check_env(lambda split="train": Walk(split, flaw))
    report = check_env(lambda split="train": Walk(split, flaw), raise_on_failure=False)
    assert check in report.failed and message in report.failed[check], report.failed


def test_words_outside_the_vocabulary_are_named():
    report = check_env(Walk(), vocabulary=["goal"], raise_on_failure=False)
    assert "vocabulary" in report.failed and "not in the vocabulary" in report.failed["vocabulary"]


def test_fork_is_an_independent_copy():
    env = Walk()
    env.reset(seed=3)
    env.step("<move> 2 </move>")
    copy = env.fork()
    copy.step("<move> 4 </move>")
    assert (env.position, copy.position) == (2, 6) and env.transcript.actions != copy.transcript.actions
    assert env.step("nonsense")[4]["is_action_valid"] is False
