"""`envs.check_env`: every course environment keeps the contract, and each way of breaking it is caught by name."""

from __future__ import annotations

import inspect
import random

import numpy as np
import pytest

from course_lib import envs
from course_lib.envs.base import InvalidAction, TextEnv, extract_tag
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
    assert {"reset", "anchor", "hostile", "termination", "valid"} <= set(report.passed) and not report.failed
    assert "valid episodes" in report.passed["valid"], "each names a valid action, so whole episodes are played"


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
        arrived = self.position == self.goal
        return f"at {self.position}", float(arrived), arrived, {} if self.flaw == "no_success" else {"success": arrived}

    def anchor(self):
        return [self.position] if self.flaw == "unhashable" else self.position

    def valid_action(self, rng):
        return None if self.flaw == "nameless" else f"<move> {rng.choice([1, 2])} </move>"


class Broken(Walk):
    """A Walk whose `_step` returns a value of the wrong type on a valid action (issue 42, item 10): what hostile
    actions never reach, since they take the invalid-action branch."""

    def _step(self, action):
        observation, reward, terminated, info = super()._step(action)
        if self.flaw == "dict_observation":
            return {"at": self.position}, reward, terminated, info
        if self.flaw == "none_reward":
            return observation, None, terminated, info
        if self.flaw == "text_terminated":
            return observation, reward, "no", info
        if self.flaw == "numpy_int_terminated":
            return observation, reward, np.int64(terminated), info
        if self.flaw == "numpy":  # numpy's scalars, as an environment computing with arrays returns them
            return observation, np.float32(reward), np.bool_(terminated), info
        return observation, reward, terminated, info


def test_a_well_made_environment_passes_and_reports_each_check():
    report = check_env(lambda split="train": Walk(split), vocabulary=["goal", "at", "<feedback>", "</feedback>",
                       "write", "<move>", "n", "</move>", *map(str, range(40))])  # fmt: skip
    assert list(report.passed) == ["reset", "anchor", "splits", "hostile", "termination", "valid", "info", "vocabulary"]
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
@pytest.mark.filterwarnings("ignore:Walk._step raised ValueError:RuntimeWarning")  # the crash flaw's, expected
def test_each_flaw_fails_its_check(flaw, check, message):
    with pytest.raises(EnvContractError, match=check):
        check_env(lambda split="train": Walk(split, flaw))
    report = check_env(lambda split="train": Walk(split, flaw), raise_on_failure=False)
    assert check in report.failed and message in report.failed[check], report.failed


class Declared(Walk):
    """A Walk that declares the range of its rewards, right or (flaw "narrow") too narrow for the arrival's 1."""

    def reward_range(self):
        return (-0.1, 0.5 if self.flaw == "narrow" else 1.0)


def test_a_declared_reward_range_is_checked():
    """Every reward check_env sees lies in `reward_range()`, when the environment declares one; none declared, no
    check (the default)."""
    assert "reward_range" not in check_env(Walk()).passed
    assert "within (-0.1, 1.0)" in check_env(Declared()).passed["reward_range"]
    # some of 20 episodes of random valid moves reach their goal, and its reward 1.0 is outside the declared range
    report = check_env(lambda split="train": Declared(split, "narrow"), episodes=20, raise_on_failure=False)
    assert "reward 1.0 outside the declared reward_range() (-0.1, 0.5)" in report.failed["reward_range"]


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


