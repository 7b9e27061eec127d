"""ToolRL's function-calling task (chapter 05): the warm start's noisy demonstrator and the SFT arm's correct traces,
the held-out queries and their evaluation.

The environment is `envs.function_calling` (queries, tools, the `test` and `novel` splits) with ToolRL's reward
(`envs.toolrl_reward`). The demonstrator answers train queries right, or with the mistakes a `Noise` makes likely,
and never writes a (tool, parameter, value) triple only the `novel` split asks for (`noisy_answer`), so that a
`novel` query asks for a pair the warm start never wrote.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from course_lib.envs.base import distinct_seeds
from course_lib.envs.function_calling import (
    THOUGHTS,
    TOOLS,
    VALUES,
    FunctionCallingEnv,
    Task,
    TaskMix,
    answer_text,
    draw_task,
    held_out,
)
from course_lib.envs.toolrl_reward import parse_calls, think_words
from course_lib.rl.train import evaluate_policy
from course_lib.tokenizer import encode


@dataclass
class Noise:
    """How often the demonstrations of the warm start make each kind of mistake."""

    format: float = 0.2
    """Broken shape: the think block is missing or not closed."""
    name: float = 0.12
    """A call names another tool."""
    key: float = 0.2
    """A parameter is given another tool's parameter name."""
    value: float = 0.2
    """A parameter gets another value of the same type."""
    missing: float = 0.25
    """A multi-call answer drops its last call."""
    no_tool_call: float = 0.3
    """A query that no tool fits gets a (wrong) tool call instead of a response."""


def _other(rng: random.Random, options, current, allowed=lambda option: True):
    """Another option than `current`, among those `allowed` accepts (`current` when none is left)."""
    choices = [o for o in options if o != current and allowed(o)]
    return rng.choice(choices) if choices else current


def noisy_answer(task: Task, rng: random.Random, noise: Noise) -> str:
    """A demonstration response for `task`: right, or with the mistakes `noise` makes likely.

    The noise never writes a held-out `(tool, parameter, value)` triple (`function_calling.held_out`):
    a wrong value, a wrong key or a wrong tool name is drawn only among those that keep every written
    triple seen-in-training, so a `novel` query really asks for a pair the warm start never wrote. (Before
    this rule, value and key noise wrote every held-out triple of the novel split 25 times or more.)
    """
    thought = rng.sample(THOUGHTS, rng.randint(0, 3))
    if not task.calls:
        if rng.random() < noise.no_tool_call:
            wrong = draw_task(rng.randrange(10**9), "train", no_tool_share=0.0, two_call_share=0.0)
            text = answer_text(wrong, thought)
        else:
            text = answer_text(task, thought)
    else:
        calls = list(task.calls)
        if len(calls) >= 2 and rng.random() < noise.missing:
            calls = calls[:-1]
        all_keys = sorted({p for params, _ in TOOLS.values() for p, _, _ in params})
        noisy = []
        for name, args in calls:
            kinds = {p: k for p, k, _ in TOOLS[name][0]}
            new_args = []
            for key, value in args:
                if rng.random() < noise.value:
                    value = _other(rng, VALUES[kinds[key]], value, lambda v: not held_out(name, key, v))  # noqa: B023
                if rng.random() < noise.key:
                    key = _other(rng, all_keys, key, lambda k: not held_out(name, k, value))  # noqa: B023
                new_args.append((key, value))
            if rng.random() < noise.name:
                seen = lambda n: not any(held_out(n, k, v) for k, v in new_args)  # noqa: E731, B023
                name = _other(rng, sorted(TOOLS), name, seen)
            noisy.append((name, tuple(new_args)))
        text = answer_text(Task(task.question, tuple(noisy)), thought)
    if rng.random() < noise.format:
        text = text.replace("</think> ", "", 1) if rng.random() < 0.5 else text.split("</think> ", 1)[1]
    return text


def demonstration_pairs(count: int, seed: int, noise: Noise, mix: TaskMix | None = None) -> list[tuple[str, str]]:
    """`(question, response)` texts of `count` noisy train demonstrations (the warm start's)."""
    rng, mix = random.Random(seed), mix or TaskMix()
    pairs = []
    for index in range(count):
        task = mix.draw(seed * 10_000_019 + index, "train")
        pairs.append((task.question, noisy_answer(task, rng, noise)))
    return pairs


