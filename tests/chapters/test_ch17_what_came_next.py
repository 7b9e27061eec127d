"""Chapter 17 (GraphGPO, Tree-GRPO, IGPO): the arms' settings, the sweep's matched share, the information gain read
from a real base, the mechanism numbers, and a short run that measures every claim's number."""

from __future__ import annotations

import dataclasses
import math

import pytest

from course_lib import data
from course_lib.algos.gigpo import step_group_sizes
from course_lib.chapters import ch17_what_came_next as ch
from course_lib.rl import seams
from course_lib.tasks import two_hop_search


def test_arms_share_their_chapters_budgets_and_differ_where_the_method_does():
    config = ch.preset("cpu")
    grid = {arm: ch.grid_arm(config, arm) for arm in ch.GRID_ARMS}
    assert [grid[arm].advantage for arm in ch.GRID_ARMS] == ["grpo", "gigpo", "graphgpo"]
    assert grid["graphgpo"].graphgpo.omega == grid["gigpo"].gigpo.gamma == config.omega == 0.95
    assert grid["graphgpo"].graphgpo.step_weight == grid["gigpo"].gigpo.step_weight
    assert len({(c.iterations, c.prompts_per_iteration, c.group_size, c.learning_rate) for c in grid.values()}) == 1
    search = {arm: ch.search_arm(config, arm) for arm in ch.SEARCH_ARMS}
    assert (search["tree_grpo"].sampler, search["tree_grpo"].advantage, search["tree_grpo"].group_size) == (
        "tree", "tree_grpo", 3
    )  # fmt: skip
    assert search["tree_grpo"].tree.global_samples == 1 and search["tree_grpo"].tree.beta == 0.0
    assert search["grpo_quarter"].group_size == 2 and search["grpo"].group_size == 8
    assert (search["igpo"].sampler, search["igpo"].advantage) == ("igpo", "igpo")
    assert len({c.iterations for c in search.values()}) == 1
    with pytest.raises(KeyError, match="unknown arm"):
        ch.search_arm(config, "arpo")
    sweep = {method: ch.sweep_arm(config.grid, method, ch.Cell(gamma=1.0)) for method in ch.GRID_ARMS}
    assert [sweep[method].advantage for method in ch.GRID_ARMS] == ["grpo", "gigpo", "graphgpo"]
    assert all(c.anchor_source == "state" and c.gigpo.gamma == 1.0 for c in sweep.values())
    assert sweep["graphgpo"].graphgpo.omega == 1.0
    with pytest.raises(KeyError, match="unknown method"):
        ch.sweep_arm(config.grid, "arpo", ch.Cell())


def test_each_group_has_its_share_of_matched_episodes_and_unmatched_anchors_never_meet():
    config = ch.preset("cpu")
    factory = ch.PartlyMatchedFactory(config.grid, ch.Cell(0.25), group_size=8)
    made = [factory() for _ in range(16)]
    assert [env.matched for env in made] == ([True] * 2 + [False] * 6) * 2
    anchors, groups = [], []
    for env in made:
        env.reset(seed=7)
        for action in ("up", "up", "pickup"):
            anchors.append(env.anchor())
            groups.append(0)
            env.step(action)
    sizes = step_group_sizes(anchors, groups)
    matched_rows = [3 * e + k for e, env in enumerate(made) if env.matched for k in range(3)]
    assert all(sizes[i] == 1 for i in range(len(sizes)) if i not in matched_rows)
    assert all(sizes[i] >= 2 for i in matched_rows)  # the matched episodes share their states
    assert ch.Cell(0.5, 1.0, 30).name == "q0.5_g1_t30"


def test_demonstrated_table_holds_shortest_path_successes_and_the_identity_holds_there():
    config = ch.preset("cpu")
    numbers = ch.graph_numbers(ch.demonstrated_table(config, seed=0), config.omega, 0.1)
    assert numbers["identity_steps"] >= 40 and numbers["identity_gap"] < 1e-12
    assert 0 < numbers["failed_progress_share"] < 1 and 0 < numbers["advantage_sign_flips"] < 1


