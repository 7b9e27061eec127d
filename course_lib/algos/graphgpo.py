"""GraphGPO: step credit from a graph of a group's states (Cheng, He, Feng et al. 2026, "Beyond Trajectory-Level
Attribution: Graph-Based Credit Assignment for Agentic RL", arXiv 2605.26684; recipe `recipe/GraphGPO` in
langfengQ/verl-agent, PR #256).

GiGPO (`algos.gigpo`) credits an action by the discounted return its own episode went on to earn, so a step that
made progress inside an episode that later failed gets nothing. GraphGPO merges the N episodes of a group into one
directed graph: nodes are the distinct states (anchors), every step is an edge s -> s' of cost 1, and the last step
of a successful episode leads to one shared sink, `SUCCESS`. Each state's distance to success is its shortest path
there, d(SUCCESS) = 0, and a state with no path gets d_max + 1 (d_max the largest finite distance; 1 everywhere
when nothing in the group succeeded). A step is then rewarded by how close it brought the agent:

    R^G(s, a, s') = r_succ * omega^(d(s') + c)          (paper, c = 1; the code drops c: r_succ * omega^d(s'))
    A^G = (R^G - mean_{G(s)} R^G) / (std_{G(s)} R^G + eps)    over GiGPO's step group G(s): the steps from s
    A   = beta_G * A^G + beta_E * A^E                           (A^E: GiGPO's episode advantage)

The code's exponent is used here (`r_succ * omega^d(s')`): the paper's extra factor omega is the same for every
step and cancels under the std normalisation, and with it a successful episode that is a shortest path gets
exactly GiGPO's discounted return (omega = gamma). There is no discount along the episode: omega acts per hop of
the graph. The official defaults: omega (`algorithm.gamma`) 0.1 on ALFWorld, 0.2 on WebShop, 0.8 on Sokoban;
beta_G = beta_E = 1; `mean_std_norm`; the invalid-action penalty 0.1 subtracted from a penalised step's R^G and
its episode score after the fact, as GiGPO's code does.

Where this differs from the official recipe, disclosed:
- The last step of a failed episode leads here to a node of its own (the step table holds the state each action
  was taken in, not the state after the last one), so it counts as unreachable; the code knows that final state.
- r_succ is the environment's success reward (1 in the course; the recipe's episodes score 10). The std
  normalisation removes that scale only in a step group with no penalised step: the invalid-action penalty (0.1)
  is not scaled with it, so against a success reward of 1 a penalty weighs ten times what it weighs in the recipe
  (`success_reward=10` gives the recipe's balance).

`progress(...)` marks the steps that bring the agent closer (d(s') < d(s)): the paper's Fig. 1 counts 22% of the
steps of ALFWorld's failed episodes as progress (its exact definition was not available here; this is ours).

Plain Python lists in and out (one value per step row, rows in any order), like `algos.gigpo`.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from course_lib.algos.gigpo import (
    EPISODE_BASELINES,
    apply_invalid_action_penalty,
    episode_advantages,
    step_group_advantages,
    to_hashable,
)
from course_lib.algos.step_rows import check_lengths, episode_rows
from course_lib.validation import one_of, within


@dataclass
class GraphGPOConfig:
    """GraphGPO's settings in the loop's config (`GRPOConfig.graphgpo`); the recipe's beta_G = 1 and pooled episode
    part. The course sets omega to GiGPO's discount (chapter 17), so that the two differ only in their step return."""

    omega: float = 0.95
    """The per-hop decay of R^G = r omega^d(s') (the recipe reads it from `algorithm.gamma`: 0.1 on ALFWorld, 0.2 on
    WebShop, 0.8 on Sokoban)."""
    step_weight: float = 1.0
    """beta_G in A = A^E + beta_G A^G."""
    episode_baseline: str = "pooled"
    """The episode part's baseline, as GiGPO's (`GiGPOConfig.episode_baseline`)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Refuse an omega outside [0, 1] and an unknown baseline."""
        within("GraphGPOConfig.omega", self.omega, 0.0, 1.0)
        one_of("GraphGPOConfig.episode_baseline", self.episode_baseline, EPISODE_BASELINES)


SUCCESS = ("<graphgpo success sink>",)
"""The shared node every successful episode's last step leads to."""


def next_states(
    anchors: Sequence, group_ids: Sequence[Hashable], traj_ids: Sequence[Hashable], step_index: Sequence[int],
    success: Sequence[bool],
) -> list[Hashable]:  # fmt: skip
    """The node each step row `[N]` leads to: the next step's anchor in its episode; after the last step, `SUCCESS`
    for a successful episode and a dead end of its own (never reached by anything) otherwise. `success` `[N]`:
    whether the row's episode succeeded."""
    check_lengths(anchors=anchors, group_ids=group_ids, traj_ids=traj_ids, step_index=step_index, success=success)
    following: list[Hashable] = [None] * len(anchors)
    for traj, rows in episode_rows(traj_ids, step_index, group_ids).items():
        for here, there in zip(rows, rows[1:]):
            following[here] = to_hashable(anchors[there])
        last = rows[-1]
        following[last] = SUCCESS if success[last] else ("<dead end>", traj)
    return following


