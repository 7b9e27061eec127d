"""Data artifacts are checked against data/MANIFEST.json; failures name the command that rebuilds them."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from course_lib import data
from course_lib.envs.arithmetic import split_of

COMMAND = "python -m course_lib.data build ch00"
REPO_DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.fixture
def artifact(tmp_path):
    """A tiny artifact `ch00_base` with two files (one nested), recorded in a tmp manifest."""
    folder = tmp_path / "ch00_base"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text('{"hidden_size": 32}\n')
    (folder / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 4)
    data.record("ch00_base", COMMAND, 0, data_dir=tmp_path)
    return tmp_path


def test_verify_passes_on_recorded_files(artifact):
    assert data.verify("ch00_base", data_dir=artifact) == artifact / "ch00_base"
    entry = data.read_manifest(artifact)["artifacts"]["ch00_base"]
    assert set(entry["files"]) == {"ch00_base/config.json", "ch00_base/sub/weights.bin"}


def test_missing_file_names_the_build_command(artifact):
    (artifact / "ch00_base" / "sub" / "weights.bin").unlink()
    with pytest.raises(data.DataError, match="missing") as err:
        data.verify("ch00_base", data_dir=artifact)
    assert COMMAND in str(err.value)


def test_corrupted_byte_is_detected(artifact):
    path = artifact / "ch00_base" / "sub" / "weights.bin"
    blob = bytearray(path.read_bytes())
    blob[500] ^= 1
    path.write_bytes(bytes(blob))
    with pytest.raises(data.DataError, match="corrupted") as err:
        data.verify("ch00_base", data_dir=artifact)
    assert COMMAND in str(err.value)


@pytest.mark.parametrize(
    "name, command", [("ch00_nothing", COMMAND), ("ch07_tasks", "python -m course_lib.data build ch07")]
)
def test_unknown_artifact_names_the_build_command(artifact, name, command):
    with pytest.raises(data.DataError) as err:
        data.verify(name, data_dir=artifact)
    assert command in str(err.value)


def test_broken_manifest_is_a_data_error(artifact):
    (artifact / data.MANIFEST).write_text("{not json")
    with pytest.raises(data.DataError, match="not valid JSON"):
        data.verify("ch00_base", data_dir=artifact)


@pytest.mark.skipif(not (REPO_DATA / data.MANIFEST).exists(), reason="no generated data in this checkout")
def test_repository_data_matches_its_manifest():
    """The committed ch00 artifacts verify, and the tasks are the train/test splits they claim to be."""
    assert data.verify("ch00_base", data_dir=REPO_DATA).is_dir()
    tasks = data.load_tasks("ch00_tasks", data_dir=REPO_DATA)
    assert set(tasks) == {"train", "test"} and len(tasks["train"]) > len(tasks["test"]) > 0
    for split in ("train", "test"):
        for question in tasks[split]["question"][:200]:
            a, op, b = question.split()
            assert split_of(int(a), op, int(b)) == split


def test_write_task_set_round_trips_through_load_tasks(tmp_path):
    """A task set written with `write_task_set` is recorded in the manifest and loads back intact."""
    data.write_task_set("ch99_tasks", {"train": {"x": [1, 2, 3]}, "test": {"x": [4]}}, seed=7, data_dir=tmp_path)
    entry = data.read_manifest(tmp_path)["artifacts"]["ch99_tasks"]
    # No chapter ch99 has a builder: the manifest records no command rather than one that does not exist.
    assert entry["seed"] == 7 and entry["command"] is None
    tasks = data.load_tasks("ch99_tasks", data_dir=tmp_path)
    assert tasks["train"]["x"] == [1, 2, 3] and tasks["test"]["x"] == [4]


def test_importing_data_loads_no_chapter():
    """`course_lib.data` imports no chapter module (the chapters import it; only `lab.build` maps a chapter
    to its builder), checked in a fresh interpreter."""
    import subprocess
    import sys

    code = "import sys, course_lib.data; print(sorted(m for m in sys.modules if m.startswith('course_lib.chapters')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_DATA.parent)
    assert out.stdout.strip() == "[]", out.stdout


def test_build_table_names_every_chapter_with_data():
    """`python -m course_lib.data build chNN` knows exactly the chapter modules that define `build_data`."""
    import importlib
    import pkgutil

    from course_lib import chapters
    from course_lib.lab import build

    modules = [m.name for m in pkgutil.iter_modules(chapters.__path__) if m.name[:2] == "ch" and m.name[2:4].isdigit()]
    found = {
        name[:4]: f"course_lib.chapters.{name}"
        for name in modules
        if hasattr(importlib.import_module(f"course_lib.chapters.{name}"), "build_data")
    }
    assert build.builders() == found


def test_data_command_line_keeps_its_commands(capsys):
    """`python -m course_lib.data` still has `build chNN` (choices from the table) and `verify`."""
    import subprocess
    import sys

    from course_lib.lab import build

    help_text = subprocess.run(
        [sys.executable, "-m", "course_lib.data", "build", "--help"],
        capture_output=True, text=True, check=True, cwd=REPO_DATA.parent,
    ).stdout  # fmt: skip
    assert "python -m course_lib.data build" in help_text and "ch00" in help_text
    with pytest.raises(SystemExit):
        build.main(["build", "ch02"])  # chapter 02 reuses chapter 01's data
    assert "invalid choice" in capsys.readouterr().err
    with pytest.raises(KeyError, match="ch01"):
        build.build("ch02")


# Every command a DataError names exists -----------------------------------------------------------------
def assert_command_exists(command: str) -> None:
    """`command` (as a `DataError` quotes it) would run: `python -m course_lib.data ...` parses with the command
    line's own parser (nothing is built), a `python -c` program's imports resolve and every attribute it uses of
    them exists, and `git -C <repo> checkout -- <path>` names a tracked file of this repository."""
    import ast
    import shlex
    import subprocess

    from course_lib.lab import build

    words = shlex.split(command)
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # environment assignments in front
        words.pop(0)
    if words[:3] == ["python", "-m", "course_lib.data"]:
        try:
            build.parser().parse_args(words[3:])
        except SystemExit as exit:  # argparse exits 0 for --help and 2 for arguments it rejects
            assert exit.code == 0, command
    elif words[:2] == ["python", "-c"]:
        tree = ast.parse(words[2])
        imports = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
        namespace: dict = {}
        exec(compile(ast.Module(body=imports, type_ignores=[]), "<command>", "exec"), namespace)
        used = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in namespace
        ]
        assert used, command
        for node in used:
            assert hasattr(namespace[node.value.id], node.attr), f"{node.value.id}.{node.attr} in {command}"
    elif words[:2] == ["git", "-C"]:
        assert Path(words[2]).resolve() == REPO_DATA.parent and words[3:5] == ["checkout", "--"], command
        tracked = subprocess.run(["git", "-C", words[2], "ls-files", "--error-unmatch", words[5]], capture_output=True)
        assert tracked.returncode == 0, command
    else:
        raise AssertionError(f"not a command of this repository: {command}")


def quoted_commands(message: str) -> list[str]:
    """The commands a message quotes (between backticks)."""
    return re.findall(r"`([^`]+)`", message)


def data_error(call) -> str:
    with pytest.raises(data.DataError) as err:
        call()
    return str(err.value)


def test_command_checker_rejects_commands_that_do_not_exist():
    for command in [
        "python -m course_lib.data build counter",
        "python -m course_lib.data build ch00 --scale tpu",
        'python -c "from course_lib import data; data.build_everything()"',
        "git -C . checkout -- MANIFEST.json",
    ]:
        with pytest.raises(AssertionError):
            assert_command_exists(command)


def test_committed_manifest_commands_exist():
    manifest = data.read_manifest(REPO_DATA)["artifacts"]
    for name, entry in manifest.items():
        assert_command_exists(entry["command"])
        assert_command_exists(data._command_for(name, "cpu"))
        gpu = data._command_for(name, "gpu")
        if gpu is not None:  # None: no gpu build makes it (the design base), and the message says so
            assert gpu.endswith("--scale gpu")
            assert_command_exists(gpu)
    from course_lib.chapters import ch08_design

    # The design base is the one artifact not built by a chapter's build command.
    assert manifest[ch08_design.BASE_NAME]["command"] == ch08_design.BUILD_COMMAND
    assert data._command_for(ch08_design.BASE_NAME, "gpu") is None


@pytest.mark.parametrize("name", ["ch00_base", "ch03_base_small", "ch08_design_base", "ch07_tasks"])
def test_artifact_missing_from_a_manifest_names_a_command_that_exists(tmp_path, name):
    message = data_error(lambda: data.verify(name, data_dir=tmp_path))
    (command,) = quoted_commands(message)
    # The build writes into DATA_DIR: a folder other than the repository's data/ is named with COURSE_DATA.
    assert command.startswith(f"COURSE_DATA={tmp_path} python ")
    assert_command_exists(command)


def test_unknown_artifact_names_no_command_that_does_not_exist(tmp_path):
    """The issue's case: a user's own environment `counter` was sent to `python -m course_lib.data build counter`."""
    message = data_error(lambda: data.verify("counter_base", data_dir=tmp_path))
    assert (
        "no course command builds 'counter_base'" in message and "a chapter module that defines build_data" in message
    )
    assert quoted_commands(message) == []


def test_missing_and_corrupted_files_name_a_command_that_exists(artifact):
    weights = artifact / "ch00_base" / "sub" / "weights.bin"
    weights.write_bytes(b"corrupted")
    corrupted = data_error(lambda: data.verify("ch00_base", data_dir=artifact))
    weights.unlink()
    missing = data_error(lambda: data.verify("ch00_base", data_dir=artifact))
    for message, what in [(corrupted, "corrupted"), (missing, "missing")]:
        assert what in message
        assert quoted_commands(message) == [f"COURSE_DATA={artifact} {COMMAND}"]
        assert_command_exists(quoted_commands(message)[0])


def test_own_artifacts_record_their_own_command_or_none(tmp_path):
    splits = {"train": {"x": [1]}, "test": {"x": [2]}}
    data.write_task_set("counter_tasks", splits, seed=0, data_dir=tmp_path)
    data.write_task_set("counter_eval", splits, seed=0, data_dir=tmp_path, command="python counter.py build")
    artifacts = data.read_manifest(tmp_path)["artifacts"]
    assert artifacts["counter_tasks"]["command"] is None
    assert artifacts["counter_eval"]["command"] == "python counter.py build"
    (tmp_path / "counter_tasks" / "dataset_dict.json").unlink()
    message = data_error(lambda: data.verify("counter_tasks", data_dir=tmp_path))
    assert "missing" in message and "no course command builds 'counter_tasks'" in message
    (tmp_path / "counter_eval" / "dataset_dict.json").unlink()
    message = data_error(lambda: data.verify("counter_eval", data_dir=tmp_path))
    assert quoted_commands(message) == [f"COURSE_DATA={tmp_path} python counter.py build"]


def test_broken_manifest_names_a_command_that_exists(artifact):
    (artifact / data.MANIFEST).write_text("{not json")
    message = data_error(lambda: data.verify("ch00_base", data_dir=artifact))
    (command,) = quoted_commands(message)
    assert command == f"COURSE_DATA={artifact} python -m course_lib.data build --help"
    assert_command_exists(command)
    # The repository's own manifest is restored from git (not corrupted here: its remedy is checked directly).
    (command,) = quoted_commands(data._restore_manifest(REPO_DATA))
    assert command == f"git -C {REPO_DATA.parent} checkout -- data/MANIFEST.json"
    assert_command_exists(command)


# Rebuilding data that did not change leaves the tracked manifest untouched ----------------------------
def test_recording_an_unchanged_artifact_leaves_the_manifest_untouched(artifact):
    manifest = artifact / data.MANIFEST
    before = manifest.read_bytes()
    os.utime(manifest, ns=(1_000_000_000, 1_000_000_000))  # an old time: a rewrite would move it
    data.record("ch00_base", COMMAND, 0, data_dir=artifact)
    assert manifest.read_bytes() == before and manifest.stat().st_mtime_ns == 1_000_000_000
    (artifact / "ch00_base" / "config.json").write_text('{"hidden_size": 64}\n')
    data.record("ch00_base", COMMAND, 0, data_dir=artifact)
    assert manifest.read_bytes() != before and manifest.stat().st_mtime_ns != 1_000_000_000


def test_committed_manifest_is_what_record_writes(tmp_path):
    """Re-recording a committed artifact from identical files writes the committed manifest byte for byte (so
    rebuilding `data/` to the same bits leaves `git status` clean)."""
    shutil.copy(REPO_DATA / data.MANIFEST, tmp_path / data.MANIFEST)
    shutil.copytree(REPO_DATA / "ch00_tasks", tmp_path / "ch00_tasks")
    os.utime(tmp_path / data.MANIFEST, ns=(1_000_000_000, 1_000_000_000))
    data.record("ch00_tasks", COMMAND, 0, data_dir=tmp_path)
    assert (tmp_path / data.MANIFEST).read_bytes() == (REPO_DATA / data.MANIFEST).read_bytes()
    assert (tmp_path / data.MANIFEST).stat().st_mtime_ns == 1_000_000_000
