"""Watching chapter commands train (`course_lib.rl.tracking`): a line per evaluation, a bar on a terminal, trackers
(jsonl always; tensorboard read back when installed; wandb offline when installed), all without changing a number;
and `--report-to` / `--save-steps` passed through to TRL."""

from __future__ import annotations

import dataclasses
import io
import json
import re
from pathlib import Path

import pytest
import torch

from course_lib import course_config, data
from course_lib.chapters import ch00_tool_agent as ch00
from course_lib.chapters import command, skeleton
from course_lib.rl import session, tracking, train
from course_lib.tasks import tool_arithmetic

TINY = ["--set", "grpo.iterations=2", "--set", "grpo.prompts_per_iteration=2", "--set", "grpo.group_size=4",
        "--set", "grpo.eval_every=1", "--set", "eval_tasks=4"]  # fmt: skip
"""Chapter 00 cut to seconds by overrides: two iterations of 2 x 4 episodes, evaluated on 4 held-out tasks."""


def without_times(history):
    return [{key: value for key, value in record.items() if not key.startswith("time_")} for record in history]


@pytest.fixture(scope="module")
def unobserved():
    """Chapter 00's tiny run through its own `run`, as a notebook calls it: nothing observes it. At the course's
    thread count, as the command runs it (a sum split over another count rounds differently)."""
    config = skeleton.resolved_config(ch00.CHAPTER, [text for text in TINY if text != "--set"])
    previous = torch.get_num_threads()
    course_config.use_threads()
    try:
        return ch00.run(0, config)
    finally:
        torch.set_num_threads(previous)


def test_a_command_prints_each_evaluation_and_logs_every_record_without_changing_a_number(unobserved, tmp_path, capsys):
    [results] = command.main(ch00.CHAPTER, ["--seeds", "0", *TINY, "--report-to", "jsonl", "--run-dir", str(tmp_path)])
    history = results["history"]
    assert without_times(history) == without_times(unobserved["history"]), "observing changes no number"
    assert train.train_grpo is tool_arithmetic.train_grpo, "the chapter module holds the original function again"
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if " iteration " in line]
    assert [re.match(r"  seed 0 1-grpo iteration (\d)/2: eval_success ", line)[1] for line in lines] == ["0", "1", "2"]
    assert f"{history[1]['eval_success']:.3f}" in lines[1].split("eval_success ")[1][:5]
    assert f"seed 0: jsonl under {tmp_path / 'ch00-seed0'}" in out
    logged = [json.loads(line) for line in (tmp_path / "ch00-seed0" / "metrics.jsonl").read_text().splitlines()]
    assert [(row["run"], row["iteration"]) for row in logged] == [("1-grpo", 0), ("1-grpo", 1), ("1-grpo", 2)]
    for row, record in zip(logged, history, strict=True):
        assert {key: row[key] for key in tracking.metrics(record)} == tracking.metrics(record)


def test_the_command_run_as_a_module_is_observed_too(tmp_path):
    """`python -m course_lib.chapters.ch00_tool_agent`: the chapter module is `__main__` there, not the course's
    `course_lib.chapters...` (a wrapper put only into course_lib's modules would see nothing)."""
    import os
    import subprocess
    import sys

    argv = ["-m", "course_lib.chapters.ch00_tool_agent", "--seeds", "0", *TINY, "--report-to", "jsonl"]
    done = subprocess.run([sys.executable, *argv, "--run-dir", str(tmp_path)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], env={**os.environ, "OMP_NUM_THREADS": "1"},
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(re.findall(r"^  seed 0 1-grpo iteration \d/2: eval_success", done.stdout, flags=re.MULTILINE)) == 3
    assert len((tmp_path / "ch00-seed0" / "metrics.jsonl").read_text().splitlines()) == 3


def test_tensorboard_writes_a_run_whose_scalars_read_back(tmp_path):
    pytest.importorskip("tensorboard")  # in the dev extra; a plain install tests the jsonl tracker only
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    [results] = command.main(
        ch00.CHAPTER, ["--seeds", "3", *TINY, "--report-to", "tensorboard", "jsonl", "--run-dir", str(tmp_path)]
    )
    [events] = (tmp_path / "ch00-seed3" / "tensorboard" / "1-grpo").glob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(events.parent))
    accumulator.Reload()
    history = results["history"]
    success = [(event.step, event.value) for event in accumulator.Scalars("eval_success")]
    assert success == [(r["iteration"], pytest.approx(r["eval_success"])) for r in history]
    assert [event.value for event in accumulator.Scalars("loss")] == pytest.approx([r["loss"] for r in history[:-1]])
    assert (tmp_path / "ch00-seed3" / "metrics.jsonl").exists()


