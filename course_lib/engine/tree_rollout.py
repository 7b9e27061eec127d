"""ARPO's entropy-guided tree rollout (Dong et al. 2025, arXiv 2507.19849, Sec. 3.1), a sampler of the RL loop.

Per prompt the budget is M trajectories (`GRPOConfig.group_size`). The sampler starts N of them as independent
global samples (`TreeConfig.global_samples`), then spends the rest on branches, in rounds, one round per
environment step s = 1, 2, ...: every trajectory whose step s was a tool call that the episode survived is a
candidate branch point. Its entropy right after the tool response, H_s (mean full-vocabulary entropy of the first
k tokens the policy wrote after it, normalised by log |V|), is compared with the trajectory's initial entropy H_0
(the same over its first turn), and with probability `algos.arpo.branch_probability(H_s, H_0, alpha, beta)` =
clip(alpha + beta (H_s - H_0), 0, 1) the trajectory forks there: a new trajectory shares its tokens up to and
including that tool response and samples the rest anew. At most one branch per trajectory per round (the
released script's beam size 2: the source plus one branch), and never beyond the budget. A branch joins the
pool and may branch itself at its own later tool calls. When no trajectory of a prompt can branch any more and
its budget is not spent, the sampler adds global samples ("refills", one per prompt per round, as the code does),
which may branch in turn. Every prompt ends with exactly M leaves: GRPO's group, trained with tool-response
tokens masked, so tokens of a shared prefix appear in several leaves ("soft" credit, implicit in the tree).

Where this follows the paper and where the released code (`vllm_rollout_with_tools.py`):

- **Look-ahead.** The paper branches on the entropy of the k tokens generated after a tool response, and the
  branch resamples them; so does this sampler (it reads them from the source trajectory, already sampled). The
  code uses the entropy of the segment that *ended* with the tool call, one call late, and no look-ahead.
- **Entropy.** Exact full-vocabulary entropy per token, averaged over the first `entropy_tokens` tokens; the
  code sums top-10 log-prob terms over the first 20 positions, a length-dependent proxy (`algos.arpo`).
- **Initial entropy.** Each trajectory's own first turn, so every batch starts fresh; the code keeps a
  dictionary keyed by batch index that it never resets, so from the second batch on it compares with the
  first turn of whatever sequence held that index first.
- **Budget.** Exactly M leaves per prompt, with branches and refills counted (`TreeStats`); the code cuts or
  duplicates to M at the end.

With `TreeConfig.rule = "aepo"` the sampler is AEPO's (arXiv 2510.14545, `algos.aepo`): a prompt that gained a
rollout (a branch or a refill) in each of its last l rounds branches with probability
clip(1 - alpha / (1 - 0.05 l) + beta dH, 0, 1), the consecutive-branch penalty (l is reset when a round adds
nothing to the prompt, and left alone in a round that adds nothing to any prompt, as the code does); and with
`dynamic_globals`, entropy pre-monitoring sets each prompt's global samples from one extra pre-rollout:
m = int(M sigmoid(0.5 (H_root - H_tool))) + 1, H_root its first turn's entropy and H_tool the mean over all its
turns (the code probes the root with a separate short generation; here the pre-rollout's first turn serves). A
turn's entropy there is the code's: summed over its first `monitor_tokens` (20) positions, divided by log |V|
(`monitor_units="normalised"`) or not (`"nats"`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from course_lib.algos import aepo
from course_lib.algos.arpo import branch_probability, should_branch
from course_lib.engine.rollout import RolloutEngine, Trajectory
from course_lib.validation import at_least, one_of, within

TREE_RULES = ("arpo", "aepo")
"""`TreeConfig.rule` (`sample_trees`)."""
MONITOR_UNITS = ("normalised", "nats")
"""`TreeConfig.monitor_units` (`monitored_entropies`)."""


@dataclass
class TreeConfig:
    """The tree sampler's settings; the defaults are ARPO's released script's where it has them."""

    global_samples: int = 8
    """N: independent samples per prompt at the start (`initial_rollouts`, 8 of a budget of 16 in the script).
    Equal to the group size, the sampler is GRPO's (the maintainers' recipe for the GRPO baseline)."""
    alpha: float = 0.5
    """Branch probability when the entropy did not change (`BRANCH_PROBABILITY`)."""
    beta: float = 0.2
    """Weight of the entropy change (`Entropy_weight`)."""
    entropy_tokens: int = 20
    """k: how many of the first tokens of a turn its entropy averages (the code reads the first 20 positions)."""
    rule: str = "arpo"
    """`arpo`: P = clip(alpha + beta dH, 0, 1); `aepo`: AEPO's rule with the consecutive-branch penalty."""
    penalty_slope: float = 0.05
    """AEPO: the damping per consecutive round in which a prompt gained a rollout (hard-coded 0.05 in the code)."""
    dynamic_globals: bool = False
    """AEPO's entropy pre-monitoring: each prompt's global samples from a pre-rollout (`algos.aepo.global_samples`)
    instead of `global_samples`. Off in AEPO's released scripts."""
    monitor_tokens: int = 20
    """Pre-monitoring: how many of a turn's first tokens its entropy sums (the code's 20 positions)."""
    monitor_units: str = "normalised"
    """Pre-monitoring: `normalised` (each token's entropy divided by log |V|, the code's scale) or `nats`."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Refuse an unknown rule or unit and impossible sizes (a ValueError naming the field); also run by
        `GRPOConfig.validate`, for a config changed in place."""
        one_of("TreeConfig.rule", self.rule, TREE_RULES)
        one_of("TreeConfig.monitor_units", self.monitor_units, MONITOR_UNITS)
        at_least("TreeConfig.global_samples", self.global_samples, 1)
        within("TreeConfig.alpha", self.alpha, 0.0, 1.0)
        at_least("TreeConfig.entropy_tokens", self.entropy_tokens, 1)
        at_least("TreeConfig.monitor_tokens", self.monitor_tokens, 1)
        at_least("TreeConfig.penalty_slope", self.penalty_slope, 0.0)


