"""Chapter 04's task, ToRL's in miniature: `word_math` problems with a calculator that runs the policy's code
(`envs.word_math`), its settings (`WordMathConfig`), the generic mixed traces the base is warm-started on (about 40%
of them write code), the held-out evaluation with ToRL's Fig. 5 measurements (`torl_stats`), and the data build
(`python -m course_lib.data build ch04`). Chapter 04 trains on it; the survey on a real model warm-starts SmolLM2
on it."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from course_lib import course_config, data, envs
from course_lib.engine.rollout import SamplingConfig, Trajectory
from course_lib.envs.word_math import MAX_NUMBER, draw_problem, vocabulary
from course_lib.rl.train import GRPOConfig, evaluate_policy
from course_lib.rl.warm_start import SFTConfig
from course_lib.tasks import bases
from course_lib.tokenizer import build_tokenizer, is_word_level, tag_id

ENV_NAME = "word_math"
BASE_NAME = "ch04_base"
TASKS_NAME = "ch04_tasks"


@dataclass
class WordMathConfig:
    """Chapter 04's task and its training (the cpu preset's values as defaults)."""

    model_preset: str = "tiny"
    """Model size, a key of `models.MODEL_PRESETS`."""
    demonstrations: int = 20_000
    """Demonstration episodes of the warm start (the "base model")."""
    tool_share: float = 0.4
    """Share of demonstrations that write code (ToRL's base starts near a 40% code ratio)."""
    direct_correct: float = 0.2
    """Share of direct (text-only) answers in the demonstrations that are right; the rest are near misses."""
    sft: SFTConfig = field(default_factory=lambda: SFTConfig(steps=700, batch_size=64, learning_rate=3e-3))
    """Warm start."""
    grpo: GRPOConfig = field(
        default_factory=lambda: GRPOConfig(
            iterations=40, prompts_per_iteration=8, group_size=8, learning_rate=5e-4, eval_every=10
        )
    )
    """RL (ToRL: no KL, no entropy bonus, one on-policy update per batch, tool output masked)."""
    sampling: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(temperature=1.0, max_turn_tokens=14, max_total_tokens=96)
    )
    """Rollout sampling (ToRL samples at temperature 1)."""
    max_tool_calls: int = 1
    """ToRL's C: executed tool calls per response (the paper's default is 1)."""
    execution_error_penalty: float = 0.5
    """Size of the optional penalty for a response with failing code (the ablation; off in the main run)."""
    eval_tasks: int = 200
    """Distinct held-out test problems per evaluation (`test_seeds`)."""


Config = TypeVar("Config", bound=WordMathConfig)


def preset(scale: str | None = None, kind: type[Config] = WordMathConfig) -> Config:
    """The task's configuration for `COURSE_SCALE` (`cpu` or `gpu`), as a `kind` (a chapter's subclass)."""
    gpu = kind(
        model_preset="small",
        demonstrations=50_000,
        sft=SFTConfig(steps=3000, batch_size=128, learning_rate=2e-3),
        grpo=GRPOConfig(iterations=200, prompts_per_iteration=32, group_size=16, learning_rate=3e-4, eval_every=20),
        eval_tasks=1000,
    )
    return course_config.by_scale(kind(), gpu, scale)


def make_env(split: str = "train", max_tool_calls: int = 1, execution_error_penalty: float = 0.0) -> envs.TextEnv:
    return envs.make(
        ENV_NAME, split=split, max_tool_calls=max_tool_calls, execution_error_penalty=execution_error_penalty
    )


# Demonstrations: the "base model" -------------------------------------------------------------
def _near_miss(rng: random.Random, value: int) -> int:
    return max(0, min(MAX_NUMBER, value + rng.choice([-1, 1]) * rng.randint(1, 30)))


def _broken(rng: random.Random, expression: str, question: str) -> str:
    """Code that fails: a dropped last number (SyntaxError) or a question word used as a name."""
    words = expression.split()
    if rng.random() < 0.5:
        return " ".join(words[:-1])
    noun = question.split()[-2]  # e.g. "pens"
    return " ".join(noun if w == words[-1] else w for w in words)


def demonstration_texts(count: int, seed: int, tool_share: float, direct_correct: float) -> list[tuple[str, str]]:
    """`(prompt, completion)` generic mixed traces on train problems.

    With probability `1 - tool_share` the completion answers in text only (right with probability
    `direct_correct`, else a near miss). Otherwise it writes code, in one of these shapes:
    - 70%: one call with the whole expression, then the result copied into the answer;
    - 12%: one operation per call (the tool response is followed by more code), as a model
      that computes step by step would; with C = 1 only the first call runs;
    - 10%: broken code, an error, then a guessed answer (an ineffective call);
    - 8%: a correct call whose result is then ignored for a guess (an ineffective call).
    """
    rng = random.Random(seed)
    texts = []
    for index in range(count):
        problem = draw_problem(seed * 10_000_019 + index, "train")
        answer = problem.answer
        prompt = f"<question> {problem.question} </question>"
        if rng.random() >= tool_share:
            guess = answer if rng.random() < direct_correct else _near_miss(rng, answer)
            texts.append((prompt, f"<answer> {guess} </answer>"))
            continue
        shape = rng.random()
        if shape < 0.70:
            calls = [(problem.expression, str(answer))]
            final = answer
        elif shape < 0.82:
            steps = problem.step_expressions()
            calls = [(s, str(int(eval(s, {"__builtins__": {}})))) for s in steps]  # noqa: S307 (own text)
            final = answer
        elif shape < 0.92:
            broken = _broken(rng, problem.expression, problem.question)
            kind = "SyntaxError" if len(broken.split()) < len(problem.expression.split()) else "NameError"
            calls = [(broken, f"error {kind}")]
            final = _near_miss(rng, answer)
        else:
            calls = [(problem.expression, str(answer))]
            final = _near_miss(rng, answer)
        completion = " ".join(
            f"<tool_call> {code} </tool_call> <tool_response> {result} </tool_response>" for code, result in calls
        )
        texts.append((prompt, f"{completion} <answer> {final} </answer>"))
    return texts


