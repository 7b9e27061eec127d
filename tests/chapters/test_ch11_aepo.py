"""Chapter 11: the arms' settings, the concentration reference and the entropy drift by hand, the claim checks,
the pre-monitoring entropies' units, the exact gradient check on real policies, the root variant's base, and a
short run of every arm."""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pytest
import torch

from course_lib import data
from course_lib.chapters import ch11_aepo as ch11
from course_lib.engine.rollout import Trajectory
from course_lib.engine.tree_rollout import TreeConfig, monitored_entropies, turn_entropy_sum


def test_arms_change_only_what_they_name():
    config = ch11.Chapter11Config()
    grpo, arpo = ch11.arm_config(config, "grpo"), ch11.arm_config(config, "arpo")
    assert (grpo.sampler, grpo.policy_loss, grpo.updates_per_batch, grpo.iterations) == ("groups", "clipped", 4, 30)
    assert dataclasses.replace(arpo, sampler="groups") == grpo and arpo.tree.rule == "arpo"
    hard = ch11.arm_config(config, "aepo_hard")
    assert hard.tree.rule == "aepo" and dataclasses.replace(hard, tree=arpo.tree) == arpo
    balanced = ch11.arm_config(config, "aepo")
    assert dataclasses.replace(balanced, policy_loss="clipped") == hard, "aepo and aepo_hard differ only in the clip"
    adv = ch11.arm_config(config, "aepo_adv")
    assert adv.entropy_advantage == 0.2 and dataclasses.replace(adv, entropy_advantage=0.0) == balanced


def test_chain_depth_and_entropy_drift_by_hand():
    parents = [None, None, 0, 2, 1]
    assert [ch11._chain_depth(parents, i) for i in range(5)] == [0, 0, 1, 2, 1]
    history = [{"entropy": 0.2}, {"entropy": 0.3}, {"entropy": 0.1}, {"eval_success": 0.5}]
    assert ch11.entropy_drift(history) == pytest.approx((0.1 + 0.1) / 2 / 0.2)


def claim(claim_id):
    return next(c for c in ch11.CLAIMS if c.id == claim_id)


def test_claim_checks():
    c1 = claim("C11.1").check
    n = {"top3_arpo_over_uniform": 0.05, "top3_aepo_minus_arpo": -0.01}
    assert c1(n) and not c1(n | {"top3_arpo_over_uniform": 0.0}) and not c1(n | {"top3_aepo_minus_arpo": 0.0})
    c2a, c2b = claim("C11.2a").check, claim("C11.2b").check
    n = {"gradient_above_share": 0.01, "gradient_gradient_gap": 1e-8, "gradient_value_gap": 0.0,
         "drift_balanced_minus_hard": -0.1}  # fmt: skip
    assert c2a(n) and c2b(n)
    assert not c2a(n | {"gradient_above_share": 0.0}), "no token above the bound: nothing was checked"
    assert not c2a(n | {"gradient_gradient_gap": 1e-5}) and not c2b(n | {"drift_balanced_minus_hard": 0.0})
    c3 = claim("C11.3").check
    n = {"aepo_minus_arpo_pass_1": -0.02, "aepo_minus_arpo_pass_k": 0.1}
    assert c3(n) and not c3(n | {"aepo_minus_arpo_pass_1": -0.021}) and not c3(n | {"aepo_minus_arpo_pass_k": -0.03})
    c4 = claim("C11.4").check
    n = {"globals_root_minus_tool": 0.5, "branches_tool_minus_root": 0.02}
    assert c4(n) and not c4(n | {"globals_root_minus_tool": 0.0}) and not c4(n | {"branches_tool_minus_root": -0.1})


def test_pre_monitoring_entropy_units():
    t = Trajectory(env=None, token_ids=[1, 2, 3, 4, 5, 6], loss_mask=[0, 1, 1, 1, 1, 0], logprobs=[0.0] * 6,
                   entropies=[0.0, 0.5, 1.0, 2.0, 0.3, 9.0], turn_ids=[-1, 0, 0, 0, 1, 1])  # fmt: skip
    assert turn_entropy_sum(t, 0, 2, 100, "nats") == pytest.approx(1.5), "the first two tokens of turn 0"
    assert turn_entropy_sum(t, 0, 20, 100, "normalised") == pytest.approx(3.5 / math.log(100))
    assert turn_entropy_sum(t, 1, 20, 100, "nats") == pytest.approx(0.3), "masked tokens do not count"
    assert turn_entropy_sum(t, 2, 20, 100, "nats") is None
    with pytest.raises(ValueError, match="monitor_units"):
        turn_entropy_sum(t, 0, 20, 100, "bits")
    t.rewards = [0.0, 1.0]  # num_turns reads the rewards
    root, tool = monitored_entropies(t, TreeConfig(monitor_units="nats"), 100)
    assert (root, tool) == pytest.approx((3.5, (3.5 + 0.3) / 2)), "the tool mean includes the first turn, as the code"


