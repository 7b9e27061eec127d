"""Chapter 12: the arms' settings, the MI stop's threshold and rollback by hand, the collapse sign and the claim
check, the course table from per-seed numbers, and short runs (one with a stop that must fire)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from course_lib.chapters import ch12_capstone as ch12
from course_lib.course.claims import NOT_RUN_HERE


def test_arms_change_only_what_they_name():
    config = ch12.Chapter12Config()
    grpo = ch12.arm_config(config, "grpo")
    assert (grpo.sampler, grpo.advantage, grpo.batch_filter, grpo.policy_loss, grpo.entropy_coef) == (
        "groups", "grpo", "none", "clipped", 0.0,
    )  # fmt: skip
    assert dataclasses.replace(ch12.arm_config(config, "gigpo"), advantage="grpo") == grpo
    starpo = ch12.arm_config(config, "starpo_s")
    assert (starpo.batch_filter, starpo.clip_high, starpo.filter.keep_fraction) == ("starpo_s", 0.28, 0.25)
    aepo = ch12.arm_config(config, "aepo")
    assert (aepo.sampler, aepo.tree.rule, aepo.policy_loss) == ("tree", "aepo", "entropy_balanced")
    combined = ch12.arm_config(config, "combined")
    assert (
        combined
        == dataclasses.replace(ch12.arm_config(config, "aepo_snr"), eval_every=5)
        == dataclasses.replace(aepo, batch_filter="snr_top_p", eval_every=5)
    ), "the MI stop lives outside the loop's configuration; its arms only evaluate more often"
    assert ch12.ARMS["combined"]["mi_stop"] and not ch12.ARMS["aepo_snr"].get("mi_stop")
    bonus = ch12.arm_config(config, "combined_bonus")
    assert bonus.entropy_coef == 0.1 and dataclasses.replace(bonus, entropy_coef=0.0) == combined
    assert dataclasses.replace(ch12.arm_config(config, "aepo_bonus_snr"), entropy_coef=0.0) == ch12.arm_config(
        config, "aepo_snr"
    )
    assert ch12.arm_config(config, "aepo_bonus_mi") == dataclasses.replace(aepo, entropy_coef=0.1, eval_every=5)
    assert set(ch12.METHODS) <= set(ch12.ARMS)


def test_mi_stop_by_hand():
    stop = ch12.MIStop(base_mi=2.0, drop=0.2)
    assert stop.threshold == pytest.approx(1.6)
    model = torch.nn.Linear(1, 1)
    torch.nn.init.constant_(model.weight, 1.0)
    stop.remember(model, 1.7)  # passes: remembered
    torch.nn.init.constant_(model.weight, 5.0)
    stop.remember(model, 1.5)  # fails: not remembered
    assert not stop.check({"iteration": 5, "eval_monitor_mi": 1.6}), "at the threshold it does not fire"
    assert stop.check({"iteration": 10, "eval_monitor_mi": 1.59}) and stop.stopped_at == 10
    stop.restore(model)
    assert model.weight.item() == 1.0, "rolled back to the last state that passed"


def test_collapse_sign_and_claim_check():
    n = {"base_mi": 2.0, "aepo_bonus_mi": 1.0, "combined_bonus_mi": 1.9}
    assert ch12.collapsed(n, "aepo_bonus") and not ch12.collapsed(n, "combined_bonus")
    check = ch12.CLAIMS[0].check
    n = {"combined_bonus_minus_aepo": -0.02, "combined_minus_aepo": -0.02}
    assert check(n), "at the margin on both sides"
    assert not check(n | {"combined_bonus_minus_aepo": -0.021}), "the inducer cost more than AEPO's gains allow"
    assert not check(n | {"combined_minus_aepo": -0.021})
    # the parts that hold by construction are not part of the check
    assert check(n | {"aepo_bonus_collapsed": 0.0, "combined_bonus_collapsed": 1.0})
    numbers = {"combined_bonus_success": 0.5, "aepo_success": 0.9}
    assert ch12.derived_numbers(numbers) == {"combined_bonus_minus_aepo": pytest.approx(-0.4)}


def test_table_rows_by_hand():
    seeds = [
        {"grpo_success": 0.8, "grpo_mi": 2.0, "grpo_seconds_per_iteration": 1.0},
        {"grpo_success": 0.6, "grpo_mi": 1.0, "grpo_seconds_per_iteration": 3.0},
    ]
    (row,) = ch12.table_rows(seeds, ["grpo"])
    assert row == {"arm": "grpo", "success": pytest.approx(0.7), "low": 0.6, "high": 0.8, "mi": 1.5, "seconds": 2.0}


def small_config(**changes) -> ch12.Chapter12Config:
    config = ch12.preset("cpu")
    return dataclasses.replace(
        config, grpo=dataclasses.replace(config.grpo, iterations=2, eval_every=1),
        task=dataclasses.replace(config.task, eval_tasks=16), mi_samples=8, monitor_prompts=6,
        **{"monitor_every": 1, **changes},
    )  # fmt: skip


@pytest.mark.slow
def test_a_short_run_measures_every_claim_number():
    """Every arm for two iterations, with a stop that cannot fire (its threshold (1 - inf) x the base's monitor MI
    is -inf), so the MI-stop arms train all the way and `combined`, which only evaluates more often than
    `aepo_snr`, must make exactly `aepo_snr`'s updates (the stop's firing is `test_the_mi_stop_fires...`'s)."""
    results = ch12.run(0, small_config(gate_drop=math.inf))
    assert set(results["histories"]) == set(ch12.ARMS)
    numbers = ch12.claim_numbers(results)
    assert results["base"]["monitor_mi"] > 0, "a positive base MI: the threshold is -inf"
    for key, value in numbers.items():
        assert math.isfinite(value) or key.endswith("stopped_at"), key
        assert not key.endswith("stopped_at") or math.isnan(value), f"{key}: the stop fired"
    assert 0 < numbers["base_mi"] <= math.log(16) + 1e-6
    assert all(numbers[f"{arm}_iterations"] == 2 for arm in ch12.ARMS)
    assert {key.split("/")[0] for key in ch12.curves(results)} == set(ch12.ARMS)
    assert len(ch12.summary_lines(results)) == 1 + len(ch12.ARMS)
    losses = [[row["loss"] for row in results["histories"][arm] if "loss" in row] for arm in ("aepo_snr", "combined")]
    assert len(losses[0]) == 2 and losses[0] == losses[1], "the stop only evaluates: training is aepo_snr's"

    # The notebook's live subset: its arms' results are exactly the full run's (each arm reseeds), C12.1 measured.
    live = ch12.run(0, small_config(gate_drop=math.inf), arms=ch12.LIVE_ARMS)
    assert list(live["final"]) == list(ch12.LIVE_ARMS)
    for arm in ch12.LIVE_ARMS:
        same = {k: v for k, v in live["final"][arm].items() if k != "seconds_per_iteration"}
        full = {k: v for k, v in results["final"][arm].items() if k != "seconds_per_iteration"}
        assert same == pytest.approx(full, rel=0, abs=0, nan_ok=True), arm  # exact; NaN: the stop did not fire
    assert [claim.measured for claim in ch12.claims(live)] == [True]
    without = ch12.run(0, small_config(gate_drop=math.inf), arms=["grpo", "aepo"])
    assert [claim.status for claim in ch12.claims(without)] == [NOT_RUN_HERE]


