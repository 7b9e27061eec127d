"""The survey's methods under TRL, checked against the course on the same episodes (chapter 13's C13.5).

Each check builds a `CourseMethodTrainer` (`trl_methods`) on a small batch, lets TRL generate and score it the way a
training step starts (`_generate_and_score_completions`), and compares what TRL will train on with what the course's
loop computes from the very same episodes (`course_lib.rl.seams`, `tree_rollout.sample_trees`):

- GiGPO, step mode (chapter 07): every step row's advantages, bit for bit, and TRL's loss and gradient;
- GiGPO, trajectory mode (chapter 08): each step's advantage on its action tokens, bit for bit, and loss and gradient;
- ARPO's and AEPO's trees (chapter 08): the leaves TRL trains on are `sample_trees`' (ids, masks, log-probs, parents)
  for the same weights, seeds and generator;
- StarPO-S and the SNR filter (chapter 08): the rows TRL keeps are the course filter's, and its loss and gradient on
  them the course's.

A mismatch is a row whose values differ, or a loss more than 1e-6 away or a gradient more than 1e-4 (relative) away.
`tests/integrations/test_trl_methods.py` checks more (one whole TRL step, AEPO's balanced clip on spread ratios,
the MI callback).
"""

from __future__ import annotations

import copy
import dataclasses

import torch

from course_lib import data
from course_lib.engine.rollout import RolloutEngine, collate
from course_lib.engine.tree_rollout import sample_trees
from course_lib.integrations import course_trl, trl_chapters
from course_lib.models import token_logprobs
from course_lib.rl import seams
from course_lib.tasks import key_door_grid, two_hop_search
from course_lib.tasks.tool_task import ToolTask

LOSS_TOLERANCE = 1e-6
"""Largest loss difference (absolute) counted as equal: float32 sums in another order."""
GRADIENT_TOLERANCE = 1e-4
"""Largest gradient difference, relative to the largest course gradient entry, counted as equal."""


def _settings(prompts: int, seed: int) -> course_trl.TRLSettings:
    return course_trl.TRLSettings(steps=1, prompts=prompts, group=4, seed=seed)


