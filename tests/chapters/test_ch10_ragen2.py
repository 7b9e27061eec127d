"""Chapter 10: the arms' settings, the claim checks and pooled Spearman by hand, the base's MI on held-out maps,
the gradient terms at the reference policy, and a short run of every arm."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

from course_lib import data
from course_lib.chapters import ch10_ragen2 as ch10


def test_arms_change_only_what_they_name():
    config = ch10.Chapter10Config()
    plain = ch10.arm_config(config, "grpo")
    assert (plain.entropy_coef, plain.batch_filter, plain.kl_coef, plain.iterations) == (0.0, "none", 0.0, 30)
    entropy = ch10.arm_config(config, "entropy")
    assert (entropy.entropy_coef, entropy.entropy_scope, entropy.entropy_rows) == (0.1, "reasoning", "all")
    assert dataclasses.replace(entropy, entropy_coef=0.0) == plain
    zero_rv = ch10.arm_config(config, "entropy_zero_rv")
    assert dataclasses.replace(zero_rv, entropy_rows="all") == entropy
    snr = ch10.arm_config(config, "entropy_snr")
    assert dataclasses.replace(snr, batch_filter="none") == entropy
    assert (snr.filter.top_p, snr.filter.mode, snr.filter.include_zero) == (0.9, "linear", False)
    assert dataclasses.replace(ch10.arm_config(config, "grpo_snr"), batch_filter="none") == plain


def test_step_stats_by_hand():
    history = [
        {"iteration": 0, "eval_success": 0.2},
        {"iteration": 0, "time_rollout": 1.0, "time_advantage": 0.5, "time_update": 0.5, "kept_rows": 0.5},
        {"iteration": 1, "time_rollout": 2.0, "time_advantage": 0.0, "time_update": 0.0, "kept_rows": 0.0,
         "skipped_update": 1.0},
        {"iteration": 2, "eval_success": 0.3},
    ]  # fmt: skip
    assert ch10.step_stats(history) == {
        "seconds_per_step": 2.0,
        "update_seconds": 0.25,
        "kept_rows": 0.25,
        "skipped_steps": 1.0,
    }


def claim(claim_id):
    return next(c for c in ch10.CLAIMS if c.id == claim_id)


def test_template_collapse_check_needs_input_dependence_down():
    n = {"base_entropy": 0.17, "base_conditional_entropy": 0.25, "base_mi": 1.6, "retrieval_halfway": 0.16,
         "entropy_entropy": 0.30, "entropy_conditional_entropy": 0.6, "entropy_mi": 0.8,
         "entropy_retrieval_accuracy": 0.16}  # fmt: skip
    check = claim("C10.1").check
    assert check(n), "at the edges: MI exactly half, retrieval exactly halfway"
    assert not check(n | {"entropy_mi": 0.81})
    assert not check(n | {"entropy_retrieval_accuracy": 0.17})
    # entropy rising under an entropy bonus holds by construction: the chapter shows it, the check does not count it
    assert check(n | {"entropy_entropy": 0.16, "entropy_conditional_entropy": 0.2})


def test_predictor_and_filter_checks():
    predictors = claim("C10.2").check
    assert predictors({"spearman_abs_gap": 0.25}), "at the margin"
    assert not predictors({"spearman_abs_gap": 0.2})
    snr = claim("C10.3").check
    assert snr({"snr_mi_gain": 0.1, "snr_success_gain": 0.01, "snr_step_saving": 0.2})
    assert not snr({"snr_mi_gain": 0.1, "snr_success_gain": 0.0, "snr_step_saving": 0.2}), "a tie is no raise"
    assert snr({"snr_mi_gain": 0.1, "snr_success_gain": 0.1, "snr_step_saving": -0.01}), "cost is shown, not checked"


def test_bucket_check():
    n = {"bucket_zero_task": 0.0, "bucket_zero_entropy": 0.2, "bucket_zero_kl": 0.5, "bucket_low_task_centred": 0.05,
         "bucket_high_task_centred": 0.08, "bucket_low_entropy_per_task": 4.0, "bucket_high_entropy_per_task": 3.0,
         "bucket_low_kl_per_task": 20.0, "bucket_high_kl_per_task": 6.0}  # fmt: skip
    check = claim("C10.4").check
    assert check(n)
    assert check(n | {"bucket_zero_task": 1e-3}), "the zero bucket holds by construction: not part of the check"
    assert not check(n | {"bucket_low_task_centred": 0.09})
    assert not check(n | {"bucket_low_entropy_per_task": 2.0})
    assert not check(n | {"bucket_low_kl_per_task": 5.0})


def hand_results() -> dict:
    """A seed's results by hand: MI ranks the five runs as success does and entropy the other way round; the SNR
    arm is a quarter cheaper per step than the `entropy` arm."""
    final_mi = {"grpo": 1.7, "entropy": 0.3, "entropy_zero_rv": 0.5, "entropy_snr": 1.0, "grpo_snr": 1.6}
    final_success = {"grpo": 0.3, "entropy": 0.1, "entropy_zero_rv": 0.15, "entropy_snr": 0.2, "grpo_snr": 0.25}
    final_entropy = {"grpo": 0.13, "entropy": 0.35, "entropy_zero_rv": 0.3, "entropy_snr": 0.25, "grpo_snr": 0.14}
    stats = {"mi": 1.6, "retrieval_accuracy": 0.3, "conditional_entropy": 0.25, "entropy": 0.17, "success": 0.2,
             "reasoning_tracks_state": 0.6, "first_reasoning_tracks_state": 0.9, "invalid_rate": 0.02}  # fmt: skip
    final = {
        arm: {f"eval_{k}": v for k, v in stats.items()}
        | {"eval_mi": final_mi[arm], "eval_success": final_success[arm], "eval_entropy": final_entropy[arm]}
        for arm in ch10.ARMS
    }
    steps = {arm: {"seconds_per_step": 1.0 if arm == "entropy" else 0.75, "update_seconds": 0.3, "kept_rows": 1.0,
                   "skipped_steps": 0.0} for arm in ch10.ARMS}  # fmt: skip
    terms = {name: {"rows": 8.0, "groups": 1.0, "task": 0.1, "task_centred": centred, "entropy": 0.2, "kl": 0.4}
             for name, centred in (("zero", 0.0), ("low", 0.05), ("high", 0.1))}  # fmt: skip
    histories = {arm: [{"iteration": 0, **final[arm]}] for arm in ch10.ARMS}
    return {"base": stats | {"chance": 1 / 128}, "final": final, "steps": steps, "gradient_terms": terms,
            "histories": histories, "minutes": 0.1}  # fmt: skip


def test_claim_numbers_and_pooled_spearman_by_hand():
    """Spearman over the five runs from their final numbers, the SNR differences, and the bucket ratios."""
    results = hand_results()
    n = ch10.claim_numbers(results)
    assert n["spearman_mi"] == pytest.approx(1.0) and n["spearman_entropy"] == pytest.approx(-1.0)
    assert n["spearman_gap"] == pytest.approx(2.0) and n["spearman_abs_gap"] == pytest.approx(0.0)
    assert n["grpo_mi_change"] == pytest.approx(0.1) and n["grpo_snr_mi_change"] == pytest.approx(0.0)
    assert n["snr_mi_gain"] == pytest.approx(0.7) and n["snr_success_gain"] == pytest.approx(0.1)
    assert n["snr_step_saving"] == pytest.approx(0.25)
    assert n["retrieval_halfway"] == pytest.approx((0.3 + 1 / 128) / 2)
    assert n["bucket_low_kl_per_task"] == pytest.approx(8.0) and n["bucket_high_entropy_per_task"] == pytest.approx(2)
    pooled = ch10.pooled_spearman([n, n | {"grpo_success": 0.05}])
    assert pooled["runs"] == 10
    assert -1 <= pooled["spearman_mi"] < 1, "one run out of order breaks the perfect ranking"


@pytest.fixture(scope="module")
def base_and_tokenizer():
    return data.load_base(ch10.BASE_NAME)


def test_base_reasoning_depends_on_its_input(base_and_tokenizer):
    """The premise: on distinct held-out maps the base's first reasoning identifies its map far above chance."""
    model, tokenizer = base_and_tokenizer
    config = dataclasses.replace(ch10.preset("cpu"), eval_tasks=32, mi_samples=32)
    stats = ch10.evaluate(model, tokenizer, config, seed=1)
    # a map whose first turn breaks the format has no reasoning, and drops out of the prompts
    assert 28 <= stats["prompts"] <= 32 and stats["chance"] == pytest.approx(1 / stats["prompts"])
    assert stats["retrieval_accuracy"] >= 4 * stats["chance"]
    # a first reasoning names the start cell (one of 16) and a move, so MI is capped near log 16 = 2.8, not log 32
    assert 1.0 <= stats["mi"] <= math.log(stats["prompts"])
    assert stats["marginal_entropy"] == pytest.approx(stats["mi"] + stats["conditional_entropy"], abs=1e-6)


