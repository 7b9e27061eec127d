"""Chapter 09: demonstrations (training maps only, reasoning that names the agent's cell), the reasoning
measures and the Echo Trap's timeline by hand, the committed base, and a short run of every arm."""

from __future__ import annotations

import dataclasses
import math

import pytest

from course_lib import data, models
from course_lib.chapters import ch09_ragen as ch09
from course_lib.diagnostics import collapse
from course_lib.engine.rollout import Trajectory
from course_lib.envs import frozen_lake
from course_lib.envs.reasoning import parse_turn
from course_lib.tasks import lake_reasoning
from course_lib.tokenizer import build_tokenizer, encode


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(frozen_lake.vocabulary())


def test_demonstrations_are_training_maps_whose_reasoning_names_the_cell(tokenizer):
    texts = lake_reasoning.demonstration_texts(200, seed=3)
    env = ch09.make_env("train")
    for (prompt, completion), task_seed in zip(texts, lake_reasoning.demonstration_seeds(200, 3), strict=True):
        assert prompt == env.reset(seed=task_seed)[0]
        assert frozen_lake.split_of(env.lake) == "train"
        assert tokenizer.unk_token_id not in encode(tokenizer, f"{prompt} {completion}")
        first_turn = completion.split("</answer>")[0] + "</answer>"
        think, move = parse_turn(first_turn)
        assert think == ["you", *frozen_lake.cell_words(env.lake[0]).split(), "go", move]
    assert lake_reasoning.demonstration_texts(50, seed=3) == texts[:50], "deterministic in the seed"


def test_demonstrator_moves_are_mostly_shortest_path_moves():
    """With noise 0.3 about 70-80% of first moves are the expert's (a random move can also be it)."""
    texts = lake_reasoning.demonstration_texts(400, seed=1)
    env = ch09.make_env("train")
    agree = 0
    for (_, completion), task_seed in zip(texts, lake_reasoning.demonstration_seeds(400, 1), strict=True):
        env.reset(seed=task_seed)
        agree += parse_turn(completion.split("</answer>")[0] + "</answer>")[1] == frozen_lake.expert_move(env)
    assert 0.7 <= agree / 400 <= 0.85


def trajectory(tokenizer, turns: list[str], positions: list[tuple[int, int]]) -> Trajectory:
    """A hand-made trajectory: a prompt, then each turn's policy tokens followed by a one-token observation."""
    lake = ((0, 0), (3, 3), ((1, 1),))
    ids, mask, turn_ids = encode(tokenizer, "you r1 c1 goal r4 c4 holes r2 c2"), [], []
    mask, turn_ids = [0] * len(ids), [-1] * len(ids)
    for k, text in enumerate(turns):
        policy = encode(tokenizer, text)
        ids += policy + encode(tokenizer, "fell")
        mask += [1] * len(policy) + [0]
        turn_ids += [k] * (len(policy) + 1)
    return Trajectory(env=None, token_ids=ids, loss_mask=mask, logprobs=[0.0] * len(ids), entropies=[0.0] * len(ids),
                      turn_ids=turn_ids, anchors=[(lake, p) for p in positions])  # fmt: skip


def test_reasoning_stats_by_hand(tokenizer):
    good = "<think> you r1 c1 go down </think> <answer> down </answer>"
    wrong = "<think> you r2 c2 go down </think> <answer> down </answer>"
    broken = "<think> you r1 c1 go down <answer> down </answer>"
    trajectories = [
        trajectory(tokenizer, [good, wrong], [(0, 0), (1, 0)]),  # tracks, then names a cell it is not in
        trajectory(tokenizer, [wrong, broken], [(0, 0), (1, 0)]),  # wrong first turn; a broken turn is not counted
        trajectory(tokenizer, [good], [(0, 0)]),  # the same first reasoning as the first episode
    ]
    assert ch09.turn_texts(trajectories[0], tokenizer) == [good, wrong]
    stats = lake_reasoning.reasoning_stats(trajectories, tokenizer)
    assert stats["reasoning_tracks_state"] == pytest.approx(2 / 4)
    assert stats["first_reasoning_tracks_state"] == pytest.approx(2 / 3)
    assert stats["distinct_first_reasoning"] == pytest.approx(2 / 3)
    first = f"you r1 c1 goal r4 c4 holes r2 c2  ->  {good}"
    assert ch09.reasoning_samples(trajectories, tokenizer, 1) == [first, f"    ... turn 2 of 2: {wrong}"]
    assert ch09.reasoning_samples(trajectories[2:], tokenizer, 1) == [first], "a one-turn episode has no later turn"


