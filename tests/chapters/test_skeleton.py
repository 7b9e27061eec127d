"""The chapter skeleton: its command line (with a chapter's own options) and the data glue chapters share."""

from __future__ import annotations

import dataclasses

import pytest

from course_lib import course_config, models
from course_lib.chapters import command, skeleton
from course_lib.course.claims import ClaimSpec
from course_lib.tasks import bases

CLAIMS = (ClaimSpec("C9.1", "the number is positive", "no paper", "x", lambda n: n["x"] > 0),)


def toy(**changes) -> skeleton.Chapter:
    chapter = skeleton.Chapter(
        "ch99", "Toy chapter", lambda seed: {"x": seed - 1, "minutes": 0.0}, lambda r: {"x": r["x"]}, CLAIMS,
        report=lambda r: [f"x is {r['x']}"],
    )  # fmt: skip
    return dataclasses.replace(chapter, **changes)


def test_main_runs_every_seed_and_prints_report_and_claims(capsys):
    outputs = command.main(toy(), ["--seeds", "0", "2"])
    assert [r["x"] for r in outputs] == [-1, 1]
    assert capsys.readouterr().out.splitlines() == [
        "seed 0 (0.00 min)", "  x is -1", "  C9.1 FAIL the number is positive",
        "seed 2 (0.00 min)", "  x is 1", "  C9.1 PASS the number is positive",
    ]  # fmt: skip


def test_main_hooks_add_options_configure_and_finish(capsys):
    """A chapter's own flag reaches `configure`, which may run another mode (None) or rebind the chapter."""
    finished = []

    def arguments(parser):
        parser.add_argument("--shift", type=int, default=0)
        parser.add_argument("--other-mode", action="store_true")

    def configure(chapter, args, parser):
        if args.other_mode:
            print("other mode")
            return None
        return dataclasses.replace(chapter, run=lambda seed: {"x": seed + args.shift, "minutes": 0.0})

    def finish(args, outputs):
        finished.append([r["x"] for r in outputs])

    chapter = dataclasses.replace(toy(), options=arguments, configure=configure, finish=finish)
    assert chapter.main(["--seeds", "1", "--other-mode"]) == []
    assert capsys.readouterr().out == "other mode\n" and finished == []
    dataclasses.replace(chapter, print_claims=False).main(["--seeds", "1", "--shift", "5"])
    assert capsys.readouterr().out.splitlines() == ["seed 1 (0.00 min)", "  x is 6"]
    assert finished == [[6]]


def test_model_flags_reach_the_run_as_one_session_and_leave_the_environment_alone(monkeypatch):
    """`--model`, `--full-finetune` and `--observation-role` are a run session the chapter's runs read
    (`rl.session.current()`, as `bases.base_for` does); the process's environment is not written, and after the
    command the session is the one before it."""
    import os

    from course_lib.rl import session

    for name in (session.MODEL_VARIABLE, session.FULL_FINETUNE_VARIABLE, session.OBSERVATION_ROLE_VARIABLE):
        monkeypatch.delenv(name, raising=False)
    environment, seen = dict(os.environ), []

    def run(seed):
        seen.append((session.current(), dict(os.environ)))
        return {"x": seed, "minutes": 0.0}

    argv = ["--seeds", "0", "1", "--model", "my/folder", "--full-finetune", "--observation-role", "user"]
    command.main(toy(run=run, checkpoint=True), argv)
    assert [s.model for s, _ in seen] == ["my/folder"] * 2
    assert all(s.full_finetune and s.observation_role == "user" for s, _ in seen)
    assert all(env == environment for _, env in seen) and dict(os.environ) == environment
    assert session.current() == session.RunSession()


def test_task_splits_count_seeds_from_zero_per_split():
    splits = bases.task_splits(lambda seed, split: (split, seed), lambda ps: {"p": [f"{a}{b}" for a, b in ps]},
                                  {"train": 3, "test": 1})  # fmt: skip
    assert splits == {
        "train": {"seed": [0, 1, 2], "p": ["train0", "train1", "train2"]},
        "test": {"seed": [0], "p": ["test0"]},
    }


def test_warm_start_base_is_deterministic(tmp_path):
    """Same seed, same files: the manifest's hashes of a rebuilt base stay valid."""
    from course_lib.data import sha256
    from course_lib.rl.warm_start import SFTConfig

    texts = [("<question> 1 + 2 </question>", "<answer> 3 </answer>")] * 8
    sft = SFTConfig(steps=2, batch_size=4)
    words = ["1", "2", "3", "+"]
    for name in ("a", "b"):
        bases.warm_start_base(tmp_path / name, words, "tiny", 16, lambda: texts, sft, seed=0)
    assert sha256(tmp_path / "a" / "model.safetensors") == sha256(tmp_path / "b" / "model.safetensors")
    assert models.load(tmp_path / "a")[1].convert_tokens_to_ids("+") > 0