def test_gradient_terms_at_the_reference(base_and_tokenizer):
    """At the reference policy KL's gradient vanishes; the task term vanishes in zero-std groups; rows add up."""
    model, tokenizer = base_and_tokenizer
    config = dataclasses.replace(ch10.preset("cpu"), bucket_maps=8)
    terms = ch10.gradient_terms(model, copy.deepcopy(model), tokenizer, config, seed=0)
    assert set(terms) == {"zero", "low", "high"}
    present = list(terms.values())
    assert all(t["rows"] > 0 for t in present), "this batch (seed 0, 8 maps) fills every bucket"
    assert sum(t["rows"] for t in present) == 8 * config.grpo.group_size
    for t in present:
        assert t["kl"] == pytest.approx(0.0, abs=1e-6) and t["entropy"] > 0
    assert terms["zero"]["task"] == 0.0 and terms["zero"]["task_centred"] == 0.0
    assert all(p.grad is None for p in model.parameters()), "the model's gradients are left untouched"


def test_gpu_preset_is_larger():
    cpu, gpu = ch10.preset("cpu"), ch10.preset("gpu")
    assert gpu.grpo.iterations > cpu.grpo.iterations and gpu.eval_tasks > cpu.eval_tasks
    assert (gpu.grpo.entropy_scope, gpu.grpo.filter) == (cpu.grpo.entropy_scope, cpu.grpo.filter), "same arms"


