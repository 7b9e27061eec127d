"""The RL loop's four seams, each chosen by name in a chapter's `GRPOConfig` (after verl's registry of
advantage estimators):

| seam | config field | signature | entries |
|---|---|---|---|
| sampler | `sampler` | `(engine, envs, task_seeds, config, generator) -> Rollouts` | `groups`, `tree`, `igpo` |
| advantage estimator | `advantage` | `(batch, config) -> (advantages [B] or [B, T], stats)` | see below |
| batch filter | `batch_filter` | `(batch, config) -> keep [B] bool` | `none`, `starpo_s`, `snr_top_p` |
| policy loss | `policy_loss` | `(logprobs, old, adv, mask, config) -> (loss, stats)` | `clipped`, `entropy_balanced` |

The advantage estimators: `grpo`, `gigpo`, `graphgpo`, `tree_grpo` (over the `tree` sampler) and `igpo` (over the
`igpo` sampler, which writes each turn's information gain).

`train.policy_iteration` calls the sampler, then the batch filter (whole groups are kept, and advantages are
computed on what is kept, as RAGEN-2 does), then the estimator and the policy loss; a method adds one function
and registers it (`register("advantage", "gae", my_gae)`), and the loop does not change. The functions here are thin
adapters from a `RolloutBatch` to the tensor functions of `algos/`, which they import when first
called, so that importing the loop does not load every method.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from course_lib.engine.rollout import RolloutBatch, Trajectory, broadcast_steps

if TYPE_CHECKING:
    from course_lib.rl.train import GRPOConfig


@dataclass
class Rollouts:
    """What a sampler returns: the rows to train on and the episodes to measure.

    In trajectory mode both are the same list; in step mode `rows` are the one-step rows of every
    episode and `episodes` the `step_mode.Episode`s."""

    rows: list[Trajectory]
    episodes: list[Any]
    stats: dict[str, float] = field(default_factory=dict)
    """What the sampler did, for the training history (the tree sampler's branches and refills)."""
    step_extras: tuple[str, ...] = ()
    """The info keys whose per-step numbers the sampler wrote for its estimator (`RolloutBatch.step_extras`)."""


# Samplers ----------------------------------------------------------------------------------------
def independent_groups(engine, envs, task_seeds: list[int], config: GRPOConfig, generator) -> Rollouts:
    """`config.group_size` independent episodes of each task (GRPO's group), in trajectory or step mode."""
    seeds = [s for s in task_seeds for _ in range(config.group_size)]
    groups = [p for p in range(len(task_seeds)) for _ in range(config.group_size)]
    if config.rollout_mode == "trajectory":
        trajectories = engine.rollout(envs, seeds, groups, generator)
        return Rollouts(rows=trajectories, episodes=trajectories)
    from course_lib.engine.step_mode import rollout_steps

    episodes = rollout_steps(engine, envs, seeds, groups, generator, config.history_window, config.anchor_source)
    return Rollouts(rows=[row for episode in episodes for row in episode.rows], episodes=episodes)


def tree_groups(engine, envs, task_seeds: list[int], config: GRPOConfig, generator) -> Rollouts:
    """ARPO's entropy-guided tree (`course_lib.engine.tree_rollout`): `config.group_size` leaves per task, of which
    `config.tree.global_samples` independent and the rest branched after tool responses or refilled
    (trajectory mode)."""
    from course_lib.engine.tree_rollout import sample_trees

    if config.rollout_mode != "trajectory":
        raise ValueError("the tree sampler forks growing sequences: it needs rollout_mode='trajectory'")
    trajectories, tree = sample_trees(engine, envs, task_seeds, config.group_size, config.tree, generator)
    stats = tree.counts(config.group_size, len(task_seeds))
    return Rollouts(rows=trajectories, episodes=trajectories, stats=stats)


def one_by_one(play: Callable) -> Callable:
    """A sampler that plays GRPO's groups episode by episode with `play(engine, policy, env, seed)` (the rollout
    exercise's signature; `engine.episode.play_episode` is the reference) and `engine.episode.sampling_policy`:
    chapter 00 trains with the student's rollout through it (register it under a name of your own). Trajectory
    mode only; many times slower than `groups`, which samples every episode at once."""
    from course_lib.engine.episode import sampling_policy

    def sampler(engine, envs, task_seeds: list[int], config: GRPOConfig, generator) -> Rollouts:
        if config.rollout_mode != "trajectory":
            raise ValueError("a sampler that plays whole episodes needs rollout_mode='trajectory'")
        policy = sampling_policy(engine, generator)
        rows = []
        for group, seed in enumerate(task_seeds):
            for k in range(config.group_size):
                row = play(engine, policy, envs[group * config.group_size + k], seed)
                row.group_id = group
                rows.append(row)
        return Rollouts(rows=rows, episodes=rows)

    return sampler


def information_gain_groups(engine, envs, task_seeds: list[int], config: GRPOConfig, generator) -> Rollouts:
    """IGPO's sampler: GRPO's independent groups (trajectory mode), then each turn's reward written into its info
    by the policy that sampled it (`rl.info_gain.annotate`: the information gain, the outcome on the last turn),
    for the `igpo` estimator. Stats: the mean gain per turn and the share of groups whose outcomes are all equal."""
    from course_lib.rl.info_gain import annotate

    if config.rollout_mode != "trajectory":
        raise ValueError("IGPO reads each turn's context from one growing sequence: it needs rollout_mode='trajectory'")
    rollouts = independent_groups(engine, envs, task_seeds, config, generator)
    annotate(engine.model, engine.tokenizer, rollouts.rows, config.igpo)
    gains = [info["turn_reward"] for t in rollouts.rows for info in t.infos[: max(len(t.rewards) - 1, 0)]]
    outcomes: dict[int, set] = {}
    for t in rollouts.rows:
        outcomes.setdefault(t.group_id, set()).add(t.total_reward)
    rollouts.stats = {
        "igpo_mean_gain": sum(gains) / len(gains) if gains else 0.0,
        "igpo_equal_outcome_share": sum(len(v) == 1 for v in outcomes.values()) / max(len(outcomes), 1),
    }
    rollouts.step_extras = (TURN_REWARD,)
    return rollouts


# Advantage estimators ----------------------------------------------------------------------------
def invalid_steps_per_row(batch: RolloutBatch) -> torch.Tensor:
    """Number of invalid actions in each row `[B]` (0 or 1 for a step-mode row)."""
    counts = torch.zeros(batch.input_ids.shape[0], device=batch.step_row.device)
    return counts.index_add(0, batch.step_row, (~batch.step_valid).float())


def penalised_rewards(batch: RolloutBatch, config: GRPOConfig) -> torch.Tensor:
    """Each row's episode reward `[B]` less `invalid_penalty` per invalid action of the row (verl-agent's
    `apply_invalid_action_penalty`)."""
    if not config.invalid_penalty:
        return batch.rewards
    return batch.rewards - config.invalid_penalty * invalid_steps_per_row(batch)


def step_columns(batch: RolloutBatch) -> dict[str, list]:
    """The batch's K steps as the six per-row columns GiGPO and GraphGPO read (`algos.gigpo.gigpo_advantages`)."""
    return {
        "rewards": batch.step_reward.tolist(), "valid": batch.step_valid.tolist(), "anchors": batch.step_anchors,
        "group_ids": batch.step_group.tolist(), "traj_ids": batch.step_traj.tolist(),
        "step_index": batch.step_index.tolist(),
    }  # fmt: skip


def grpo_episode_part(batch: RolloutBatch, config: GRPOConfig, baseline: str) -> torch.Tensor | None:
    """GRPO's own advantage on the step rows, `[B, T]` over the loss mask, when a step-credit method's episode part
    equals it: step mode (one step per row), the pooled episode baseline and groups of more than one. The same
    float32 arithmetic as `grpo`, so that with no recurring state GiGPO's and GraphGPO's updates are bit-identical
    to GRPO's. None otherwise (the method's own episode advantage is used)."""
    rows = batch.input_ids.shape[0]
    one_step_rows = torch.equal(batch.step_row, torch.arange(rows, device=batch.step_row.device))
    if baseline == "pooled" and one_step_rows and config.group_size > 1:
        return grpo(batch, config)[0][:, None] * batch.loss_mask
    return None


def grpo(batch: RolloutBatch, config: GRPOConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """GRPO: each row's episode reward against its group (`algos.grpo.group_advantages`), `[B]`.

    In step mode the rows are steps, so the group's mean and std are taken over step rows (weighted by
    episode length), as verl-agent's GRPO does; `invalid_penalty` subtracts 0.1-style penalties per
    invalid action of the row (verl-agent's `apply_invalid_action_penalty`)."""
    from course_lib.algos.grpo import group_advantages

    rewards = penalised_rewards(batch, config)
    return group_advantages(rewards, batch.group_ids, config.scale_by_std), {}


def gigpo(batch: RolloutBatch, config: GRPOConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """GiGPO (`algos.gigpo`): A = A^E + omega * A^S per step, spread over the tokens of each step's action,
    `[B, T]`. Stats: the share of steps in a step group of one, and the mean step-group size.

    In step mode with the pooled episode baseline, the episode part is GRPO's own advantage on the step
    rows (the same float32 arithmetic as `grpo`; equal to `result.episode` up to rounding), so that when
    no state repeats (A^S = 0 everywhere) GiGPO's update is bit-identical to GRPO's: the negative control
    of chapter 07 compares exactly, not within noise."""
    from course_lib.algos.gigpo import GiGPOSettings, token_advantages

    settings = GiGPOSettings.from_course(config)
    device = batch.step_row.device
    episode = grpo_episode_part(batch, config, settings.episode_baseline)
    return token_advantages(
        step_columns(batch), lambda values: broadcast_steps(batch, values.to(device)), settings, episode
    )


def graphgpo(batch: RolloutBatch, config: GRPOConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """GraphGPO (`algos.graphgpo`): A = A^E + beta_G A^G per step, A^G from distances to success in each group's
    graph of states, with `config.graphgpo`'s omega and beta_G. The episode part is GiGPO's (in step mode with the
    pooled baseline, GRPO's own advantage on the step rows, as `gigpo`), so with no recurring state the update is
    GRPO's. Stats: the share of steps in a step group of one, the mean step-group size, and the share of steps of
    failed episodes that brought the agent closer to success."""
    from course_lib.algos.gigpo import step_group_sizes, step_group_stats
    from course_lib.algos.graphgpo import graphgpo_advantages

    g = config.graphgpo
    device = batch.step_row.device
    table = step_columns(batch)
    result = graphgpo_advantages(
        **table, omega=g.omega, step_weight=g.step_weight, scale_by_std=config.scale_by_std,
        pooled=g.episode_baseline == "pooled", invalid_penalty=config.invalid_penalty,
    )  # fmt: skip
    episode = grpo_episode_part(batch, config, g.episode_baseline)
    if episode is None:
        episode = broadcast_steps(batch, torch.tensor(result.episode, dtype=torch.float, device=device))
    step = broadcast_steps(batch, torch.tensor(result.step, dtype=torch.float, device=device))
    stats = step_group_stats(step_group_sizes(table["anchors"], table["group_ids"]))
    stats["graph_failed_progress_share"] = result.failed_progress_share
    return episode + g.step_weight * step, stats


def tree_grpo(batch: RolloutBatch, config: GRPOConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """Tree-GRPO (`algos.tree_grpo`): each leaf's reward against its prompt's leaves plus against its own tree's,
    `[B]`; a tree is a row and its branches (`RolloutBatch.tree_ids`), so unbranched rows get GRPO's advantage.
    `invalid_penalty` as in `grpo`."""
    from course_lib.algos.tree_grpo import tree_advantages

    rewards = penalised_rewards(batch, config)
    trees = batch.tree_ids
    sizes = torch.bincount(trees)[trees].float()
    return tree_advantages(rewards, batch.group_ids, trees, config.scale_by_std), {
        "tree_mean_leaves": float(sizes.mean()) if len(sizes) else 0.0
    }


def igpo(batch: RolloutBatch, config: GRPOConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """IGPO (`algos.igpo`): each turn's reward (`turn_rewards`, written by the `igpo` sampler) normalised within its
    group and summed backwards along its episode, spread over the turn's action tokens, `[B, T]`. Stats: the share of
    groups in which every turn's advantage is 0 (no signal at all)."""
    from course_lib.algos.igpo import igpo_advantages

    last = {}
    for k, (traj, index) in enumerate(zip(batch.step_traj.tolist(), batch.step_index.tolist())):
        if traj not in last or index > batch.step_index[last[traj]]:
            last[traj] = k
    is_outcome = [False] * len(batch.step_traj)
    for k in last.values():
        is_outcome[k] = True
    c = config.igpo
    values = igpo_advantages(
        turn_rewards(batch).tolist(), is_outcome, batch.step_group.tolist(), batch.step_traj.tolist(),
        batch.step_index.tolist(), c.gamma, c.normalisation, config.scale_by_std,
    )  # fmt: skip
    groups = batch.step_group.tolist()
    silent = set(groups) - {g for g, v in zip(groups, values) if abs(v) > 1e-12}
    stats = {"igpo_silent_group_share": len(silent) / max(len(set(groups)), 1)}
    return broadcast_steps(batch, torch.tensor(values, dtype=torch.float, device=batch.step_row.device)), stats


TURN_REWARD = "turn_reward"
"""The info key of IGPO's turn rewards (`rl.info_gain.annotate` writes them; `RolloutBatch.step_extras` holds them)."""


def turn_rewards(batch: RolloutBatch) -> torch.Tensor:
    """IGPO's turn reward of each step `[K]`, or a ValueError saying which sampler writes them."""
    if TURN_REWARD not in batch.step_extras:
        raise ValueError("the igpo estimator reads each turn's reward, which the igpo sampler writes: sampler='igpo'")
    return batch.step_extras[TURN_REWARD]


# Batch filters -----------------------------------------------------------------------------------
def keep_all(batch: RolloutBatch, config: GRPOConfig) -> torch.Tensor:
    """Train on every row."""
    return torch.ones(batch.input_ids.shape[0], dtype=torch.bool, device=batch.input_ids.device)


def _episode_filter(batch: RolloutBatch, select: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """Apply a group filter to the batch's episodes (one reward per episode, also in step mode, where several
    rows share an episode) and map its verdict back to the rows."""
    traj = batch.traj_ids.tolist()
    first = {t: row for row, t in reversed(list(enumerate(traj)))}
    episodes = sorted(first, key=first.get)
    rows = torch.tensor([first[t] for t in episodes])
    keep = select(batch.rewards[rows].detach().cpu(), batch.group_ids[rows].detach().cpu())
    verdict = dict(zip(episodes, keep.tolist(), strict=True))
    return torch.tensor([verdict[t] for t in traj], dtype=torch.bool, device=batch.input_ids.device)


def starpo_s(batch: RolloutBatch, config: GRPOConfig) -> torch.Tensor:
    """RAGEN's StarPO-S: keep the top `config.filter.keep_fraction` of groups by the std of their episodes'
    rewards (`algos.filters.top_groups_by_reward_std`)."""
    from course_lib.algos.filters import top_groups_by_reward_std

    fraction = config.filter.keep_fraction
    return _episode_filter(batch, lambda rewards, groups: top_groups_by_reward_std(rewards, groups, fraction))


def snr_top_p(batch: RolloutBatch, config: GRPOConfig) -> torch.Tensor:
    """RAGEN-2's SNR-aware filter: the fewest groups, by reward std, that hold `config.filter.top_p` of it
    (`algos.filters.top_p_groups_by_reward_std`); may keep nothing, and the loop then skips the update."""
    from course_lib.algos.filters import top_p_groups_by_reward_std

    f = config.filter
    return _episode_filter(
        batch, lambda rewards, groups: top_p_groups_by_reward_std(rewards, groups, f.top_p, f.mode, f.include_zero)
    )


# Policy losses -----------------------------------------------------------------------------------
def clipped(logprobs, old_logprobs, advantages, loss_mask, config: GRPOConfig) -> tuple[torch.Tensor, dict]:
    """PPO's clipped surrogate with separate low and high clip (DAPO's clip-higher when high > low),
    aggregated by `config.aggregation` (`algos.grpo.clipped_surrogate_loss`)."""
    from course_lib.algos.grpo import clipped_surrogate_loss

    return clipped_surrogate_loss(
        logprobs, old_logprobs, advantages, loss_mask, config.clip_low, config.clip_high, config.aggregation
    )


def entropy_balanced(logprobs, old_logprobs, advantages, loss_mask, config: GRPOConfig) -> tuple[torch.Tensor, dict]:
    """AEPO's entropy-balanced clip (`algos.aepo.balanced_clip_losses`): the hard clip's value, but a positive-
    advantage token above 1 + `config.clip_high` keeps the gradient (1 + clip_high) * A * grad log pi; dual clip
    at 3; aggregated by `config.aggregation`. Stats: `clip_fraction` (tokens whose ratio was clipped, at either
    bound: the hard clip's definition, so the two seams compare), `upper_clip_fraction` (tokens whose upper clip
    acted, the ones whose gradient the hard clip would have dropped and this one keeps) and `ratio_mean`."""
    from course_lib.algos.aepo import balanced_clip_losses
    from course_lib.algos.grpo import masked_aggregate

    losses, above = balanced_clip_losses(logprobs, old_logprobs, advantages, config.clip_low, config.clip_high)
    with torch.no_grad():
        mask = loss_mask.bool()
        count = max(int(mask.sum()), 1)
        ratio = torch.exp(logprobs - old_logprobs)
        wide = advantages[:, None].expand_as(ratio) if advantages.dim() == 1 else advantages
        below = (ratio < 1 - config.clip_low) & (wide < 0)
        stats = {"clip_fraction": float(((above | below) & mask).sum()) / count,
                 "upper_clip_fraction": float((above & mask).sum()) / count,
                 "ratio_mean": float((ratio * mask).sum()) / count}  # fmt: skip
    return masked_aggregate(losses, loss_mask, config.aggregation), stats


SEAMS: dict[str, dict[str, Callable]] = {
    "sampler": {"groups": independent_groups, "tree": tree_groups, "igpo": information_gain_groups},
    "advantage": {"grpo": grpo, "gigpo": gigpo, "graphgpo": graphgpo, "tree_grpo": tree_grpo, "igpo": igpo},
    "batch_filter": {"none": keep_all, "starpo_s": starpo_s, "snr_top_p": snr_top_p},
    "policy_loss": {"clipped": clipped, "entropy_balanced": entropy_balanced},
}


BUILT_IN: dict[str, frozenset[str]] = {seam: frozenset(names) for seam, names in SEAMS.items()}
"""The names the course registers itself, per seam."""


def register(seam: str, name: str, function: Callable, replace: bool = False) -> None:
    """Add `function` under `name` in `seam`. A name already taken by another function is refused (a fork that
    registers its own `grpo` would otherwise silently replace the course's, in every chapter) unless `replace`."""
    if seam not in SEAMS:
        raise KeyError(f"unknown seam {seam!r}; choose from {sorted(SEAMS)}")
    taken = SEAMS[seam].get(name)
    if taken is not None and taken is not function and not replace:
        owner = "the course's own" if name in BUILT_IN[seam] else f"{getattr(taken, '__qualname__', taken)!s}"
        raise ValueError(
            f"{seam} {name!r} is taken ({owner}); register yours under another name, or pass replace=True to "
            f"replace it everywhere it is used"
        )
    SEAMS[seam][name] = function


def resolve(seam: str, name: str) -> Callable:
    """The function registered under `name` in `seam`, with a clear error for an unknown name."""
    if seam not in SEAMS:
        raise KeyError(f"unknown seam {seam!r}; choose from {sorted(SEAMS)}")
    if name not in SEAMS[seam]:
        raise KeyError(f"unknown {seam} {name!r}; registered: {sorted(SEAMS[seam])}")
    return SEAMS[seam][name]