@dataclass
class TreeNode:
    """One candidate branch point that was considered: trajectory `index` after its step `step`."""

    index: int
    step: int
    entropy: float
    initial_entropy: float
    probability: float
    branched: bool
    child: int | None = None
    """Index of the branch created here (None if none was: no draw, or no budget left)."""


@dataclass
class TreeStats:
    """What a tree rollout did: every trajectory's parent and fork position, and every branch point considered."""

    parents: list[int | None] = field(default_factory=list)
    """Per trajectory: the index of the trajectory it branched from (None for a global sample)."""
    fork_steps: list[int] = field(default_factory=list)
    """Per trajectory: the step after which it forked from its parent (0 for a global sample)."""
    refill: list[bool] = field(default_factory=list)
    """Per trajectory: a global sample added because the budget was not spent."""
    nodes: list[TreeNode] = field(default_factory=list)
    group_ids: list[int] = field(default_factory=list)
    """Per trajectory: the prompt (group) it belongs to."""
    global_counts: list[int] = field(default_factory=list)
    """Per prompt: its global samples at the start (`global_samples`, or pre-monitoring's choice)."""

    def counts(self, group_size: int, groups: int) -> dict[str, float]:
        """Per-batch numbers for the training history: branches, refills and the realised share of branches."""
        branches = sum(parent is not None for parent in self.parents)
        refills = sum(self.refill)
        total = max(group_size * groups, 1)
        return {
            "tree_branches": float(branches),
            "tree_refills": float(refills),
            "tree_branch_share": branches / total,
            "tree_refill_share": refills / total,
            "tree_branch_points": float(len(self.nodes)),
            "tree_top3_branch_share": aepo.top_branch_share(self.parents, self.group_ids, 3),
            "tree_global_samples": sum(self.global_counts) / max(len(self.global_counts), 1),
        }


def _turn_entropies(trajectory: Trajectory, turn: int) -> list[float]:
    """The entropies (nats) at the policy tokens of `turn`, in order."""
    return [
        entropy
        for entropy, turn_id, mask in zip(trajectory.entropies, trajectory.turn_ids, trajectory.loss_mask, strict=True)
        if turn_id == turn and mask
    ]


def turn_entropy(trajectory: Trajectory, turn: int, tokens: int, vocabulary: int) -> float | None:
    """Mean entropy of the first `tokens` policy tokens of `turn` (0: the first action), normalised by log
    `vocabulary`, or None if the turn has no policy token (the episode ended before it)."""
    values = _turn_entropies(trajectory, turn)[:tokens]
    if not values:
        return None
    return sum(values) / len(values) / math.log(vocabulary)


def branch_points(trajectory: Trajectory, after_step: int) -> list[int]:
    """Steps s > `after_step` after which `trajectory` could fork: the episode went on after step s (the
    environment answered it) and the policy wrote a next turn. In a tool environment these are the tool calls."""
    return [
        step
        for step in range(max(after_step, 0) + 1, trajectory.num_turns)
        if not trajectory.snapshots[step].done and any(t == step for t in trajectory.turn_ids)
    ]


