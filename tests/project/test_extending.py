"""The documentation's commands run as written.

docs/extending.md: its `python` and `bash` blocks, in order, in an empty folder: the `python` blocks in one fresh
interpreter, each `bash` block in a shell in that folder at its place among them, a `python` block whose first line
is `# file: PATH` saved at PATH. Every other page's course commands (`python -m course_lib...` in a `bash` block of
README.md and docs/*.md) are parsed by the command's own argument parser, so a flag, a choice or a module that no
longer exists fails here; they are not run, as most take minutes, a GPU or a model of the reader's.
"""

from __future__ import annotations

import argparse
import os
import re
import runpy
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "extending.md"
BLOCK = re.compile(r"```(python|bash)\n(.*?)```", flags=re.DOTALL)
FILE = "# file: "

RUNNER = '''
import pathlib as _pathlib
import subprocess as _subprocess
import sys as _sys


def _save(path, text):
    """A `# file:` block: written where it says, relative to the folder the guide runs in."""
    target = _pathlib.Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def _bash(script):
    """A `bash` block: run in a shell in this folder, its output shown; a failing command fails the guide."""
    print(f"$ {script.strip().splitlines()[0]}", flush=True)
    done = _subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], capture_output=True, text=True)
    print(done.stdout + done.stderr, flush=True)
    if done.returncode:
        tail = done.stdout[-3000:] + done.stderr[-3000:]
        raise SystemExit(f"bash block failed ({done.returncode}):\\n{script}\\n{tail}")
'''


def blocks(text: str | None = None) -> list[tuple[str, str]]:
    """`(language, body)` of every `python` and `bash` block of the guide (or of `text`), in order."""
    return BLOCK.findall(GUIDE.read_text() if text is None else text)


def script(guide: list[tuple[str, str]]) -> str:
    """The guide as one Python script: `RUNNER`, then each block in order (`_save`, the code, or `_bash`)."""
    parts = [RUNNER]
    for language, body in guide:
        first = body.splitlines()[0] if body.strip() else ""
        if language == "bash":
            parts.append(f"_bash({body!r})")
        elif first.startswith(FILE):
            parts.append(f"_save({first[len(FILE) :].strip()!r}, {body.split(chr(10), 1)[1]!r})")
        else:
            parts.append(body)
    return "\n\n".join(parts)


def test_the_guide_has_a_recipe_per_extension():
    text = GUIDE.read_text()
    headings = (
        "A new environment",
        "Training on it",
        "A new method",
        "A model of your own",
        "Runs you can",
        "A new chapter",
        "Forking a chapter from the command line",
    )
    for heading in headings:
        assert f"· {heading}" in text, heading
    kinds = [language for language, _ in blocks()]
    assert kinds.count("python") >= 8 and kinds.count("bash") >= 3


def test_the_guide_lists_every_info_key_the_course_reads():
    """The environment contract in one place (`envs.contract.INFO_KEYS`) and in the guide's table, key for key."""
    from course_lib.envs.contract import INFO_KEYS

    table = GUIDE.read_text().split("| key | on | read by |")[1].split("\n\n")[0]
    assert all(f"`{key.name}`" in table for key in INFO_KEYS), [k.name for k in INFO_KEYS if f"`{k.name}`" not in table]


