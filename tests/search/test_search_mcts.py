"""MCTS arithmetic (RAP's UCT, backups, bookkeeping) on hand-computed cases and a toy problem."""

import math

import networkx as nx
import pytest

from course_lib.search.mcts import MCTS, Child, MCTSConfig, backup, draw_tree, suffix_means, uct


def test_uct_visited_and_unvisited():
    # Q + w sqrt(ln N / n): 0.5 + 1 * sqrt(ln 10 / 2)
    assert uct(0.5, 10, 2, 1.0, prior=9.0) == pytest.approx(0.5 + math.sqrt(math.log(10) / 2))
    # unvisited: prior reward + w sqrt(ln N)
    assert uct(0.0, 10, 0, 2.0, prior=0.3) == pytest.approx(0.3 + 2 * math.sqrt(math.log(10)))
    # a parent visited once has ln 1 = 0: pure exploitation
    assert uct(0.7, 1, 1, 1.0, prior=0.0) == pytest.approx(0.7)


def test_suffix_means():
    assert suffix_means([1.0, 2.0, 3.0]) == pytest.approx([2.0, 2.5, 3.0])
    assert suffix_means([]) == []


def _chain(rewards):
    tree = nx.DiGraph()
    for i, r in enumerate([0.0, *rewards]):
        tree.add_node(i, reward=r, N=0, mean_q=0.0, max_q=-math.inf, Q=0.0)
        if i:
            tree.add_edge(i - 1, i)
    return tree


@pytest.mark.parametrize("rule", ["max_mean", "mean"])
def test_backup_rules(rule):
    tree = _chain([1.0, 3.0])
    backup(tree, [0, 1, 2], rule)  # returns: node1 mean(1,3)=2, node2 3
    tree.nodes[2]["reward"] = 1.0
    backup(tree, [0, 1, 2], rule)  # returns: node1 mean(1,1)=1, node2 1
    node1, node2 = tree.nodes[1], tree.nodes[2]
    assert node1["N"] == node2["N"] == tree.nodes[0]["N"] == 2
    assert node1["mean_q"] == pytest.approx(1.5) and node1["max_q"] == pytest.approx(2.0)
    assert node2["mean_q"] == pytest.approx(2.0) and node2["max_q"] == pytest.approx(3.0)
    assert node1["Q"] == pytest.approx(2.0 if rule == "max_mean" else 1.5)


def test_backup_rejects_unknown_rule():
    with pytest.raises(ValueError):
        backup(_chain([1.0]), [0, 1], "sum")
    with pytest.raises(ValueError):
        MCTS(lambda s, d: [], MCTSConfig(backup="sum"))


def counting_problem(target: int, calls: list):
    """States are integers; actions +1 / +2; reward 1 for reaching `target` exactly, else 0.1;
    overshooting is a failed node."""

    def expand(state, depth):
        calls.append(state)
        out = []
        for step in (1, 2):
            nxt = state + step
            out.append(Child(f"+{step}", nxt, 1.0 if nxt == target else 0.1, solved=nxt == target, failed=nxt > target))
        return out

    return expand


def test_search_finds_plan_and_bookkeeping_is_consistent():
    calls = []
    result = MCTS(counting_problem(5, calls), MCTSConfig(iterations=20, depth_limit=5)).search(0)
    assert result.solved and sum(int(a[1:]) for a in result.plan) == 5
    tree = result.tree
    assert result.expansions == len(calls) == sum(tree.nodes[n]["expanded"] for n in tree.nodes)
    # expand ran once for each expanded node, on that node's state, and never on a terminal node
    expanded = [n for n in tree.nodes if tree.nodes[n]["expanded"]]
    assert sorted(calls) == sorted(tree.nodes[n]["state"] for n in expanded)
    assert all(len(list(tree.successors(n))) == (2 if n in expanded else 0) for n in tree.nodes)
    assert tree.nodes[0]["N"] == 20
    for node in tree.nodes:
        children = list(tree.successors(node))
        # a node is visited once per iteration through it: its visits cover its children's
        assert tree.nodes[node]["N"] >= sum(tree.nodes[c]["N"] for c in children)
        assert tree.nodes[node]["depth"] <= 5
        if tree.nodes[node]["failed"] or tree.nodes[node]["solved"]:
            assert not children  # terminal nodes are never expanded
    ax = draw_tree(tree, [0])
    assert ax.get_title() == ""


def test_depth_limit_and_no_solution_falls_back_to_greedy_path():
    calls = []
    result = MCTS(counting_problem(50, calls), MCTSConfig(iterations=5, depth_limit=3)).search(0)
    assert not result.solved and 1 <= len(result.plan) <= 3
    assert max(nx.get_node_attributes(result.tree, "depth").values()) == 3


def test_dead_end_root():
    result = MCTS(lambda s, d: [], MCTSConfig(iterations=3)).search("x")
    assert result.plan == [] and not result.solved and result.tree.nodes[0]["terminal"]
