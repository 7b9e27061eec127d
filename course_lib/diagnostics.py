"""Measurements of rollouts and of the policy (all RL chapters).

Summaries of a list of trajectories (success, reward, tool use, length, entropy) and of a batch
of groups (within-group reward spread), the numbers the chapters plot and their claims test.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from course_lib.rollout import Trajectory


def rollout_stats(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Success rate, mean reward, tool-use rate, tool error rate, invalid-action rate, turns,
    policy tokens per trajectory and mean token entropy (nats) over policy tokens."""
    if not trajectories:
        raise ValueError("rollout_stats needs at least one trajectory")
    tool_calls = [sum("tool_result" in info for info in t.infos) for t in trajectories]
    tool_errors = [sum(info.get("tool_result") == "error" for info in t.infos) for t in trajectories]
    steps = sum(t.num_turns for t in trajectories)
    policy_tokens = [sum(t.loss_mask) for t in trajectories]
    entropy_sum = sum(e for t in trajectories for e, m in zip(t.entropies, t.loss_mask, strict=True) if m)
    return {
        "success": float(np.mean([t.success for t in trajectories])),
        "reward": float(np.mean([t.total_reward for t in trajectories])),
        "tool_use": float(np.mean([c > 0 for c in tool_calls])),
        "tool_error_rate": sum(tool_errors) / max(sum(tool_calls), 1),
        "invalid_rate": sum(not info.get("valid", True) for t in trajectories for info in t.infos) / max(steps, 1),
        "turns": steps / len(trajectories),
        "policy_tokens": float(np.mean(policy_tokens)),
        "entropy": entropy_sum / max(sum(policy_tokens), 1),
    }


def group_reward_std(trajectories: Sequence[Trajectory]) -> float:
    """Mean over groups of the (unbiased) standard deviation of total reward within the group."""
    groups: dict[int, list[float]] = defaultdict(list)
    for t in trajectories:
        groups[t.group_id].append(t.total_reward)
    spreads = [np.std(r, ddof=1) for r in groups.values() if len(r) > 1]
    return float(np.mean(spreads)) if spreads else 0.0
