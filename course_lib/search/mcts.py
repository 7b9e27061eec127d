"""Monte Carlo tree search with UCT, as RAP runs it (chapter 01; chapter 02 reuses the arithmetic).

RAP (arXiv 2305.14992, sec. 3.3 and `rap/mcts.py` in Ber666/RAP) repeats four phases:

1. **Selection** from the root by UCT (w = 1 in every released default):
       a* = argmax_a  Q(s, a) + w * sqrt( ln N(s) / N(c(s, a)) ).
   An unvisited child is scored by its immediate ("prior") reward plus w * sqrt(ln N(s)).
2. **Expansion**: all candidate actions of the leaf, each with its predicted next state and reward.
3. **Simulation**: roll forward choosing the child with the highest *local* (cheap) reward, until a
   terminal node or the depth limit.
4. **Backpropagation**: the node reached by edge i of the path gets the return
   mean(r_i, ..., r_L); `max_mean` keeps the max over rollouts (RAP's Q*), `mean` the running mean.

The output is the best path that ends in a solved node (highest mean reward), else the path that
follows the highest Q. The tree is a `networkx.DiGraph`, so it can be drawn (`draw_tree`).
The problem is given as one function, `expand(state, depth) -> list[Child]`, so the same search
runs over a learned world model (RAP) or a real environment.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

BACKUPS = ("max_mean", "mean")


@dataclass
class Child:
    """One candidate action of a node and what it leads to."""

    action: str
    state: Any
    """The next state (text predicted by a world model, or a real observation); None when unusable."""
    reward: float
    """r(s, a), used for selection's prior and for backup."""
    fast_reward: float | None = None
    """The cheap local reward that simulation maximises (defaults to `reward`)."""
    solved: bool = False
    """The next state satisfies the goal (as far as the searcher can tell)."""
    failed: bool = False
    """The next state is unusable (e.g. a malformed prediction): a dead end."""
    info: dict = field(default_factory=dict)


@dataclass
class MCTSConfig:
    """RAP's MCTS settings (the paper's Blocksworld defaults, arXiv 2305.14992)."""

    iterations: int = 10
    """Selection-expansion-simulation-backup rounds (RAP(10), RAP(20))."""
    w_exp: float = 1.0
    """Exploration weight w of UCT."""
    depth_limit: int = 6
    """Longest path (RAP sets it to the plan length)."""
    backup: str = "max_mean"
    """`max_mean` (RAP: Q is the max over rollouts of the mean future reward) or `mean`."""
    stop_when_solved: bool = False
    """End the search at the first solved leaf (LATS does; RAP runs every iteration)."""


@dataclass
class SearchResult:
    plan: list[str]
    """Actions of the output path."""
    states: list[Any]
    """States along the output path, root first."""
    solved: bool
    """The output path ends in a solved node (success *as the searcher sees it*)."""
    tree: nx.DiGraph
    expansions: int
    """Calls of `expand`."""
    path: list[int] = field(default_factory=list)
    """Node ids of the output path in `tree`, root first."""


def uct(q: float, parent_visits: int, child_visits: int, w: float, prior: float) -> float:
    """UCT score of a child; an unvisited one gets its prior reward plus w * sqrt(ln N(parent))."""
    explore = math.log(max(parent_visits, 1))
    if child_visits == 0:
        return prior + w * math.sqrt(explore)
    return q + w * math.sqrt(explore / child_visits)


def suffix_means(rewards: Sequence[float]) -> list[float]:
    """mean(r_i, ..., r_L) for every i: the return that backup gives the node reached by edge i."""
    out, total = [0.0] * len(rewards), 0.0
    for i in range(len(rewards) - 1, -1, -1):
        total += rewards[i]
        out[i] = total / (len(rewards) - i)
    return out


def backup(tree: nx.DiGraph, path: Sequence[int], rule: str = "max_mean") -> None:
    """Update N, the running mean `mean_q`, the max `max_q` and Q of every node on `path` (root first)."""
    if rule not in BACKUPS:
        raise ValueError(f"backup rule must be one of {BACKUPS}, got {rule!r}")
    rewards = [tree.nodes[n]["reward"] for n in path[1:]]
    returns = [suffix_means(rewards)[0] if rewards else 0.0, *suffix_means(rewards)]
    for node, value in zip(path, returns, strict=True):
        data = tree.nodes[node]
        data["N"] += 1
        data["mean_q"] += (value - data["mean_q"]) / data["N"]
        data["max_q"] = max(data["max_q"], value)
        data["Q"] = data["max_q"] if rule == "max_mean" else data["mean_q"]


class StopSearch(Exception):
    """Raised by an `expand` function whose budget (e.g. of environment steps) is spent."""