def test_the_runner_saves_files_and_stops_at_a_failing_command(tmp_path):
    """The harness itself: a `# file:` block is saved, not run; a bash block runs in the guide's folder and its
    output is shown; a failing command fails the whole guide (so a broken recipe cannot pass)."""
    guide = blocks(
        "```python\n# file: pkg/mod.py\nVALUE = 3\n```\n```bash\ncat pkg/mod.py\n```\n"
        "```python\nimport sys\nsys.path.insert(0, 'pkg')\nimport mod\nprint('value', mod.VALUE)\n```\n"
        "```bash\nfalse\necho never\n```\n"
    )
    done = subprocess.run([sys.executable, "-c", script(guide)], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode != 0 and "bash block failed (1)" in done.stderr
    assert "VALUE = 3" in done.stdout and "value 3" in done.stdout and "never" not in done.stdout


@pytest.mark.slow
def test_every_recipe_runs_as_written(tmp_path):
    """Each block's printed lines are kept; a failing block fails the test with its output. The environment passes
    its contract check, the methods and the registered one train, the stand-in's checks are exact, the forks of
    chapters 07 and 08 stop at the environment's tag, are recorded into the fork's folder with their provenance,
    resumed and tracked as one run, and nothing is written into the course's results/."""
    results = ROOT / "results"
    before = {path: path.stat().st_mtime_ns for path in results.rglob("*")}
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run([sys.executable, "-c", script(blocks())], cwd=tmp_path, capture_output=True, text=True,
                          env=environment, timeout=1500)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert {path: path.stat().st_mtime_ns for path in results.rglob("*")} == before, "the course's results/ untouched"
    check_guide_output(done.stdout, tmp_path)


def check_guide_output(out: str, folder: Path) -> None:
    """What the guide's blocks printed and wrote in `folder`, block by block."""
    tmp_path = folder
    # 1-3: the environment, its warm start, the loop's estimators
    assert "ok    reset:" in out and "ok    valid: 3 valid episodes" in out and "\nFAIL  " not in out
    assert re.search(r"^base: held-out success 0\.\d\d$", out, flags=re.MULTILINE), out
    for method in ("grpo", "gigpo"):
        assert re.search(rf"^{method}: training reward \S+ -> \S+, held-out success \S+$", out, re.MULTILINE), out
    assert re.search(r"^rloo: 2 iterations, loss \S+$", out, flags=re.MULTILINE), out
    # 4: a model of your own
    assert "{'id_errors': 0, 'mask_errors': 0, 'text_errors': 0}" in out
    # 5: overrides, tracking, resume, on the command line and from Python
    assert re.search(r"^  seed 0 4-gigpo-step-mode-no-std iteration 2/2: eval_success \S+", out, re.MULTILINE), out
    assert (tmp_path / "runs" / "ch07-seed0" / "metrics.jsonl").exists()
    assert (tmp_path / "runs" / "trl" / "checkpoint-1").is_dir()
    assert re.search(r"^trl_grpo_steps=1 loss=\S+ reward=\S+$", out, flags=re.MULTILINE), out
    assert re.search(r"^  seed 0 1-grpo iteration 2/2: eval_success \S+", out, flags=re.MULTILINE), out
    assert re.search(r"^tracked: 3 records of run 1-grpo, held-out success \S+$", out, flags=re.MULTILINE), out
    assert "resumed: 2 iterations, the first restored from the checkpoint: True" in out
    # 6: a new chapter, its command and its test, its resume; the environment served
    assert (tmp_path / "my_fork" / "runs" / "ch20-seed0" / "metrics.jsonl").exists()
    assert re.search(r"^1 passed", out, flags=re.MULTILINE), out
    assert "ch20: ['gigpo', 'grpo'], resumed run identical to the uninterrupted one: True" in out
    assert re.search(r"^C20\.2 (PASS|not reproduced at this scale)$", out, flags=re.MULTILINE), out
    assert re.search(
        r"^openenv: '<pos> \d \d </pos>', reward \S+, the same as the environment played directly: True$",
        out,
        flags=re.MULTILINE,
    ), out
    # 7: the forks from the command line
    for chapter, own in (("chapter 07", "key_door's ('</action>',)"), ("chapter 08", "two_hop_qa's")):
        assert f"{chapter} on hidden_goal: turns stop at ('</move>',), hidden_goal's stop_tags, not {own}" in out
    assert len(re.findall(r"^resumed from iteration 0 in checkpoints/ch07-seed0/\d-", out, flags=re.MULTILINE)) == 4
    assert "  C8.1 not applicable (it reads the ambiguity two_hop_qa plants; hidden_goal has none): right after" in out
    assert re.search(r"^  C8\.4 (PASS|FAIL) ", out, flags=re.MULTILINE), out
    fork = "env_name hidden_goal, overrides ['--config small.yaml', '--set env_name=hidden_goal', '--set base=base'"
    assert f"ch07 recorded: {fork}], code ['course_lib.chapters.ch07_gigpo', 'my_package.hidden_goal']" in out
    assert "not applicable ['C7.2']" in out and "not applicable ['C8.1']" in out
    whole = "[0, 1, 2]"
    assert f"ch07 tracked: {{'1-grpo-step-mode': {whole}, '2-gigpo-step-mode': {whole}, " in out, out
    assert "chapter 17 runs on key_door (grid) and two_hop_qa (search) only" in out, "chapter 17 refuses the fork"


# Every other page's course commands: parsed by their own parser ---------------------------------------------------
PAGES = [ROOT / "README.md", *sorted(path for path in (ROOT / "docs").glob("*.md") if path != GUIDE)]


def course_commands(text: str) -> list[list[str]]:
    """The argv of every `python -m course_lib...` command in `text`'s bash blocks (continuations joined, comments
    and leading `NAME=value` assignments dropped)."""
    commands = []
    for language, body in blocks(text):
        if language != "bash":
            continue
        for line in body.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                words = words[1:]
            if words[:2] == ["python", "-m"] and words[2].startswith("course_lib"):
                commands.append(words[2:])
    return commands


class Parsed(Exception):
    """Raised by the patched `parse_args` once a command line has been parsed: nothing after it runs."""


@pytest.mark.filterwarnings("ignore:.*found in sys.modules after import of package:RuntimeWarning")  # runpy's
@pytest.mark.parametrize("page", PAGES, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_documented_course_command_parses(page, monkeypatch):
    """Each documented `python -m course_lib...` command is run as `__main__` with `argparse`'s `parse_args` stopping
    it once parsed: the module exists, and its parser takes every flag and choice the page gives it."""
    check_commands(course_commands(page.read_text()), page.name, monkeypatch)


def check_commands(commands: list[list[str]], where: str, monkeypatch) -> None:
    """Run each command's module as `__main__` until its parser has parsed the command line (`Parsed`)."""
    real = argparse.ArgumentParser.parse_args

    def parse_then_stop(parser, args=None, namespace=None):
        real(parser, args, namespace)
        raise Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    for module, *argv in commands:
        monkeypatch.setattr(sys, "argv", [module, *argv])
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=False)
        except Parsed:
            continue
        except SystemExit as exit_info:  # --help prints and leaves with 0; a parser error with 2
            assert exit_info.code in (0, None), f"{where}: python -m {module} {shlex.join(argv)}"
            continue
        raise AssertionError(f"{where}: python -m {module} {shlex.join(argv)} never parsed its command line")


@pytest.mark.filterwarnings("ignore:.*found in sys.modules after import of package:RuntimeWarning")
def test_the_parse_check_fails_a_flag_a_choice_or_a_module_that_does_not_exist(monkeypatch, capsys):
    for command in (
        ["course_lib.chapters.ch00_tool_agent", "--seeds", "0", "--no-such-flag"],
        ["course_lib.integrations.course_trl", "--chapter", "99"],
        ["course_lib.no_such_module"],
    ):
        with pytest.raises((AssertionError, ImportError)):
            check_commands([command], "a page", monkeypatch)
    check_commands(
        [["course_lib.chapters.ch00_tool_agent", "--seeds", "0", "--env-module", "x"]], "a page", monkeypatch
    )


def test_the_pages_commands_are_found():
    """The parse check sees the commands it should (so an empty list cannot pass it)."""
    found = {page.name: len(course_commands(page.read_text())) for page in PAGES}
    assert found["bring-your-own-model.md"] >= 5 and found["scale-out.md"] >= 10 and found["data.md"] >= 4
    assert course_commands(
        "```bash\nCOURSE_SCALE=gpu python -m course_lib.data build \\\n  ch00  # a comment\n```"
    ) == [["course_lib.data", "build", "ch00"]]