def sample_trees(
    engine: RolloutEngine,
    envs: Sequence,
    task_seeds: Sequence[int],
    group_size: int,
    tree: TreeConfig,
    generator: torch.Generator | None = None,
) -> tuple[list[Trajectory], TreeStats]:
    """`group_size` leaves per task: `tree.global_samples` global samples, then entropy-guided branches and
    refills as in the module docstring. `envs` holds `group_size` environments per task (global samples and
    refills use them in order; branches copy their parent's). Returns the trajectories grouped by task (group id
    = the task's position) in creation order within each group, and what the sampler did."""
    if not engine.config.snapshot_envs:
        raise ValueError("the tree sampler forks trajectories: its SamplingConfig needs snapshot_envs=True")
    if not 1 <= tree.global_samples <= group_size:
        raise ValueError(f"global_samples must lie in [1, group_size={group_size}], got {tree.global_samples}")
    if len(envs) < group_size * len(task_seeds):
        raise ValueError(f"need {group_size} environments per task, got {len(envs)} for {len(task_seeds)} tasks")
    if tree.rule not in ("arpo", "aepo"):
        raise ValueError(f"rule must be 'arpo' or 'aepo', got {tree.rule!r}")
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    vocabulary = len(engine.tokenizer)
    trajectories: list[Trajectory] = []
    stats = TreeStats()
    used_envs = [0] * len(task_seeds)
    # Round r considers, for each trajectory, the branch point it reaches in round r: a global sample started
    # in round 0 reaches its own step s in round s; a trajectory that starts in round r0 after its step f (a
    # branch: f = its fork step; a refill: f = 0) reaches its step s in round r0 + s - f.
    schedule: dict[int, dict[int, int]] = {}  # trajectory -> {round: own step}

    def enter(index: int, round_: int, after_step: int) -> None:
        points = branch_points(trajectories[index], after_step)
        if points:
            schedule[index] = {round_ + point - after_step: point for point in points}

    def start_globals(prompts: list[int], counts: list[int], refill: bool, round_: int) -> None:
        made, seeds, groups = [], [], []
        for prompt, count in zip(prompts, counts, strict=True):
            for _ in range(count):
                made.append(envs[prompt * group_size + used_envs[prompt]])
                used_envs[prompt] += 1
                seeds.append(task_seeds[prompt])
                groups.append(prompt)
        first = len(trajectories)
        trajectories.extend(engine.rollout(made, seeds, groups, generator))
        for index in range(first, len(trajectories)):
            stats.parents.append(None)
            stats.fork_steps.append(0)
            stats.refill.append(refill)
            stats.group_ids.append(trajectories[index].group_id)
            enter(index, round_, 0)

    prompts = list(range(len(task_seeds)))
    stats.global_counts = (
        pre_monitored_globals(engine, envs, task_seeds, group_size, tree, generator)
        if tree.dynamic_globals
        else [tree.global_samples] * len(prompts)
    )
    start_globals(prompts, stats.global_counts, refill=False, round_=0)
    consecutive = [0] * len(prompts)  # AEPO: rounds in a row in which each prompt gained a rollout
    round_ = 0
    while True:
        round_ += 1
        leaves = _leaves(trajectories, len(task_seeds))
        forks, sources = [], []
        for index in sorted(schedule):
            step = schedule[index].get(round_)
            t = trajectories[index]
            if step is None or leaves[t.group_id] >= group_size:
                continue
            initial = turn_entropy(t, 0, tree.entropy_tokens, vocabulary)
            after = turn_entropy(t, step, tree.entropy_tokens, vocabulary)
            if tree.rule == "aepo":
                probability = aepo.branch_probability(
                    after, initial, consecutive[t.group_id], tree.alpha, tree.beta, tree.penalty_slope
                )
            else:
                probability = float(branch_probability(after, initial, tree.alpha, tree.beta))
            branched = should_branch(probability, generator)
            stats.nodes.append(TreeNode(index, step, after, initial, probability, branched))
            if branched:  # at most one branch per trajectory per round: the source and one copy
                leaves[t.group_id] += 1
                forks.append(engine.fork(t, step, parent=index))
                sources.append((step, len(stats.nodes) - 1))
        if forks:
            first = len(trajectories)
            trajectories.extend(engine.run(forks, generator))
            for offset, (fork_step, node) in enumerate(sources):
                stats.parents.append(stats.nodes[node].index)
                stats.fork_steps.append(fork_step)
                stats.refill.append(False)
                stats.group_ids.append(trajectories[first + offset].group_id)
                stats.nodes[node].child = first + offset
                enter(first + offset, round_, fork_step)
        for index in list(schedule):  # rounds already played are over
            schedule[index] = {r: s for r, s in schedule[index].items() if r > round_}
            if not schedule[index]:
                del schedule[index]
        # A prompt none of whose trajectories can still branch gets one more global sample per round until full.
        open_prompts = {trajectories[i].group_id for i in schedule}
        short = [p for p in range(len(task_seeds)) if leaves[p] < group_size and p not in open_prompts]
        if short:
            start_globals(short, [1] * len(short), refill=True, round_=round_)
        gained = {trajectories[stats.nodes[node].index].group_id for _, node in sources} | set(short)
        if gained:  # the code leaves the counters alone in a round that adds nothing to any prompt
            consecutive = [c + 1 if p in gained else 0 for p, c in enumerate(consecutive)]
        if not schedule and min(_leaves(trajectories, len(task_seeds))) >= group_size:
            break
    order = sorted(range(len(trajectories)), key=lambda i: (trajectories[i].group_id, i))
    return _reindex(trajectories, stats, order)