def test_held_out_seeds_skips_repeats_and_is_cached():
    class Env:
        def reset(self, seed=None, options=None):
            self.problem = (seed * seed) % 7  # seeds 0-6 pose 0, 1, 4, 2, 2, 4, 1
            return str(self.problem), {}

        def problem_key(self):
            return self.problem

    seeds = bases.held_out_seeds(Env)
    assert seeds(4) == [0, 1, 2, 3] and seeds(4) is seeds(4) and seeds.cache_info().hits == 2


def test_by_scale_rejects_unknown_scales():
    assert course_config.by_scale("c", "g", "gpu") == "g"
    with pytest.raises(ValueError):
        course_config.by_scale("c", "g", "tpu")


def test_designed_experiment_runs_instead_of_the_chapter():
    """The `--flag` hook runs the experiment with the seeds and --record, and the chapter's seed loop does not run."""
    import argparse

    calls = []
    chapter = object()
    configure = command.designed_experiment("special", lambda seeds, record: calls.append((seeds, record)))
    assert configure(chapter, argparse.Namespace(special=False, seeds=[0], record=False), None) is chapter
    assert calls == []
    assert configure(chapter, argparse.Namespace(special=True, seeds=[3, 4], record=True), None) is None
    assert calls == [([3, 4], True)]


def test_base_for_refuses_a_checkpoint_on_an_environment_without_demonstrations(tmp_path, monkeypatch):
    """A chapter forked onto another environment (chapters 07 and 08 take `env_name`) has no demonstrations of it to
    warm a checkpoint on: `--model` there is refused before anything loads; without `--model` the base loads."""
    from course_lib.chapters import ch07_gigpo as ch07
    from course_lib.rl.session import MODEL_VARIABLE as ENV_VARIABLE

    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setenv(ENV_VARIABLE, str(tmp_path))
    config = ch07.preset("cpu")
    never = lambda: pytest.fail("no demonstrations may be built")  # noqa: E731
    with pytest.raises(ValueError, match="warm-starts on key_door's demonstrations; number_line has none here"):
        bases.base_for(config.base, config, never, demonstrated=("key_door", "number_line"))
    monkeypatch.delenv(ENV_VARIABLE)
    model, tokenizer, same = bases.base_for(config.base, config, never, demonstrated=("key_door", "number_line"))
    assert same is config and model.num_parameters() > 0 and len(tokenizer) > 0


ENV_MODULE = '''
from course_lib import envs
from course_lib.envs.template import NumberLineEnv


class CopiedLine(NumberLineEnv):
    """An environment of a fork's own, registered when its module is imported."""


envs.register("copied_line", CopiedLine)
'''


