"""Watching chapter commands train (`course_lib.tracking`): a line per evaluation and a bar on a terminal, without
changing a number."""

from __future__ import annotations

import dataclasses
import io
import re

import pytest

from course_lib import tracking, train
from course_lib.chapters import ch00_tool_agent as ch00
from course_lib.chapters import skeleton

TINY = ["--set", "grpo.iterations=2", "--set", "grpo.prompts_per_iteration=2", "--set", "grpo.group_size=4",
        "--set", "grpo.eval_every=1", "--set", "eval_tasks=4"]  # fmt: skip
"""Chapter 00 cut to seconds by overrides: two iterations of 2 x 4 episodes, evaluated on 4 held-out tasks."""


def without_times(history):
    return [{key: value for key, value in record.items() if not key.startswith("time_")} for record in history]


@pytest.fixture(scope="module")
def unobserved():
    """Chapter 00's tiny run through its own `run`, as a notebook calls it: nothing observes it."""
    config = skeleton.resolved_config(ch00.CHAPTER, [text for text in TINY if text != "--set"])
    return ch00.run(0, config)


def test_a_command_prints_each_evaluation_without_changing_a_number(unobserved, capsys):
    [results] = skeleton.main(ch00.CHAPTER, ["--seeds", "0", *TINY])
    history = results["history"]
    assert without_times(history) == without_times(unobserved["history"]), "observing changes no number"
    assert train.train_grpo is ch00.train_grpo, "the chapter module holds the original function again"
    lines = [line for line in capsys.readouterr().out.splitlines() if " iteration " in line]
    assert [re.match(r"  seed 0 1-grpo iteration (\d)/2: eval_success ", line)[1] for line in lines] == ["0", "1", "2"]
    assert f"{history[1]['eval_success']:.3f}" in lines[1].split("eval_success ")[1][:5]


def test_observing_labels_each_call_and_restores_the_modules_after_an_error():
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

    recorder, original = Recorder(), train.train_grpo
    with pytest.raises(AttributeError, match="parameters"), tracking.observing("ch00", 0, [recorder]):
        assert ch00.train_grpo is not original
        ch00.train_grpo(None, None, None, None, train.GRPOConfig(iterations=3, advantage="gigpo"), 0)  # no model
    assert ch00.train_grpo is original and train.train_grpo is original
    assert recorder.events[0] == ("start", "1-gigpo", 3)
    assert recorder.events[-2:] == [("finish", "1-gigpo"), ("close",)]


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