def test_the_mi_stop_fires_and_rolls_back(monkeypatch):
    """With the threshold above the base's MI the stop fires at the first evaluation, before any update: the
    combined arm makes no update and its final policy is the base (same held-out numbers)."""
    config = small_config(gate_drop=-1.0)  # threshold: twice the base's monitor MI
    monkeypatch.setattr(ch12, "ARMS", {"combined": ch12.ARMS["combined"]})
    results = ch12.run(0, config)
    final, base = results["final"]["combined"], results["base"]
    assert final["stopped_at"] == 0 and final["iterations"] == 0
    assert final["success"] == base["success"] and final["mi"] == base["mi"]


def test_recorded_figure_shows_every_recorded_seed_with_readable_names():
    import matplotlib.pyplot as plt

    from course_lib.course import recorded

    seeds = recorded.seed_numbers(recorded.load("ch12"))
    fig = ch12.plot_recorded()
    success, mi, monitor = fig.axes[:3]
    assert [len(c.get_offsets()) for c in success.collections] == [len(seeds)] * len(ch12.ARMS)
    assert [t.get_text() for t in success.get_xticklabels()] == [ch12.ARM_NAMES[arm] for arm in ch12.ARMS]
    assert list(success.collections[4].get_offsets()[:, 1]) == [n["aepo_success"] for n in seeds]
    assert len(monitor.get_lines()) == 3 * len(seeds) + 1, "one line per recorded seed of three arms, and the stop's"
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "bonus: combined (each recorded seed)" in labels and not any("_" in label for label in labels)
    plt.close(fig)
