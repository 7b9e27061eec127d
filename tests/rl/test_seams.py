"""The RL loop's seams, the step-aware batch and step mode."""

from __future__ import annotations

import copy
import dataclasses
import subprocess
import sys

import pytest
import torch

from course_lib import envs
from course_lib.engine.rollout import RolloutBatch, RolloutEngine, SamplingConfig, Trajectory, broadcast_steps, collate
from course_lib.engine.step_mode import Episode, rollout_steps, step_prompt
from course_lib.rl import seams
from course_lib.rl.train import GRPOConfig, train_grpo

SAMPLING = SamplingConfig(max_turn_tokens=8, max_total_tokens=40)


def row(tokens, mask, turns, rewards, valid, anchors, group=0, traj_id=None, step_index=0, episode_reward=None):
    """A hand-made Trajectory: `turns` per token, one reward/valid/anchor per step."""
    return Trajectory(
        env=None, token_ids=tokens, loss_mask=mask, logprobs=[0.0] * len(tokens), entropies=[0.0] * len(tokens),
        turn_ids=turns, group_id=group, rewards=rewards, infos=[{"valid": v} for v in valid], anchors=anchors,
        traj_id=traj_id, step_index=step_index, episode_reward=episode_reward,
    )  # fmt: skip


def trajectory_mode_rows():
    # row 0: prompt (2 tokens), step 0 = 2 action tokens + 1 observation token, step 1 = 1 action token
    first = row([1, 2, 3, 4, 5, 6], [0, 0, 1, 1, 0, 1], [-1, -1, 0, 0, 0, 1], [0.0, 1.0], [True, False], ["a", "b"])
    # row 1: prompt (1 token), one step of 2 action tokens; another group
    second = row([1, 7, 8], [0, 1, 1], [-1, 0, 0], [0.5], [True], [("s", 1)], group=1)
    return [first, second]


def test_collate_keeps_the_step_table_in_trajectory_mode():
    batch = collate(trajectory_mode_rows(), pad_id=0)
    assert batch.rewards.tolist() == [1.0, 0.5]
    assert batch.traj_ids.tolist() == [0, 1]
    assert batch.step_row.tolist() == [0, 0, 1]
    assert batch.step_turn.tolist() == [0, 1, 0]
    assert batch.step_index.tolist() == [0, 1, 0]
    assert batch.step_traj.tolist() == [0, 0, 1] and batch.step_group.tolist() == [0, 0, 1]
    assert batch.step_reward.tolist() == [0.0, 1.0, 0.5]
    assert batch.step_valid.tolist() == [True, False, True]
    assert batch.step_anchors == ["a", "b", ("s", 1)]


def test_broadcast_steps_puts_each_value_on_its_action_tokens_only():
    batch = collate(trajectory_mode_rows(), pad_id=0)
    spread = broadcast_steps(batch, torch.tensor([10.0, 20.0, 30.0]))
    assert spread.tolist() == [
        [0.0, 0.0, 10.0, 10.0, 0.0, 20.0],  # observation token of step 0 and the prompt get nothing
        [0.0, 30.0, 30.0, 0.0, 0.0, 0.0],  # padding gets nothing
    ]


def test_broadcast_skips_an_unsent_action():
    """A sequence cut by the length cap ends in action tokens that never reached the env: no step, no value."""
    cut = row([1, 2, 3, 4], [0, 1, 1, 1], [-1, 0, 1, 1], [1.0], [True], ["a"])
    batch = collate([cut], pad_id=0)
    assert broadcast_steps(batch, torch.tensor([5.0])).tolist() == [[0.0, 5.0, 0.0, 0.0]]


def test_collate_step_mode_rows():
    """One-turn rows of two episodes: step indices and episode ids come from the rows, rewards from the episode."""
    rows = [
        row([1, 2, 3], [0, 0, 1], [-1, -1, 0], [0.0], [True], ["x"], traj_id=0, step_index=0, episode_reward=1.0),
        row([1, 4, 3], [0, 0, 1], [-1, -1, 0], [0.0], [True], ["y"], traj_id=1, step_index=0, episode_reward=0.0),
        row([1, 5, 6], [0, 0, 1], [-1, -1, 0], [1.0], [False], ["z"], traj_id=0, step_index=1, episode_reward=1.0),
    ]
    batch = collate(rows, pad_id=0)
    assert batch.rewards.tolist() == [1.0, 0.0, 1.0]
    assert batch.traj_ids.tolist() == [0, 1, 0]
    assert batch.step_index.tolist() == [0, 0, 1] and batch.step_turn.tolist() == [0, 0, 0]
    assert batch.step_traj.tolist() == [0, 1, 0]
    assert seams.invalid_steps_per_row(batch).tolist() == [0.0, 0.0, 1.0]


