"""Chapter 07 (GiGPO): the demonstrator, the arms, the step-group bins, the claims' numbers, and the
negative control's exactness on a short run with the committed base."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from course_lib import data
from course_lib.chapters import ch07_gigpo as ch
from course_lib.chapters import command
from course_lib.envs.key_door import ACTIONS, KeyDoorEnv, expert_action
from course_lib.tasks import key_door_grid


def test_demonstrations_are_step_prompts_of_a_noisy_expert():
    """Observation -> one action word and the stop tag; about 30% random actions (expert otherwise)."""
    config = ch.Chapter07Config()
    texts = ch.demonstration_texts(200, seed=3, config=config)
    env = KeyDoorEnv()
    agree = 0
    for prompt, completion in texts:
        action, stop = completion.split()
        assert action in ACTIONS and stop == key_door_grid.STOP and prompt.startswith("at r")
    # replay the episodes: the share of steps that were the expert's is 0.7 + 0.3 / 6, within sampling noise
    episodes = iter(texts)
    for task_seed in ch.demonstration_seeds(200, seed=3):
        env.reset(seed=task_seed)
        while not env.done:
            prompt, completion = next(episodes)
            assert prompt == env.transcript.observations[-1]
            agree += completion.split()[0] == expert_action(env)
            env.step(completion.split()[0])
    share = agree / len(texts)
    assert abs(share - (0.7 + 0.3 / 6)) < 0.03, share


def test_arms_differ_only_in_their_estimator_settings():
    config = ch.Chapter07Config()
    arms = {arm: ch.arm_config(config, arm) for arm in ch.ARMS}
    assert (arms["grpo"].advantage, arms["gigpo"].advantage) == ("grpo", "gigpo")
    assert arms["gigpo"].gigpo.gamma == 0.95 and arms["gigpo_gamma1"].gigpo.gamma == 1.0
    assert arms["gigpo"].scale_by_std and not arms["gigpo_mean"].scale_by_std
    budget = {
        (c.iterations, c.prompts_per_iteration, c.group_size, c.learning_rate, c.rollout_mode) for c in arms.values()
    }
    assert budget == {(20, 4, 8, 1e-3, "step")}
    assert ch.arm_config(config, "gigpo", 5).iterations == 5


def test_noisy_factory_gives_each_environment_its_own_noise_id():
    factory = ch.EnvFactory("train", ch.Chapter07Config(), "noisy")
    made = [factory() for _ in range(3)]
    assert [env.noise_id for env in made] == [0, 1, 2] and {env.view for env in made} == {"noisy"}
    assert ch.EnvFactory("test", ch.Chapter07Config())().view == "full"


def test_size_bins():
    assert [ch.size_bin(s, 8) for s in (1, 2, 7, 8, 9, 16, 17, 40)] == [
        "1",
        "2-7",
        "2-7",
        "8",
        "9-16",
        "9-16",
        ">16",
        ">16",
    ]


def fake_results(noisy_gigpo_extra: dict | None = None) -> dict:
    """Hand-made run results: final successes, histograms and timings with known claim numbers."""
    final = {"grpo": 0.70, "gigpo": 0.78, "gigpo_gamma1": 0.72, "gigpo_mean": 0.77}
    timed = {"time_rollout": 0.5, "time_advantage": 0.02, "time_update": 0.48}
    noisy = [{"iteration": 0, "success": 0.5, "loss": 0.1, **timed}, {"iteration": 1}]
    noisy_gigpo = [{**noisy[0], "step_group_singleton_share": 1.0, **(noisy_gigpo_extra or {})}, noisy[1]]
    histories = {arm: [{"iteration": 0, **timed, "time_advantage": 0.03 if arm != "grpo" else 0.02}] for arm in final}
    return {
        "base": {"success": 0.44},
        "final": {arm: {"eval_success": value} for arm, value in final.items()},
        "histories": {**histories, "noisy_grpo": noisy, "noisy_gigpo": noisy_gigpo},
        "histogram_base": {"1": 0.0, "2-7": 0.2, "8": 0.0, "9-16": 0.4, ">16": 0.4},
        "histogram_trained": {"1": 0.0, "2-7": 0.2, "8": 0.5, "9-16": 0.2, ">16": 0.1},
    }


def test_claim_numbers_and_verdicts_on_hand_made_results():
    numbers = ch.claim_numbers(fake_results())
    assert numbers["gigpo_minus_grpo"] == pytest.approx(0.08)
    assert numbers["noisy_runs_identical"] == 1.0 and numbers["noisy_singleton_share"] == 1.0
    assert (numbers["loop_share_base"], numbers["loop_share_trained"]) == pytest.approx((0.8, 0.3))
    assert numbers["gigpo_extra_share"] == pytest.approx(0.01 / 1.01)
    verdicts = {c.id: c.passed for c in ch.claims(fake_results())}
    assert verdicts == {"C7.1": True, "C7.2": True, "C7.3": True, "C7.4": True}  # the per-seed margin
    # a noisy GiGPO run that moved a single number is not identical to GRPO's: C7.2 fails
    moved = ch.claims(fake_results({"loss": 0.1000001}))
    assert {c.id: c.passed for c in moved}["C7.2"] is False


def test_confirmation_prints_the_fresh_seeds_lead_alone(monkeypatch, capsys):
    """`--confirm` (without `--record`): each seed's own numbers, and the lead's t-interval over the seeds it ran and
    nothing else (C7.1's verdict pools them with the chapter's seeds: `course_lib.lab.verdicts`)."""
    leads = {10: 0.08, 11: 0.02, 12: 0.05}

    def fake_run(seed):
        results = fake_results()
        results["final"]["gigpo"] = {"eval_success": 0.70 + leads[seed]}
        return results | {"minutes": 0.1}

    monkeypatch.setattr(ch, "run", fake_run)
    per_seed = ch.confirm([10, 11, 12])
    assert [n["gigpo_minus_grpo"] for n in per_seed] == pytest.approx([0.08, 0.02, 0.05])
    printed = capsys.readouterr().out
    half = 4.302653 * 0.03 / 3**0.5  # sd 0.03, t(0.975, 2)
    assert f"+0.050 [{0.05 - half:+.3f}, {0.05 + half:+.3f}] over 3 seeds" in printed
    assert "holds on 2 of 3 fresh seeds" in printed  # 0.08 and 0.05 (float: 0.75 - 0.70)


@pytest.fixture(scope="module")
def base():
    return data.load_base(ch.BASE_NAME)


@pytest.mark.parametrize("view", ["noisy", "full"])
def test_gigpo_equals_grpo_exactly_when_no_observation_repeats(base, view):
    """Two short runs from the committed base, same seed: in the noisy view GiGPO's history is GRPO's, number
    for number; in the full view, where states repeat, it is not (so the equality is not vacuous)."""
    model, tokenizer = base
    config = ch.Chapter07Config()
    config.grpo = dataclasses.replace(config.grpo, prompts_per_iteration=2, group_size=4)
    histories = {}
    for arm in ("grpo", "gigpo"):
        grpo = dataclasses.replace(ch.arm_config(config, arm, 2), eval_every=100)
        trained = copy.deepcopy(model)
        histories[arm] = key_door_grid.train_grpo(
            trained, tokenizer, ch.EnvFactory("train", config, view), config.sampling, grpo, 0
        )
    gigpo_steps = [r for r in histories["gigpo"] if "step_group_singleton_share" in r]
    same = ch.without_times(histories["grpo"]) == ch.without_times(ch.strip_step_stats(histories["gigpo"]))
    if view == "noisy":
        assert all(r["step_group_singleton_share"] == 1.0 for r in gigpo_steps) and same
    else:
        assert min(r["step_group_singleton_share"] for r in gigpo_steps) < 1.0 and not same


def test_size_bins_follow_the_group_size():
    assert ch.size_bins(8) == ch.SIZE_BINS == ("1", "2-7", "8", "9-16", ">16")
    assert [ch.size_bin(s, 4) for s in (1, 3, 4, 5, 8, 9)] == ["1", "2-3", "4", "5-8", "5-8", ">8"]


def test_a_fork_on_another_environment_runs_and_drops_the_control_it_cannot_have(number_line_base):
    """Chapter 07 on the template environment (`number_line`) with a base folder of its own, groups of 4 and the
    environment's stop tag: every arm trains, the noisy-view pair is not run, and C7.2 prints "not applicable" with
    the reason while every other claim gets a verdict."""
    from course_lib.course.claims import NOT_APPLICABLE
    from course_lib.engine.rollout import SamplingConfig

    config = ch.preset("cpu")
    config = dataclasses.replace(
        config,
        env_name="number_line",
        base=number_line_base,
        sampling=SamplingConfig(max_turn_tokens=4, max_total_tokens=40, stop_tags=("</move>",)),
        grpo=dataclasses.replace(config.grpo, iterations=1, prompts_per_iteration=2, group_size=4, eval_every=1),
        eval_tasks=8,
    )
    results = ch.run(0, config)
    assert set(results["histories"]) == set(ch.ARMS), "no noisy-view pair"
    assert set(results["histogram_base"]) == set(ch.size_bins(4))
    verdicts = {claim.id: claim for claim in ch.claims(results)}
    assert verdicts["C7.2"].status.startswith(NOT_APPLICABLE) and "number_line has none" in verdicts["C7.2"].status
    assert all(verdicts[i].measured for i in ("C7.1", "C7.3", "C7.4"))
    with pytest.raises(ValueError, match="noisy view is key_door's"):
        ch.EnvFactory("train", config, "noisy")()


def test_the_command_prints_not_applicable_for_a_fork(number_line_base, capsys):
    """Run as a command with overrides, a fork onto number_line prints C7.2 as not applicable, not as a failure."""

    sets = ["env_name=number_line", f"base={number_line_base}", "sampling.stop_tags=['</move>']", "grpo.iterations=1",
            "grpo.prompts_per_iteration=2", "grpo.group_size=4", "grpo.eval_every=1", "eval_tasks=8"]  # fmt: skip
    argv = ["--seeds", "0", *[part for text in sets for part in ("--set", text)]]
    command.main(ch.CHAPTER, argv)
    line = "  C7.2 not applicable (the noisy view is key_door's; number_line has none): when no observation repeats"
    assert line in capsys.readouterr().out


@pytest.mark.parametrize("mode", ["step", "trajectory"])
def test_evaluation_uses_the_rollout_mode_training_uses(monkeypatch, mode):
    """Issue 42, item 2: a run trained in `grpo.rollout_mode` is evaluated in that mode too (`train.py`'s configs
    refuse the split elsewhere); the chapter's own config evaluates in step mode, as before."""
    seen = {}

    def evaluate_policy(model, tokenizer, make_env, seeds, sampling, seed, rollout_mode="trajectory", **kwargs):
        seen["mode"] = rollout_mode
        return {"success": 0.0}, []

    monkeypatch.setattr(key_door_grid, "evaluate_policy", evaluate_policy)
    monkeypatch.setattr(key_door_grid, "test_seeds", lambda count, config: [0])
    config = ch.Chapter07Config()
    assert config.grpo.rollout_mode == "step"
    config = dataclasses.replace(config, grpo=dataclasses.replace(config.grpo, rollout_mode=mode))
    ch.evaluate(None, None, config, seed=1)
    assert seen["mode"] == mode


