"""`python -m course_lib.lab.scaffold`: a new chapter on an environment of yours, written outside the course, runs
as a course chapter does (overrides, tracking, resume), and its own test and notebook stub are what the course asks."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from course_lib import models
from course_lib.chapters import command, skeleton
from course_lib.envs.template import vocabulary
from course_lib.lab import scaffold
from course_lib.tokenizer import build_tokenizer

TINY = ["grpo.iterations=2", "grpo.prompts_per_iteration=2", "grpo.group_size=4", "grpo.eval_every=1", "eval_tasks=4"]


@pytest.fixture(scope="module")
def chapter(tmp_path_factory):
    """Chapter 20 scaffolded on the template environment with a (random) base folder, imported from its folder."""
    out = tmp_path_factory.mktemp("fork")
    tokenizer = build_tokenizer(vocabulary())
    models.save(models.build_model(tokenizer, "micro", max_positions=128), tokenizer, out / "base")
    paths = scaffold.scaffold(20, "my_line", "number_line", str(out / "base"), out, stops=("</move>",))
    assert [p.name for p in paths] == ["ch20_my_line.py", "test_ch20_my_line.py", "20_my_line.ipynb"]
    sys.path.insert(0, str(out))
    try:
        yield importlib.import_module("ch20_my_line"), out
    finally:
        sys.path.remove(str(out))
        sys.modules.pop("ch20_my_line", None)


def test_it_refuses_to_overwrite_and_bad_names(tmp_path):
    scaffold.scaffold(21, "a", "number_line", "base", tmp_path)
    with pytest.raises(FileExistsError):
        scaffold.scaffold(21, "a", "number_line", "base", tmp_path)
    with pytest.raises(ValueError, match="identifier"):
        scaffold.scaffold(22, "My Line", "number_line", "base", tmp_path)


def test_the_command_takes_overrides_and_logs_to_a_tracker(chapter, tmp_path, capsys):
    module, _ = chapter
    sets = [part for text in TINY for part in ("--set", text)]
    [out] = command.main(module.CHAPTER, ["--seeds", "0", *sets, "--report-to", "jsonl", "--run-dir", str(tmp_path)])
    assert set(out["histories"]) == {"grpo", "gigpo"}
    printed = capsys.readouterr().out
    assert "C20.1" in printed and "C20.2" in printed
    rows = [json.loads(line) for line in (tmp_path / "ch20-seed0" / "metrics.jsonl").read_text().splitlines()]
    assert {row["run"] for row in rows} == {"1-grpo", "2-gigpo"} and len(rows) == 6


def test_an_interrupted_run_resumes_bit_for_bit(chapter, tmp_path):
    module, _ = chapter
    whole = module.run(0, skeleton.resolved_config(module.CHAPTER, TINY))
    folder = f"checkpoint_dir={tmp_path}"
    module.run(0, skeleton.resolved_config(module.CHAPTER, [*TINY, "grpo.iterations=1", folder]))
    resumed = module.run(0, skeleton.resolved_config(module.CHAPTER, [*TINY, folder, "resume=true"]))

    def timeless(history):
        return [{k: v for k, v in row.items() if not k.startswith("time_")} for row in history]

    for arm in module.ARMS:
        assert timeless(resumed["histories"][arm]) == timeless(whole["histories"][arm]), arm


@pytest.mark.slow
def test_its_own_test_passes_and_its_notebook_follows_the_template(chapter):
    _, out = chapter
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_ch20_my_line.py"],
        cwd=out, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    cells = json.loads((out / "20_my_line.ipynb").read_text())["cells"]
    markdown = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert markdown.startswith("# 20 · ") and "arXiv 2505.10978" in markdown and "**Time.**" in markdown
    positions = [markdown.find(f"## {k} ") for k in range(1, 9)]
    assert all(p >= 0 for p in positions) and positions == sorted(positions)


def test_a_resume_with_other_settings_is_refused_naming_them(chapter, tmp_path):
    """Issue 42, item 8: the scaffold's chapter fingerprints its whole resolved config, so resuming with another
    `eval_tasks` (or `env_kwargs`) is refused instead of mixing two settings in one history."""
    module, _ = chapter
    folder = f"checkpoint_dir={tmp_path}"
    module.run(0, skeleton.resolved_config(module.CHAPTER, [*TINY, "grpo.iterations=1", folder]))
    with pytest.raises(ValueError, match=r"settings.eval_tasks: 4 there, 6 here"):
        module.run(0, skeleton.resolved_config(module.CHAPTER, [*TINY, folder, "resume=true", "eval_tasks=6"]))
    with pytest.raises(ValueError, match=r"resume=true: checkpoint_dir .*nowhere' does not exist"):
        module.run(0, skeleton.resolved_config(module.CHAPTER, [*TINY, f"checkpoint_dir={tmp_path / 'nowhere'}",
                                                                "resume=true"]))  # fmt: skip