def test_select_keeps_rows_and_their_steps():
    batch = collate(trajectory_mode_rows(), pad_id=0)
    kept = batch.select(torch.tensor([False, True]))
    assert kept.input_ids.tolist() == [[1, 7, 8, 0, 0, 0]]
    assert kept.step_row.tolist() == [0] and kept.step_reward.tolist() == [0.5] and kept.step_anchors == [("s", 1)]
    assert broadcast_steps(kept, torch.tensor([2.0])).tolist() == [[0.0, 2.0, 2.0, 0.0, 0.0, 0.0]]


def test_grpo_estimator_is_group_advantages_and_penalises_invalid_rows():
    batch = collate(trajectory_mode_rows() + [row([1, 9], [0, 1], [-1, 0], [0.0], [True], ["c"], group=1)], 0)
    plain, stats = seams.grpo(batch, GRPOConfig())
    # group 0 holds one row (A = 0); group 1: rewards 0.5 and 0, mean 0.25, unbiased std 0.3536
    assert stats == {} and plain.tolist() == pytest.approx([0.0, 0.7071, -0.7071], abs=1e-4)
    penalised, _ = seams.grpo(batch, GRPOConfig(invalid_penalty=0.1, scale_by_std=False))
    assert penalised.tolist() == pytest.approx([0.0, 0.25, -0.25])  # the invalid step is in a singleton group


def test_resolve_and_register():
    assert seams.resolve("advantage", "grpo") is seams.grpo
    with pytest.raises(KeyError, match="unknown advantage 'nope'"):
        seams.resolve("advantage", "nope")
    with pytest.raises(KeyError, match="unknown seam"):
        seams.register("critic", "x", print)


def test_register_refuses_a_taken_name_unless_asked_to_replace(monkeypatch):
    """A fork's `grpo` would silently replace the course's in every chapter: refused, naming whose it is."""
    monkeypatch.setitem(seams.SEAMS, "advantage", dict(seams.SEAMS["advantage"]))
    with pytest.raises(ValueError, match="advantage 'grpo' is taken \\(the course's own\\)"):
        seams.register("advantage", "grpo", print)
    assert seams.resolve("advantage", "grpo") is seams.grpo
    seams.register("advantage", "mine", print)
    seams.register("advantage", "mine", print)  # the same function again: nothing changes
    with pytest.raises(ValueError, match="'mine' is taken \\(print\\)"):
        seams.register("advantage", "mine", repr)
    seams.register("advantage", "grpo", repr, replace=True)
    assert seams.resolve("advantage", "grpo") is repr


def test_a_registered_estimator_drives_the_loop(monkeypatch, warm_model, tokenizer):
    """A new estimator is one function: registered under a name and chosen in the config, the loop calls
    it, and an all-zero advantage leaves the weights where they were."""
    calls = []

    def zero(batch, config):
        calls.append(batch.input_ids.shape[0])
        return torch.zeros(batch.input_ids.shape), {"zero_calls": float(len(calls))}

    monkeypatch.setitem(seams.SEAMS["advantage"], "zero", zero)
    before = copy.deepcopy(warm_model.state_dict())
    config = GRPOConfig(iterations=1, prompts_per_iteration=2, group_size=2, advantage="zero")
    history = train_grpo(warm_model, tokenizer, lambda: envs.make("tool_arithmetic"), SAMPLING, config, seed=0)
    assert calls == [4] and history[0]["zero_calls"] == 1.0
    assert all(torch.equal(before[k], v) for k, v in warm_model.state_dict().items())


PLANTED_ALGOS = """
from dataclasses import dataclass

import torch


@dataclass
class RLOOConfig:
    bonus_weight: float = 1.0


def rloo_advantages(rewards, groups, bonus, config):
    \"\"\"Each row's reward (plus its steps' bonus) minus the mean of the other rows of its group, `[B]`.\"\"\"
    scores = rewards + config.bonus_weight * bonus
    out = torch.zeros_like(scores)
    for group in groups.unique():
        rows = groups == group
        n = int(rows.sum())
        out[rows] = scores[rows] - (scores[rows].sum() - scores[rows]) / max(n - 1, 1)
    return out
"""
PLANTED_SEAM = """
import functools

import torch

import planted_algos
from course_lib.rl import seams


def bonus_sampler(engine, envs, task_seeds, config, generator):
    rollouts = seams.independent_groups(engine, envs, task_seeds, config, generator)
    for trajectory in rollouts.rows:
        for info in trajectory.infos:
            info["bonus"] = 0.25
    rollouts.step_extras = ("bonus",)
    return rollouts


def rloo(batch, config, settings):
    bonus = torch.zeros(batch.input_ids.shape[0]).index_add(0, batch.step_row, batch.step_extras["bonus"])
    advantages = planted_algos.rloo_advantages(seams.penalised_rewards(batch, config), batch.group_ids, bonus, settings)
    return advantages, {"rloo_bonus": float(bonus.sum())}


seams.register("sampler", "bonus", bonus_sampler)
seams.register("advantage", "rloo", functools.partial(rloo, settings=planted_algos.RLOOConfig(bonus_weight=2.0)))
"""


