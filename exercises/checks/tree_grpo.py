"""Checks of `exercises/tree_grpo.py` (chapter 17) against hand values of Tree-GRPO's advantage and
`course_lib.algos.tree_grpo`."""

from __future__ import annotations

import random

import torch

from course_lib.algos import tree_grpo
from exercises.checks.common import Exercise, ExerciseFailure, expect_close


def library_tree_advantages(rewards, prompt_ids, tree_ids, eps=1e-6):
    """The library's function on tensors made from the lists (ids mapped to integers)."""
    prompts = {p: k for k, p in enumerate(dict.fromkeys(prompt_ids))}
    trees = {t: k for k, t in enumerate(dict.fromkeys(tree_ids))}
    return tree_grpo.tree_advantages(
        torch.tensor([float(r) for r in rewards]),
        torch.tensor([prompts[p] for p in prompt_ids]),
        torch.tensor([trees[t] for t in tree_ids]),
        eps=eps,
    ).tolist()


def _check(fn, rewards, prompts, trees, expected, why):
    got = fn(rewards, prompts, trees)
    if not isinstance(got, (list, tuple, torch.Tensor)) or len(got) != len(rewards):
        raise ExerciseFailure(f"return one advantage per leaf ({len(rewards)} values)")
    expect_close(got, expected, why)


def chains_are_grpo(fn):
    # four chains of one prompt, rewards 1, 0, 0, 0: GRPO's (1.5, -0.5, -0.5, -0.5) (mean 0.25, std 0.5)
    _check(fn, [1.0, 0.0, 0.0, 0.0], ["q"] * 4, ["a", "b", "c", "d"], [1.5, -0.5, -0.5, -0.5],
           "four unbranched chains are four one-leaf trees: each tree's term is 0 (a one-leaf tree adds nothing; "
           "the official code's raw reward gives 2.5), so A is GRPO's: unbiased std, mean 0.25, std 0.5")  # fmt: skip


def one_tree_doubles(fn):
    _check(fn, [1.0, 0.0, 0.0, 0.0], ["q"] * 4, ["t"] * 4, [3.0, -1.0, -1.0, -1.0],
           "one tree holding every leaf of its prompt: the intra-tree and inter-tree groups are the same set, so "
           "A = 2 x GRPO's z-score (the two terms are added, with no weight)")  # fmt: skip


def two_trees(fn):
    # prompt: mean 1/3, std 0.5164 -> +1.2910 / -0.6455; tree A (1, 1, 0): +0.5774, +0.5774, -1.1547; tree B: 0
    _check(fn, [1.0, 1.0, 0.0, 0.0, 0.0, 0.0], ["q"] * 6, ["A", "A", "A", "B", "B", "B"],
           [1.8683, 1.8683, -1.8002, -0.6455, -0.6455, -0.6455],
           "each leaf's z-score within its tree plus within its prompt, each with the unbiased std (n - 1); a tree "
           "whose leaves all score the same contributes 0")  # fmt: skip


def prompts_apart(fn):
    # prompt q: (1, 0) in one tree -> 2 x 0.7071 each side; prompt r: all 1 -> 0
    _check(fn, [1.0, 0.0, 1.0, 1.0], ["q", "q", "r", "r"], ["A", "A", "B", "C"], [1.4142, -1.4142, 0.0, 0.0],
           "each prompt is its own inter-tree group: another prompt's rewards never enter its mean or std")  # fmt: skip


def random_batches(fn):
    rng = random.Random(17)
    for _ in range(5):
        rewards, prompts, trees = [], [], []
        for prompt in range(3):
            for tree in range(rng.randint(1, 3)):
                for _ in range(rng.randint(1, 3)):
                    rewards.append(float(rng.random() < 0.5))
                    prompts.append(prompt)
                    trees.append((prompt, tree))
        _check(fn, rewards, prompts, trees, library_tree_advantages(rewards, prompts, trees),
               "random trees: your advantages differ from the library's (course_lib/algos/tree_grpo.py)")  # fmt: skip


EXERCISES = (
    Exercise(
        "tree_grpo.tree_advantages",
        "17",
        "course_lib/algos/tree_grpo.py",
        library_tree_advantages,
        (
            ("chains are GRPO", chains_are_grpo),
            ("one tree doubles", one_tree_doubles),
            ("two trees", two_trees),
            ("prompts apart", prompts_apart),
            ("random batches", random_batches),
        ),
    ),
)
