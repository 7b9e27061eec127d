"""The survey's methods under TRL's `GRPOTrainer` (`course_lib.integrations.trl_methods`, `trl_rollouts`,
`trl_chapters`, `trl_monitor`): on the same episodes, TRL's batch, advantages, loss and gradients are the course's
(`course_lib.rl.seams`, `tree_rollout`, `diagnostics.MIStop`), and the chapter 07 and 08 commands train."""

from __future__ import annotations

import copy
import dataclasses
import math
import re

import pytest
import torch
from transformers import TrainerCallback

from course_lib import data
from course_lib.engine.rollout import RolloutEngine, collate
from course_lib.engine.tree_rollout import sample_trees
from course_lib.integrations import course_trl, trl_chapters, trl_checks
from course_lib.integrations.trl_methods import CourseMethodTrainer
from course_lib.integrations.trl_monitor import MIRollback
from course_lib.models import token_logprobs
from course_lib.rl import seams
from course_lib.tasks import two_hop_search


@pytest.fixture(scope="module")
def ch07():
    task, _ = trl_chapters.chapter_setup("07")
    return data.load_base(task.base)


@pytest.fixture(scope="module")
def ch08():
    task, _ = trl_chapters.chapter_setup("08")
    return data.load_base(task.base)


def settings(prompts: int = 2, group: int = 4, steps: int = 1, seed: int = 0) -> course_trl.TRLSettings:
    return course_trl.TRLSettings(steps=steps, prompts=prompts, group=group, seed=seed)


