"""`check_env`: the contract a course environment keeps, checked on a new one before any training.

A chapter's loop trusts its environment in ways that fail silently when broken: GiGPO groups steps by `anchor` (an
unhashable or state-blind anchor merges unrelated steps), evaluation counts distinct problems by `problem_key` and
keeps the test split out of training (a split that leaks makes held-out numbers meaningless), a rollout replays a
seed and expects the same problem (a non-deterministic reset breaks groups of one prompt), and a policy writes
anything (an environment that crashes on a malformed action ends the run). Each check below is one of these.
"""

from __future__ import annotations

import inspect
import math
import numbers
import random
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from course_lib.envs import contract
from course_lib.envs.base import TextEnv

HOSTILE_ACTIONS: tuple[object, ...] = (
    "",
    "   \n\t",
    "<tool_call>",
    "</answer><answer>",
    "\x00\x01\x02 \ufffd\u202e",
    "__import__('os').system('rm -rf /')",
    "x" * 100_000,
    None,
    42,
)
"""Actions no environment may take as valid: empty, unclosed or garbled tags, control characters, code, a huge
string, and values that are not strings (`TextEnv.step` turns them into the empty action)."""


class EnvContractError(AssertionError):
    """An environment broke the contract; the message lists every failed check."""


@dataclass
class EnvReport:
    """What `check_env` checked: `passed` and `failed` map a check's name to what was seen."""

    passed: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        return [f"ok    {k}: {v}" for k, v in self.passed.items()] + [f"FAIL  {k}: {v}" for k, v in self.failed.items()]


def _factory(env: TextEnv | Callable[..., TextEnv]) -> Callable[..., TextEnv]:
    """A zero-argument-capable factory: `type(env)` for an instance built without arguments, else the callable."""
    if isinstance(env, TextEnv):
        return lambda **kwargs: env if not kwargs else type(env)(**kwargs)
    return env


def _default_key_hint(instance: TextEnv) -> str:
    """What to say when problems collide and `instance` keys them by TextEnv's default, the reset text."""
    if type(instance).problem_key is not TextEnv.problem_key:
        return ""
    return (" (problem_key() is TextEnv's default, the reset text: when the reset text does not name the whole "
            "problem, e.g. a hidden goal, override problem_key() to return what does)")  # fmt: skip


def _takes_split(factory: Callable[..., TextEnv]) -> bool:
    try:
        return "split" in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False