def build_tokenizer_for_chapter():
    return build_tokenizer(vocabulary())


build_base = bases.base_builder(
    preset, vocabulary, 128, lambda c, seed: demonstration_texts(c.demonstrations, seed, c.tool_share, c.direct_correct)
)
"""`build_base(out_dir, seed, scale, progress, config)`: a fresh model warm-started on the demonstrations, saved."""


def build_data(data_dir: Path, seed: int = 0, progress: bool = True, scale: str = "cpu") -> None:
    """`python -m course_lib.data build ch04 [--scale gpu]`: the task set and the warm-started base of
    `preset(scale)`."""

    def columns(problems: list) -> dict[str, list]:
        return {key: [getattr(p, key) for p in problems] for key in ("question", "expression", "answer")}

    data.write_task_set(TASKS_NAME, bases.task_splits(draw_problem, columns), seed, data_dir, scale)
    bases.write_base(BASE_NAME, build_base, data_dir, seed, progress, scale)


# Measurements (ToRL Fig. 5, plus the tool success rate and hallucinated observations) -------
def call_is_effective(call: dict, later_actions: list[str]) -> bool:
    """A call is effective when it ran, did not fail, and its result is used later (in a later
    call's code or in the answer). Skipped calls (over the limit C) and errors are ineffective."""
    if call.get("skipped") or call.get("result") in (None, "error"):
        return False
    result = call["result"].split()
    return any(word in action.split() for action in later_actions for word in result if word.isdigit())


def torl_stats(trajectories: list[Trajectory], tokenizer) -> dict[str, float]:
    """The chapter's measurements of a batch of responses.

    - `code_ratio`: share of responses with at least one tool call (executed or over the limit);
    - `executable_ratio`: among responses with executed code, the share whose code all ran;
    - `tool_success`: executed calls that returned a result (not an error) / executed calls;
    - `ineffective_rate`: ineffective calls / all calls (`call_is_effective`);
    - `ineffective_per_response`: ineffective calls per response;
    - `calls_per_response`, `skipped_rate` (calls over the limit / all calls);
    - `hallucination_rate`: share of responses where the policy itself wrote `<tool_response>`;
    - `hallucinated_tokens`: such policy-written `<tool_response>` tokens per response.
    """
    # The course's tokenizer has the tag as one token, counted by id; a checkpoint's spells it in pieces, so its
    # policy-written tags are counted in the text of its actions instead.
    response_id = tag_id(tokenizer, "<tool_response>") if is_word_level(tokenizer) else None
    calls = ineffective = skipped = executed = succeeded = 0
    with_code = with_executed = all_ran = hallucinating = hallucinated = 0
    for t in trajectories:
        env_calls = t.env.calls
        actions = t.env.transcript.actions
        for call in env_calls:
            calls += 1
            skipped += bool(call.get("skipped"))
            if "result" in call:
                executed += 1
                succeeded += call["result"] != "error"
            ineffective += not call_is_effective(call, actions[call["turn"] :])
        with_code += bool(env_calls)
        ran = [c for c in env_calls if "result" in c]
        with_executed += bool(ran)
        all_ran += bool(ran) and all(c["result"] != "error" for c in ran)
        if response_id is None:
            written = sum(action.count("<tool_response>") for action in actions)
        else:
            written = sum(1 for i, m in zip(t.token_ids, t.loss_mask, strict=True) if m and i == response_id)
        hallucinated += written
        hallucinating += written > 0
    n = len(trajectories)
    return {
        "code_ratio": with_code / n,
        "executable_ratio": all_ran / max(with_executed, 1),
        "tool_success": succeeded / max(executed, 1),
        "ineffective_rate": ineffective / max(calls, 1),
        "ineffective_per_response": ineffective / n,
        "calls_per_response": calls / n,
        "skipped_rate": skipped / max(calls, 1),
        "hallucination_rate": hallucinating / n,
        "hallucinated_tokens": hallucinated / n,
    }


test_seeds = bases.held_out_seeds(lambda: make_env("test"))
"""`test_seeds(count)`: seeds of the held-out problems used for evaluation (the test split's first `count`
seeds with pairwise different problems; cached)."""


def evaluate(model, tokenizer, config: WordMathConfig, seed: int, max_tool_calls: int | None = None) -> dict:
    """Held-out accuracy and the ToRL measurements, sampled the way RL samples (temperature 1).

    `silent_tool_hallucination` probes what the policy does when a call gets no response (as for a
    call over the limit C): the same problems with C = 0, and the share of responses in which the
    policy then writes `<tool_response>` itself.
    """
    calls = config.max_tool_calls if max_tool_calls is None else max_tool_calls
    seeds = test_seeds(config.eval_tasks)
    stats, trajectories = evaluate_policy(
        model, tokenizer, lambda: make_env("test", calls), seeds, config.sampling, seed
    )
    _, silent = evaluate_policy(model, tokenizer, lambda: make_env("test", 0), seeds, config.sampling, seed)
    probe = torl_stats(silent, tokenizer)["hallucination_rate"]
    return {**stats, **torl_stats(trajectories, tokenizer), "silent_tool_hallucination": probe}