def expected_finite(n: dict) -> dict[str, bool]:
    """Which Spearman and bucket numbers may be NaN, and when: a Spearman correlation is undefined exactly when one
    side is constant over the five runs (no ranking to compare), a gap when either of its correlations is; a bucket's
    numbers when this seed's batch put no group in it, its ratios also when its task gradient is 0. Every other
    claim number must be finite (keys absent from the answer)."""

    def varies(name: str) -> bool:
        return len({n[f"{arm}_{name}"] for arm in ch10.ARMS}) > 1

    spearman = {d: varies("success") and varies(d) for d in ("mi", "entropy", "conditional_entropy")}
    out = {f"spearman_{d}": ok for d, ok in spearman.items()}
    out |= dict.fromkeys(("spearman_gap", "spearman_abs_gap"), spearman["mi"] and spearman["entropy"])
    unknown = {key for key in n if key.startswith("spearman_")} - set(out)
    assert not unknown, f"say when {unknown} may be NaN"
    for key in n:
        if key.startswith("bucket_"):
            name = key.split("_")[1]
            filled = math.isfinite(n[f"bucket_{name}_rows"])
            out[key] = filled and (not key.endswith("_per_task") or n[f"bucket_{name}_task_centred"] > 0)
    return out


def test_spearman_is_nan_exactly_when_a_side_is_constant():
    """Five runs of equal success rank nothing: every correlation and both gaps are NaN; with success ordered but
    MI equal in every run, MI's correlation (and the gaps) are NaN and entropy's is still finite."""
    results = hand_results()
    flat = copy.deepcopy(results)
    for arm in ch10.ARMS:
        flat["final"][arm]["eval_success"] = 0.2
    n = ch10.claim_numbers(flat)
    assert all(math.isnan(n[key]) for key in n if key.startswith("spearman_"))
    assert not any(expected_finite(n)[key] for key in n if key.startswith("spearman_"))
    same_mi = copy.deepcopy(results)
    for arm in ch10.ARMS:
        same_mi["final"][arm]["eval_mi"] = 1.0
    n = ch10.claim_numbers(same_mi)
    assert math.isnan(n["spearman_mi"]) and math.isnan(n["spearman_gap"]) and math.isnan(n["spearman_abs_gap"])
    assert n["spearman_entropy"] == pytest.approx(-1.0)
    assert math.isnan(n["spearman_conditional_entropy"]), "the hand-made runs share their conditional entropy too"
    finite = expected_finite(n)
    assert all(math.isfinite(n[key]) == finite.get(key, True) for key in n)


