"""Checks of `exercises/loop.py` (chapter 00): the student's GRPO update against the library's own loop
(`course_lib.rl.train.policy_iteration`) on the same sampled batch, from the same weights."""

from __future__ import annotations

import copy
import dataclasses
import functools
from types import SimpleNamespace

import torch

from exercises.checks.common import Exercise, ExerciseFailure

LEARNING_RATE = 0.1
"""Plain SGD in the checks: a step proportional to the gradient, so a wrong gradient cannot hide behind Adam's
normalisation."""

TOLERANCE = 1e-5


@functools.cache
def _sampled() -> tuple:
    """Chapter 00's committed base, its tokenizer and one batch of rows it sampled (3 tasks x 4 episodes)."""
    from course_lib import data
    from course_lib.chapters import ch00_tool_agent as ch00
    from course_lib.engine.rollout import RolloutEngine

    model, tokenizer = data.load_base(ch00.BASE_NAME, "cpu")
    config = ch00.preset()
    engine = RolloutEngine(model, tokenizer, config.sampling)
    seeds, groups = [s for s in (11, 12, 13) for _ in range(4)], [g for g in range(3) for _ in range(4)]
    rows = engine.rollout([ch00.make_env() for _ in seeds], seeds, groups, torch.Generator().manual_seed(0))
    return model, tokenizer, config, rows


def library_grpo_update(model, rows, pad_id, config, optimizer, temperature=1.0) -> float:
    """The library's update: `policy_iteration` itself, with a sampler that hands it `rows`."""
    from course_lib.rl import seams
    from course_lib.rl.seams import Rollouts
    from course_lib.rl.train import policy_iteration

    config = dataclasses.replace(config, sampler="exercise_rows", advantage="grpo", policy_loss="clipped")
    # rows sampled in float32: the update takes their stored log-probs as old (GRPOConfig.old_logprobs)
    sampling = SimpleNamespace(temperature=temperature, precision="fp32")
    engine = SimpleNamespace(tokenizer=SimpleNamespace(pad_token_id=pad_id), config=sampling)
    seams.register("sampler", "exercise_rows", lambda *_: Rollouts(rows=list(rows), episodes=list(rows)))
    try:
        return policy_iteration(model, engine, [], config, 0, 0, None, optimizer)["loss"]
    finally:  # leave the loop's seams as the course registered them
        del seams.SEAMS["sampler"]["exercise_rows"]


def _both(fn, **changes) -> tuple:
    """Run `fn` and the library on copies of the base from the same batch: (yours, library's) models and losses."""
    base, tokenizer, config, rows = _sampled()
    config = dataclasses.replace(config.grpo, **changes)
    results = []
    for update in (fn, library_grpo_update):
        model = copy.deepcopy(base).eval()
        optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
        loss = update(model, copy.deepcopy(rows), tokenizer.pad_token_id, config, optimizer, 1.0)
        results.append((model, loss))
    return results[0], results[1], config


def _largest_difference(mine: torch.nn.Module, library: torch.nn.Module) -> tuple[float, str]:
    return max(((a - b).abs().max().item(), name) for (name, a), (_, b) in
               zip(mine.named_parameters(), library.named_parameters(), strict=True))  # fmt: skip


def _compare(fn, why_loss: str, why_step: str, **changes) -> None:
    (mine, loss), (library, library_loss), config = _both(fn, **changes)
    if not isinstance(loss, float):
        raise ExerciseFailure(f"return the last update's loss as a float (loss.item()), not a {type(loss).__name__}")
    if abs(loss - library_loss) > TOLERANCE * max(1.0, abs(library_loss)):
        raise ExerciseFailure(f"{why_loss} (the library's loss {library_loss:.4f}, yours {loss:.4f})")
    difference, name = _largest_difference(mine, library)
    if difference > TOLERANCE:
        raise ExerciseFailure(
            f"{why_step} (largest difference from the library's parameters {difference:.2e}, in {name})"
        )
    if mine.training:
        raise ExerciseFailure("put the model back in eval mode (model.eval()) after the update: sampling runs in it")


def one_update(fn):
    _compare(
        fn,
        "one update, chapter 00's settings: your loss differs from the library's on the same batch. The advantage is "
        "each episode's reward against its own group (group ids, unbiased std); the loss is the clipped surrogate "
        "over the tokens with loss mask 1, token-mean, with the rows' recorded log-probs as pi_old",
        "one update: your loss matches, but the parameters after the step differ from the library's. Zero the "
        "gradients, backpropagate the loss once, clip the gradient norm to config.max_grad_norm, then step",
        updates_per_batch=1,
    )


def several_updates(fn):
    # The second update's loss is computed after the first step: a wrong step (no gradient clip, say) changes it
    # too, and must not be blamed on pi_old. So the first step is checked on its own before the two updates.
    (mine, _), (library, _), _ = _both(fn, updates_per_batch=1, clip_high=0.28)
    difference, name = _largest_difference(mine, library)
    if difference > TOLERANCE:
        raise ExerciseFailure(
            "two updates: the first update's step already differs from the library's, so the second starts from "
            "other weights and nothing after it can match. Get 'one update' passing first: zero the gradients, "
            "backpropagate the loss once, clip the gradient norm to config.max_grad_norm, then step (largest "
            f"difference after the first step {difference:.2e}, in {name})"
        )
    _compare(
        fn,
        "two updates with clip-higher (clip_low 0.2, clip_high 0.28): the second update's loss differs. Every update "
        "recomputes the log-probs under the current policy but keeps pi_old, the policy that sampled the rows: "
        "their recorded log-probs, not the current ones (then every ratio is 1 and the clip never acts)",
        "two updates: the loss matches, but the parameters differ after the steps. Zero the gradients before each "
        "update's backward: otherwise the second step adds the first update's gradient again",
        updates_per_batch=2,
        clip_high=0.28,
    )


def no_signal(fn):
    """Every group's rewards equal: no advantage, no gradient, so the step must not move the model."""
    base, tokenizer, config, rows = _sampled()
    rows = copy.deepcopy(rows)
    for row in rows:
        row.episode_reward = 1.0
    model = copy.deepcopy(base).eval()
    loss = fn(model, rows, tokenizer.pad_token_id, config.grpo, torch.optim.SGD(model.parameters(), lr=1.0), 1.0)
    difference, name = _largest_difference(model, base)
    if abs(loss) > TOLERANCE or difference > TOLERANCE:
        raise ExerciseFailure(
            "when every episode of every group has the same reward there is no advantage and no gradient: the loss "
            f"must be 0 and the parameters unchanged (loss {loss:.4f}, largest change {difference:.2e} in {name})"
        )


def dr_grpo_tight_clip(fn):
    _compare(
        fn,
        "Dr. GRPO (config.scale_by_std False): your loss differs; the advantage is r - mean of its group, not "
        "divided by the group's std",
        "a tight gradient clip (config.max_grad_norm 0.05): the parameters differ. Clip the total gradient norm of "
        "the trainable parameters to config.max_grad_norm after backward and before optimizer.step()",
        scale_by_std=False,
        max_grad_norm=0.05,
    )


EXERCISES = [
    Exercise(
        "loop.grpo_update",
        "00",
        "course_lib/rl/train.py",
        library_grpo_update,
        (
            ("one update", one_update),
            ("several updates", several_updates),
            ("no signal", no_signal),
            ("Dr. GRPO, tight clip", dr_grpo_tight_clip),
        ),
    ),
]