class MCTS:
    """RAP's search over `expand(state, depth) -> list[Child]`.

    `on_leaf(tree, path)`, if given, is called after each simulation with the node path it ended
    on (LATS records failed leaves there). An `expand` that raises `StopSearch` ends the search.
    """

    def __init__(
        self,
        expand: Callable[[Any, int], list[Child]],
        config: MCTSConfig | None = None,
        on_leaf: Callable[[nx.DiGraph, list[int]], None] | None = None,
    ):
        self.expand_fn, self.config, self.on_leaf = expand, config or MCTSConfig(), on_leaf
        if self.config.backup not in BACKUPS:
            raise ValueError(f"backup rule must be one of {BACKUPS}, got {self.config.backup!r}")

    def search(self, root_state: Any) -> SearchResult:
        tree = nx.DiGraph()
        tree.add_node(0, **_node_data(root_state, None, 0.0, 0.0, 0, False, False))
        self.expansions, best = 0, None
        for _ in range(self.config.iterations):
            path = self._select(tree)
            try:
                self._expand(tree, path[-1])
                path = self._simulate(tree, path)
            except StopSearch:
                break
            backup(tree, path, self.config.backup)
            if self.on_leaf is not None:
                self.on_leaf(tree, path)
            if tree.nodes[path[-1]]["solved"]:
                score = sum(tree.nodes[n]["reward"] for n in path[1:]) / max(len(path) - 1, 1)
                if best is None or score > best[0]:
                    best = (score, path)
                if self.config.stop_when_solved:
                    break
        path = best[1] if best is not None else self._greedy_path(tree)
        return SearchResult(
            path=path,
            plan=[tree.nodes[n]["action"] for n in path[1:]],
            states=[tree.nodes[n]["state"] for n in path],
            solved=tree.nodes[path[-1]]["solved"],
            tree=tree,
            expansions=self.expansions,
        )

    def _open(self, tree: nx.DiGraph, node: int) -> bool:
        data = tree.nodes[node]
        return not data["terminal"] and data["depth"] < self.config.depth_limit

    def _select(self, tree: nx.DiGraph) -> list[int]:
        path = [0]
        while self._open(tree, path[-1]) and tree.nodes[path[-1]]["expanded"]:
            children = list(tree.successors(path[-1]))
            if not children:
                break
            parent_visits = tree.nodes[path[-1]]["N"]
            path.append(max(children, key=lambda c: self._uct(tree, c, parent_visits)))
        return path

    def _uct(self, tree: nx.DiGraph, child: int, parent_visits: int) -> float:
        data = tree.nodes[child]
        return uct(data["Q"], parent_visits, data["N"], self.config.w_exp, data["reward"])

    def _expand(self, tree: nx.DiGraph, node: int) -> None:
        data = tree.nodes[node]
        if data["expanded"] or not self._open(tree, node):
            return
        data["expanded"] = True
        self.expansions += 1
        children = self.expand_fn(data["state"], data["depth"])
        if not children:
            data["terminal"] = True
        for child in children:
            index = tree.number_of_nodes()
            fast = child.reward if child.fast_reward is None else child.fast_reward
            tree.add_node(
                index,
                **_node_data(
                    child.state, child.action, child.reward, fast, data["depth"] + 1, child.solved, child.failed
                ),
                **child.info,
            )
            tree.add_edge(node, index, action=child.action)

    def _simulate(self, tree: nx.DiGraph, path: list[int]) -> list[int]:
        """Extend `path` greedily by local reward until a terminal node or the depth limit."""
        path = list(path)
        while self._open(tree, path[-1]):
            self._expand(tree, path[-1])
            children = list(tree.successors(path[-1]))
            if not children:
                break
            path.append(max(children, key=lambda c: tree.nodes[c]["fast_reward"]))
        return path

    def _greedy_path(self, tree: nx.DiGraph) -> list[int]:
        path = [0]
        while True:
            visited = [c for c in tree.successors(path[-1]) if tree.nodes[c]["N"] > 0]
            if not visited:
                return path
            path.append(max(visited, key=lambda c: tree.nodes[c]["Q"]))


def _node_data(state, action, reward, fast_reward, depth, solved, failed) -> dict:
    return dict(
        state=state, action=action, reward=reward, fast_reward=fast_reward, depth=depth, solved=solved,
        failed=failed, terminal=solved or failed, expanded=False, N=0, mean_q=0.0, max_q=-math.inf, Q=0.0,
    )  # fmt: skip


def draw_tree(tree: nx.DiGraph, plan_nodes: Sequence[int] = (), ax=None, title: str = ""):
    """Draw a search tree top-down: colour = visits, red edges = the output path, green = solved,
    grey crosses = failed nodes."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(9, 4))[1]
    depth = nx.get_node_attributes(tree, "depth")
    layers: dict[int, list[int]] = {}
    for node in nx.dfs_preorder_nodes(tree, 0):
        layers.setdefault(depth[node], []).append(node)
    pos = {n: ((i + 0.5) / len(row), -d) for d, row in layers.items() for i, n in enumerate(row)}
    on_path = set(zip(plan_nodes, plan_nodes[1:], strict=False))
    nx.draw_networkx_edges(
        tree, pos, ax=ax, arrows=False,
        edge_color=["tab:red" if e in on_path else "0.75" for e in tree.edges],
        width=[2.5 if e in on_path else 0.8 for e in tree.edges],
    )  # fmt: skip
    visits = [tree.nodes[n]["N"] for n in tree.nodes]
    nodes = nx.draw_networkx_nodes(tree, pos, ax=ax, node_size=40, node_color=visits, cmap="viridis")
    solved = [n for n in tree.nodes if tree.nodes[n]["solved"]]
    failed = [n for n in tree.nodes if tree.nodes[n]["failed"]]
    nx.draw_networkx_nodes(tree, pos, nodelist=solved, ax=ax, node_size=90, node_color="none", edgecolors="tab:green")
    nx.draw_networkx_nodes(tree, pos, nodelist=failed, ax=ax, node_size=40, node_color="0.5", node_shape="x")
    ax.figure.colorbar(nodes, ax=ax, label="visits N")
    from course_lib.diagnostics.plots import tree_axes

    return tree_axes(ax, list(layers), title, "depth (steps from the start)")
