"""Checks for the pitfalls people hit when they train agents with RL, each callable on a user's own run.

One module per pitfall or pair (chapter 15, `notebooks/15_pitfalls_lab.ipynb`, reproduces each on a course model):

1. retokenization drift (TRL 5224, verl 2165): `tokens.check_retokenization(tokenizer, trajectories)`;
2. templates that strip earlier turns (verl 6854): `tokens.check_incremental_template(tokenizer, episodes)`;
3. advantages on the wrong tokens (SkyRL 1507): `masks.check_advantage_alignment(advantages, loss_mask, action_mask)`;
4. environment tokens in the loss: `masks.check_observation_share(loss_mask, action_mask)`;
5. one environment for several rollouts (OpenRLHF 1169): `environments.check_env_isolation(make_env)` and
   `environments.check_distinct_envs(envs)`;
6. all-equal reward groups: `groups.check_zero_variance_groups(rewards, group_ids)`;
7. entropy blow-ups (and collapses): `monitors.check_entropy(history)`;
8. stale off-policy data: `monitors.check_staleness(logprobs, behaviour_logprobs, mask)` (`monitors.ratio_stats`).

Every check returns a `PitfallReport` (`flagged`, `numbers`, `message`) and, when it flags, warns (`on_flag="warn"`,
the default), raises `PitfallError` (`"raise"`) or stays quiet (`"return"`).
"""

from course_lib.course.pitfalls.environments import check_distinct_envs, check_env_isolation
from course_lib.course.pitfalls.groups import check_zero_variance_groups
from course_lib.course.pitfalls.masks import check_advantage_alignment, check_observation_share, shifted_right
from course_lib.course.pitfalls.monitors import check_entropy, check_staleness, ratio_stats
from course_lib.course.pitfalls.report import PitfallError, PitfallReport, PitfallWarning
from course_lib.course.pitfalls.tokens import (
    check_incremental_template,
    check_retokenization,
    policy_turns,
    retokenized,
)

__all__ = [
    "PitfallError",
    "PitfallReport",
    "PitfallWarning",
    "check_advantage_alignment",
    "check_distinct_envs",
    "check_entropy",
    "check_env_isolation",
    "check_incremental_template",
    "check_observation_share",
    "check_retokenization",
    "check_staleness",
    "check_zero_variance_groups",
    "policy_turns",
    "ratio_stats",
    "retokenized",
    "shifted_right",
]