def test_wandb_writes_an_offline_run(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    command.main(ch00.CHAPTER, ["--seeds", "0", *TINY, "--report-to", "wandb", "--run-dir", str(tmp_path)])
    assert list((tmp_path / "ch00-seed0" / "wandb").glob("offline-run-*")), "an offline run to `wandb sync`"


def test_trackio_writes_a_local_project(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))  # read when trackio is first imported
    pytest.importorskip("trackio")  # not in dev (it brings gradio's client): run where the track extra is installed
    command.main(ch00.CHAPTER, ["--seeds", "0", *TINY, "--report-to", "trackio", "--run-dir", str(tmp_path)])
    assert (tmp_path / "trackio" / "course-ch00.db").exists()


def test_a_tracker_that_is_not_installed_is_refused_before_the_run(monkeypatch, capsys):
    monkeypatch.setitem(tracking.TRACKERS, "wandb", (tracking.WandbTracker, "no_such_package_for_the_course"))
    with pytest.raises(SystemExit):
        command.main(ch00.CHAPTER, ["--seeds", "0", "--report-to", "wandb"])
    assert "--report-to needs no_such_package_for_the_course" in capsys.readouterr().err


def test_observing_labels_each_run_and_hears_it_end_after_an_error():
    class Recorder:
        def __init__(self):
            self.events = []

        def start(self, run):
            self.events.append(("start", run.name, run.iterations))

        def log(self, run, record):
            self.events.append(("log", run.name, record["iteration"]))

        def finish(self, run):
            self.events.append(("finish", run.name))

        def close(self):
            self.events.append(("close",))

    def failing(model):
        raise RuntimeError("the evaluator broke")

    recorder = Recorder()
    model, tokenizer = data.load_base(ch00.BASE_NAME)
    config = train.GRPOConfig(iterations=3, prompts_per_iteration=1, group_size=2, eval_every=1, advantage="gigpo")
    with pytest.raises(RuntimeError, match="evaluator broke"), tracking.observing("ch00", 0, [recorder]):
        tool_arithmetic.train_grpo(model, tokenizer, ch00.make_env, ch00.preset().sampling, config, 0, evaluate=failing)
    assert recorder.events == [("start", "1-gigpo", 3), ("finish", "1-gigpo"), ("close",)]
    assert session.current().observers == (), "the observer is gone after the block"


def test_run_names_fit_a_folder_and_keep_the_method():
    config = dataclasses.replace(train.GRPOConfig(), advantage="gigpo", rollout_mode="step", sampler="tree")
    run = tracking.TrainingRun("ch07", 0, 2, train.method_label(config), 1, {})
    assert run.method == "gigpo [tree, step mode]" and run.name == "2-gigpo-tree-step-mode"


def test_the_bar_shows_the_method_and_current_metrics_and_lines_go_above_it():
    run = tracking.TrainingRun("ch07", 0, 2, "gigpo [step mode]", 2, {})
    stream = io.StringIO()
    progress = tracking.Progress(bar=True, stream=stream)
    progress.start(run)
    progress.log(run, {"iteration": 0, "success": 0.25, "loss": 0.5, "eval_success": 0.3})
    progress.log(run, {"iteration": 1, "success": 0.5, "loss": 0.1})
    assert progress.bar.n == 2 and progress.bar.desc == "seed 0 gigpo [step mode]"
    assert progress.bar.postfix == "success=0.500, loss=0.100, eval_success=0.300"
    progress.close()
    assert stream.getvalue() == "  seed 0 2-gigpo-step-mode iteration 0/2: eval_success 0.300\n"


