"""The survey's tasks on a real model (`tasks.real_model`): every task warm-starts a checkpoint with LoRA on its own
demonstrator and evaluates it on held-out problems, on a stand-in (a two-block Llama with a BPE tokenizer and ChatML)
in place of SmolLM2; the numbers are noise, the plumbing is the point."""

from __future__ import annotations

import pytest

from course_lib.tasks import real_model


@pytest.mark.parametrize("name", list(real_model.TASKS))
def test_every_task_warm_starts_and_evaluates(tiny_warm_start, llama_standin, name):
    numbers = real_model.warm_start_numbers(name, 0, tiny_warm_start, model=llama_standin)
    assert set(numbers) == {"success", "valid_rate", "turns", "loss_first", "loss_last", "warm_start_minutes",
                            "eval_minutes"}  # fmt: skip
    assert 0 <= numbers["success"] <= 1 and 0 <= numbers["valid_rate"] <= 1 and numbers["turns"] >= 1


def test_the_warm_start_adapts_only_the_top_blocks_and_samples_in_bf16(tiny_warm_start, llama_standin):
    model, _, config, history = real_model.warm_start(
        real_model.TASKS["calculator"], tiny_warm_start, 0, model=llama_standin
    )
    adapted = {name for name, p in model.named_parameters() if p.requires_grad}
    assert adapted and all(".layers.1." in name for name in adapted)
    assert config.sampling.precision == "bf16" and config.sampling.prompt_format.startswith("chat")
    assert config.eval_tasks == 4 and len(history) >= 1


def test_train_and_evaluate_trains_from_the_warm_start(tiny_warm_start, llama_standin):
    """Two GRPO iterations on the fast path from the warm start: numbers before and after, and the gain between."""
    from course_lib.rl.train import GRPOConfig

    grpo = GRPOConfig(iterations=2, prompts_per_iteration=2, group_size=2, learning_rate=1e-3, autocast="bf16")
    numbers = real_model.train_and_evaluate("arithmetic", 0, tiny_warm_start, grpo, model=llama_standin)
    assert numbers["gain"] == pytest.approx(numbers["after_success"] - numbers["before_success"])
    assert 0 <= numbers["after_invalid_rate"] <= 1 and numbers["minutes"] > 0


def test_train_and_evaluate_reports_the_tasks_extra_numbers(tiny_warm_start, llama_standin):
    """Exercise 16.3 reads the calculator's tool-call share before and after RL; a name the task's evaluation does
    not report is a KeyError, not a silent zero."""
    from course_lib.rl.train import GRPOConfig

    grpo = GRPOConfig(iterations=1, prompts_per_iteration=2, group_size=2, learning_rate=1e-3, autocast="bf16")
    numbers = real_model.train_and_evaluate(
        "calculator", 0, tiny_warm_start, grpo, model=llama_standin, extra=("code_ratio",)
    )
    assert 0 <= numbers["before_code_ratio"] <= 1 and 0 <= numbers["after_code_ratio"] <= 1
    with pytest.raises(KeyError, match="no_such_number"):
        real_model.train_and_evaluate("calculator", 0, tiny_warm_start, grpo, model=llama_standin,
                                      extra=("no_such_number",))  # fmt: skip


@pytest.mark.parametrize("name", ["two_hop", "calculator", "lake"])
def test_each_tasks_premises_are_measured_on_its_warm_start(tiny_warm_start, llama_standin, name):
    """The premises' numbers come out with their keys, `scored` counted, and the calculator's two arms differ only
    in the calculator (the reach is what the success without it leaves)."""
    numbers = real_model.warm_start_numbers(name, 0, tiny_warm_start, model=llama_standin, premises=True)
    premises = {key for key in numbers if "_" in key and key.split("_")[0] in ("entropy", "branching", "calculator",
                                                                                  "reasoning")}  # fmt: skip
    assert premises
    if name == "calculator":
        assert numbers["calculator_reach"] == pytest.approx(1 - numbers["calculator_success_off"])
        assert numbers["calculator_on_minus_off"] == pytest.approx(
            numbers["calculator_success_on"] - numbers["calculator_success_off"]
        )
    if name == "two_hop":
        assert numbers["branching_reach"] == pytest.approx(1 - numbers["branching_uniform_top3_share"])
        assert numbers["entropy_scored"] >= 0
    if name == "lake":
        assert numbers["reasoning_scored"] >= 0


@pytest.mark.parametrize("comparison", list(real_model.COMPARISONS))
def test_each_comparisons_arms_train_from_one_warm_start(tiny_warm_start, llama_standin, comparison):
    """Every arm of a comparison trains from the same warm start at the same budget and is evaluated after; the
    difference is the second arm's success minus the first's."""
    rl = {"iterations": 1, "prompts_per_iteration": 2, "group_size": 4, "learning_rate": 1e-3}
    numbers = real_model.paired_arms(comparison, 0, tiny_warm_start, rl, model=llama_standin)
    baseline, method = real_model.COMPARISONS[comparison][1]
    assert numbers["difference"] == pytest.approx(numbers[f"{method}_success"] - numbers[f"{baseline}_success"])
    assert 0 <= numbers["before_success"] <= 1 and numbers[f"{method}_minutes"] > 0


@pytest.mark.parametrize("arm", ["grpo", "arpo"])
def test_an_arm_trained_alone_gets_what_it_gets_beside_the_other(tiny_warm_start, llama_standin, arm):
    """The measured exercise trains one arm of one seed: its numbers are that arm's in the comparison's record."""
    rl = {"iterations": 1, "prompts_per_iteration": 2, "group_size": 4, "learning_rate": 1e-3}
    both = real_model.paired_arms("arpo", 2, tiny_warm_start, rl, model=llama_standin)
    alone = real_model.train_arms("arpo", 2, tiny_warm_start, rl, model=llama_standin, arms=[arm])
    assert set(alone) == {"before_success", f"{arm}_success", f"{arm}_invalid_rate", f"{arm}_minutes"}
    assert {k: v for k, v in alone.items() if "minutes" not in k} == {k: both[k] for k in alone if "minutes" not in k}
    with pytest.raises(ValueError, match="not \\['gigpo'\\]"):
        real_model.train_arms("arpo", 2, tiny_warm_start, rl, model=llama_standin, arms=["gigpo"])
