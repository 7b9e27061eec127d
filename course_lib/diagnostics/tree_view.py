"""One group of ARPO's rollout tree as a `networkx` graph, and its drawing (chapter 08).

A node is one step of the episode: the action the policy wrote and the environment's answer. Each trajectory is a
chain of its steps; a branch's chain hangs from the node of its source after which it forked, so the steps a
branch shares with its source are drawn once. Node attributes: `text` (the action), `entropy` (normalised entropy
of the first k tokens of that action, `tree_rollout.turn_entropy`), `reward` (the episode's, on its last node),
`trajectory` and `step`; a node after which the sampler considered a branch also has `branch_entropy` (that of the
action written after its tool response, which the decision used), `probability` and `branched`.
"""

from __future__ import annotations

from collections.abc import Sequence

import networkx as nx

from course_lib.engine.rollout import Trajectory
from course_lib.engine.tree_rollout import TreeStats, turn_entropy
from course_lib.tokenizer import decode

ROOT = "prompt"


def tree_graph(
    trajectories: Sequence[Trajectory], stats: TreeStats, group: int, tokenizer, entropy_tokens: int = 20
) -> nx.DiGraph:
    """The rollout tree of group `group` (`sample_trees`' output)."""
    members = [i for i, t in enumerate(trajectories) if t.group_id == group]
    vocabulary = len(tokenizer)

    def owner(index: int, step: int) -> tuple[int, int]:
        """The node holding step `step` of trajectory `index`: its own, or its source's if it forked later."""
        while step <= stats.fork_steps[index] and stats.parents[index] is not None:
            index = stats.parents[index]
        return (index, step)

    graph = nx.DiGraph()
    first = trajectories[members[0]]
    graph.add_node(ROOT, text=decode(tokenizer, first.token_ids[1 : _prompt_end(first)]))
    for index in members:
        t = trajectories[index]
        for step in range(stats.fork_steps[index] + 1, t.num_turns + 1):
            tokens = [tok for tok, turn, mask in zip(t.token_ids, t.turn_ids, t.loss_mask, strict=True)
                      if turn == step - 1 and mask]  # fmt: skip
            node = (index, step)
            graph.add_node(
                node, text=decode(tokenizer, tokens), trajectory=index, step=step,
                entropy=turn_entropy(t, step - 1, entropy_tokens, vocabulary),
            )  # fmt: skip
            graph.add_edge(ROOT if step == 1 else owner(index, step - 1), node)
        graph.nodes[(index, t.num_turns)]["reward"] = t.total_reward
    for point in stats.nodes:
        if trajectories[point.index].group_id == group:
            node = owner(point.index, point.step)
            graph.nodes[node].update(
                probability=point.probability, branched=point.branched, branch_entropy=point.entropy
            )
    return graph


def _prompt_end(trajectory: Trajectory) -> int:
    return sum(1 for turn in trajectory.turn_ids if turn < 0)


def draw_tree(graph: nx.DiGraph, ax=None, title: str = ""):
    """Top-down drawing: one row per step, leaves coloured by reward (green 1, red 0), branch points circled
    and labelled with the entropy after the tool response and the branch probability it gave."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(10, 4))[1]
    layers: dict[int, list] = {}
    for node in nx.dfs_preorder_nodes(graph, ROOT):
        layers.setdefault(0 if node == ROOT else graph.nodes[node]["step"], []).append(node)
    pos = {n: ((i + 0.5) / len(row), -depth) for depth, row in layers.items() for i, n in enumerate(row)}
    nx.draw_networkx_edges(graph, pos, ax=ax, arrows=False, edge_color="0.6", width=1.0)
    leaves = [n for n in graph.nodes if "reward" in graph.nodes[n]]
    colours = ["tab:green" if graph.nodes[n]["reward"] > 0 else "tab:red" for n in leaves]
    inner = [n for n in graph.nodes if n not in leaves]
    nx.draw_networkx_nodes(graph, pos, nodelist=inner, ax=ax, node_size=30, node_color="0.4")
    nx.draw_networkx_nodes(graph, pos, nodelist=leaves, ax=ax, node_size=60, node_color=colours)
    points = [n for n in graph.nodes if "probability" in graph.nodes[n]]
    branched = [n for n in points if graph.nodes[n]["branched"]]
    nx.draw_networkx_nodes(
        graph, pos, nodelist=branched, ax=ax, node_size=160, node_color="none", edgecolors="tab:blue"
    )  # fmt: skip
    for node in points:
        x, y = pos[node]
        info = graph.nodes[node]
        ax.annotate(f"H {info['branch_entropy']:.2f}\np {info['probability']:.2f}", (x, y), xytext=(4, -12),
                    textcoords="offset points", fontsize=7)  # fmt: skip
    from course_lib.diagnostics.plots import tree_axes

    return tree_axes(ax, list(layers), title, "step")