@pytest.mark.parametrize(
    ("flaw", "message"),
    [
        ("dict_observation", "Broken._step returned a dict observation at step 1 (seed 0), not str"),
        ("none_reward", "Broken._step returned a NoneType reward at step 1 (seed 0), not a finite number"),
        ("text_terminated", "Broken._step returned a str `terminated` at step 1 (seed 0), not bool"),
        ("numpy_int_terminated", "Broken._step returned a numpy.int64 `terminated` at step 1 (seed 0), not bool"),
    ],
)
def test_a_wrong_type_on_a_valid_action_is_caught_by_the_check_and_by_step_itself(flaw, message):
    """Issue 42, item 10: `check_env` plays whole episodes of valid actions (hostile ones only reach the invalid-action
    branch), so a dict observation or a None reward fails the contract instead of the tokenizer, later; and
    `TextEnv.step` refuses it too, naming the environment, the step and the seed."""
    report = check_env(lambda split="train": Broken(split, flaw), raise_on_failure=False)
    assert set(report.failed) == {"valid"} and message in report.failed["valid"], report.failed
    env = Broken("train", flaw)
    env.reset(seed=0)
    with pytest.raises(TypeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        env.step("<move> 1 </move>")
    assert env.step("nonsense")[4]["valid"] is False, "an invalid action still gets feedback, never an exception"


def test_numpy_scalars_are_accepted_as_python_ones():
    """Issue 58: numpy's bool was refused with a message that contradicted itself ("a bool `terminated`, not bool":
    numpy 2 names its bool type `bool`); it is accepted now, and `step` returns Python's bool and float."""
    report = check_env(lambda split="train": Broken(split, "numpy"), raise_on_failure=False)
    assert "valid" in report.passed, report.failed
    env = Broken("train", "numpy")
    env.reset(seed=0)
    _, reward, terminated, truncated, _ = env.step("<move> 1 </move>")
    assert type(terminated) is bool and type(truncated) is bool and type(reward) is float


def test_reset_refuses_a_wrong_type_naming_the_environment():
    class DictReset(Walk):
        def _reset(self, seed, options):
            super()._reset(seed, options)
            return {"goal": self.goal}, {}

    with pytest.raises(TypeError, match=r"DictReset._reset returned a dict observation \(seed 3\), not str"):
        DictReset().reset(seed=3)


def test_without_a_named_valid_action_candidates_are_tried_and_their_absence_is_a_failure():
    """An environment that names no valid action (`valid_action` returns None) is played with the candidates given
    (`actions=`, each kept only where `info["is_action_valid"]` says so); with none that is valid, the check fails
    and says how to name one."""
    nameless = lambda split="train": Walk(split, "nameless")  # noqa: E731
    report = check_env(nameless, actions=["<move> 1 </move>", "hop"], raise_on_failure=False)
    assert "valid" in report.passed and not report.failed, report.failed
    report = check_env(nameless, actions=["hop"], raise_on_failure=False)
    assert set(report.failed) == {"valid"} and "override TextEnv.valid_action" in report.failed["valid"]
    assert "override TextEnv.valid_action" in check_env(nameless, raise_on_failure=False).failed["valid"]


class HiddenGoal(TextEnv):
    """The reset text shows the start only; the goal, which splits train from test, is hidden (issue 42, item 11)."""

    max_turns = 4

    def __init__(self, split: str = "train"):
        super().__init__()
        self.split = split

    def _reset(self, seed, options):
        self.goal = random.Random(f"{self.split}:{seed}").randrange(5) * 2 + (self.split == "test")
        self.start = seed % 3
        return f"at {self.start}", {}

    def _step(self, action):
        if action.strip() != "<move> wait </move>":
            raise InvalidAction("write <move> wait </move>")
        return f"at {self.start}", 0.0, False, {}

    def anchor(self):
        return (self.start, self.goal, self.turn)

    def valid_action(self, rng):
        return "<move> wait </move>"


class KeyedHiddenGoal(HiddenGoal):
    def problem_key(self):
        return (self.start, self.goal)


def test_a_split_leak_through_the_default_problem_key_says_the_key_is_the_reset_text():
    """Issue 42, item 11: with `problem_key` left as TextEnv's (the reset text), a hidden goal makes test problems
    look like training ones; the failure says that the key is the reset text and what to override. Keyed by its
    start and goal, the same environment passes."""
    report = check_env(lambda split="train": HiddenGoal(split), raise_on_failure=False)
    assert "also in train" in report.failed["splits"]
    assert "problem_key() is TextEnv's default, the reset text" in report.failed["splits"], report.failed
    assert "override problem_key()" in report.failed["splits"]
    assert not check_env(lambda split="train": KeyedHiddenGoal(split), raise_on_failure=False).failed


def test_a_value_error_is_an_invalid_action_and_any_other_exception_names_where_it_happened():
    """Issue 58: `TextEnv`'s docstring said parsing errors become invalid actions, but only `InvalidAction` did; any
    other exception ended the run raw. A ValueError (what `int()` raises on text) is now an invalid action, warned
    once per class; any other exception is re-raised naming the environment, step, seed and action."""
    from course_lib.envs.base import EnvironmentStepError

    class ReadsInts(Walk):
        def _step(self, action):
            if "boom" in action:
                raise KeyError("a bug, not a parsing error")
            return f"at {int(action)}", 0.0, False, {}

    env = ReadsInts()
    env.reset(seed=5)
    with pytest.warns(RuntimeWarning, match="ReadsInts._step raised ValueError at step 1 \\(seed 5\\)"):
        obs, reward, terminated, _, info = env.step("left")
    assert info["valid"] is False and info["raised"] == "ValueError" and reward == env.invalid_penalty
    assert "could not read the action" in obs and not terminated
    with pytest.raises(EnvironmentStepError, match="ReadsInts._step raised KeyError at step 2 \\(seed 5\\) on the"):
        env.step("boom")


class OneShot(TextEnv):
    """Answers in one step, calling a tool first when `tool`; `leave_out` names the info key it forgets."""

    max_turns = 3

    def __init__(self, split: str = "train", leave_out: str = "", tool: bool = False):
        super().__init__()
        self.split, self.leave_out, self.tool = split, leave_out, tool

    def _reset(self, seed, options):
        self.number, self.called = seed * 2 + (self.split == "test"), False
        return f"double {self.number}", {}

    def _step(self, action):
        if extract_tag(action, "tool_call"):
            self.called = True
            info = {"tool_result": str(self.number * 2), "answer": str(self.number * 2)}
            return f"<tool_response> {self.number * 2} </tool_response>", 0.0, False, self._drop(info)
        answer = extract_tag(action, "answer")
        if not answer:
            raise InvalidAction("write <answer> n </answer>")
        success = answer == str(self.number * 2)
        return "done", float(success), True, self._drop({"success": success, "answer": str(self.number * 2)})

    def anchor(self):
        return (self.number, self.called)

    def _drop(self, info):
        return {k: v for k, v in info.items() if k != self.leave_out}

    def valid_action(self, rng):
        if self.tool and not self.called:
            return f"<tool_call> {self.number} * 2 </tool_call>"
        return f"<answer> {self.number * 2} </answer>"


@pytest.mark.parametrize(
    ("leave_out", "tool", "chapter", "named"),
    [
        ("success", False, None, "no info['success']"),
        ("tool_result", True, None, "no info['tool_result'] (what the tool returned"),
        ("answer", True, "17", "no info['answer'] (the episode's gold answer"),
    ],
)
def test_every_info_key_the_course_reads_is_checked_where_it_is_read(leave_out, tool, chapter, named):
    """Issue 58: a missing `success` read as 0 and a missing `tool_result` as no tool call, silently (a fork calling
    its tool in half its episodes showed tool use 0.000 and chapter 08's tool claim passed vacuously); IGPO's
    answer was not checked at all. `check_env` now checks each where it is read, the chapter's own on request."""
    report = check_env(lambda split="train": OneShot(split, leave_out, tool), for_chapter=chapter,
                       raise_on_failure=False)  # fmt: skip
    assert set(report.failed) == {"info"} and named in report.failed["info"], report.failed
    assert "read by" in report.failed["info"]
    assert not check_env(
        lambda split="train": OneShot(split, "", tool), for_chapter=chapter, raise_on_failure=False
    ).failed
    if chapter:  # the chapter's own key is not asked of an environment checked for any chapter
        assert not check_env(lambda split="train": OneShot(split, leave_out, tool), raise_on_failure=False).failed