def _env_package(tmp_path, monkeypatch, name: str) -> str:
    """A package `name` on the path holding `line.py`, which registers `copied_line` when imported."""
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / name / "line.py").write_text(ENV_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{name}.line"


def test_env_module_registers_a_forks_environment_from_the_command_line(tmp_path, monkeypatch, capsys,
                                                                        number_line_base):  # fmt: skip
    """Issue 42, item 13: `--env-module my_pkg.my_env` imports the module that registers a fork's environment before
    the config is resolved (as OpenEnv's server takes `--import`); an environment no module registered, and a module
    that does not import, stop the command before anything runs, naming them."""
    from course_lib.chapters import ch07_gigpo as ch07

    module = _env_package(tmp_path, monkeypatch, "fork_envs_a")
    sets = ["env_name=copied_line", f"base={number_line_base}", "sampling.stop_tags=['</move>']", "grpo.iterations=1",
            "grpo.prompts_per_iteration=2", "grpo.group_size=4", "grpo.eval_every=1", "eval_tasks=8"]  # fmt: skip
    argv = ["--seeds", "0", *[part for text in sets for part in ("--set", text)]]
    with pytest.raises(SystemExit):
        command.main(ch07.CHAPTER, argv)
    error = capsys.readouterr().err
    assert "unknown environment 'copied_line'" in error and "--env-module" in error
    with pytest.raises(SystemExit):
        command.main(ch07.CHAPTER, ["--env-module", "fork_envs_a.missing", *argv])
    assert "--env-module fork_envs_a.missing cannot be imported (ModuleNotFoundError" in capsys.readouterr().err
    command.main(ch07.CHAPTER, ["--env-module", module, *argv])
    assert "C7.2 not applicable" in capsys.readouterr().out


def _training_chapter(warm_model, tokenizer):
    """A chapter whose run trains twice (two arms) on tool_arithmetic from a warm model: what `--checkpoint-dir` and
    `--resume` reach through the run session (`session.checkpointing`) without the chapter passing anything."""
    import copy
    from dataclasses import dataclass

    from course_lib import envs
    from course_lib.engine.rollout import SamplingConfig
    from course_lib.rl.train import GRPOConfig, train_grpo

    @dataclass
    class Config:
        iterations: int = 2
        eval_tasks: int = 4

    def run(seed, config=None):
        config = config or Config()
        histories = {}
        for arm, rate in (("slow", 1e-4), ("fast", 1e-3)):
            grpo = GRPOConfig(iterations=config.iterations, prompts_per_iteration=2, group_size=2, learning_rate=rate)
            histories[arm] = train_grpo(copy.deepcopy(warm_model), tokenizer, lambda: envs.make("tool_arithmetic"),
                                        SamplingConfig(max_turn_tokens=8, max_total_tokens=40), grpo, seed)  # fmt: skip
        return {"histories": histories, "x": 1.0, "minutes": 0.0}

    return skeleton.Chapter("ch98", "Training toy", run, lambda r: {"x": r["x"]}, CLAIMS, preset=Config)


def test_checkpoint_dir_and_resume_reach_every_training_run_of_a_chapter(warm_model, tokenizer, tmp_path, capsys):
    """Issue 42, items 14 and 7: `--checkpoint-dir DIR` checkpoints each training run of a seed into
    `DIR/<chapter>-seed<k>/<k>-<method>`; `--resume` continues them, bit for bit as an uninterrupted run, saying where
    it resumed; `--resume` without a checkpoint folder, or with one that does not exist, is refused before anything
    runs; and a resume with other settings is refused, naming them."""
    chapter = _training_chapter(warm_model, tokenizer)

    def timeless(history):
        return [{k: v for k, v in row.items() if not k.startswith("time_")} for row in history]

    [whole] = command.main(chapter, ["--seeds", "0"])
    folder = tmp_path / "checkpoints"
    command.main(chapter, ["--seeds", "0", "--set", "iterations=1", "--checkpoint-dir", str(folder)])
    assert sorted(p.name for p in (folder / "ch98-seed0").iterdir()) == ["1-grpo", "2-grpo"]
    capsys.readouterr()
    [resumed] = command.main(chapter, ["--seeds", "0", "--checkpoint-dir", str(folder), "--resume"])
    assert "resumed from iteration 0 in" in capsys.readouterr().out
    assert all(timeless(resumed["histories"][a]) == timeless(whole["histories"][a]) for a in ("slow", "fast"))
    with pytest.raises(ValueError, match=r"settings.eval_tasks: 4 there, 8 here"):
        command.main(chapter, ["--seeds", "0", "--checkpoint-dir", str(folder), "--resume", "--set", "eval_tasks=8"])
    for argv, message in (
        (["--resume"], "--resume continues the runs under --checkpoint-dir: give it"),
        (["--resume", "--checkpoint-dir", str(tmp_path / "nowhere")], "nowhere does not exist"),
    ):
        with pytest.raises(SystemExit):
            command.main(chapter, ["--seeds", "0", *argv])
        assert message in capsys.readouterr().err


def test_an_interrupted_command_ends_with_a_resume_hint(tmp_path, capsys):
    """Issue 42, item 16: Ctrl-C during a seed ends the command with exit code 130 and a line saying how to resume
    (or how to make the run resumable), not a raw traceback."""

    def interrupted(seed):
        raise KeyboardInterrupt

    resumable = (["--checkpoint-dir", str(tmp_path)], f"add --resume (its checkpoints are under {tmp_path})")
    for argv, hint in (([], "run with --checkpoint-dir DIR"), resumable):
        with pytest.raises(SystemExit) as exit_info:
            command.main(toy(run=interrupted), ["--seeds", "3", *argv])
        assert exit_info.value.code == 130
        error = capsys.readouterr().err
        assert "ch99 interrupted during seed 3" in error and hint in error, error


def test_a_not_applicable_claim_prints_its_reason_apart_from_its_statement(capsys):
    """Issue 42, item 16: the reason a claim does not apply ran into the claim's statement (`... number_line has
    none the number is positive`); it is printed in parentheses, the statement after a colon."""
    chapter = toy(run=lambda seed: {"x": 1, "minutes": 0.0, "not_applicable": {"C9.1": "toy has no number"}})
    command.main(chapter, ["--seeds", "0"])
    assert "  C9.1 not applicable (toy has no number): the number is positive" in capsys.readouterr().out.splitlines()


def test_a_forks_record_keeps_the_claims_that_do_not_apply_with_their_reason(tmp_path, monkeypatch):
    """Issue 42, item 14: a fork on another environment has claims that do not apply (chapter 07's C7.2); its record
    in its own folder says so, with the reason, instead of a FAIL computed from NaN; the course's own results/ still
    refuses such a run, since its records hold every claim of their chapter."""
    import json

    from course_lib.course import recorded

    monkeypatch.setattr(recorded, "_run_provenance", None)
    chapter = toy(run=lambda seed: {"x": 1, "minutes": 0.0, "not_applicable": {"C9.1": "toy has no number"}})
    command.main(chapter, ["--seeds", "0", "--record", "--out", str(tmp_path)])
    record = json.loads((tmp_path / "ch99.json").read_text())["seeds"]["0"]
    assert record["verdicts"] == {"C9.1": "not applicable: toy has no number"} and record["passed"] == {"C9.1": False}
    assert record["not_applicable"] == {"C9.1": "toy has no number"}
    monkeypatch.setattr(recorded, "RESULTS_DIR", tmp_path / "course")  # stands for the course's results/
    with pytest.raises(SystemExit, match="do not apply to this setting"):
        command.main(chapter, ["--seeds", "0", "--record"])
    assert not (tmp_path / "course").exists()


def test_an_empty_stop_tag_override_is_refused_before_anything_runs(capsys):
    """Issue 58: `--set sampling.stop_tags=` (empty) brought back runaway turns silently (5.9 turns of 63.6 policy
    tokens against 8.5 and 25.6 on the fork it was found on); the command now stops, naming the setting."""
    from course_lib.chapters import ch07_gigpo as ch07

    with pytest.raises(SystemExit):
        command.main(ch07.CHAPTER, ["--seeds", "0", "--set", "sampling.stop_tags="])
    error = capsys.readouterr().err
    assert "sampling.stop_tags" in error and "stop_tags is empty" in error


def test_an_override_an_arm_table_overwrites_is_refused_or_said(monkeypatch, capsys):
    """Issue 58: chapter 07 accepted `--set grpo.advantage=rloo`, echoed it, then trained its own four estimators
    (each arm sets `advantage`); chapter 08's arms overwrite `grpo.sampler` the same way, and chapter 09's every
    filter setting. An override no arm trains with now stops the command, naming each arm's own value; one that
    some arms keep their own value of is said before anything runs."""
    from course_lib.chapters import ch07_gigpo as ch07
    from course_lib.chapters import ch08_arpo as ch08
    from course_lib.chapters import ch09_ragen as ch09
    from course_lib.rl import seams

    monkeypatch.setitem(seams.SEAMS["advantage"], "rloo", seams.grpo)  # a fork's estimator, registered
    for chapter, setting, kept in (
        (ch07.CHAPTER, "grpo.advantage=rloo", "gigpo_mean ('gigpo')"),
        (ch09.CHAPTER, "grpo.filter.keep_fraction=0.5", "starpo_s (0.25)"),
    ):
        with pytest.raises(SystemExit):
            command.main(chapter, ["--seeds", "0", "--set", setting])
        error = capsys.readouterr().err
        assert setting.split("=")[0] in error and "would be ignored" in error, error
        assert kept in error and "fork the chapter's arm table" in error
    config = skeleton.resolved_config(ch08.CHAPTER, ["grpo.sampler=groups"])
    refused, partly = skeleton.ignored_overrides(ch08.CHAPTER, config, ["grpo.sampler"])
    assert not refused and partly[0].startswith("grpo.sampler='groups' is trained by 1 of 5 arms; arpo ('tree'), ")
    config = skeleton.resolved_config(ch07.CHAPTER, ["grpo.iterations=3"])
    assert skeleton.ignored_overrides(ch07.CHAPTER, config, ["grpo.iterations"])[1] == [
        "grpo.iterations=3 is trained by 4 of 6 arms; noisy_grpo (5), noisy_gigpo (5) keep their own"
    ]  # the noisy view's runs have their own count, `noisy_iterations`
    assert skeleton.ignored_overrides(ch07.CHAPTER, config, ["grpo.learning_rate", "eval_tasks"]) == ([], [])


def test_every_chapter_with_an_arm_table_tells_the_command_its_arms():
    """A chapter whose arms set loop fields (`arm_config`) must give `Chapter.arms`, or its overrides go unchecked."""
    from course_lib import chapters

    for key in chapters.modules():
        module = chapters.module(key)
        if hasattr(module, "arm_config") and hasattr(module, "CHAPTER"):
            assert module.CHAPTER.arms is not None, f"{key} has arm_config but no Chapter.arms"
            arms = module.CHAPTER.arms(module.preset("cpu"))
            assert arms and all(hasattr(grpo, "advantage") for grpo in arms.values()), key
