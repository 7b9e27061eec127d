"""The survey's premises measured on a warm-started real model (docs/experiments/real-model-survey.md, section 2).

Each function takes a model warm-started on its task (`tasks.real_model.warm_start`), the task's config as the warm
start returns it (chat sampling in the model's tokenizer), a seed, and returns the premise's numbers; every
episode is sampled by the course's engine on distinct held-out problems, as training samples them.

- P1, ARPO: `entropy_after_result`, the entropy of the first tokens after the first search result minus that of the
  first tokens of the episode (two-hop search);
- P2, ToRL: `calculator_room`, held-out success with the calculator on minus off (chapter 04's word problems);
- P3, RAGEN-2: `reasoning_retrieval`, in-batch retrieval of first-turn reasonings over chance (the lake);
- P4, AEPO: `branch_concentration`, the top-3 branch share of ARPO's tree over its uniform reference (two-hop).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from course_lib.algos.aepo import uniform_top_share
from course_lib.diagnostics import mutual_information, reasoning_span, teacher_forced_logp
from course_lib.engine.rollout import Trajectory
from course_lib.engine.tree_rollout import TreeConfig, sample_trees
from course_lib.tasks import lake_reasoning, two_hop_search, word_math_tool

ENTROPY_TOKENS = 4
"""P1: how many first policy tokens of a turn its entropy averages (ARPO's k in chapter 08)."""
TREE = TreeConfig(global_samples=8, alpha=0.5, beta=0.2, entropy_tokens=4, rule="arpo")
"""P4: ARPO's tree with 8 global samples (chapter 16's 4 left the margin out of reach), alpha 0.5, beta 0.2, k 4."""
TREE_BUDGET = 16
"""P4: trajectories per question (8 global samples, 8 branches)."""
TREE_QUESTIONS = 32
"""P4: distinct held-out questions per seed."""


def turn_entropies(trajectory: Trajectory, turn: int, first: int) -> list[float]:
    """The full-vocabulary entropies (nats) of the first `first` policy tokens of `turn`."""
    values = [e for e, t, m in zip(trajectory.entropies, trajectory.turn_ids, trajectory.loss_mask, strict=True)
              if m and t == turn]  # fmt: skip
    return values[:first]


def entropy_after_result(model, tokenizer, config, seed: int) -> dict[str, float]:
    """P1 on the warm start's held-out questions (`two_hop_search.evaluate`, sampling seed `seed`):
    `after_result_entropies` of its episodes."""
    episodes = two_hop_search.evaluate(model, tokenizer, config, seed, keep=True)["trajectories"]
    return after_result_entropies(episodes)


def after_result_entropies(episodes: Sequence[Trajectory], first: int = ENTROPY_TOKENS) -> dict[str, float]:
    """Over the episodes whose first action returned a search result (`tool_result` in its info) and that went on
    to a second turn (`scored` of them): the mean entropy of the first `first` policy tokens of the first turn, of the
    second turn (right after the result), and the mean per-episode difference (NaN where none is scored)."""
    before, after = [], []
    for t in episodes:
        later = turn_entropies(t, 1, first)
        if t.infos and "tool_result" in t.infos[0] and later:
            before.append(float(np.mean(turn_entropies(t, 0, first))))
            after.append(float(np.mean(later)))
    nan = float("nan")
    return {
        "entropy_first_turn": float(np.mean(before)) if before else nan,
        "entropy_after_result": float(np.mean(after)) if after else nan,
        "after_result_minus_first": float(np.mean(np.subtract(after, before))) if before else nan,
        "scored": float(len(before)),
    }


def calculator_room(model, tokenizer, config, seed: int) -> dict[str, float]:
    """P2 on the warm start's held-out word problems (the same problems and sampling seed in both arms): success with
    the calculator running (C = 1) and with calls answered by nothing (C = 0), their difference, and its reach (1
    minus the success with the calculator off)."""
    on = word_math_tool.evaluate(model, tokenizer, config, seed, max_tool_calls=1)
    off = word_math_tool.evaluate(model, tokenizer, config, seed, max_tool_calls=0)
    return {
        "success_on": float(on["success"]),
        "success_off": float(off["success"]),
        "on_minus_off": float(on["success"] - off["success"]),
        "reach": 1.0 - float(off["success"]),
        "code_ratio_on": float(on["code_ratio"]),
    }


def reasoning_retrieval(model, tokenizer, config, seed: int) -> dict[str, float]:
    """P3 on the warm start's held-out maps (`lake_reasoning.evaluate`, one episode per distinct map): every first
    turn's closed, non-empty reasoning (`diagnostics.reasoning_span`) is scored under every such turn's prompt, its
    own prefix up to the reasoning; RAGEN-2's `mi`, `retrieval_accuracy`, `chance` and their difference (NaN with
    fewer than two scored reasonings: `scored`)."""
    episodes = lake_reasoning.evaluate(model, tokenizer, config, seed, keep=True)["trajectories"]
    pairs = []
    for t in episodes:
        turn = [k for k, (m, turn_id) in enumerate(zip(t.loss_mask, t.turn_ids, strict=True)) if m and turn_id == 0]
        span = reasoning_span(tokenizer, [t.token_ids[k] for k in turn]) if turn else None
        if span is not None:
            start = turn[0]
            pairs.append((t.token_ids[: start + span[0]], t.token_ids[start + span[0] : start + span[1]]))
    numbers = {"scored": float(len(pairs))}
    if len(pairs) < 2:
        nan = float("nan")
        return numbers | {"mi": nan, "retrieval_accuracy": nan, "chance": nan, "retrieval_minus_chance": nan}
    logp = teacher_forced_logp(model, [x for x, _ in pairs], [z for _, z in pairs], reuse_prompts=True)
    found = mutual_information(logp, list(range(len(pairs))))
    numbers |= {key: float(found[key]) for key in ("mi", "retrieval_accuracy", "chance")}
    return numbers | {"retrieval_minus_chance": numbers["retrieval_accuracy"] - numbers["chance"]}


def branch_concentration(model, tokenizer, config, seed: int, questions: int = TREE_QUESTIONS) -> dict[str, float]:
    """P4 on `questions` distinct held-out questions, tree-sampled by ARPO's rule (`TREE`, `TREE_BUDGET` per
    question) with the warm start's sampling: the top-3 branch share over the questions that branched, its uniform
    reference (`algos.aepo.uniform_top_share`), their difference, its reach (1 minus the reference), and the
    questions that branched (`scored`)."""
    engine = two_hop_search.tree_engine(model, tokenizer, config)
    seeds = two_hop_search.test_seeds(questions, config)
    made = [two_hop_search.make_env("test", config) for _ in range(len(seeds) * TREE_BUDGET)]
    _, stats = sample_trees(engine, made, seeds, TREE_BUDGET, TREE, torch.Generator().manual_seed(seed))
    groups = range(len(seeds))
    branches = [sum(p is not None and g == q for p, g in zip(stats.parents, stats.group_ids)) for q in groups]
    roots = [sum(p is None and g == q for p, g in zip(stats.parents, stats.group_ids)) for q in groups]
    top = stats.counts(TREE_BUDGET, len(seeds))["tree_top3_branch_share"]
    uniform = uniform_top_share(branches, roots, 3, seed)
    return {
        "top3_share": top,
        "uniform_top3_share": uniform,
        "top3_over_uniform": top - uniform,
        "reach": 1.0 - uniform,
        "scored": float(sum(b > 0 for b in branches)),
    }


PREMISES = {
    "two_hop": (("entropy", entropy_after_result), ("branching", branch_concentration)),
    "calculator": (("calculator", calculator_room),),
    "lake": (("reasoning", reasoning_retrieval),),
}
"""Per task, its premises: `(name, measure)` with `measure(model, tokenizer, config, seed)`."""


def measure(task: str, model, tokenizer, config, seed: int, names: Sequence[str] | None = None) -> dict[str, float]:
    """Every premise of `task` (or those in `names`), its numbers prefixed by the premise's name."""
    numbers = {}
    for name, function in PREMISES.get(task, ()):
        if names is None or name in names:
            numbers |= {f"{name}_{key}": value for key, value in function(model, tokenizer, config, seed).items()}
    return numbers
