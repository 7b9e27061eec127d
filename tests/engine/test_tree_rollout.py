"""ARPO's tree sampler: budget accounting, prefix sharing, masks, the branch rule's extremes, GRPO as its special
case, and the loop's `tree` sampler."""

from __future__ import annotations

import math

import pytest
import torch
from test_rollout import rebuild

from course_lib import envs
from course_lib.engine.bookkeeping import alignment_errors
from course_lib.engine.rollout import RolloutEngine, SamplingConfig, Trajectory
from course_lib.engine.tree_rollout import TreeConfig, branch_points, sample_trees, turn_entropy
from course_lib.rl import seams
from course_lib.rl.train import GRPOConfig

GROUP, TASKS = 6, 3


def tree(model, tokenizer, group=GROUP, seed=0, **settings):
    engine = RolloutEngine(model, tokenizer, SamplingConfig(snapshot_envs=True))
    made = [envs.make("tool_arithmetic") for _ in range(group * TASKS)]
    config = TreeConfig(**{"global_samples": 2, **settings})
    return sample_trees(engine, made, [10, 11, 12], group, config, torch.Generator().manual_seed(seed))


def test_every_task_gets_exactly_the_budget_and_the_counts_add_up(warm_model, tokenizer):
    trajectories, stats = tree(warm_model, tokenizer)
    groups = [t.group_id for t in trajectories]
    assert groups == sorted(groups) and [groups.count(g) for g in range(TASKS)] == [GROUP] * TASKS
    assert all(t.seed == 10 + t.group_id for t in trajectories)
    for group in range(TASKS):
        members = [i for i, t in enumerate(trajectories) if t.group_id == group]
        first_globals = [i for i in members if stats.parents[i] is None and not stats.refill[i]]
        branches = [i for i in members if stats.parents[i] is not None]
        refills = [i for i in members if stats.refill[i]]
        assert len(first_globals) == 2 and len(first_globals) + len(branches) + len(refills) == GROUP
    counts = stats.counts(GROUP, TASKS)
    assert counts["tree_branches"] == sum(p is not None for p in stats.parents)
    assert counts["tree_refills"] == sum(stats.refill)
    assert counts["tree_branch_share"] == pytest.approx(counts["tree_branches"] / (GROUP * TASKS))
    assert counts["tree_branches"] == sum(node.child is not None for node in stats.nodes)
    assert counts["tree_branches"] > 0  # a warm model that calls the tool branches at alpha 0.5


def test_branches_share_their_parent_prefix_token_for_token(warm_model, tokenizer):
    trajectories, stats = tree(warm_model, tokenizer, alpha=1.0, beta=0.0)
    branched = [i for i, parent in enumerate(stats.parents) if parent is not None]
    assert branched
    for index in branched:
        child, parent = trajectories[index], trajectories[stats.parents[index]]
        cut = parent.prefix_length(stats.fork_steps[index])
        assert child.parent == stats.parents[index] and child.branch_position == cut
        assert child.group_id == parent.group_id and child.seed == parent.seed
        assert child.token_ids[:cut] == parent.token_ids[:cut]
        assert child.loss_mask[:cut] == parent.loss_mask[:cut] and child.logprobs[:cut] == parent.logprobs[:cut]
        # the shared prefix ends with the tool response (masked 0); the branch then writes its own turn (mask 1)
        assert child.loss_mask[cut - 1] == 0 and child.turn_ids[cut - 1] == stats.fork_steps[index] - 1
        assert child.loss_mask[cut] == 1 and child.turn_ids[cut] == stats.fork_steps[index]
        assert alignment_errors(child, tokenizer) == []
        assert (child.token_ids, child.loss_mask) == rebuild(child, tokenizer)  # tool tokens masked, actions not