def check_env(
    env: TextEnv | Callable[..., TextEnv],
    seeds: int = 20,
    vocabulary: Iterable[str] | None = None,
    hostile: Sequence[object] = HOSTILE_ACTIONS,
    shared_problems: Iterable[Hashable] = (),
    raise_on_failure: bool = True,
    actions: Sequence[str] = (),
    episodes: int = 3,
    for_chapter: str | None = None,
    max_observation_tokens: int | None = None,
    count_tokens: Callable[[str], int] = lambda text: len(text.split()) + 1,
) -> EnvReport:
    """Check the course's environment contract on `env` (an instance, or a factory such as a registered name's
    `lambda split="train": MyEnv(split)`). Checks, each on `seeds` seeds:

    - `reset`: returns `(str, dict)`; the same seed on a fresh environment gives the same observation and
      `problem_key` (deterministic), and different seeds pose at least two different problems;
    - `anchor`: `info["anchor"]` is hashable after reset and after every step;
    - `problem_key`: hashable;
    - `splits` (when the factory takes `split`): no `problem_key` of "test" among "train"'s, apart from the
      `shared_problems` an environment discloses (chapter 05's chit-chat questions are in every split by design);
    - `hostile`: every action of `hostile`, on a fresh episode, returns the 5-tuple with `info["valid"]` False and
      `info["is_action_valid"]` False, a finite reward at most 0, and no exception;
    - `termination`: an episode of invalid actions ends within `max_turns` steps;
    - `valid`: `episodes` whole episodes of valid actions, each step's return typed as the course needs (a str
      observation, a finite reward, bool flags, a dict info with `valid` True). The actions are the environment's
      own (`TextEnv.valid_action`), else a random one of the candidates `actions` that a copy of the environment
      (`fork`) marks valid (`info["is_action_valid"]`); an environment that names none fails, saying how to;
    - `info`: on those episodes, every `info` key the course reads where it must be (`envs.contract.INFO_KEYS`:
      `success` on a step that ends its episode, `tool_result` on a step that called a tool, ...), and the keys
      only chapter `for_chapter` reads (`"17"`: IGPO's `answer`) when it is given;
    - `reward_range` (when the environment declares one, `TextEnv.reward_range`): every reward of the steps above
      lies in it;
    - `vocabulary` (when given): every whitespace-separated word of the observations seen is in it;
    - `budget` (when `max_observation_tokens` is given, the run's `sampling.max_total_tokens`): every first
      observation leaves room for a turn, counted by `count_tokens` (default: words plus BOS, the course's
      word-level tokenizers; pass a BPE tokenizer's count for a checkpoint). One that does not ends its episode after
      one policy token, with reward 0 and nothing said.

    Returns the report; with `raise_on_failure`, raises `EnvContractError` listing every failed check.
    """
    factory, report = _factory(env), EnvReport()
    words = set(vocabulary) if vocabulary is not None else None
    allowed = set(shared_problems)
    seen_words: set[str] = set()
    first_observations: dict[int, str] = {}
    played: list[tuple[str, str, dict, bool]] = []  # (where, action, info, ended by terminated) of valid steps
    rewards: list[tuple[str, float]] = []  # (where, reward) of every step played

    def check(name: str, test: Callable[[], str]) -> None:
        try:
            report.passed[name] = test()
        except Exception as error:  # a check that raises failed, with the reason
            report.failed[name] = f"{type(error).__name__}: {error}"

    def reset(seed: int, instance: TextEnv | None = None) -> tuple[TextEnv, str, dict]:
        instance = instance or factory()
        result = instance.reset(seed=seed)
        assert isinstance(result, tuple) and len(result) == 2, f"reset returned {result!r:.40}, not (obs, info)"
        obs, info = result
        assert isinstance(obs, str) and isinstance(info, dict), "reset must return (str, dict)"
        seen_words.update(obs.split())
        first_observations[seed] = obs
        return instance, obs, info

    def reset_is_deterministic() -> str:
        keys = []
        for seed in range(seeds):
            first, obs, _ = reset(seed)
            _, again, _ = reset(seed)
            assert obs == again, f"seed {seed}: two resets gave different observations"
            key = first.problem_key()
            assert isinstance(key, Hashable), f"problem_key() returned an unhashable {type(key).__name__}"
            hash(key)
            keys.append(key)
        assert len(set(keys)) >= min(2, seeds), "every seed poses the same problem" + _default_key_hint(first)
        return f"{seeds} seeds, {len(set(keys))} distinct problems"

    def anchors_are_hashable() -> str:
        steps = 0
        for seed in range(min(seeds, 5)):
            instance, _, info = reset(seed)
            hash(info["anchor"])
            while not instance.done:
                *_, info = instance.step("")
                hash(info["anchor"])
                steps += 1
        return f"after reset and {steps} steps"

    def splits_are_disjoint() -> str:
        keys = {}
        for split in ("train", "test"):
            instance = factory(split=split)
            keys[split] = set()
            for seed in range(seeds):
                instance.reset(seed=seed)
                keys[split].add(instance.problem_key())
        shared = (keys["train"] & keys["test"]) - allowed
        example = f"e.g. {next(iter(shared))!r}" if shared else ""
        assert not shared, f"{len(shared)} test problems also in train, {example}{_default_key_hint(instance)}"
        return f"{len(keys['train'])} train and {len(keys['test'])} test problems, none shared"

    def hostile_actions_are_invalid() -> str:
        for action in hostile:
            instance, _, _ = reset(0)
            result = instance.step(action)  # type: ignore[arg-type]
            assert len(result) == 5, "step must return (obs, reward, terminated, truncated, info)"
            obs, reward, _, _, info = result
            shown = repr(action)[:40]
            assert isinstance(obs, str), f"{shown}: the observation is not text"
            assert info.get("valid") is False, f"{shown}: labelled valid"
            assert info.get("raised") is None, (
                f"{shown}: _step raised {info.get('raised')} ({info.get('error')}), which step took as an invalid "
                "action; raise envs.base.InvalidAction for an action the environment cannot read"
            )
            assert info.get("is_action_valid") is False, f"{shown}: info['is_action_valid'] is not False"
            assert math.isfinite(reward) and reward <= 0, f"{shown}: reward {reward}"
            rewards.append((shown, reward))
            seen_words.update(obs.split())
        return f"{len(hostile)} actions, each invalid with a penalty"

    def episodes_terminate() -> str:
        instance, _, _ = reset(0)
        for _ in range(instance.max_turns):
            if instance.done:
                break
            instance.step("")
        assert instance.done, f"not done after max_turns={instance.max_turns} invalid actions"
        return f"within max_turns={instance.max_turns}"

    rng = random.Random(0)

    def valid_step(instance: TextEnv) -> str | None:
        """The environment's own valid action, else a random candidate that a copy of it marks valid."""
        named = instance.valid_action(rng)
        if named is not None:
            return named
        valid = []
        for candidate in actions:
            trial = instance.fork()
            *_, info = trial.step(candidate)
            if info.get("is_action_valid") is True:
                valid.append(candidate)
        return rng.choice(valid) if valid else None

    def valid_episodes_are_typed() -> str:
        steps = 0
        for seed in range(episodes):
            instance, _, _ = reset(seed)
            while not instance.done:
                action = valid_step(instance)
                assert action is not None, (
                    f"seed {seed}, step {instance.turn + 1}: no valid action to play; override "
                    "TextEnv.valid_action(rng) to name one (or give check_env candidate actions=[...]), so that "
                    "episodes of valid actions are checked"
                )
                result = instance.step(action)
                assert isinstance(result, tuple) and len(result) == 5, "step must return a 5-tuple"
                obs, reward, terminated, truncated, info = result
                at = f"seed {seed}, step {instance.turn}, action {action!r}"
                assert isinstance(obs, str), f"{at}: a {type(obs).__name__} observation, not str"
                assert isinstance(reward, numbers.Real) and math.isfinite(reward), f"{at}: reward {reward!r}"
                assert isinstance(terminated, bool) and isinstance(truncated, bool), f"{at}: flags not bool"
                assert isinstance(info, dict), f"{at}: a {type(info).__name__} info, not dict"
                assert info.get("valid") is True and info.get("is_action_valid") is True, (
                    f"{at}: named valid but refused ({obs[:60]!r})"
                )
                seen_words.update(obs.split())
                played.append((at, action, info, terminated))
                rewards.append((at, reward))
                steps += 1
        return f"{episodes} valid episodes, {steps} steps, every return typed"

    def rewards_are_in_range() -> str:
        low, high = declared
        outside = [(at, reward) for at, reward in rewards if not low <= reward <= high]
        assert not outside, f"{outside[0][0]}: reward {outside[0][1]} outside the declared reward_range() {declared}"
        return f"{len(rewards)} rewards within {declared}"

    def info_keys_are_set() -> str:
        assert played, "no valid step was played (see the `valid` check)"
        wanted = contract.keys_for(for_chapter)
        for at, action, info, last in played:
            lacking = [key for key in wanted if contract.missing(key, info, action, last)]
            assert not lacking, "; ".join(
                f"{at}: no info[{key.name!r}] ({key.meaning}) on a {key.when}, read by {key.read_by}" for key in lacking
            )
        return f"{', '.join(key.name for key in wanted)} where each is read, on {len(played)} valid steps"

    check("reset", reset_is_deterministic)
    check("anchor", anchors_are_hashable)
    if _takes_split(factory):
        check("splits", splits_are_disjoint)
    check("hostile", hostile_actions_are_invalid)
    check("termination", episodes_terminate)
    check("valid", valid_episodes_are_typed)
    if "valid" in report.passed:  # its episodes are what `info` reads
        check("info", info_keys_are_set)
    declared = factory().reward_range()
    if declared is not None:
        check("reward_range", rewards_are_in_range)
    if max_observation_tokens is not None:

        def observations_leave_room() -> str:
            counts = {seed: count_tokens(obs) for seed, obs in first_observations.items()}
            seed = max(counts, key=counts.get)
            assert counts[seed] < max_observation_tokens - 1, (
                f"seed {seed}: the first observation is {counts[seed]} tokens, at or over the budget of "
                f"{max_observation_tokens}: its episode would end after one policy token with reward 0"
            )
            return f"longest first observation {counts[seed]} tokens of {max_observation_tokens}"

        check("budget", observations_leave_room)
    if words is not None:

        def vocabulary_covers() -> str:
            missing = sorted(seen_words - words)
            assert not missing, f"{len(missing)} words not in the vocabulary, e.g. {missing[:5]}"
            return f"{len(seen_words)} distinct words seen, all in the vocabulary"

        check("vocabulary", vocabulary_covers)
    if raise_on_failure and report.failed:
        raise EnvContractError("\n".join(report.lines()))
    return report