# TRL ---------------------------------------------------------------------------------------------------------------
def test_trl_takes_report_to_and_save_steps(tmp_path, capsys):
    pytest.importorskip("trl")
    pytest.importorskip("tensorboard")
    from course_lib.integrations import course_trl

    settings = course_trl.TRLSettings()
    with course_trl.quiet_deprecations():
        assert course_trl.grpo_config(settings, str(tmp_path), 8).save_strategy == "no", "unchanged by default"
    argv = ["--chapter", "00", "--steps", "2", "--prompts", "2", "--group", "4", "--report-to", "tensorboard",
            "--save-steps", "1", "--output-dir", str(tmp_path)]  # fmt: skip
    assert course_trl.main(argv) == 0
    assert sorted(path.name for path in tmp_path.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    assert (tmp_path / "checkpoint-2" / "optimizer.pt").exists()
    assert list(tmp_path.glob("runs/*/events.out.tfevents.*")), "TRL's own tensorboard log"
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2] == f"TRL's checkpoints and tracker logs are under {tmp_path}"
    assert lines[-1].startswith("trl_grpo_steps=2 ")


def test_a_run_interrupted_twice_and_resumed_is_tracked_as_one_uninterrupted_run(warm_model, tokenizer, tmp_path):
    """Issue 42, item 6: `--report-to jsonl` opened `metrics.jsonl` with "w", so a run interrupted twice and resumed
    kept the last process's rows only. A resumed run appends; the rows its checkpoint did not keep (logged, then
    killed before the save) are dropped as the run logs them again, so the file equals an uninterrupted run's; and
    TensorBoard hides those steps (`purge_step`) instead of logging them twice."""
    from course_lib import envs
    from course_lib.engine.rollout import SamplingConfig

    tensorboard = True
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:  # a plain install checks the jsonl tracker only
        tensorboard = False

    class Killed(Exception):
        pass

    class Killer:
        """Dies right after the trackers logged iteration `at`, before that iteration's checkpoint is written."""

        def __init__(self, at):
            self.at = at

        def start(self, run):
            pass

        def log(self, run, record):
            if record["iteration"] == self.at:
                raise Killed

        def finish(self, run):
            pass

        def close(self):
            pass

    def trackers(folder):
        made = [tracking.JsonlTracker(folder, "chX", 0)]
        return made + ([tracking.TensorBoardTracker(folder, "chX", 0)] if tensorboard else [])

    config = train.GRPOConfig(iterations=4, prompts_per_iteration=2, group_size=2, eval_every=2)
    sampling = SamplingConfig(max_turn_tokens=8, max_total_tokens=40)

    def run(model, folder, killer=None, **options):
        with tracking.observing("chX", 0, [*trackers(folder), *([killer] if killer else [])]):
            return train.train_grpo(model, tokenizer, lambda: envs.make("tool_arithmetic"), sampling, config, 0,
                                    evaluate=lambda m: {"probe": 1.0}, **options)  # fmt: skip

    import copy

    run(copy.deepcopy(warm_model), tmp_path / "reference")
    checkpoints = tmp_path / "checkpoints"
    with pytest.raises(Killed):
        run(copy.deepcopy(warm_model), tmp_path / "tracked", Killer(1), checkpoint_dir=checkpoints)
    with pytest.raises(Killed):
        run(copy.deepcopy(warm_model), tmp_path / "tracked", Killer(3), checkpoint_dir=checkpoints, resume=True)
    run(copy.deepcopy(warm_model), tmp_path / "tracked", checkpoint_dir=checkpoints, resume=True)

    def rows(folder):
        lines = (folder / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(line).items() if not k.startswith("time_")} for line in lines]

    assert [(row["run"], row["iteration"]) for row in rows(tmp_path / "tracked")] == [("1-grpo", i) for i in range(5)]
    assert rows(tmp_path / "tracked") == rows(tmp_path / "reference")
    if tensorboard:
        accumulator = EventAccumulator(str(tmp_path / "tracked" / "tensorboard" / "1-grpo"))
        accumulator.Reload()
        assert [event.step for event in accumulator.Scalars("loss")] == [0, 1, 2, 3]
        assert [event.step for event in accumulator.Scalars("eval_probe")] == [0, 2, 4]
