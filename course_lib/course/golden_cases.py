"""What a chapter's golden-run cases compute (`skeleton.Chapter.golden`): exactly what the rollout engine and a
GRPO update produce, as plain values for the golden run (`course_lib.lab.golden`) to hash. A case is a function
returning such values; these helpers build the common ones."""

from __future__ import annotations

from collections.abc import Callable

import torch

from course_lib.engine.rollout import RolloutEngine


def trajectory_values(trajectories) -> list:
    return [(t.token_ids, t.loss_mask, t.logprobs, t.entropies, t.turn_ids, t.rewards) for t in trajectories]


def grpo_batch(model, tokenizer, sampling, make_env: Callable, seed: int) -> list:
    """One GRPO-shaped batch (8 tasks x 8 samples: shared prompts are prefilled once), as `trajectory_values`."""
    seeds = [i // 8 for i in range(64)]
    generator = torch.Generator().manual_seed(seed)
    engine = RolloutEngine(model, tokenizer, sampling)
    return trajectory_values(engine.rollout([make_env() for _ in seeds], seeds, seeds, generator))


def rollout_case(task) -> Callable[[], list]:
    """The case `"chNN rollouts"` of a tool chapter: one GRPO batch (seed 0) of its committed base on its
    training task (`ToolTask`)."""

    def run():
        from course_lib import data

        model, tokenizer = data.load_base(task.base)
        return grpo_batch(model, tokenizer, task.sampling, task.make_env, 0)

    return run


def untimed(metrics: list[dict]) -> list[dict]:
    """Metrics without their `time_` entries (wall-clock times are not arithmetic)."""
    return [{key: value for key, value in m.items() if not key.startswith("time_")} for m in metrics]