def test_a_new_estimator_takes_three_files(tmp_path, monkeypatch, warm_model, tokenizer):
    """A new method is its equations and settings (an `algos`-style module), its seam (an adapter registered by name,
    reading a per-step number its sampler wrote, from `RolloutBatch.step_extras`) and its test: planted here as two
    modules of a temporary folder and this test, with no edit to the loop, the batch or `GRPOConfig`."""
    (tmp_path / "planted_algos.py").write_text(PLANTED_ALGOS)
    (tmp_path / "planted_seam.py").write_text(PLANTED_SEAM)
    monkeypatch.syspath_prepend(str(tmp_path))
    for seam in ("sampler", "advantage"):
        monkeypatch.setitem(seams.SEAMS, seam, dict(seams.SEAMS[seam]))  # the registrations end with the test
    for name in ("planted_algos", "planted_seam"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import planted_seam  # noqa: F401  (registers the sampler and the estimator)

    config = GRPOConfig(iterations=1, prompts_per_iteration=2, group_size=2, sampler="bonus", advantage="rloo")
    history = train_grpo(warm_model, tokenizer, lambda: envs.make("tool_arithmetic"), SAMPLING, config, seed=0)
    steps = history[0]["turns"] * 4  # 2 prompts x 2 episodes, each step's bonus 0.25
    assert history[0]["rloo_bonus"] == pytest.approx(0.25 * steps)
    assert {field.name for field in dataclasses.fields(GRPOConfig)}.isdisjoint({"rloo", "bonus"})
    assert {field.name for field in dataclasses.fields(RolloutBatch)}.isdisjoint({"bonus", "step_bonus"})
    rewards, groups = torch.tensor([1.0, 0.0, 0.5, 0.5]), torch.tensor([0, 0, 1, 1])
    settings = sys.modules["planted_algos"].RLOOConfig(bonus_weight=0.0)
    by_hand = [1.0, -1.0, 0.0, 0.0]  # r_i - mean of the rest of its group
    assert sys.modules["planted_algos"].rloo_advantages(rewards, groups, torch.zeros(4), settings).tolist() == by_hand


def test_step_prompt_window():
    history = [("o1", "a1"), ("o2", "a2"), ("o3", "a3")]
    assert step_prompt("o4", history, 0) == "o4"
    assert step_prompt("o4", history, 2) == "o2 a2 o3 a3 o4"
    assert step_prompt("o1", [], 3) == "o1"
    with pytest.raises(ValueError):
        step_prompt("o", [], -1)


def test_rollout_steps_plays_episodes_as_one_step_rows(warm_model, tokenizer):
    """Each row holds one action; its prompt is the observation the action answered; the rows of an
    episode are its steps in order and carry the episode's total reward."""
    engine = RolloutEngine(warm_model, tokenizer, SAMPLING)
    made = [envs.make("tool_arithmetic") for _ in range(4)]
    episodes = rollout_steps(engine, made, [3, 3, 5, 5], [0, 0, 1, 1], torch.Generator().manual_seed(0), window=1)
    assert [e.traj_id for e in episodes] == [0, 1, 2, 3] and [e.group_id for e in episodes] == [0, 0, 1, 1]
    for episode in episodes:
        assert isinstance(episode, Episode) and episode.env.done
        transcript = episode.env.transcript
        assert len(episode.rows) == len(transcript.actions) == episode.num_turns
        for index, step in enumerate(episode.rows):
            assert step.traj_id == episode.traj_id and step.step_index == index and len(step.rewards) == 1
            assert step.episode_reward == episode.total_reward == pytest.approx(sum(transcript_rewards(episode)))
            prompt_text = tokenizer.decode(step.token_ids[1 : step.turn_ids.count(-1)])
            expected = step_prompt(transcript.observations[index], episode.history[:index], 1)
            assert prompt_text.split() == expected.split()
            sampled = [t for t, m in zip(step.token_ids, step.loss_mask, strict=True) if m]
            assert tokenizer.decode(sampled).split() == transcript.actions[index].split()
            assert step.anchors == [transcript.observations[index]]  # verl-agent's anchor: the raw observation
    batch = collate([r for e in episodes for r in e.rows], tokenizer.pad_token_id)
    assert batch.step_traj.tolist() == [e.traj_id for e in episodes for _ in e.rows]


def transcript_rewards(episode):
    return [r for step in episode.rows for r in step.rewards]


def test_train_grpo_in_step_mode_with_gigpo(warm_model, tokenizer):
    """Both estimators run in step mode; GiGPO reports its step-group statistics."""
    make = lambda: envs.make("tool_arithmetic")  # noqa: E731
    for advantage in ("grpo", "gigpo"):
        config = GRPOConfig(iterations=1, prompts_per_iteration=2, group_size=3, rollout_mode="step",
                            advantage=advantage, invalid_penalty=0.1)  # fmt: skip
        history = train_grpo(copy.deepcopy(warm_model), tokenizer, make, SAMPLING, config, seed=1)
        assert torch.isfinite(torch.tensor(history[0]["loss"]))
        assert ("step_group_size_mean" in history[0]) == (advantage == "gigpo")


def test_importing_the_loop_loads_no_environment_and_only_the_methods_it_holds_settings_of():
    """Registries resolve lazily: importing the loop and the engine loads no environment, no tool and no step mode;
    of `algos` only GRPO's (the loop's KL and aggregation, AEPO's entropy-aware advantage), ARPO's (the tree
    sampler's settings) and the modules whose settings `GRPOConfig` holds (each method's beside its equations)."""
    code = (
        "import sys, course_lib.rl.train, course_lib.rl.seams, course_lib.engine.rollout;"
        "print(sorted(m for m in sys.modules if m.startswith('course_lib.')))"
    )
    loaded = eval(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert not [m for m in loaded if m.startswith(("course_lib.envs.word_math", "course_lib.tools"))]
    assert "course_lib.engine.step_mode" not in loaded
    algos = {m.removeprefix("course_lib.algos.") for m in loaded if m.startswith("course_lib.algos.")}
    assert algos <= {"grpo", "aepo", "arpo", "filters", "gigpo", "graphgpo", "igpo", "step_rows"}, algos
    assert not {"ppo", "tree_grpo"} & algos


def test_group_filters_score_episodes_not_step_rows():
    """In step mode an episode has several rows; the filters score each episode once. Here group 0 has episodes of
    reward 1 (three step rows) and 0 (one row): per episode its std is 0.707, per row 0.5. Group 1 has one-row
    episodes of reward 1 and 0.1: std 0.636 either way. By episode group 0 ranks first, by row it would not."""
    rows = [
        row([1, 2], [0, 1], [-1, 0], [0.0], [True], ["a"], group=0, traj_id=0, step_index=k, episode_reward=1.0)
        for k in range(3)
    ]
    rows.append(row([1, 3], [0, 1], [-1, 0], [0.0], [True], ["b"], group=0, traj_id=1, episode_reward=0.0))
    rows.append(row([1, 4], [0, 1], [-1, 0], [1.0], [True], ["c"], group=1, traj_id=2, episode_reward=1.0))
    rows.append(row([1, 5], [0, 1], [-1, 0], [0.1], [True], ["d"], group=1, traj_id=3, episode_reward=0.1))
    batch = collate(rows, pad_id=0)
    config = GRPOConfig(batch_filter="starpo_s")
    config.filter.keep_fraction = 0.5
    assert seams.starpo_s(batch, config).tolist() == [True, True, True, True, False, False]
    config.filter.top_p = 0.5  # 0.707 alone holds more than half of 0.707 + 0.636
    assert seams.snr_top_p(batch, config).tolist() == [True, True, True, True, False, False]
    config.filter.top_p = 0.9
    assert seams.snr_top_p(batch, config).all()


def test_a_filter_that_keeps_nothing_skips_the_update(monkeypatch, warm_model, tokenizer):
    monkeypatch.setitem(
        seams.SEAMS["batch_filter"], "nothing", lambda batch, c: torch.zeros(len(batch.rewards), dtype=bool)
    )
    before = copy.deepcopy(warm_model.state_dict())
    config = GRPOConfig(iterations=1, prompts_per_iteration=2, group_size=2, batch_filter="nothing")
    history = train_grpo(warm_model, tokenizer, lambda: envs.make("tool_arithmetic"), SAMPLING, config, seed=0)
    assert history[0]["skipped_update"] == 1.0 and history[0]["kept_rows"] == 0.0 and "loss" not in history[0]
    assert all(torch.equal(before[k], v) for k, v in warm_model.state_dict().items())
    config = GRPOConfig(iterations=1, prompts_per_iteration=2, group_size=2, batch_filter="starpo_s")
    config.filter.keep_fraction = 1.0
    history = train_grpo(warm_model, tokenizer, lambda: envs.make("tool_arithmetic"), SAMPLING, config, seed=0)
    assert history[0]["skipped_update"] == 0.0 and history[0]["kept_rows"] == 1.0