@pytest.mark.slow
def test_a_short_run_measures_every_claim_number():
    """Two iterations of every arm: every claim number is finite, the SNR arms kept part of the batch, the samples
    and curves are there."""
    config = ch10.preset()
    config = dataclasses.replace(
        config, grpo=dataclasses.replace(config.grpo, iterations=2, eval_every=1), eval_tasks=16, mi_samples=8,
        bucket_maps=4,
    )  # fmt: skip
    results = ch10.run(0, config)
    assert set(results["histories"]) == set(ch10.ARMS)
    numbers = ch10.claim_numbers(results, config)
    finite = expected_finite(numbers)
    for key, value in numbers.items():
        assert math.isfinite(value) == finite.get(key, True), (key, value)
    assert "kept_rows" in results["histories"]["entropy_snr"][0] and "kept_rows" not in results["histories"]["grpo"][0]
    assert len(results["samples"]["base"]) == 6 and set(results["samples"]) == {"base", "entropy", "entropy_snr"}
    assert {key.split("/")[0] for key in ch10.curves(results)} == set(ch10.ARMS)
    assert any(line.startswith("zero") for line in ch10.bucket_lines(results))
    base = results["trajectories"]["base"]
    maps = ch10.distinct_start_maps(base, 4)
    assert len({base[m].anchors[0][1] for m in maps}) == len(maps) == 4
    posterior, labels = ch10.cross_scores(results["base_model"], results["tokenizer"], base, maps)
    assert posterior.shape == (len(labels), len(labels)) and torch.allclose(
        posterior.sum(1), torch.ones(len(labels), dtype=posterior.dtype)
    )


def test_no_bonus_lines_count_the_runs_whose_mi_rose():
    n = ch10.claim_numbers(hand_results())
    lines = ch10.no_bonus_lines({0: n, 3: n | {"grpo_mi_change": -0.2}})
    assert lines[0].startswith("seed 0: base MI 1.600") and "GRPO 1.700 (+0.100)" in lines[0]
    assert lines[1].startswith("seed 3:") and "(-0.200)" in lines[1]
    assert lines[-1] == "MI rose in 1 of 4 runs without the entropy bonus", "grpo_snr's change is 0: no rise"


def test_readable_figures_draw_every_recorded_seed():
    import matplotlib

    matplotlib.use("Agg")
    from course_lib.course import recorded

    seeds = recorded.seed_numbers(recorded.load("ch10"))
    assert set(ch10.ARM_LABELS) == set(ch10.ARMS)
    fig = ch10.plot_recorded_predictors(seeds)
    mi_panel = fig.axes[0]
    assert len(mi_panel.collections) == len(ch10.ARMS)
    for collection, arm in zip(mi_panel.collections, ch10.ARM_LABELS, strict=True):
        points = collection.get_offsets()
        assert [tuple(p) for p in points] == [(n[f"{arm}_mi"], n[f"{arm}_success"]) for n in seeds]
    assert f"entropy bonus ({len(seeds)} recorded seeds)" in [t.get_text() for t in fig.legends[0].get_texts()]
    fig = ch10.plot_recorded_gradient_terms(seeds)
    bars = fig.axes[0].patches
    assert len(bars) == 3 * len(ch10.BUCKET_TERMS)
    low_task = sum(n["bucket_low_task"] for n in seeds) / len(seeds)
    assert bars[1].get_height() == pytest.approx(low_task)  # first term (task), second bucket (low)


def test_label_arms_renames_keys_only():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.set_title("entropy_zero_rv")
    ax.plot([0, 1], [0, 1], label="grpo_snr")
    ax.plot([0, 1], [1, 0], label="chance")
    ch10.label_arms(fig)
    assert ax.get_title() == "bonus on zero-RV groups"
    assert [line.get_label() for line in ax.get_lines()] == ["GRPO + SNR filter", "chance"]
    plt.close(fig)