def distances(edges: Sequence[tuple[Hashable, Hashable]]) -> dict[Hashable, int]:
    """Shortest path (unit costs) from every node of `edges` to `SUCCESS`, by breadth-first search over the reversed
    edges; a node with no path gets d_max + 1 (d_max the largest finite distance, 0 when no node reaches success)."""
    into: dict[Hashable, list[Hashable]] = defaultdict(list)
    nodes: set[Hashable] = set()
    for source, target in edges:
        into[target].append(source)
        nodes.update((source, target))
    found = {SUCCESS: 0} if SUCCESS in nodes else {}
    queue = deque(found)
    while queue:
        node = queue.popleft()
        for source in into[node]:
            if source not in found:
                found[source] = found[node] + 1
                queue.append(source)
    unreachable = max(found.values(), default=0) + 1
    return {node: found.get(node, unreachable) for node in nodes}


def group_distances(
    anchors: Sequence, group_ids: Sequence[Hashable], traj_ids: Sequence[Hashable], step_index: Sequence[int],
    success: Sequence[bool],
) -> tuple[list[int], list[int]]:  # fmt: skip
    """(d(s), d(s')) for every step row `[N]`: distances in its own group's merged graph (`distances`)."""
    following = next_states(anchors, group_ids, traj_ids, step_index, success)
    here = [to_hashable(anchor) for anchor in anchors]
    edges_of: dict[Hashable, list[tuple]] = defaultdict(list)
    for row, group in enumerate(group_ids):
        edges_of[group].append((here[row], following[row]))
    graph = {group: distances(edges) for group, edges in edges_of.items()}
    return [graph[g][s] for g, s in zip(group_ids, here)], [graph[g][s] for g, s in zip(group_ids, following)]


def progress(
    anchors: Sequence, group_ids: Sequence[Hashable], traj_ids: Sequence[Hashable], step_index: Sequence[int],
    success: Sequence[bool],
) -> list[bool]:  # fmt: skip
    """Per step row `[N]`: whether it brought the agent closer to success in its group's graph, d(s') < d(s)."""
    before, after = group_distances(anchors, group_ids, traj_ids, step_index, success)
    return [b > a for b, a in zip(before, after)]


@dataclass
class GraphGPOAdvantages:
    """Per-row outputs `[N]` of `graphgpo_advantages`, in the order of its input rows."""

    advantages: list[float]  # beta_G * A^G + beta_E * A^E
    episode: list[float]  # A^E
    step: list[float]  # A^G
    graph_returns: list[float]  # R^G after the penalty
    distance: list[int]  # d(s')
    distance_before: list[int]  # d(s)
    success: list[bool]  # whether the row's episode succeeded

    @property
    def failed_progress_share(self) -> float:
        """The share of the steps of failed episodes that brought the agent closer to success, d(s') < d(s) (the
        paper's Fig. 1 counts 22% on ALFWorld); nan when no episode failed."""
        failed = [row for row, succeeded in enumerate(self.success) if not succeeded]
        if not failed:
            return float("nan")
        return sum(self.distance_before[row] > self.distance[row] for row in failed) / len(failed)


def graphgpo_advantages(
    rewards: Sequence[float],
    valid: Sequence[bool],
    anchors: Sequence,
    group_ids: Sequence[Hashable],
    traj_ids: Sequence[Hashable],
    step_index: Sequence[int],
    omega: float = 0.95,
    step_weight: float = 1.0,
    episode_weight: float = 1.0,
    scale_by_std: bool = True,
    pooled: bool = True,
    invalid_penalty: float = 0.1,
    success_reward: float = 1.0,
    eps: float = 1e-6,
) -> GraphGPOAdvantages:
    """GraphGPO advantages of `N` step rows given as flat per-row lists, in any order (GiGPO's six columns).

    An episode succeeded when its rewards sum above 0 (the course's environments: reward 1 on success). Its episode
    score is that sum (GiGPO's), `pooled` as in `algos.gigpo.episode_advantages`. `omega` in (0, 1]."""
    n = check_lengths(
        rewards=rewards, valid=valid, anchors=anchors, group_ids=group_ids, traj_ids=traj_ids, step_index=step_index
    )
    if not 0.0 < omega <= 1.0:
        raise ValueError(f"omega must lie in (0, 1], got {omega}")
    totals = [0.0] * n
    for rows in episode_rows(traj_ids, step_index, group_ids).values():
        total = sum(float(rewards[row]) for row in rows)
        for row in rows:
            totals[row] = total
    success = [total > 0 for total in totals]
    before, after = group_distances(anchors, group_ids, traj_ids, step_index, success)
    graph_returns = apply_invalid_action_penalty([success_reward * omega**d for d in after], valid, invalid_penalty)
    scores = apply_invalid_action_penalty(totals, valid, invalid_penalty)
    step = step_group_advantages(graph_returns, anchors, group_ids, scale_by_std, eps)
    episode = episode_advantages(scores, group_ids, traj_ids, step_index, pooled, scale_by_std, eps)
    return GraphGPOAdvantages(
        advantages=[episode_weight * e + step_weight * s for e, s in zip(episode, step)],
        episode=episode,
        step=step,
        graph_returns=graph_returns,
        distance=after,
        distance_before=before,
        success=success,
    )
