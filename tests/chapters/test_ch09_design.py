"""Chapter 09's designed setting (`course_lib.chapters.ch09_design`): RAGEN's mini-batch schedule, the filter's cut
in optimizer steps, the recorded windows and the design's claim (no model is trained here)."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import chapters
from course_lib.algos.filters import top_groups_by_reward_std
from course_lib.chapters import ch09_design as design


def test_optimizer_steps_by_hand():
    assert design.optimizer_steps(64, 16) == 4  # StarPO: RAGEN's 128 / 32, halved
    assert design.optimizer_steps(16, 16) == 1  # StarPO-S: 2 of 8 groups kept
    assert design.optimizer_steps(17, 16) == 2  # a short last mini-batch
    assert design.optimizer_steps(1, 16) == 1
    assert design.optimizer_steps(0, 16) == 0
    with pytest.raises(ValueError):
        design.optimizer_steps(64, 0)


def test_mini_batches_cover_every_row_once():
    generator = torch.Generator().manual_seed(0)
    chunks = design.mini_batches(37, 16, generator)
    assert [len(c) for c in chunks] == [16, 16, 5]
    assert len(chunks) == design.optimizer_steps(37, 16)
    assert sorted(torch.cat(chunks).tolist()) == list(range(37))
    assert all(torch.equal(c, c.sort().values) for c in chunks)  # sorted, as `RolloutBatch.select` returns rows
    assert not torch.equal(torch.cat(chunks), torch.arange(37))  # shuffled across mini-batches


def test_the_filter_cuts_starpo_s_to_one_step():
    """8 groups x 8 episodes: the top quarter by reward std keeps 2 groups, 16 episodes, one mini-batch of 16; StarPO
    trains on all 64 in 4."""
    groups = torch.arange(8).repeat_interleave(8)
    rewards = torch.zeros(64)
    rewards[0:4] = 1.0  # group 0: 4 of 8 succeed (std 0.53)
    rewards[8:10] = 1.0  # group 1: 2 of 8 (std 0.46)
    rewards[16] = 1.0  # group 2: 1 of 8 (std 0.35)
    keep = top_groups_by_reward_std(rewards, groups, 0.25)
    assert keep.sum().item() == 16 and set(groups[keep].tolist()) == {0, 1}
    config = design.DesignConfig()
    assert design.optimizer_steps(int(keep.sum()), config.mini_batch_rows) == 1
    assert design.optimizer_steps(64, config.mini_batch_rows) == 4


def test_arm_configurations():
    config = design.DesignConfig()
    plain, filtered = design.grpo_config(config, "starpo"), design.grpo_config(config, "starpo_s")
    assert plain.batch_filter == "none" and (plain.clip_low, plain.clip_high) == (0.2, 0.2)
    assert filtered.batch_filter == "starpo_s" and (filtered.clip_low, filtered.clip_high) == (0.2, 0.28)
    assert filtered.filter.keep_fraction == 0.25
    for grpo in (plain, filtered):
        assert grpo.kl_coef == 0.0 and grpo.learning_rate == 5e-4 and grpo.iterations == 60
        assert grpo.prompts_per_iteration * grpo.group_size == 4 * config.mini_batch_rows


def _history(curve: list[float]) -> list[dict[str, float]]:
    """A fake run: checkpoints every 10 iterations with the given success, 10 training records between them."""
    history = []
    for k, value in enumerate(curve):
        last = k == len(curve) - 1
        history.append({"iteration": 10 * k, "eval_success": value, **({} if last else {
            "reward_std": 0.3, "entropy": 0.1, "grad_norm": 0.5 + k, "time_rollout": 1.0, "steps": 4.0})})  # fmt: skip
        if not last:
            history += [{"iteration": 10 * k + j, "reward_std": 0.3, "entropy": 0.1, "grad_norm": 0.5,
                         "time_rollout": 1.0, "steps": 4.0} for j in range(1, 10)]  # fmt: skip
    return history


def test_arm_numbers_windows_by_hand():
    # checkpoints 0..60: early window = iterations 10, 20, 30; late window = 50, 60
    history = _history([0.2, 0.3, 0.5, 0.4, 0.45, 0.3, 0.2])
    numbers = design.arm_numbers("starpo", history, {"success": 0.25})
    assert numbers["starpo_success"] == 0.25
    assert numbers["starpo_early_success"] == pytest.approx(0.4)
    assert numbers["starpo_late_success"] == pytest.approx(0.25)
    assert numbers["starpo_early_minus_base"] == pytest.approx(0.2)
    assert numbers["starpo_early_minus_late"] == pytest.approx(0.15)
    assert numbers["starpo_peak_success"] == 0.5
    assert numbers["starpo_checkpoint_final_success"] == 0.2
    assert numbers["starpo_steps_per_iteration"] == 4.0
    assert numbers["starpo_grad_norm_peak"] == 5.5 and numbers["starpo_grad_norm_peak_iteration"] == 50


def test_the_claim_can_fail():
    claim = design.DESIGN.claim
    assert claim.kind == "finding" and claim.id == "C9.3d" and claim.effects == (("starpo_s_minus_starpo", 0.0),)
    assert claim.evaluate({"starpo_s_minus_starpo": 0.08}).passed
    assert not claim.evaluate({"starpo_s_minus_starpo": -0.01}).passed
    assert not claim.evaluate({"starpo_s_minus_starpo": math.nan}).passed


def test_design_is_registered_with_disjoint_pilot_seeds():
    loaded = chapters.design("ch09")
    assert loaded is design.DESIGN
    assert loaded.effect_key == "starpo_s_minus_starpo" and loaded.scaled_effect == design.SCALED_EFFECT
    assert loaded.deciding_seeds(3) == [20, 21, 22]  # seeds 0-2 ran chapter 09's main arms
    assert not set(loaded.pilot_seeds) & set(loaded.deciding_seeds(loaded.max_seeds))
    assert [key for key, _ in loaded.arms] == ["starpo_success", "starpo_s_success"]