def history(evals: dict[int, float], **keys: list[float]) -> list[dict]:
    """A run's history: training rows with `keys` (and timings), evaluations at the given iterations."""
    length = len(next(iter(keys.values())))
    rows = [{"iteration": i, "time_rollout": 0.1, **{k: v[i] for k, v in keys.items()}} for i in range(length)]
    rows.append({"iteration": length})
    for iteration, value in evals.items():
        rows[iteration]["eval_success"] = value
    return rows


def test_collapse_point_by_hand():
    run = history({0: 0.30, 2: 0.45, 4: 0.42, 6: 0.38, 8: 0.30}, grad_norm=[0.1] * 8)
    point = collapse.collapse_point(run, drop=0.05)
    assert point == {"start_success": 0.30, "peak_success": 0.45, "peak_iteration": 2.0, "final_success": 0.30,
                     "collapse_iteration": 6.0}  # fmt: skip
    assert collapse.collapse_point(run, drop=0.03)["collapse_iteration"] == 4.0, "a drop of exactly 0.03 counts"
    flat = history({0: 0.30, 2: 0.45, 4: 0.44}, grad_norm=[0.1] * 4)
    assert math.isnan(collapse.collapse_point(flat, drop=0.05)["collapse_iteration"])
    tie = history({0: 0.40, 2: 0.40, 4: 0.30}, grad_norm=[0.1] * 4)
    assert collapse.collapse_point(tie, drop=0.05)["peak_iteration"] == 0.0, "the first of equal peaks"


def test_signal_onsets_by_hand():
    run = history(
        {0: 0.3},
        reward_std=[1.0, 1.0, 0.9, 0.9, 0.8, 0.8, 0.6, 0.6],  # windows of 2: 1.0, 0.9, 0.8, 0.6
        entropy=[0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5],
        grad_norm=[0.2, 0.3, 0.2, 0.9, 0.2, 0.2, 0.4, 0.2],
    )
    assert collapse.windowed(run, "reward_std", 2) == [(1, 1.0), (3, 0.9), (5, 0.8), (7, 0.6)]
    onsets = collapse.signal_onsets(run, window=2, drop=0.2)
    assert onsets["reward_std_onset"] == 5.0, "0.8 is 20% below 1.0"
    assert math.isnan(onsets["entropy_onset"])
    assert math.isnan(collapse.signal_onsets(run, window=10, drop=0.2)["reward_std_onset"]), "shorter than one window"
    assert onsets["grad_norm_peak_iteration"] == 3.0 and onsets["grad_norm_peak"] == 0.9
    assert onsets["grad_norm_median"] == pytest.approx(0.2)
    assert (onsets["reward_std_first_window"], onsets["reward_std_last_window"]) == (1.0, 0.6)