def test_probability_one_branches_until_the_budget_is_spent_and_zero_never(warm_model, tokenizer):
    _, always = tree(warm_model, tokenizer, alpha=1.0, beta=0.0)
    assert all(node.branched and node.probability == 1.0 for node in always.nodes)
    _, never = tree(warm_model, tokenizer, alpha=0.0, beta=0.0)
    assert never.nodes and not any(node.branched for node in never.nodes)
    assert all(parent is None for parent in never.parents)
    assert sum(never.refill) == (GROUP - 2) * TASKS  # the whole remaining budget is refilled


def test_with_the_whole_budget_global_the_sampler_is_grpos(warm_model, tokenizer):
    """`global_samples == group size` (the maintainers' GRPO baseline): the same trajectories, token for token,
    as independent groups sampled with the same generator, and no branch point is even considered."""
    trajectories, stats = tree(warm_model, tokenizer, global_samples=GROUP)
    engine = RolloutEngine(warm_model, tokenizer, SamplingConfig(snapshot_envs=True))
    made = [envs.make("tool_arithmetic") for _ in range(GROUP * TASKS)]
    config = GRPOConfig(group_size=GROUP)
    independent = seams.independent_groups(engine, made, [10, 11, 12], config, torch.Generator().manual_seed(0))
    assert [t.token_ids for t in trajectories] == [t.token_ids for t in independent.rows]
    assert stats.nodes == [] and not any(stats.refill)


def test_same_generator_same_tree(warm_model, tokenizer):
    first, first_stats = tree(warm_model, tokenizer, seed=3)
    again, again_stats = tree(warm_model, tokenizer, seed=3)
    assert [t.token_ids for t in first] == [t.token_ids for t in again]
    assert first_stats.parents == again_stats.parents and first_stats.nodes == again_stats.nodes


def test_entropy_and_branch_points_on_a_hand_made_trajectory():
    """Turn 0 has entropies 1 and 3 nats, turn 1 has 2; the prompt's 9 (mask 0) is ignored."""
    env = envs.make("tool_arithmetic")
    env.reset(seed=0)
    t = Trajectory(
        env=env, token_ids=[1, 2, 3, 4, 5, 6], loss_mask=[0, 1, 1, 0, 1, 1], logprobs=[0.0] * 6,
        entropies=[9.0, 1.0, 3.0, 9.0, 2.0, 2.0], turn_ids=[-1, 0, 0, 0, 1, 1],
    )  # fmt: skip
    assert turn_entropy(t, 0, 20, 100) == pytest.approx(2.0 / math.log(100))
    assert turn_entropy(t, 0, 1, 100) == pytest.approx(1.0 / math.log(100))
    assert turn_entropy(t, 1, 20, 100) == pytest.approx(2.0 / math.log(100))
    assert turn_entropy(t, 2, 20, 100) is None
    t.rewards, t.snapshots = [0.0, 1.0], [env, env, env]  # two steps; the env after step 1 is still running
    assert branch_points(t, 0) == [1] and branch_points(t, 1) == []


def test_bad_settings_are_refused(warm_model, tokenizer):
    with pytest.raises(ValueError, match="snapshot_envs"):
        sample_trees(RolloutEngine(warm_model, tokenizer), [], [0], 2, TreeConfig(global_samples=1))
    with pytest.raises(ValueError, match="global_samples"):
        tree(warm_model, tokenizer, global_samples=GROUP + 1)
    engine = RolloutEngine(warm_model, tokenizer, SamplingConfig(snapshot_envs=True))
    with pytest.raises(ValueError, match="trajectory"):
        seams.tree_groups(engine, [], [0], GRPOConfig(rollout_mode="step"), None)


def test_the_loop_trains_on_a_tree_and_logs_what_it_did(warm_model, tokenizer):
    from course_lib.rl.train import train_grpo

    config = GRPOConfig(
        iterations=1, prompts_per_iteration=2, group_size=4, sampler="tree", tree=TreeConfig(global_samples=2)
    )
    history = train_grpo(
        warm_model, tokenizer, lambda: envs.make("tool_arithmetic"), SamplingConfig(snapshot_envs=True), config, 0
    )
    record = history[0]
    assert record["tree_branches"] + record["tree_refills"] == 2 * 2  # the budget beyond the 2 x 2 global samples
    assert math.isfinite(record["loss"])


