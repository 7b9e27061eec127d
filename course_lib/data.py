"""Generated data and base checkpoints under `data/`, each listed in `data/MANIFEST.json`.

Every artifact (a task set saved with `datasets.save_to_disk`, or a base model saved with
`save_pretrained`) is built by a command of this module, and the manifest records, per file, its
sha256, the command and the seed. Loading checks every hash first: a missing or corrupted file
gives a `DataError` that names the command rebuilding it, instead of a confusing failure later.

    python -m course_lib.data build ch00      # rebuild chapter 00's tasks and base checkpoint
    python -m course_lib.data verify          # check every file against the manifest

The command line is `course_lib.build` (it maps a chapter to the module that builds its data); this
module imports no chapter.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

DATA_DIR = Path(os.environ.get("COURSE_DATA", Path(__file__).resolve().parent.parent / "data"))
MANIFEST = "MANIFEST.json"


class DataError(RuntimeError):
    """A data file is missing or does not match its manifest entry."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(data_dir: Path = DATA_DIR) -> dict:
    path = data_dir / MANIFEST
    if not path.exists():
        return {"artifacts": {}}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise DataError(f"{path} is not valid JSON ({err}); restore it with `git checkout {MANIFEST}`") from None


def verify(name: str, data_dir: Path = DATA_DIR) -> Path:
    """Check every file of artifact `name` against the manifest; return its folder."""
    entry = read_manifest(data_dir)["artifacts"].get(name)
    if entry is None:
        raise DataError(f"artifact {name!r} is not in {data_dir / MANIFEST}; build it with: {_command_for(name)}")
    for relative, expected in entry["files"].items():
        path = data_dir / relative
        if not path.exists():
            raise DataError(f"{path} is missing; rebuild it with: {entry['command']}")
        if sha256(path) != expected:
            raise DataError(f"{path} is corrupted (sha256 mismatch); rebuild it with: {entry['command']}")
    return data_dir / name


def record(name: str, command: str, seed: int, data_dir: Path = DATA_DIR) -> None:
    """Hash every file under `data_dir/name` into the manifest entry of `name`."""
    folder = data_dir / name
    files = {str(p.relative_to(data_dir)): sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}
    manifest = read_manifest(data_dir)
    manifest["artifacts"][name] = {"command": command, "seed": seed, "files": files}
    manifest["artifacts"] = dict(sorted(manifest["artifacts"].items()))
    (data_dir / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")


def load_base(name: str, device="cpu", data_dir: Path = DATA_DIR):
    """`(model, tokenizer)` of base checkpoint `name`, after checking its hashes."""
    from course_lib.models import load

    return load(verify(name, data_dir), device)


def load_tasks(name: str, data_dir: Path = DATA_DIR):
    """The `datasets.DatasetDict` of task set `name`, after checking its hashes."""
    from datasets import load_from_disk

    return load_from_disk(str(verify(name, data_dir)))


# Writing artifacts (each chapter's `build_data`; the `build` command is `course_lib.build`) ------------
def write_artifact(name: str, write: Callable[[Path], object], seed: int, data_dir: Path = DATA_DIR) -> None:
    """Build artifact `name` with `write(folder)` and record its files in the manifest."""
    _replace(data_dir / name, write)
    record(name, _command_for(name), seed, data_dir)


def write_task_set(name: str, splits: dict[str, dict[str, list]], seed: int, data_dir: Path = DATA_DIR) -> None:
    """Save columns per split (e.g. `{"train": {...}, "test": {...}}`) as a `DatasetDict` artifact."""
    from datasets import Dataset, DatasetDict, disable_progress_bars

    disable_progress_bars()
    tasks = DatasetDict({split: Dataset.from_dict(columns) for split, columns in splits.items()})
    write_artifact(name, lambda folder: tasks.save_to_disk(str(folder)), seed, data_dir)


def _command_for(name: str) -> str:
    chapter = name.split("_")[0]
    return f"python -m course_lib.data build {chapter}"


def _replace(target: Path, write: Callable[[Path], object]) -> None:
    """Write into a temporary folder, then swap it in, so a failed build leaves the old data."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        write(tmp)
        tmp.chmod(0o755)
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


if __name__ == "__main__":
    # The command line (`build chNN`, `verify`) lives in `course_lib.build`, so that importing this module loads
    # no chapter: the chapters import `data`, and only the build command imports them.
    from course_lib.build import main

    sys.exit(main())