def turn_entropy_sum(trajectory: Trajectory, turn: int, tokens: int, vocabulary: int, units: str) -> float | None:
    """AEPO's pre-monitoring entropy of `turn`: the sum over its first `tokens` policy tokens, in nats or divided by
    log `vocabulary` (`units`: `nats` or `normalised`); None if the turn has no policy token."""
    if units not in ("nats", "normalised"):
        raise ValueError(f"monitor_units must be 'nats' or 'normalised', got {units!r}")
    values = _turn_entropies(trajectory, turn)[:tokens]
    if not values:
        return None
    return sum(values) / (math.log(vocabulary) if units == "normalised" else 1.0)


def monitored_entropies(probe: Trajectory, tree: TreeConfig, vocabulary: int) -> tuple[float, float]:
    """(H_root, H_tool) of one pre-rollout: its first turn's entropy and the mean over all its turns (the first
    included, as the code does), each `turn_entropy_sum`; (0, 0) for a probe without policy tokens."""
    turns = [
        turn_entropy_sum(probe, k, tree.monitor_tokens, vocabulary, tree.monitor_units) for k in range(probe.num_turns)
    ]
    turns = [h for h in turns if h is not None]
    return (turns[0], sum(turns) / len(turns)) if turns else (0.0, 0.0)


def pre_monitor(
    engine: RolloutEngine, envs: Sequence, task_seeds: Sequence[int], group_size: int, tree: TreeConfig, generator
) -> list[tuple[float, float]]:
    """AEPO's entropy pre-monitoring: one pre-rollout per prompt (in the prompt's first environment, which its first
    global sample resets again); per prompt (H_root, H_tool) of `monitored_entropies`."""
    vocabulary = len(engine.tokenizer)
    first_envs = [envs[p * group_size] for p in range(len(task_seeds))]
    probes = engine.rollout(first_envs, list(task_seeds), list(range(len(task_seeds))), generator)
    return [monitored_entropies(probe, tree, vocabulary) for probe in probes]


def pre_monitored_globals(
    engine: RolloutEngine, envs: Sequence, task_seeds: Sequence[int], group_size: int, tree: TreeConfig, generator
) -> list[int]:
    """Each prompt's global samples `algos.aepo.global_samples(group_size, H_root, H_tool)` from `pre_monitor`."""
    return [
        aepo.global_samples(group_size, root, tool)
        for root, tool in pre_monitor(engine, envs, task_seeds, group_size, tree, generator)
    ]


def _leaves(trajectories: Sequence[Trajectory], groups: int) -> list[int]:
    counts = [0] * groups
    for t in trajectories:
        counts[t.group_id] += 1
    return counts


def _reindex(trajectories: list[Trajectory], stats: TreeStats, order: list[int]) -> tuple[list[Trajectory], TreeStats]:
    """Trajectories in `order`, with parents, children and node indices renumbered to match."""
    position = {old: new for new, old in enumerate(order)}
    renumbered = TreeStats(
        parents=[None if stats.parents[i] is None else position[stats.parents[i]] for i in order],
        fork_steps=[stats.fork_steps[i] for i in order],
        refill=[stats.refill[i] for i in order],
        group_ids=[stats.group_ids[i] for i in order],
        global_counts=stats.global_counts,
        nodes=[
            TreeNode(
                position[n.index],
                n.step,
                n.entropy,
                n.initial_entropy,
                n.probability,
                n.branched,
                None if n.child is None else position[n.child],
            )  # fmt: skip
            for n in stats.nodes
        ],
    )
    for new, old in enumerate(order):
        parent = renumbered.parents[new]
        trajectories[old].parent = parent
    return [trajectories[i] for i in order], renumbered