@pytest.fixture(scope="module")
def base_and_tokenizer():
    return data.load_base(ch11.BASE_NAME)


def small_config(**changes) -> ch11.Chapter11Config:
    config = ch11.preset("cpu")
    return dataclasses.replace(config, task=dataclasses.replace(config.task, eval_tasks=24), **changes)


@pytest.mark.slow
def test_gradient_check_is_exact_on_real_policies(base_and_tokenizer):
    """A policy moved away from the base puts some positive-advantage tokens above the bound; there the balanced
    clip's extra gradient is exactly the kept term's, and the two losses have equal values."""
    base, tokenizer = base_and_tokenizer
    moved = copy.deepcopy(base)
    with torch.no_grad():
        for parameter in moved.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=torch.Generator().manual_seed(1)) * 0.05)
    check = ch11.gradient_check(moved, base, tokenizer, small_config(), seed=0)
    assert check["above_share"] > 0
    assert check["gradient_gap"] < 1e-6 and check["value_gap"] < 1e-9 and check["kept_over_hard"] > 0
    same = ch11.gradient_check(base, base, tokenizer, small_config(), seed=0)
    assert same["above_share"] == 0.0, "at the sampling policy every ratio is 1: nothing above the bound"


def test_root_variant_base_is_uncertain_at_the_root():
    """The premise of C11.4's root kind: the root base's first search is precise on about half of the held-out
    questions (a coin flip), and it answers most of them (every response lists one candidate)."""
    model, tokenizer = data.load_base(ch11.ROOT_BASE_NAME)
    config = dataclasses.replace(small_config(), pass_k=2)
    passes = ch11.pass_at_k(model, tokenizer, config, seed=1, ambiguous_share=0.0)
    assert 0.25 <= passes["precise"] <= 0.75 and passes["pass_1"] >= 0.6


def test_gpu_preset_is_larger():
    cpu, gpu = ch11.preset("cpu"), ch11.preset("gpu")
    assert gpu.grpo.iterations > cpu.grpo.iterations and gpu.sampler_prompts > cpu.sampler_prompts
    assert gpu.grpo.updates_per_batch == cpu.grpo.updates_per_batch and gpu.grpo.tree == cpu.grpo.tree


@pytest.mark.slow
def test_a_short_run_measures_every_claim_number():
    """Two iterations of every arm: every claim number is finite, pass@k is at least pass@1, the curves are
    there, and the split's sampler spends the whole budget."""
    config = small_config(sampler_prompts=6, check_prompts=4, pass_k=2)
    config = dataclasses.replace(config, grpo=dataclasses.replace(config.grpo, iterations=2, eval_every=2))
    results = ch11.run(0, config)
    assert set(results["histories"]) == set(ch11.ARMS)
    numbers = ch11.claim_numbers(results)
    for key, value in numbers.items():
        assert math.isfinite(value), key
    for arm in ("base", *ch11.ARMS):
        assert numbers[f"{arm}_pass_2"] >= numbers[f"{arm}_pass_1"]
    for kind in ("tool", "root"):
        assert 1 <= numbers[f"{kind}_globals"] <= config.sampler_budget
        assert numbers[f"{kind}_branch_share"] <= 1 - numbers[f"{kind}_globals"] / config.sampler_budget + 1e-9
    assert {key.split("/")[0] for key in ch11.curves(results)} == set(ch11.ARMS)
    assert np.isclose(numbers["gradient_value_gap"], 0.0)
    assert len(ch11.summary_lines(results)) == 2 + 2 + 1 + 1 + len(ch11.ARMS)


def test_recorded_figure_shows_every_recorded_seed_with_readable_names():
    import matplotlib.pyplot as plt

    from course_lib.course import recorded

    seeds = recorded.seed_numbers(recorded.load("ch11"))
    fig = ch11.plot_recorded()
    concentration, entropy, passes, split = fig.axes[:4]
    dots = [len(collection.get_offsets()) for collection in concentration.collections]
    assert dots == [len(seeds)] * 3, "one dot per recorded seed on each of C11.1's three bars"
    assert [n["arpo_top3_share"] for n in seeds] == list(concentration.collections[0].get_offsets()[:, 1])
    assert len(passes.collections) == 2 * len(ch11.ARM_NAMES), "pass@1 and pass@k dots for every policy"
    assert [t.get_text() for t in split.get_xticklabels()] == ["root kind", "tool kind"]
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert f"AEPO as released (mean, range of {len(seeds)} seeds)" in labels and not any(
        "aepo_" in label for label in labels
    )
    plt.close(fig)
