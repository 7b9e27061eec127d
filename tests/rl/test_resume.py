"""Training runs a researcher can trust and continue: configs refuse bad settings on construction, `train_grpo`
reports each finished iteration to a callback, and an interrupted run resumes bit for bit from its checkpoint."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from course_lib.algos.filters import FilterConfig
from course_lib.algos.gigpo import GiGPOConfig
from course_lib.engine.tree_rollout import TreeConfig
from course_lib.rl.train import GRPOConfig
from course_lib.rl.warm_start import SFTConfig


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("rollout_mode", "steps", "'trajectory', 'step'"),
        ("aggregation", "token_mean", "'token-mean', 'seq-mean-token-mean', 'seq-mean-token-sum'"),
        ("anchor_source", "obs", "'observation', 'state'"),
        ("entropy_scope", "answer", "'policy', 'reasoning'"),
        ("entropy_rows", "low", "'all', 'zero_variance'"),
    ],
)
def test_an_unknown_mode_is_refused_naming_the_allowed_values(field, value, allowed):
    with pytest.raises(ValueError) as error:
        GRPOConfig(**{field: value})
    assert str(error.value) == f"GRPOConfig.{field} must be one of {allowed}; got {value!r}"


def test_nested_modes_are_checked_too():
    with pytest.raises(ValueError, match=r"GiGPOConfig.episode_baseline must be one of 'pooled', 'trajectory'"):
        GiGPOConfig(episode_baseline="pool")
    with pytest.raises(ValueError, match="TreeConfig.rule must be one of 'arpo', 'aepo'; got 'ARPO'"):
        GRPOConfig(tree=TreeConfig(rule="ARPO"))
    with pytest.raises(ValueError, match="TreeConfig.monitor_units must be one of 'normalised', 'nats'"):
        GRPOConfig(tree=TreeConfig(monitor_units="normalized"))
    with pytest.raises(ValueError, match="FilterConfig.mode must be one of 'linear', 'softmax'; got 'soft'"):
        GRPOConfig(filter=FilterConfig(mode="soft"))


def test_each_methods_config_validates_itself_and_again_inside_a_grpo_config():
    """A tree or filter setting is refused where it is made, without a GRPOConfig around it; one changed in place
    afterwards is refused when the GRPOConfig that holds it is validated."""
    with pytest.raises(ValueError, match="TreeConfig.alpha must lie in"):
        TreeConfig(alpha=2.0)
    with pytest.raises(ValueError, match="FilterConfig.keep_fraction must lie in"):
        FilterConfig(keep_fraction=0.0)
    config = GRPOConfig()
    config.tree.entropy_tokens = 0
    with pytest.raises(ValueError, match="TreeConfig.entropy_tokens must be >= 1; got 0"):
        config.validate()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: GRPOConfig(group_size=0), "GRPOConfig.group_size must be >= 1; got 0"),
        (lambda: GRPOConfig(prompts_per_iteration=-2), "GRPOConfig.prompts_per_iteration must be >= 1; got -2"),
        (lambda: GRPOConfig(iterations=-1), "GRPOConfig.iterations must be >= 0; got -1"),
        (lambda: GRPOConfig(learning_rate=0.0), "GRPOConfig.learning_rate must be > 0.0; got 0.0"),
        (lambda: GRPOConfig(learning_rate=-1e-4), "GRPOConfig.learning_rate must be > 0.0; got -0.0001"),
        (lambda: GRPOConfig(learning_rate=float("nan")), "GRPOConfig.learning_rate must be a finite number; got nan"),
        (lambda: GRPOConfig(kl_coef=float("inf")), "GRPOConfig.kl_coef must be a finite number; got inf"),
        (lambda: SFTConfig(learning_rate=float("nan")), "SFTConfig.learning_rate must be a finite number; got nan"),
        (lambda: GRPOConfig(eval_every=0), "GRPOConfig.eval_every must be >= 1; got 0"),
        (lambda: GRPOConfig(updates_per_batch=0), "GRPOConfig.updates_per_batch must be >= 1; got 0"),
        (lambda: GRPOConfig(history_window=-1), "GRPOConfig.history_window must be >= 0; got -1"),
        (lambda: GRPOConfig(clip_low=1.5), "GRPOConfig.clip_low must lie in [0.0, 1.0]; got 1.5"),
        (lambda: GRPOConfig(max_grad_norm=0.0), "GRPOConfig.max_grad_norm must be > 0.0; got 0.0"),
        (lambda: GRPOConfig(filter=FilterConfig(top_p=0.0)), "FilterConfig.top_p must lie in (0.0, 1.0]; got 0.0"),
        (lambda: GRPOConfig(tree=TreeConfig(global_samples=0)), "TreeConfig.global_samples must be >= 1; got 0"),
        (lambda: GiGPOConfig(gamma=1.2), "GiGPOConfig.gamma must lie in [0.0, 1.0]; got 1.2"),
        (lambda: SFTConfig(batch_size=0), "SFTConfig.batch_size must be >= 1; got 0"),
        (lambda: SFTConfig(steps=-5), "SFTConfig.steps must be >= 0; got -5"),
        (lambda: SFTConfig(learning_rate=0.0), "SFTConfig.learning_rate must be > 0.0; got 0.0"),
        (lambda: SFTConfig(warmup_steps=0), "SFTConfig.warmup_steps must be >= 1; got 0"),
    ],
)
def test_impossible_sizes_and_rates_are_refused(make, message):
    with pytest.raises(ValueError) as error:
        make()
    assert str(error.value) == message


def test_replace_validates_and_the_boundaries_are_allowed():
    """`dataclasses.replace` builds a new config, so it is checked as well; the edge values chapters use pass."""
    with pytest.raises(ValueError, match="rollout_mode"):
        dataclasses.replace(GRPOConfig(), rollout_mode="Step")
    edge = GRPOConfig(iterations=0, group_size=1, history_window=0, clip_low=0.0, invalid_penalty=0.0, kl_coef=0.0)
    assert edge.iterations == 0 and edge.group_size == 1
    assert GiGPOConfig(gamma=1.0, episode_baseline="trajectory").gamma == 1.0
    assert SFTConfig(steps=0, warmup_steps=1).steps == 0
    assert GRPOConfig(advantage="registered_later").advantage == "registered_later", "seams resolve at train time"


def test_train_grpo_checks_a_config_changed_in_place_and_its_seams_before_any_work(warm_model, tokenizer):
    from course_lib import envs
    from course_lib.engine.rollout import SamplingConfig
    from course_lib.rl.train import train_grpo

    evaluated = []
    config = GRPOConfig(iterations=1, prompts_per_iteration=1, group_size=2)
    config.rollout_mode = "steps"
    with pytest.raises(ValueError, match="rollout_mode must be one of 'trajectory', 'step'; got 'steps'"):
        train_grpo(warm_model, tokenizer, lambda: envs.make("tool_arithmetic"), SamplingConfig(), config, 0)
    config = GRPOConfig(iterations=1, prompts_per_iteration=1, group_size=2, advantage="gea")
    with pytest.raises(KeyError, match="unknown advantage 'gea'; registered: .*'gigpo', 'graphgpo', 'grpo'"):
        train_grpo(warm_model, tokenizer, lambda: envs.make("tool_arithmetic"), SamplingConfig(), config, 0,
                   evaluate=lambda m: evaluated.append(1) or {})  # fmt: skip
    assert evaluated == [], "refused before the first evaluation"


def test_on_iteration_sees_every_finished_record_in_order(warm_model, tokenizer):
    """Each record reaches the callback once it holds its update's metrics; the final evaluation's record too,
    and the stopping one when `stop` ends the run."""
    from course_lib import envs
    from course_lib.engine.rollout import SamplingConfig
    from course_lib.rl.train import train_grpo

    seen, weights_at_call = [], []
    first_weight = next(warm_model.parameters())
    initial = first_weight.detach().clone()

    def log(record):
        seen.append(record)
        weights_at_call.append(first_weight.detach().clone())

    # 16 episodes an iteration: with 4 (2 tasks x 2) every group's rewards were equal on some machines' arithmetic,
    # no update ran, and the order check below had nothing to see
    config = GRPOConfig(iterations=3, prompts_per_iteration=4, group_size=4, eval_every=2)
    sampling = SamplingConfig(max_turn_tokens=8, max_total_tokens=40)
    history = train_grpo(warm_model, tokenizer, lambda: envs.make("tool_arithmetic"), sampling, config, 0,
                         evaluate=lambda m: {"probe": 1.0}, on_iteration=log)  # fmt: skip
    assert [r["iteration"] for r in seen] == [0, 1, 2, 3] and all(a is b for a, b in zip(seen, history, strict=True))
    assert all("loss" in r and "time_update" in r for r in seen[:3]), "called after the update, not before"
    assert seen[3] == {"iteration": 3, "eval_probe": 1.0}
    assert torch.equal(weights_at_call[-1], first_weight), "the last call sees the trained model"
    before = [initial, *weights_at_call[:2]]
    moved = [not torch.equal(a, b) for a, b in zip(before, weights_at_call[:3], strict=True)]
    assert moved == [r["grad_norm"] > 0 for r in seen[:3]], "each call follows its own update"
    assert any(moved), "no iteration updated the model: the order check above saw nothing"
    stopped = []
    train_grpo(warm_model, tokenizer, lambda: envs.make("tool_arithmetic"), sampling, config, 0,
               evaluate=lambda m: {"probe": 1.0}, stop=lambda r: r["iteration"] == 2,
               on_iteration=stopped.append)  # fmt: skip
    assert [r["iteration"] for r in stopped] == [0, 1, 2] and "loss" not in stopped[-1]


SAMPLING_SMALL = dict(max_turn_tokens=8, max_total_tokens=40)


class Interrupted(Exception):
    """Stands for a kill between two iterations (a KeyboardInterrupt would stop pytest itself)."""


def _run(model, tokenizer, config, seed=0, **options):
    from course_lib import envs
    from course_lib.engine.rollout import SamplingConfig
    from course_lib.rl.train import train_grpo

    sampling = SamplingConfig(**SAMPLING_SMALL)
    return train_grpo(model, tokenizer, lambda: envs.make("tool_arithmetic"), sampling, config, seed, **options)


def _evaluator(tokenizer):
    """A real held-out evaluation (its own generator, as the chapters' evaluators): success on 4 fixed tasks; plus
    one draw from each global generator (python, numpy, torch), so that a random state left unrestored by a resume
    shows in the history."""
    import random

    from course_lib import envs
    from course_lib.engine.rollout import SamplingConfig
    from course_lib.rl.train import evaluate_policy

    def evaluate(model):
        make_env = lambda: envs.make("tool_arithmetic")  # noqa: E731
        stats, _ = evaluate_policy(model, tokenizer, make_env, range(100, 104), SamplingConfig(**SAMPLING_SMALL), 7)
        draws = {"python": random.random(), "numpy": np.random.rand(), "torch": torch.rand(1).item()}
        return {"success": np.float64(stats["success"]), "reward": stats["reward"], **draws}  # numpy, as np.mean

    return evaluate


def _seed_globals(seed):
    """What a chapter does before training (`config.seed_everything`)."""
    import random

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _with_dropout(model, rate):
    """Attention dropout in the updates (the model trains in train mode), so torch's global generator matters."""
    attentions = [m for m in model.modules() if hasattr(m, "attention_dropout")]
    assert attentions
    for module in attentions:
        module.attention_dropout = rate
    return model


def _without_times(history):
    return [{k: v for k, v in record.items() if not k.startswith("time_")} for record in history]


def _same_weights(a, b):
    one, two = a.state_dict(), b.state_dict()
    return one.keys() == two.keys() and all(torch.equal(one[k], two[k]) for k in one)


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_an_interrupted_run_resumes_bit_for_bit(warm_model, tokenizer, tmp_path, dropout):
    """Killed after its third update (before that update's checkpoint), then resumed by a new call on a fresh copy
    of the base in a process whose global generators have moved on: the history (evaluations at 0, 2 and 4
    included) and every parameter equal those of a run that was never interrupted and never checkpointed."""
    import copy

    warm_model = _with_dropout(warm_model, dropout)
    config = GRPOConfig(iterations=4, prompts_per_iteration=2, group_size=2, eval_every=2)
    evaluate = _evaluator(tokenizer)
    reference_model = copy.deepcopy(warm_model)
    _seed_globals(0)
    reference = _run(reference_model, tokenizer, config, evaluate=evaluate)

    def kill_at_two(record):
        if record["iteration"] == 2:
            raise Interrupted

    interrupted = copy.deepcopy(warm_model)
    _seed_globals(0)
    with pytest.raises(Interrupted):
        _run(interrupted, tokenizer, config, evaluate=evaluate, checkpoint_dir=tmp_path, on_iteration=kill_at_two)
    logged = []
    resumed_model = copy.deepcopy(warm_model)
    _seed_globals(1)
    resumed = _run(resumed_model, tokenizer, config, evaluate=evaluate, checkpoint_dir=tmp_path, resume=True,
                   on_iteration=logged.append)  # fmt: skip
    assert [r["iteration"] for r in logged] == [2, 3, 4], "iterations 0 and 1 came from the checkpoint"
    assert _without_times(resumed) == _without_times(reference)
    assert [r.get("eval_success") for r in reference] == [r.get("eval_success") for r in resumed]
    assert {"eval_success", "loss"} <= reference[2].keys(), "the resumed run evaluated and trained at iteration 2"
    assert _same_weights(resumed_model, reference_model)
    assert not _same_weights(resumed_model, warm_model), "training moved the weights (the check can fail)"


def test_a_finished_run_extends_and_save_every_thins_the_checkpoints(warm_model, tokenizer, tmp_path):
    """Three iterations checkpointed every second update and after the last, then the same settings with four and
    resume=True: equal to four iterations in one go. `iterations` is not part of the fingerprint."""
    import copy

    from course_lib.rl import run_state

    saves = []
    reference_model = copy.deepcopy(warm_model)
    reference = _run(reference_model, tokenizer, GRPOConfig(iterations=4, prompts_per_iteration=2, group_size=2))
    first = copy.deepcopy(warm_model)
    short = GRPOConfig(iterations=3, prompts_per_iteration=2, group_size=2)
    _run(first, tokenizer, short, checkpoint_dir=tmp_path, save_every=2,
         on_iteration=lambda r: saves.append(run_state.load(tmp_path)))  # fmt: skip
    # on_iteration runs before that iteration's save: what it finds is the previous save
    assert [None if s is None else s["iteration"] for s in saves] == [None, None, 1, 2]
    extended_model = copy.deepcopy(warm_model)
    config = GRPOConfig(iterations=4, prompts_per_iteration=2, group_size=2)
    extended = _run(extended_model, tokenizer, config, checkpoint_dir=tmp_path, resume=True)
    assert _without_times(extended) == _without_times(reference) and len(extended) == 5
    assert _same_weights(extended_model, reference_model)
    with pytest.raises(ValueError, match="has finished 4 iterations, more than this run's 2"):
        _run(copy.deepcopy(warm_model), tokenizer, dataclasses.replace(config, iterations=2), checkpoint_dir=tmp_path,
             resume=True)  # fmt: skip


def test_a_checkpoint_from_other_settings_is_refused_and_an_empty_folder_starts_fresh(warm_model, tokenizer, tmp_path):
    import copy

    config = GRPOConfig(iterations=1, prompts_per_iteration=2, group_size=2)
    fresh_model = copy.deepcopy(warm_model)
    (tmp_path / "run").mkdir()  # an existing empty folder (one that does not exist is refused: issue 42, item 7)
    fresh = _run(fresh_model, tokenizer, config, checkpoint_dir=tmp_path / "run", resume=True)
    plain_model = copy.deepcopy(warm_model)
    assert _without_times(fresh) == _without_times(_run(plain_model, tokenizer, config))
    assert _same_weights(fresh_model, plain_model)
    with pytest.raises(ValueError, match=r"from another run \(seed: 0 there, 1 here\)"):
        _run(copy.deepcopy(warm_model), tokenizer, config, seed=1, checkpoint_dir=tmp_path / "run", resume=True)
    other = dataclasses.replace(config, learning_rate=1e-3, rollout_mode="step")
    with pytest.raises(ValueError, match=r"config.learning_rate: 0.0005 there, 0.001 here; config.rollout_mode: "
                                         r"'trajectory' there, 'step' here\)"):  # fmt: skip
        _run(copy.deepcopy(warm_model), tokenizer, other, checkpoint_dir=tmp_path / "run", resume=True)
    with pytest.raises(ValueError, match="resume=True needs the checkpoint_dir"):
        _run(copy.deepcopy(warm_model), tokenizer, config, resume=True)
    restarted = _run(copy.deepcopy(warm_model), tokenizer, config, checkpoint_dir=tmp_path / "run")
    assert _without_times(restarted) == _without_times(fresh), "without resume=True the folder is overwritten"


def test_a_save_cut_short_leaves_the_last_checkpoint_usable(monkeypatch, warm_model, tokenizer, tmp_path):
    """A crash while writing the second checkpoint leaves the first one complete (and the half-written folder aside);
    a crash between the two renames leaves it under `.latest.previous`, where a resume finds it. `latest/` alone
    loads as a model and tokenizer."""
    import copy

    from course_lib import models
    from course_lib.rl import run_state

    config = GRPOConfig(iterations=3, prompts_per_iteration=2, group_size=2)
    reference_model = copy.deepcopy(warm_model)
    reference = _run(reference_model, tokenizer, config)
    from pathlib import Path

    real_save, calls = torch.save, []

    def failing_save(obj, path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 2:
            Path(path).write_bytes(b"half a file")
            raise OSError("disk full")
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(run_state.torch, "save", failing_save)
    with pytest.raises(OSError, match="disk full"):
        _run(copy.deepcopy(warm_model), tokenizer, config, checkpoint_dir=tmp_path)
    monkeypatch.setattr(run_state.torch, "save", real_save)
    assert run_state.load(tmp_path)["iteration"] == 0 and (tmp_path / ".latest.partial").exists()
    (tmp_path / "latest").rename(tmp_path / ".latest.previous")  # as if killed between the renames
    resumed_model = copy.deepcopy(warm_model)
    resumed = _run(resumed_model, tokenizer, config, checkpoint_dir=tmp_path, resume=True)
    assert _without_times(resumed) == _without_times(reference) and _same_weights(resumed_model, reference_model)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest"], "the leftovers are cleared by the next save"
    loaded, loaded_tokenizer = models.load(tmp_path / "latest")
    assert _same_weights(loaded, reference_model) and len(loaded_tokenizer) == len(tokenizer)


def test_the_progress_bar_names_the_method(warm_model, tokenizer, capsys):
    from course_lib.rl.train import method_label

    assert method_label(GRPOConfig()) == "grpo"
    assert method_label(GRPOConfig(advantage="gigpo", rollout_mode="step")) == "gigpo [step mode]"
    arpo = GRPOConfig(sampler="tree", batch_filter="snr_top_p", policy_loss="entropy_balanced")
    assert method_label(arpo) == "grpo [tree, snr_top_p, entropy_balanced]"
    config = GRPOConfig(iterations=1, prompts_per_iteration=1, group_size=2, advantage="gigpo", rollout_mode="step")
    _run(warm_model, tokenizer, config, progress=True)
    bar = capsys.readouterr().err
    assert "gigpo [step mode]: 100%|" in bar and "2/2" in bar and "GRPO" not in bar
    _run(warm_model, tokenizer, dataclasses.replace(config, iterations=3), progress=True, stop=lambda r: True,
         evaluate=lambda m: {})  # fmt: skip
    stopped = capsys.readouterr().err
    assert "gigpo [step mode]:  25%|" in stopped and "1/4" in stopped and "2/4" not in stopped, "an early stop shows"


def test_resume_refuses_a_missing_folder_or_a_checkpoint_without_its_state_and_says_where_it_resumed(
    warm_model, tokenizer, tmp_path, capsys
):
    """Issue 42, item 7: `resume=True` never trains from scratch without a word. A folder that does not exist (a typo)
    and a `latest/` without its training state are refused, naming them, and `latest/` is left as it was; an existing
    empty folder starts a fresh run and says so; a resume says the iteration it resumed from."""
    import copy

    config = GRPOConfig(iterations=2, prompts_per_iteration=2, group_size=2)
    with pytest.raises(ValueError, match=r"resume=True: .*nowhere does not exist"):
        _run(copy.deepcopy(warm_model), tokenizer, config, checkpoint_dir=tmp_path / "nowhere", resume=True)
    assert not (tmp_path / "nowhere").exists()
    stateless = tmp_path / "stateless"
    (stateless / "latest").mkdir(parents=True)
    (stateless / "latest" / "config.json").write_text("{}")
    with pytest.raises(ValueError, match=r"latest holds no training_state\.pt"):
        _run(copy.deepcopy(warm_model), tokenizer, config, checkpoint_dir=stateless, resume=True)
    assert sorted(p.name for p in (stateless / "latest").iterdir()) == ["config.json"], "left as it was"
    empty = tmp_path / "empty"
    empty.mkdir()
    capsys.readouterr()
    one = dataclasses.replace(config, iterations=1)
    _run(copy.deepcopy(warm_model), tokenizer, one, checkpoint_dir=empty, resume=True)
    assert f"no checkpoint in {empty} yet: a fresh run from iteration 0" in capsys.readouterr().out
    _run(copy.deepcopy(warm_model), tokenizer, config, checkpoint_dir=empty, resume=True)
    assert f"resumed from iteration 0 in {empty}: continuing at iteration 1 of 2" in capsys.readouterr().out


def test_a_damaged_training_state_is_named(warm_model, tokenizer, tmp_path):
    """Issue 42, item 9: a truncated `training_state.pt` is an error naming the file and what to do, not a bare
    `OSError: [Errno 22]`."""
    import copy

    config = GRPOConfig(iterations=1, prompts_per_iteration=2, group_size=2)
    _run(copy.deepcopy(warm_model), tokenizer, config, checkpoint_dir=tmp_path)
    state = tmp_path / "latest" / "training_state.pt"
    state.write_bytes(state.read_bytes()[:1000])
    with pytest.raises(ValueError, match=rf"{state} cannot be read \(.*\): the checkpoint is damaged"):
        _run(copy.deepcopy(warm_model), tokenizer, dataclasses.replace(config, iterations=2), checkpoint_dir=tmp_path,
             resume=True)  # fmt: skip


def test_the_fingerprint_covers_the_whole_resolved_config_given(warm_model, tokenizer, tmp_path):
    """Issue 42, item 8: a chapter's settings outside `GRPOConfig` (its `env_kwargs`, `eval_tasks`) change what a run
    measures, so a resume with others mixed two settings in one history. Given as `settings` (the chapter's resolved
    config), they are part of the fingerprint, `iterations`, `checkpoint_dir` and `resume` aside (so a finished run
    can be extended, from wherever the checkpoint lies)."""
    import copy

    config = GRPOConfig(iterations=1, prompts_per_iteration=2, group_size=2)
    settings = {"env_kwargs": {"size": 6}, "eval_tasks": 4, "grpo": {"iterations": 1}, "checkpoint_dir": "a",
                "resume": False}  # fmt: skip
    _run(copy.deepcopy(warm_model), tokenizer, config, checkpoint_dir=tmp_path, settings=settings)
    two = dataclasses.replace(config, iterations=2)
    other = {**settings, "env_kwargs": {"size": 7}, "eval_tasks": 8}
    with pytest.raises(ValueError, match=r"settings.env_kwargs.size: 6 there, 7 here; settings.eval_tasks: 4 there, "
                                         r"8 here"):  # fmt: skip
        _run(copy.deepcopy(warm_model), tokenizer, two, checkpoint_dir=tmp_path, resume=True, settings=other)
    moved = {**settings, "grpo": {"iterations": 2}, "checkpoint_dir": "b", "resume": True}
    history = _run(copy.deepcopy(warm_model), tokenizer, two, checkpoint_dir=tmp_path, resume=True, settings=moved)
    assert len(history) == 3


def test_a_fingerprint_without_settings_is_todays():
    """Issue 42: with no `settings` the fingerprint is the one checkpoints written before it carry (a course run
    resumes from them as before)."""
    import json

    from course_lib.engine.rollout import SamplingConfig
    from course_lib.rl import run_state

    config, sampling = GRPOConfig(iterations=7, learning_rate=1e-3), SamplingConfig(max_turn_tokens=8)
    plain = dataclasses.asdict(config)
    plain.pop("iterations")
    today = json.dumps({"config": plain, "sampling": dataclasses.asdict(sampling), "seed": 3}, sort_keys=True)
    assert run_state.fingerprint(config, sampling, 3) == today
    assert run_state.fingerprint(config, sampling, 3, {"eval_tasks": 4}) != today