def test_a_fork_takes_its_environments_stop_tags(number_line_base, capsys):
    """Issue 42, item 1, chapter 07's side: a fork whose sampling still stops at key_door's `</action>` takes its
    environment's tags; the chapter's own config is unchanged."""
    own = ch.preset("cpu")
    assert ch.on_environment(own) == own
    fork = dataclasses.replace(own, env_name="number_line", base=number_line_base)
    assert ch.on_environment(fork).sampling == dataclasses.replace(own.sampling, stop_tags=("</move>",))
    assert "number_line's stop_tags" in capsys.readouterr().out


def test_every_arm_reaches_the_trackers_under_a_name_of_its_own():
    """Issue 42, item 16: `gigpo_gamma1` and `gigpo_mean` reached trackers as `3-gigpo` and `4-gigpo`, the same method
    as `gigpo`; the method's label names what they change (progress bars, tracker runs, checkpoint folders)."""
    from course_lib.rl.train import method_label

    labels = {arm: method_label(ch.arm_config(ch.Chapter07Config(), arm)) for arm in ch.ARMS}
    assert labels == {
        "grpo": "grpo [step mode]",
        "gigpo": "gigpo [step mode]",
        "gigpo_gamma1": "gigpo [step mode, gamma 1]",
        "gigpo_mean": "gigpo [step mode, no std]",
    }


@pytest.mark.parametrize("scale", ["cpu", "gpu"])
def test_the_chapters_own_sampling_resolves_to_todays(scale):
    """Issue 42: chapter 07's own config resolves to itself, with today's stop tag and caps."""
    from course_lib.engine.rollout import SamplingConfig

    own = ch.preset(scale)
    assert ch.on_environment(own) is own
    assert own.sampling == SamplingConfig(
        temperature=1.0, max_turn_tokens=3, max_total_tokens=40, stop_tags=("</action>",)
    )