def correct_tasks(count: int, seed: int, mix: TaskMix | None = None) -> list[Task]:
    """The train queries whose correct answers are the SFT arm's fixed traces (`correct_examples`), in order."""
    mix = mix or TaskMix()
    return [mix.draw(seed * 7_000_003 + index + 1, "train") for index in range(count)]


def examples(tokenizer, pairs: list[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
    """Token ids and loss masks (1 on the response) of `(question, response)` texts."""
    out = []
    for question, answer in pairs:
        prompt = [tokenizer.bos_token_id, *encode(tokenizer, question)]
        response = encode(tokenizer, answer)
        out.append((prompt + response, [0] * len(prompt) + [1] * len(response)))
    return out


def demonstration_examples(
    tokenizer, count: int, seed: int, noise: Noise, mix: TaskMix | None = None
) -> list[tuple[list[int], list[int]]]:
    """Token ids and loss masks of `count` noisy train demonstrations (`demonstration_pairs`)."""
    return examples(tokenizer, demonstration_pairs(count, seed, noise, mix))


def correct_examples(tokenizer, count: int, seed: int, mix: TaskMix | None = None) -> list[tuple[list[int], list[int]]]:
    """The fixed traces of the SFT arm: correct answers to train queries (`correct_tasks`), a two-word thought."""
    tasks = correct_tasks(count, seed, mix)
    return examples(tokenizer, [(task.question, answer_text(task, ["user", "wants"])) for task in tasks])


@functools.lru_cache(maxsize=16)
def test_seeds(count: int, split: str = "test", mix: TaskMix | None = None) -> list[int]:
    """Seeds of the held-out queries of `split` (`test` or `novel`) used for evaluation: the first
    `count` seeds with pairwise different queries (`envs.base.distinct_seeds`). Cached, as every
    evaluation during training asks again."""
    return distinct_seeds(lambda: FunctionCallingEnv(split, mix=mix), count)


def evaluate(model, tokenizer, config, seed: int, split: str = "test") -> dict[str, float]:
    """Success (format and calls exactly right), mean reward components and think length on
    `eval_tasks` different queries of `split` (`test` or `novel`), sampled at temperature 1 as RL samples."""
    stats, trajectories = evaluate_policy(
        model, tokenizer, lambda: FunctionCallingEnv(split, mix=config.task_mix),
        test_seeds(config.eval_tasks, split, config.task_mix), config.sampling, seed,
    )  # fmt: skip
    infos = [t.infos[-1] if t.infos else {} for t in trajectories]
    stats["format"] = float(np.mean([i.get("r_format", 0.0) for i in infos]))
    stats["correct"] = float(np.mean([i.get("r_correct", -3.0) for i in infos]))
    actions = [t.env.transcript.actions[0] if t.env.transcript.actions else "" for t in trajectories]
    stats["think_words"] = float(np.mean([think_words(a) for a in actions]))
    # Success by how many calls the query needs: exact matches are rarer on two-call queries, where ToolRL
    # argues partial credit should pay most (the chapter's exploratory comparison).
    for name, wanted in (("single", lambda n: n == 1), ("multi", lambda n: n >= 2)):
        hits = [
            bool(i.get("success")) for t, i in zip(trajectories, infos, strict=True) if wanted(len(t.env.task.calls))
        ]
        stats[f"success_{name}"] = float(np.mean(hits)) if hits else float("nan")
        stats[f"queries_{name}"] = float(len(hits))
    return stats


def call_triples(calls) -> set[tuple[str, str, str]]:
    """`{(tool, parameter, value)}` of parsed or true calls `[(name, ((key, value), ...))]`."""
    return {(name, key, value) for name, args in calls for key, value in args}


def written_triples(responses: Iterable[str]) -> set[tuple[str, str, str]]:
    """Every `(tool, parameter, value)` the calls of `responses` write (`toolrl_reward.parse_calls`)."""
    return {triple for response in responses for triple in call_triples(parse_calls(response) or [])}