@pytest.fixture(scope="module")
def search_base():
    config = ch.preset("cpu")
    model, tokenizer = data.load_base(config.search.base)
    return model, tokenizer, config


def test_information_gain_on_the_base_telescopes_and_signals_equal_outcome_groups(search_base):
    model, tokenizer, config = search_base
    config = dataclasses.replace(config, search=dataclasses.replace(config.search, grpo=dataclasses.replace(
        config.search.grpo, prompts_per_iteration=4)))  # fmt: skip
    numbers = ch.information_numbers(model, tokenizer, config, seed=1)
    assert numbers["telescoping_episodes"] >= 1 and numbers["telescoping_gap"] < 1e-5
    assert numbers["igpo_silent_share"] <= numbers["equal_outcome_share"]
    assert math.isfinite(numbers["mean_gain"])


def test_a_wrong_gold_answer_lowers_the_probability_the_gain_reads(search_base):
    from course_lib.rl.info_gain import gold_mean_logprobs, gold_tokens

    model, tokenizer, config = search_base
    engine = ch.RolloutEngine(model, tokenizer, config.search.sampling)
    env = two_hop_search.make_env("train", config.search)
    [trajectory] = engine.rollout([env], [11], [0])
    answer = trajectory.infos[0]["answer"]
    context = trajectory.token_ids  # after the whole episode: the answer has been read in the tool's responses
    right = gold_tokens(tokenizer, "<answer> {answer} </answer>", answer)
    wrong = gold_tokens(tokenizer, "<answer> {answer} </answer>", trajectory.infos[0]["bridge"])
    scores = gold_mean_logprobs(model, tokenizer, [context, context], [right, wrong])
    assert scores[0] > scores[1]
    with pytest.raises(ValueError, match="covers the answer"):
        gold_tokens(tokenizer, "<answer> {answer} </answer>", "")


@pytest.mark.slow
def test_a_short_run_measures_every_claim_number():
    config = ch.preset("cpu")
    config.grid.grpo = dataclasses.replace(config.grid.grpo, iterations=1, eval_every=1)
    config.grid.eval_tasks = 20
    config.search.grpo = dataclasses.replace(config.search.grpo, iterations=1, eval_every=1)
    config.search.eval_tasks = 20
    config = dataclasses.replace(config, identity_iterations=1, budget_questions=4)
    results = ch.run(0, config)
    numbers = ch.claim_numbers(results)
    for spec in ch.CLAIMS:
        assert spec.value in numbers, spec.id
        spec.evaluate(numbers)
    assert numbers["chain_identity"] == 1.0 and numbers["graph_identity_gap"] < 1e-12
    assert 0 < numbers["tree_budget_share"] < 0.5 and numbers["quarter_budget_share"] == pytest.approx(0.25, abs=0.1)
    curves = ch.curves(results)
    assert "grid_graphgpo/eval_success" in curves and "search_igpo/eval_success" in curves
    assert "igpo" in seams.SEAMS["sampler"] and "graphgpo" in seams.SEAMS["advantage"]


def test_a_fork_onto_another_environment_is_refused_before_anything_runs(capsys):
    """Issue 58: `--set grid.env_name=...` reached a KeyError on key_door's stop tag, then an AttributeError inside
    key_door's expert, minutes in; chapter 17 now refuses up front, naming the setting and what to fork instead."""
    from course_lib.chapters import command

    with pytest.raises(SystemExit):
        command.main(ch.CHAPTER, ["--seeds", "0", "--set", "grid.env_name=number_line"])
    error = capsys.readouterr().err
    assert "chapter 17 runs on key_door (grid) and two_hop_qa (search) only" in error
    assert "grid.env_name='number_line' cannot apply; fork chapter 07 or 08" in error
    assert ch.CHAPTER.validate(ch.preset("cpu")) == ch.preset("cpu")  # its own environments pass
