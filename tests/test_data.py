"""Data artifacts are checked against data/MANIFEST.json; failures name the command that rebuilds them."""

from __future__ import annotations

from pathlib import Path

import pytest

from course_lib import data
from course_lib.envs.arithmetic import split_of

COMMAND = "python -m course_lib.data build ch00"
REPO_DATA = Path(__file__).resolve().parent.parent / "data"


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
    assert entry["seed"] == 7 and entry["command"] == "python -m course_lib.data build ch99"
    tasks = data.load_tasks("ch99_tasks", data_dir=tmp_path)
    assert tasks["train"]["x"] == [1, 2, 3] and tasks["test"]["x"] == [4]


def test_importing_data_loads_no_chapter():
    """`course_lib.data` imports no chapter module (the chapters import it; only `course_lib.build` maps a chapter
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

    from course_lib import build, chapters

    modules = [m.name for m in pkgutil.iter_modules(chapters.__path__) if m.name[:2] == "ch" and m.name[2:4].isdigit()]
    found = {
        name[:4]: f"course_lib.chapters.{name}"
        for name in modules
        if hasattr(importlib.import_module(f"course_lib.chapters.{name}"), "build_data")
    }
    assert build.BUILDERS == found


def test_data_command_line_keeps_its_commands(capsys):
    """`python -m course_lib.data` still has `build chNN` (choices from the table) and `verify`."""
    import subprocess
    import sys

    from course_lib import build

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