def test_claim_checks_need_an_improvement_and_a_collapse():
    numbers = {"starpo_early_minus_base": 0.05, "starpo_early_minus_late": 0.06, "starpo_collapse_iteration": 40.0,
               "starpo_reward_std_onset": 20.0, "starpo_entropy_onset": 30.0,
               "starpo_grad_norm_peak_iteration": 35.0}  # fmt: skip
    echo, warnings = (next(c for c in ch09.CLAIMS if c.id == i) for i in ("C9.1", "C9.2"))
    assert echo.check(numbers) and warnings.check(numbers), "C9.1 at its margin"
    assert not echo.check(numbers | {"starpo_early_minus_base": 0.049}), "no improvement of 5 points"
    assert not echo.check(numbers | {"starpo_early_minus_late": 0.04}), "no collapse of 5 points"
    assert not warnings.check(numbers | {"starpo_entropy_onset": 50.0}), "entropy moved after the collapse"
    assert not warnings.check(numbers | {"starpo_grad_norm_peak_iteration": 51.0}), "spike far from the collapse"
    assert not warnings.check(numbers | {"starpo_collapse_iteration": float("nan")})


def test_arms_change_only_what_they_name():
    config = ch09.Chapter09Config()
    plain = ch09.arm_config(config, "starpo")
    assert (plain.batch_filter, plain.advantage, plain.clip_high, plain.kl_coef) == ("none", "grpo", 0.2, 0.0)
    starpo_s = ch09.arm_config(config, "starpo_s")
    assert dataclasses.replace(starpo_s, batch_filter="none", clip_high=0.2) == plain
    assert starpo_s.filter.keep_fraction == 0.25 and starpo_s.clip_high == 0.28
    assert ch09.arm_config(config, "starpo_s_ppo").advantage == ch09.CRITIC
    budget = {arm: ch09.arm_config(config, arm) for arm in ch09.budget_arms(config)}
    updates = {arm: g.iterations * g.updates_per_batch for arm, g in budget.items()}
    episodes = {arm: g.iterations * g.prompts_per_iteration * g.group_size for arm, g in budget.items()}
    # C9.4's freshness half: the same episodes, four times the updates for the reused arm
    assert episodes["fresh_equal"] == episodes["reused"] == 5 * 64
    assert (updates["fresh_equal"], updates["reused"]) == (config.budget_iterations // config.reuse, 20)
    assert budget["fresh_equal"].updates_per_batch == 1 and budget["reused"].updates_per_batch == config.reuse
    # its diversity half: the same updates and episodes, spread over more or fewer maps
    assert updates["maps_16x4"] == updates["maps_4x16"] == config.budget_iterations
    assert episodes["maps_16x4"] == episodes["maps_4x16"] == config.budget_iterations * 64
    assert config.budget_iterations % config.grpo.eval_every == 0, "StarPO evaluates at the budget arms' end"


@pytest.fixture(scope="module")
def base_evaluation():
    model, tokenizer = data.load_base(ch09.BASE_NAME)
    config = ch09.preset("cpu")
    return ch09.evaluate(model, tokenizer, config, seed=1, keep=True), tokenizer


def test_committed_base_is_in_the_band_and_reads_its_input(base_evaluation):
    """The course's rule before RL (held-out success between 10% and 60%), and the premise of input dependence:
    the base's reasoning names the agent's true cell on most turns and differs between maps."""
    stats, _ = base_evaluation
    assert 0.1 <= stats["success"] <= 0.6
    assert stats["invalid_rate"] < 0.1
    # the first turn copies the cell from the prompt; later ones must find the newest observation's, and miss more
    assert stats["first_reasoning_tracks_state"] >= 0.9 and stats["reasoning_tracks_state"] >= 0.5
    assert stats["distinct_first_reasoning"] >= 0.25, "at most 64 first reasonings (16 cells x 4 moves) for 128 maps"


def test_gpu_preset_builds_and_evaluates_on_cpu(tmp_path):
    """The gpu preset's model size runs end to end (shrunk budgets, CPU)."""
    config = ch09.preset("gpu")
    assert config.model_preset == "small" and config.demonstrations > ch09.preset("cpu").demonstrations
    config = dataclasses.replace(
        config, demonstrations=16, sft=dataclasses.replace(config.sft, steps=3, batch_size=4, warmup_steps=1),
        eval_tasks=8,
    )  # fmt: skip
    assert len(ch09.build_base(tmp_path, seed=0, progress=False, config=config)) >= 1
    model, tokenizer = models.load(tmp_path)
    assert models.count_parameters(model) > 1_000_000
    stats = ch09.evaluate(model, tokenizer, config, seed=0)
    assert 0.0 <= stats["success"] <= 1.0 and 0.0 <= stats["reasoning_tracks_state"] <= 1.0


@pytest.mark.slow
def test_a_short_run_measures_every_claim_number():
    """Two iterations of every arm (one batch for the reused arm): every claim number is there and finite or NaN
    where a run has no collapse; the critic arms trained a critic; the filter kept a quarter of the rows."""
    config = ch09.preset()
    config = dataclasses.replace(
        config, grpo=dataclasses.replace(config.grpo, iterations=4, eval_every=2), eval_tasks=16,
        budget_iterations=2, reuse=2, signal_window=2,
    )  # fmt: skip
    results = ch09.run(0, config)
    assert set(results["histories"]) == {*ch09.ARMS, "fresh_equal", "reused", "maps_16x4", "maps_4x16"}
    numbers = ch09.claim_numbers(results, config)
    for key, value in numbers.items():
        assert math.isfinite(value) or key.endswith(("_onset", "collapse_iteration")), key
    assert (
        "value_loss" in results["histories"]["starpo_ppo"][0] and "value_loss" not in results["histories"]["starpo"][0]
    )
    assert results["histories"]["starpo_s"][0]["kept_rows"] == pytest.approx(0.25)
    assert len(results["histories"]["reused"]) == 2 and "clip_fraction_update_1" in results["histories"]["reused"][0]
    assert len(results["histories"]["fresh_equal"]) == 2, "one fresh batch: the reused arm's episodes"
    for policy in ("base", "starpo"):  # four episodes: a first-turn line each, and a last-turn line for longer ones
        assert sum("  ->  " in line for line in results["samples"][policy]) == 4
    assert {key.split("/")[0] for key in ch09.curves(results)} == set(ch09.ARMS)
    assert {claim.id for claim in ch09.claims(results, config)} == {"C9.1", "C9.2", "C9.3", "C9.4"}
    assert len(ch09.summary_lines(results, config)) == 1 + len(results["final"]) + len(ch09.ARMS)

    # The notebook's live subset: its arms' results are exactly the full run's (each arm reseeds), and the claims
    # that read a critic arm are unmeasured rather than failing or raising.
    live = ch09.run(0, config, arms=ch09.LIVE_ARMS)
    assert list(live["final"]) == list(ch09.LIVE_ARMS)
    assert all(live["final"][arm] == results["final"][arm] for arm in ch09.LIVE_ARMS)
    statuses = {claim.id: claim.measured for claim in ch09.claims(live, config)}
    assert statuses == {"C9.1": True, "C9.2": True, "C9.3": False, "C9.4": True}
    assert ch09.unmeasured_claims(results, config) == set()
    with pytest.raises(ValueError, match="unknown arms"):
        ch09.run(0, config, arms=["starpo", "ppo"])


def test_held_out_evaluator_reuses_the_base_evaluation_exactly():
    """The shortcut is exact: the base's evaluation equals a fresh one of an untouched copy (same seed)."""
    model, tokenizer = data.load_base(ch09.BASE_NAME)
    config = dataclasses.replace(ch09.preset("cpu"), eval_tasks=24)
    base = ch09.without_trajectories(ch09.evaluate(model, tokenizer, config, seed=5, keep=True))
    evaluator = ch09.HeldOutEvaluator(tokenizer, config, 5, start=base)
    assert evaluator(model) == base and evaluator.trajectories == []
    fresh = evaluator(model)
    assert fresh == base and len(evaluator.trajectories) == 24