def test_the_tree_graph_draws_shared_steps_once(warm_model, tokenizer):
    import matplotlib

    matplotlib.use("Agg")
    from course_lib.diagnostics.tree_view import ROOT, draw_tree, tree_graph

    trajectories, stats = tree(warm_model, tokenizer, alpha=1.0, beta=0.0)
    graph = tree_graph(trajectories, stats, 0, tokenizer)
    members = [i for i, t in enumerate(trajectories) if t.group_id == 0]
    own_steps = sum(trajectories[i].num_turns - stats.fork_steps[i] for i in members)
    assert graph.number_of_nodes() == 1 + own_steps  # every step once, shared ones not repeated
    leaves = [n for n in graph.nodes if graph.out_degree(n) == 0]
    assert len(leaves) == GROUP and all("reward" in graph.nodes[n] for n in leaves)
    assert graph.out_degree(ROOT) == sum(stats.parents[i] is None for i in members)
    branched = [n for n in graph.nodes if graph.nodes[n].get("branched")]
    assert len(branched) == sum(stats.parents[i] is not None for i in members)
    assert all(graph.out_degree(n) == 2 for n in branched)  # the source goes on, and one branch
    draw_tree(graph, title="group 0")


def test_aepo_rule_without_penalty_is_arpos_coin_at_alpha_one_half(warm_model, tokenizer):
    """At alpha 0.5 and l = 0 both rules give 0.5 + beta dH; with the penalty's slope 0, AEPO's sampler draws the
    same tree as ARPO's from the same generator."""
    arpo, arpo_stats = tree(warm_model, tokenizer, seed=2)
    same, same_stats = tree(warm_model, tokenizer, seed=2, rule="aepo", penalty_slope=0.0)
    assert [t.token_ids for t in arpo] == [t.token_ids for t in same]
    assert arpo_stats.parents == same_stats.parents and arpo_stats.nodes == same_stats.nodes


def test_aepo_penalty_stops_a_prompt_that_keeps_gaining(warm_model, tokenizer):
    """With beta 0 and slope 0.5, a prompt that gained a rollout in the previous round has factor 0.5, so
    P = 1 - 0.5 / 0.5 = 0: every considered branch point has probability 0.5 (l = 0) or 0 (l >= 1)."""
    _, stats = tree(warm_model, tokenizer, rule="aepo", beta=0.0, penalty_slope=0.5)
    probabilities = {node.probability for node in stats.nodes}
    assert probabilities <= {0.5, 0.0} and 0.0 in probabilities
    assert not any(node.branched for node in stats.nodes if node.probability == 0.0)
    _, plain = tree(warm_model, tokenizer, beta=0.0)
    assert {node.probability for node in plain.nodes} == {0.5}, "ARPO's coin has no memory"


def test_aepo_pre_monitoring_sets_each_prompts_global_samples(warm_model, tokenizer):
    trajectories, stats = tree(warm_model, tokenizer, rule="aepo", dynamic_globals=True)
    assert len(stats.global_counts) == TASKS and all(1 <= m <= GROUP for m in stats.global_counts)
    for group, count in enumerate(stats.global_counts):
        members = [i for i, t in enumerate(trajectories) if t.group_id == group]
        assert len(members) == GROUP
        assert sum(stats.parents[i] is None and not stats.refill[i] for i in members) == count
    counts = stats.counts(GROUP, TASKS)
    assert counts["tree_global_samples"] == pytest.approx(sum(stats.global_counts) / TASKS)
    share = counts["tree_top3_branch_share"]
    assert math.isnan(share) if counts["tree_branches"] == 0 else 0 < share <= 1


def test_an_unknown_rule_is_refused(warm_model, tokenizer):
    with pytest.raises(ValueError, match="rule"):
        tree(warm_model, tokenizer, rule="beam")