def _generate(trainer) -> dict:
    """One batch of TRL's own generate-and-score path on the first prompts of its dataset."""
    args = trainer.args
    prompts = list(trainer.train_dataset["prompt"])[: args.per_device_train_batch_size // args.num_generations]
    with course_trl.quiet_deprecations():
        return trainer._generate_and_score_completions(
            [{"prompt": p} for p in prompts for _ in range(args.num_generations)]
        )


def _trainer(task: ToolTask, method: str, prompts: int, seed: int, base, keep: list, adjust=lambda course: course):
    """A `CourseMethodTrainer` of `method` on a copy of `base`, its loop configuration passed through `adjust`."""
    settings = _settings(prompts, seed)
    course = adjust(trl_chapters.method_config(task.method(), method, settings))
    model = copy.deepcopy(base[0])
    trainer = trl_chapters.method_trainer(task, None, settings, model, base[1], keep=keep, course=course)
    return trainer, model


def _gradient(model, loss: torch.Tensor) -> torch.Tensor:
    model.zero_grad()
    loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def loss_gaps(trainer, model, out: dict, batch, advantages: torch.Tensor) -> tuple[float, float]:
    """How far TRL's loss on `out` is from the course's clipped token mean on `batch` with `advantages`: the absolute
    difference of the values and the largest gradient difference relative to the largest course gradient entry."""
    logprobs, _ = token_logprobs(model, batch.input_ids, batch.attention_mask)
    expected, _ = seams.clipped(logprobs, batch.old_logprobs, advantages, batch.loss_mask, trainer.course)
    ours = trainer._compute_loss(model, out)
    value_gap = abs(float(ours.detach()) - float(expected.detach()))
    theirs = _gradient(model, expected)
    return value_gap, float((_gradient(model, ours) - theirs).abs().max()) / max(float(theirs.abs().max()), 1e-30)


def _loss_mismatch(trainer, model, out: dict, batch, advantages: torch.Tensor) -> int:
    """1 if TRL's loss on `out` is not the course's (value or gradient, `loss_gaps`), else 0."""
    value_gap, gradient_gap = loss_gaps(trainer, model, out, batch, advantages)
    return int(value_gap > LOSS_TOLERANCE or gradient_gap > GRADIENT_TOLERANCE)


def _advantage_mismatches(out: dict, rows, advantages: torch.Tensor) -> int:
    """Rows whose TRL advantages (completion positions) are not the course's, bit for bit."""
    wrong = 0
    for i, row in enumerate(rows):
        start, length = row.prefix_length(0), len(row.token_ids) - row.prefix_length(0)
        wrong += not torch.equal(out["advantages"][i, :length], advantages[i, start : start + length])
    return wrong


def gigpo_check(task: ToolTask, seed: int, base) -> dict[str, float]:
    """GiGPO on chapter 07's task (step mode) or 08's (trajectory mode, independent groups)."""
    kept: list = []
    step = task.step_mode
    groups = (lambda c: c) if step else (lambda course: dataclasses.replace(course, sampler="groups"))
    trainer, model = _trainer(task, "gigpo", 2 if step else 4, seed, base, kept, groups)
    out = _generate(trainer)
    rows = [row for episode in kept for row in episode.rows] if step else kept
    batch = collate(rows, base[1].pad_token_id)
    advantages, _ = seams.gigpo(batch, trainer.course)
    wrong = _advantage_mismatches(out, rows, advantages) + _loss_mismatch(trainer, model, out, batch, advantages)
    return {"rows": float(len(rows)), "mismatches": float(wrong)}


TREE_PROMPTS = 8
"""Questions per tree check. A tree that never branched would make the check vacuous; with two questions the recorded
trees branched one to three times, so a branchless tree was a real chance (C13.5's `chance` computes it from the
recorded branch counts); eight questions grow that count about fourfold."""


def tree_check(rule: str, seed: int, base) -> dict[str, float]:
    """ARPO's (or AEPO's) tree through the `rollout_func` against `sample_trees` run directly."""
    kept: list = []

    def two_globals(course):  # of a budget of 4 leaves, so that the tree has room to branch
        return dataclasses.replace(course, tree=dataclasses.replace(course.tree, global_samples=2))

    task = two_hop_search.tool_task()
    trainer, model = _trainer(task, rule, TREE_PROMPTS, seed, base, kept, two_globals)
    _generate(trainer)
    leaves, stats = kept
    engine = RolloutEngine(model, base[1], dataclasses.replace(task.sampling, snapshot_envs=True))
    prompts = list(trainer.train_dataset["prompt"])[:TREE_PROMPTS]
    seeds = [course_trl.dataset_prompts(task, _settings(TREE_PROMPTS, seed))[p] for p in prompts]
    direct, direct_stats = sample_trees(
        engine, [task.make_env() for _ in range(4 * TREE_PROMPTS)], seeds, 4, trainer.course.tree,
        torch.Generator().manual_seed(seed),
    )  # fmt: skip
    wrong = sum(
        (a.token_ids, a.loss_mask, a.logprobs) != (b.token_ids, b.loss_mask, b.logprobs)
        for a, b in zip(leaves, direct, strict=True)
    ) + int(stats.parents != direct_stats.parents)
    return {
        "rows": float(len(leaves)),
        "mismatches": float(wrong),
        "branches": float(stats.counts(4, TREE_PROMPTS)["tree_branches"]),
    }


def filter_check(method: str, seed: int, base) -> dict[str, float]:
    """StarPO-S (keeping half the groups) or the SNR filter (its default top_p 0.9) on independent groups of chapter
    08."""
    kept: list = []

    def filtered(course):
        return dataclasses.replace(
            course,
            batch_filter=trl_chapters.METHODS[method]["batch_filter"],
            filter=dataclasses.replace(course.filter, keep_fraction=0.5),
        )

    trainer, model = _trainer(two_hop_search.tool_task(), "grpo", 4, seed, base, kept, filtered)
    out = _generate(trainer)
    batch = collate(kept, base[1].pad_token_id)
    keep = seams.resolve("batch_filter", trainer.course.batch_filter)(batch, trainer.course)
    wrong = int((out["tool_mask"].bool().any(1) != keep).sum())
    if bool(keep.any()):
        selected = batch.select(keep)
        advantages, _ = seams.grpo(selected, trainer.course)
        wrong += _loss_mismatch(trainer, model, out, selected, advantages)
    return {"rows": float(len(kept)), "mismatches": float(wrong), "kept": float(keep.sum())}


def method_checks(seed: int) -> dict[str, float]:
    """Every check above on one seed: per check its rows and mismatches, and the totals (`mismatches`, `rows`)."""
    grid, search = key_door_grid.tool_task(), two_hop_search.tool_task()
    ch07, ch08 = data.load_base(grid.base), data.load_base(search.base)
    checks = {
        "gigpo_step": gigpo_check(grid, seed, ch07),
        "gigpo_trajectory": gigpo_check(search, seed, ch08),
        "arpo_tree": tree_check("arpo", seed, ch08),
        "aepo_tree": tree_check("aepo", seed, ch08),
        "starpo_s": filter_check("starpo_s", seed, ch08),
        "snr": filter_check("snr", seed, ch08),
    }
    numbers = {f"{name}_{key}": value for name, check in checks.items() for key, value in check.items()}
    numbers["mismatches"] = sum(check["mismatches"] for check in checks.values())
    numbers["rows"] = sum(check["rows"] for check in checks.values())
    return numbers