def generate(trainer: CourseMethodTrainer) -> dict:
    """One batch of TRL's own generate-and-score path on the first prompts of its dataset."""
    s = trainer.args
    prompts = list(trainer.train_dataset["prompt"])[: s.per_device_train_batch_size // s.num_generations]
    return trainer._generate_and_score_completions([{"prompt": p} for p in prompts for _ in range(s.num_generations)])


def course_config(chapter: str, method: str, s: course_trl.TRLSettings, **changes):
    _, own = trl_chapters.chapter_setup(chapter)
    return dataclasses.replace(trl_chapters.method_config(own, method, s), **changes)


def gradient(model, loss: torch.Tensor) -> torch.Tensor:
    """d loss / d parameters, flattened."""
    model.zero_grad()
    loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def compare_losses(trainer, model, out, batch, advantages: torch.Tensor) -> tuple[float, float]:
    """`trl_checks.loss_gaps` of TRL's loss against the course's clipped loss on `batch`, asserted small."""
    value_gap, gradient_gap = trl_checks.loss_gaps(trainer, model, out, batch, advantages)
    assert value_gap < 1e-6 and gradient_gap < 1e-4, (value_gap, gradient_gap)
    return value_gap, gradient_gap


def assert_rows_match(out: dict, rows, max_diff: dict) -> None:
    """TRL's tensors row by row against the course's rows (left-padded prompt, right-padded completion)."""
    for i, row in enumerate(rows):
        start = row.prefix_length(0)
        prompt = out["prompt_ids"][i][out["prompt_mask"][i].bool()].tolist()
        length = len(row.token_ids) - start
        assert prompt == row.token_ids[:start] and 1 not in row.loss_mask[:start]  # the prompt is never trained
        assert out["completion_ids"][i, :length].tolist() == row.token_ids[start:]
        assert out["completion_mask"][i].sum() == length
        loss_mask = (out["completion_mask"][i] * out["tool_mask"][i])[:length]
        assert loss_mask.tolist() == row.loss_mask[start:]
        sampled = out["old_per_token_logps"][i, :length] - torch.tensor(row.logprobs[start:])
        max_diff["logprobs"] = max(max_diff.get("logprobs", 0.0), float(sampled.abs().max()))


def test_gigpo_step_mode_rebuilds_the_step_rows_and_gives_the_course_advantages_and_loss(ch07):
    """Chapter 07 in step mode: TRL's batch is every step row of the episodes (not one per episode), its advantages
    are `seams.gigpo` on the course's step-mode `RolloutBatch` (the pooled GRPO episode part included) and its loss is
    the course's clipped token mean on them."""
    model, tokenizer = copy.deepcopy(ch07[0]), ch07[1]
    episodes: list = []
    trainer = trl_chapters.method_trainer("07", "gigpo", settings(), model, tokenizer, keep=episodes)
    out = generate(trainer)
    rows = [row for episode in episodes for row in episode.rows]
    assert len(episodes) == 8 and out["completion_ids"].shape[0] == len(rows) > len(episodes)
    diff: dict = {}
    assert_rows_match(out, rows, diff)
    batch = collate(rows, tokenizer.pad_token_id)
    course = trainer.course
    advantages, _ = seams.gigpo(batch, course)
    for i, row in enumerate(rows):
        start, length = row.prefix_length(0), len(row.token_ids) - row.prefix_length(0)
        assert torch.equal(out["advantages"][i, :length], advantages[i, start : start + length])  # bit for bit
    assert out["num_items_in_batch"] == batch.loss_mask.sum()
    # GiGPO's step part acts on these episodes (the advantages are not GRPO's alone) ...
    grpo = seams.grpo(batch, course)[0][:, None] * batch.loss_mask
    assert not torch.equal(advantages, grpo)
    # ... and with omega 0 they are GRPO's, exactly: the episode part is GRPO's own arithmetic.
    no_step = dataclasses.replace(course, gigpo=dataclasses.replace(course.gigpo, step_weight=0.0))
    assert torch.equal(seams.gigpo(batch, no_step)[0], grpo)
    value_gap, gradient_gap = compare_losses(trainer, model, out, batch, advantages)
    print(f"step-mode GiGPO: {len(rows)} rows, loss diff {value_gap:.2e}, relative gradient diff {gradient_gap:.2e}, "
          f"sampling log-prob diff {diff['logprobs']:.2e}")  # fmt: skip


def test_one_trl_step_of_step_mode_gigpo_is_the_courses_update(ch07):
    """A whole TRL training step on chapter 07's step-mode GiGPO (TRL's sampler and shuffle, the training-mode
    normaliser, the gradient-norm clip) hands AdamW the gradient of the course's update on the same episodes
    (`seams.gigpo`, `seams.clipped`, norm clipped at `max_grad_norm`); both AdamWs have the same settings (lr, betas,
    eps, no weight decay). Weights are not compared: AdamW's first step is lr x sign(gradient), so rounding noise on a
    near-zero gradient entry flips a whole step."""
    model, tokenizer = copy.deepcopy(ch07[0]), ch07[1]
    start = copy.deepcopy(model)
    episodes: list = []
    seen: dict = {}

    class Gradients(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            seen.update({name: p.grad.clone() for name, p in model.named_parameters()})

    trainer = trl_chapters.method_trainer(
        "07", "gigpo", settings(), model, tokenizer, keep=episodes, callbacks=[Gradients()]
    )
    course_trl.quiet_train(trainer)
    course = trainer.course
    batch = collate([row for episode in episodes for row in episode.rows], tokenizer.pad_token_id)
    advantages, _ = seams.gigpo(batch, course)
    logprobs, _ = token_logprobs(start, batch.input_ids, batch.attention_mask)
    loss, _ = seams.clipped(logprobs, batch.old_logprobs, advantages, batch.loss_mask, course)
    loss.backward()
    norm = float(torch.nn.utils.clip_grad_norm_(start.parameters(), course.max_grad_norm))
    logged = next(row for row in trainer.state.log_history if "grad_norm" in row)["grad_norm"]
    ours = torch.cat([seen[name].flatten() for name, _ in start.named_parameters()])
    theirs = torch.cat([p.grad.flatten() for p in start.parameters()])
    gap = float((ours - theirs).abs().max()) / float(theirs.abs().max())
    assert abs(logged - norm) < 1e-5 * norm and gap < 1e-4, (logged, norm, gap)
    optimizer = trainer.optimizer.optimizer if hasattr(trainer.optimizer, "optimizer") else trainer.optimizer
    group = optimizer.param_groups[0]
    assert (group["lr"], group["betas"], group["eps"]) == (course.learning_rate, (0.9, 0.999), 1e-8)
    assert all(g["weight_decay"] == 0.0 for g in optimizer.param_groups)
    print(f"one TRL step: gradient norm {logged:.6f} vs the course's {norm:.6f}; relative gradient diff {gap:.2e}")


def test_gigpo_trajectory_mode_puts_each_steps_advantage_on_its_action_tokens(ch08):
    model, tokenizer = copy.deepcopy(ch08[0]), ch08[1]
    s = settings(prompts=4, seed=1)
    course = course_config("08", "gigpo", s, sampler="groups")
    trajectories: list = []
    trainer = trl_chapters.method_trainer("08", None, s, model, tokenizer, keep=trajectories, course=course)
    out = generate(trainer)
    diff: dict = {}
    assert_rows_match(out, trajectories, diff)
    batch = collate(trajectories, tokenizer.pad_token_id)
    advantages, _ = seams.gigpo(batch, course)
    assert advantages.abs().sum() > 0
    for i, row in enumerate(trajectories):
        start = row.prefix_length(0)
        length = len(row.token_ids) - start
        assert torch.equal(out["advantages"][i, :length], advantages[i, start : start + length])
        assert out["advantages"][i, length:].abs().sum() == 0
    observed = out["advantages"] * (1 - out["tool_mask"]) * out["completion_mask"]
    assert observed.abs().sum() == 0  # tool responses get no advantage
    value_gap, gradient_gap = compare_losses(trainer, model, out, batch, advantages)
    print(f"trajectory-mode GiGPO: loss diff {value_gap:.2e}, relative gradient diff {gradient_gap:.2e}, "
          f"sampling log-prob diff {diff['logprobs']:.2e}")  # fmt: skip


@pytest.mark.parametrize("rule", ["arpo", "aepo"])
def test_the_tree_rollout_is_sample_trees_on_the_trainers_weights(rule, ch08):
    """The `rollout_func` grows the tree `tree_rollout.sample_trees` grows with the same weights, seeds and generator
    (same leaves, parents, token ids, masks and log-probs), and TRL's loss mask is the leaves' loss mask."""
    model, tokenizer = copy.deepcopy(ch08[0]), ch08[1]
    s = settings(seed=1)
    course = course_config("08", rule, s)
    course = dataclasses.replace(course, tree=dataclasses.replace(course.tree, global_samples=2))
    kept: list = []
    trainer = trl_chapters.method_trainer("08", None, s, model, tokenizer, keep=kept, course=course)
    out = generate(trainer)
    leaves, stats = kept
    task, _ = trl_chapters.chapter_setup("08")
    engine = RolloutEngine(model, tokenizer, dataclasses.replace(task.sampling, snapshot_envs=True))
    prompts = list(trainer.train_dataset["prompt"])[:2]
    seeds = [course_trl.dataset_prompts(task, s)[p] for p in prompts]
    envs = [task.make_env() for _ in range(8)]
    direct, direct_stats = sample_trees(engine, envs, seeds, 4, course.tree, torch.Generator().manual_seed(1))
    assert stats.parents == direct_stats.parents and any(p is not None for p in stats.parents)  # it branched
    assert stats.fork_steps == direct_stats.fork_steps and stats.refill == direct_stats.refill
    assert [n.probability for n in stats.nodes] == [n.probability for n in direct_stats.nodes]
    for ours, theirs in zip(leaves, direct, strict=True):
        assert (ours.token_ids, ours.loss_mask, ours.logprobs) == (theirs.token_ids, theirs.loss_mask, theirs.logprobs)
    diff: dict = {}
    assert_rows_match(out, direct, diff)
    assert diff["logprobs"] == 0.0


def filter_case(ch08, method: str, **filter_changes):
    model, tokenizer = copy.deepcopy(ch08[0]), ch08[1]
    s = settings(prompts=4, seed=2)
    course = course_config("08", "grpo", s)
    course = dataclasses.replace(course, batch_filter=trl_chapters.METHODS[method]["batch_filter"],
                                 filter=dataclasses.replace(course.filter, **filter_changes))  # fmt: skip
    trajectories: list = []
    trainer = trl_chapters.method_trainer("08", None, s, model, tokenizer, keep=trajectories, course=course)
    return trainer, generate(trainer), trajectories, model, tokenizer


@pytest.mark.parametrize("method", ["starpo_s", "snr"])
def test_the_group_filters_train_on_the_kept_groups_with_the_courses_loss(method, ch08):
    """StarPO-S and RAGEN-2's SNR filter: TRL's loss mask keeps exactly the course filter's rows, and TRL's loss
    (its token mean over the kept tokens, `num_items_in_batch` recounted) is the course's `clipped` loss on
    `batch.select(keep)` with the course's advantages computed there."""
    trainer, out, trajectories, model, tokenizer = filter_case(ch08, method, keep_fraction=0.5)
    course = trainer.course
    batch = collate(trajectories, tokenizer.pad_token_id)
    keep = seams.resolve("batch_filter", course.batch_filter)(batch, course)
    assert 0 < int(keep.sum()) < len(keep)  # some groups dropped, some kept
    assert torch.equal(out["tool_mask"].bool().any(1), keep)
    kept = batch.select(keep)
    assert out["num_items_in_batch"] == kept.loss_mask.sum()
    advantages, _ = seams.grpo(kept, course)
    value_gap, gradient_gap = compare_losses(trainer, model, out, kept, advantages)
    print(f"{method}: kept {int(keep.sum())}/{len(keep)} rows, "
          f"diff {value_gap:.2e}, relative gradient diff {gradient_gap:.2e}")  # fmt: skip


def test_a_batch_that_keeps_nothing_is_not_trained_on(ch08):
    """The course skips the update when its filter keeps nothing; TRL then leaves every weight alone, AdamW's
    moments from the step before notwithstanding."""
    calls = []

    def first_only(batch, config):
        calls.append(1)
        return torch.full((batch.input_ids.shape[0],), len(calls) == 1, dtype=torch.bool)

    seams.register("batch_filter", "trl_test_first_only", first_only)
    try:
        model, tokenizer = copy.deepcopy(ch08[0]), ch08[1]
        s = settings(prompts=4, steps=2, seed=1)
        course = course_config("08", "grpo", s, batch_filter="trl_test_first_only")
        snapshots = []

        class Keep(TrainerCallback):
            def on_step_end(self, args, state, control, model=None, **kwargs):
                snapshots.append(copy.deepcopy(model.state_dict()))

        start = copy.deepcopy(model.state_dict())
        trainer = trl_chapters.method_trainer("08", None, s, model, tokenizer, course=course, callbacks=[Keep()])
        course_trl.quiet_train(trainer)
    finally:
        del seams.SEAMS["batch_filter"]["trl_test_first_only"]
    assert len(snapshots) == 2
    assert any(not torch.equal(start[k], snapshots[0][k]) for k in start)  # the first step trained
    assert all(torch.equal(snapshots[0][k], snapshots[1][k]) for k in start)  # the second changed nothing


def test_aepos_balanced_clip_has_the_courses_value_and_gradient(ch08):
    """On the same log-probs, old log-probs, per-token advantages and masks (ratios spread over every clip region),
    TRL's loss with the balanced-clip term has `seams.entropy_balanced`'s value and gradient; TRL's hard clip alone
    has the value but not the gradient (the term is what makes them equal)."""
    model, tokenizer = copy.deepcopy(ch08[0]), ch08[1]
    s = settings()
    course = course_config("08", "aepo", s, sampler="groups")
    trainer = trl_chapters.method_trainer("08", None, s, model, tokenizer, course=course)
    out = generate(trainer)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        current = trainer._get_per_token_logps_and_entropies(
            model, torch.cat([out["prompt_ids"], out["completion_ids"]], 1),
            torch.cat([out["prompt_mask"], out["completion_mask"]], 1), out["completion_ids"].shape[1],
        )[0]  # fmt: skip
    out["old_per_token_logps"] = current - 0.6 * torch.randn(current.shape, generator=gen)  # ratios ~ e^{+-0.6}
    out["advantages"] = torch.randn(current.shape, generator=gen)
    mask = (out["completion_mask"] * out["tool_mask"]).float()

    ours = trainer._compute_loss(model, out)
    g_ours = gradient(model, ours)
    hard = course_trl.GRPOTrainer._compute_loss(trainer, model, out)
    g_hard = gradient(model, hard)
    logps = trainer._get_per_token_logps_and_entropies(
        model, torch.cat([out["prompt_ids"], out["completion_ids"]], 1),
        torch.cat([out["prompt_mask"], out["completion_mask"]], 1), out["completion_ids"].shape[1],
    )[0]  # fmt: skip
    expected, stats = seams.entropy_balanced(logps, out["old_per_token_logps"], out["advantages"], mask, course)
    g_expected = gradient(model, expected)
    assert stats["upper_clip_fraction"] > 0.05 and stats["clip_fraction"] > stats["upper_clip_fraction"]
    ours, hard, expected = float(ours.detach()), float(hard.detach()), float(expected.detach())
    assert ours == hard  # the added term's value is exactly 0
    assert abs(ours - expected) < 1e-6
    gap = float((g_ours - g_expected).abs().max())
    assert gap < 1e-6 * float(g_expected.abs().max()) + 1e-8, gap
    assert float((g_hard - g_expected).abs().max()) > 1e-3 * float(g_expected.abs().max())
    print(f"balanced clip: loss diff {abs(ours - expected):.2e}, gradient max diff {gap:.2e} "
          f"(largest course gradient {float(g_expected.abs().max()):.2e})")  # fmt: skip


def test_the_mi_callback_stops_and_rolls_back_where_mistop_does(ch08):
    """The same MI sequence through `MIRollback` in a TRL run and through chapter 12's `MIStop`: the same stop step
    and the same restored weights (those of the last passing measurement)."""
    from course_lib.diagnostics import MIStop

    sequence = [1.0, 0.95, 0.9, 0.7, 0.99]  # base 1, drop 0.2: the check at step 3 fails
    measured = []

    def measure(model):
        measured.append(copy.deepcopy(model.state_dict()))
        return sequence[len(measured) - 1]

    model, tokenizer = copy.deepcopy(ch08[0]), ch08[1]
    s = settings(steps=4)
    course = course_config("08", "grpo", s)
    monitor = MIRollback(measure, base_mi=1.0, drop=0.2, every=1)
    trainer = trl_chapters.method_trainer("08", None, s, model, tokenizer, course=course, callbacks=[monitor])
    course_trl.quiet_train(trainer)
    gate = MIStop(base_mi=1.0, drop=0.2)
    probe = copy.deepcopy(model)
    for step, (mi, weights) in enumerate(zip(sequence, measured)):
        probe.load_state_dict(weights)
        gate.remember(probe, mi)
        if gate.check({"eval_monitor_mi": mi, "iteration": step}):
            break
    gate.restore(probe)
    assert monitor.stopped_at == gate.stopped_at == 3 and trainer.state.global_step == 3
    assert [step for step, _ in monitor.history] == [0, 1, 2, 3]
    assert all(torch.equal(model.state_dict()[k], probe.state_dict()[k]) for k in probe.state_dict())
    assert all(torch.equal(probe.state_dict()[k], measured[2][k]) for k in measured[2])
    assert any(not torch.equal(measured[2][k], measured[3][k]) for k in measured[2])  # step 3 had moved them


def test_a_failed_first_check_leaves_the_starting_weights(ch08):
    """The course's loop never updates when its first check fails; the callback undoes the step transformers
    takes."""
    model, tokenizer = copy.deepcopy(ch08[0]), ch08[1]
    start = copy.deepcopy(model.state_dict())
    s = settings(prompts=4, steps=3, seed=1)
    monitor = MIRollback(lambda m: 0.1, base_mi=1.0, drop=0.2, every=1)
    trainer = trl_chapters.method_trainer("08", "grpo", s, model, tokenizer, callbacks=[monitor])
    course_trl.quiet_train(trainer)
    assert monitor.stopped_at == 0 and monitor.history == [(0, 0.1)] and trainer.state.global_step <= 1
    assert all(torch.equal(start[k], model.state_dict()[k]) for k in start)


def test_the_mi_callback_measures_chapter_12s_monitor_in_a_real_run(ch08):
    """One short real run: chapter 12's `monitor_mi` (a few monitor prompts) every step of a TRL ARPO run; the first
    measurement is the base's MI as chapter 12 computes it."""
    model, tokenizer = copy.deepcopy(ch08[0]), ch08[1]
    task = two_hop_search.SearchConfig()

    def measure(m) -> float:
        return two_hop_search.monitor_mi(m, tokenizer, task, 4, seed=0)

    base_mi = measure(model)
    monitor = MIRollback(measure, base_mi, drop=0.2, every=1)
    s = settings(prompts=4, steps=2, seed=1)
    trainer = trl_chapters.method_trainer("08", "arpo", s, model, tokenizer, callbacks=[monitor])
    course_trl.quiet_train(trainer)
    assert monitor.history[0] == (0, base_mi) and math.isfinite(base_mi)
    assert monitor.history[-1][1] != base_mi  # the policy moved, and the monitor saw it
    steps = [step for step, _ in monitor.history]
    assert steps == [0, 1, 2] or (monitor.stopped_at is not None and steps[-1] == monitor.stopped_at)
    print(f"MI monitor over a TRL ARPO run: {monitor.history}, stopped at {monitor.stopped_at}")


def test_what_the_route_cannot_do_is_refused(ch07):
    model, tokenizer = copy.deepcopy(ch07[0]), ch07[1]
    s = settings()
    with pytest.raises(ValueError, match="trajectory mode"):
        trl_chapters.method_trainer("07", "arpo", s, model, tokenizer)
    course = course_config("07", "gigpo", s, kl_coef=0.1, updates_per_batch=2)
    with pytest.raises(ValueError, match="no KL term.*one update per batch"):
        trl_chapters.method_trainer("07", None, s, model, tokenizer, course=course)
    with pytest.raises(KeyError, match="unknown method"):
        trl_chapters.method_trainer("07", "ppo", s, model, tokenizer)
    with pytest.raises(SystemExit):  # --method is for chapters 07 and 08
        course_trl.main(["--chapter", "00", "--method", "gigpo", "--steps", "1"])
    assert set(course_trl.METHOD_NAMES) == set(trl_chapters.METHODS)


@pytest.mark.parametrize(("chapter", "method"), [("07", "gigpo"), ("08", "arpo")])
def test_the_commands_train_two_steps_of_the_chapters_method(chapter, method, capsys):
    assert course_trl.main(["--chapter", chapter, "--steps", "2"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == ["step 1", "step 2"]
    match = re.fullmatch(rf"trl_{method}_steps=2 loss=(-?\d+\.\d{{4}}) reward=(-?\d+\.\d{{4}})", lines[-1])
    assert match, lines[-1]
    assert math.isfinite(float(match[1]))


def test_the_command_runs_chapter_12s_mi_monitor_on_chapter_08(capsys):
    argv = ["--chapter", "08", "--steps", "1", "--prompts", "2", "--group", "4", "--mi-every", "1"]
    assert course_trl.main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"MI monitor: step 0 \d+\.\d{4}, step 1 \d+\.\d{4}", lines[-3]), lines[-3]
    assert re.fullmatch(r"trl_arpo_steps=1 loss=-?\d+\.\d{4} reward=-?\d+\.\d{4} mi_stopped_at=(none|\d+)", lines[-1])
    with pytest.raises(SystemExit):
        course_trl.main(["--chapter", "07", "--steps", "1", "--mi-every", "1"])
