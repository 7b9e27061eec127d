"""Per-row step tables: the checks and the grouping that GiGPO, GraphGPO and IGPO share.

Their inputs are flat per-row lists (one value per step row, rows in any order) with a trajectory id, a step index
within the trajectory and an episode group per row (`algos.gigpo.gigpo_advantages`' six columns).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence


def check_gamma(gamma: float) -> None:
    """Refuse a discount outside [0, 1]."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must lie in [0, 1], got {gamma}")


def check_lengths(**columns: Sequence) -> int:
    """The common length of per-row inputs (0 for none); refuses inputs of different lengths."""
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"all per-row inputs must have the same length, got {lengths}")
    return next(iter(lengths.values()), 0)


def episode_rows(
    traj_ids: Sequence[Hashable], step_index: Sequence[int], group_ids: Sequence[Hashable]
) -> dict[Hashable, list[int]]:
    """Trajectory -> its rows in step order, trajectories in order of first appearance; refuses duplicate step
    indices and a trajectory whose rows lie in more than one episode group."""
    rows_of: dict[Hashable, list[int]] = defaultdict(list)
    for row, traj in enumerate(traj_ids):
        rows_of[traj].append(row)
    for traj, rows in rows_of.items():
        steps = [step_index[row] for row in rows]
        if len(set(steps)) != len(steps):
            raise ValueError(f"trajectory {traj!r} has duplicate step indices {sorted(steps)}")
        if len({group_ids[row] for row in rows}) != 1:
            raise ValueError(f"trajectory {traj!r} has rows in more than one episode group")
        rows.sort(key=lambda row: step_index[row])
    return rows_of
