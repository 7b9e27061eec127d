"""Pitfall 6: reward groups whose rewards are all equal carry no gradient.

GRPO's advantage (DeepSeekMath, arXiv 2402.03300, section 4.1.2) is a reward minus its group's mean, over the
group's std: in a group whose G rewards are equal every advantage is 0, so its rows cost a rollout and an update
and move nothing (DAPO, arXiv 2503.14476, filters them out by "dynamic sampling"). When most groups of a batch are
like that (too easy or too hard tasks, groups too small) the update is noise or nothing: RAGEN's StarPO-S
(arXiv 2504.20073) keeps only the groups with the largest reward spread, RAGEN-2's SNR filter the top share of it
(`course_lib.algos.filters`). `check_zero_variance_groups` measures the share.
"""

from __future__ import annotations

import torch

from course_lib.algos.filters import group_reward_std
from course_lib.course.pitfalls.report import PitfallReport, finish


def check_zero_variance_groups(
    rewards: torch.Tensor, group_ids: torch.Tensor, max_share: float = 0.5, on_flag: str = "warn"
) -> PitfallReport:
    """Flag a batch in which more than `max_share` of the groups have all-equal rewards. `rewards`, `group_ids`:
    `[B]` (episode rewards and their group). Numbers: `groups`, `zero_std_groups`, `share`, `rows_without_signal`.
    Sample larger groups, harder or easier tasks, or filter groups (`batch_filter="starpo_s"` / `"snr_top_p"`)."""
    order, stds = group_reward_std(rewards, group_ids)
    flat = {group for group, std in zip(order, stds.tolist(), strict=True) if std <= 1e-12}
    rows = sum(int(g) in flat for g in group_ids.tolist())
    share = len(flat) / max(len(order), 1)
    flagged = share > max_share
    message = f"{len(flat)} of {len(order)} groups ({share:.0%}) have all-equal rewards" + (
        " (their advantages are 0: larger groups, other tasks, or a StarPO-S/SNR filter)" if flagged else ""
    )
    numbers = {"groups": float(len(order)), "zero_std_groups": float(len(flat)), "share": share,
               "rows_without_signal": float(rows)}  # fmt: skip
    return finish(PitfallReport("all-equal reward groups", flagged, numbers, message), on_flag)
