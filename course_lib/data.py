"""Generated data and base checkpoints under `data/`, each listed in `data/MANIFEST.json`.

Every artifact (a task set saved with `datasets.save_to_disk`, or a base model saved with
`save_pretrained`) is built by a command of this module, and the manifest records, per file, its
sha256, the command and the seed. Loading checks every hash first: a missing or corrupted file
gives a `DataError` that names the command rebuilding it, instead of a confusing failure later.

    python -m course_lib.data build ch00      # rebuild chapter 00's tasks and base checkpoint
    python -m course_lib.data verify          # check every file against the manifest

The committed data is the cpu preset's. The gpu preset (`COURSE_SCALE=gpu`) has its own directory outside the
repository, `~/.cache/course_lib/gpu` or `COURSE_GPU_DATA`, with its own manifest in the same format: there
`load_base` / `load_tasks` build a chapter's larger base once, the first time one of its artifacts is asked for
(`build chNN --scale gpu` does the same by hand), and `load_base` prints which base it loaded.

`COURSE_DATA=<folder>` moves the cpu data elsewhere (`DATA_DIR`, read at import): loading reads that folder's
manifest and the build command writes there, so artifacts of your own never touch the tracked `data/MANIFEST.json`.
Every `DataError` names a command that exists: the one the manifest records, with `COURSE_DATA=` in front when the
folder is not the repository's `data/`; an artifact no course command builds says so instead (docs/data.md).

The command line is `course_lib.lab.build` (it maps a chapter to the module that builds its data); this
module imports no chapter (the gpu directory's one-off build imports `course_lib.lab.build` when it runs).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

REPO_DATA_DIR = Path(__file__).resolve().parent.parent / "data"
"""The repository's `data/`, whose manifest git tracks: it also says which command builds each course artifact."""
DATA_DIR = Path(os.environ.get("COURSE_DATA", REPO_DATA_DIR))
"""The cpu preset's data: the committed `data/` (or `COURSE_DATA`)."""
DEFAULT_GPU_DATA_DIR = Path.home() / ".cache" / "course_lib" / "gpu"
"""The gpu preset's data directory unless `COURSE_GPU_DATA` names another (`gpu_data_dir()` reads it when called,
so a notebook or a test may set it after importing this module)."""
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
        raise DataError(f"{path} is not valid JSON ({err}); {_restore_manifest(data_dir)}") from None


def verify(name: str, data_dir: Path = DATA_DIR) -> Path:
    """Check every file of artifact `name` against the manifest; return its folder."""
    entry = read_manifest(data_dir)["artifacts"].get(name)
    if entry is None:
        command = _command_for(name, _scale_of(data_dir))
        raise DataError(f"artifact {name!r} is not in {data_dir / MANIFEST}; {_how_to_build(name, command, data_dir)}")
    rebuild = "re" + _how_to_build(name, entry["command"], data_dir)
    for relative, expected in entry["files"].items():
        path = data_dir / relative
        if not path.exists():
            raise DataError(f"{path} is missing; {rebuild}")
        if sha256(path) != expected:
            raise DataError(f"{path} is corrupted (sha256 mismatch); {rebuild}")
    return data_dir / name


def record(name: str, command: str | None, seed: int, data_dir: Path = DATA_DIR) -> None:
    """Hash every file under `data_dir/name` into the manifest entry of `name` (`command`: what rebuilds it, None
    when no course command does). An unchanged manifest is left untouched, bytes and modification time: rebuilding
    the committed data to the same bits leaves `git status` clean."""
    folder = data_dir / name
    files = {str(p.relative_to(data_dir)): sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}
    manifest = read_manifest(data_dir)
    manifest["artifacts"][name] = {"command": command, "seed": seed, "files": files}
    manifest["artifacts"] = dict(sorted(manifest["artifacts"].items()))
    path = data_dir / MANIFEST
    text = json.dumps(manifest, indent=1) + "\n"
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def gpu_data_dir() -> Path:
    """The gpu preset's data directory: `COURSE_GPU_DATA` (default `~/.cache/course_lib/gpu`), read now. Under
    `COURSE_GPU_TINY=1` its `tiny/` folder, so that a smoke-test build never stands in for a real gpu base."""
    from course_lib import course_config

    root = Path(os.environ.get("COURSE_GPU_DATA", DEFAULT_GPU_DATA_DIR))
    return root / "tiny" if course_config.gpu_tiny() else root


def data_dir_for(scale: str) -> Path:
    """The data directory of preset `scale`: the committed `DATA_DIR` for cpu, `gpu_data_dir()` for gpu."""
    if scale not in ("cpu", "gpu"):
        raise ValueError(f"scale must be 'cpu' or 'gpu', got {scale!r}")
    return DATA_DIR if scale == "cpu" else gpu_data_dir()


def load_base(name: str | Path, device="cpu", data_dir: Path | None = None):
    """`(model, tokenizer)` of base checkpoint `name`, after checking its hashes.

    Without `data_dir`, from the active scale's directory (`data_dir_for(course_config.scale())`); under the gpu scale
    the chapter's gpu data is built first if it is not there yet, and a line says which base was loaded. `name`
    may also be a folder of your own (`models.save(model, tokenizer, folder)`: a fork's base), loaded as it is,
    with no manifest to check it against."""
    from course_lib import course_config
    from course_lib.models import load

    folder = Path(name)
    if folder.is_dir() and (folder / "config.json").exists():
        return load(folder, device)
    if isinstance(name, Path) or "/" in str(name):
        raise DataError(f"{name}: no checkpoint there (a base folder holds config.json; write one with models.save)")
    model, tokenizer = load(_available(name, data_dir), device)
    if data_dir is None and course_config.scale() == "gpu":
        # The cpu preset prints nothing (committed notebook outputs stay as they are); under gpu the reader should
        # see that the model is not the committed cpu base.
        print(_label(name, model, gpu_data_dir()), flush=True)
    return model, tokenizer


def load_tasks(name: str, data_dir: Path | None = None):
    """The `datasets.DatasetDict` of task set `name`, after checking its hashes (the active scale's directory
    without `data_dir`, building the chapter's gpu data first if needed, as `load_base` does)."""
    from datasets import load_from_disk

    return load_from_disk(str(_available(name, data_dir)))


def _available(name: str, data_dir: Path | None) -> Path:
    """The verified folder of artifact `name`: in `data_dir` if given, else in the active scale's directory,
    where under the gpu scale an artifact missing from the manifest has its chapter's data built once."""
    if data_dir is not None:
        return verify(name, data_dir)
    from course_lib import course_config

    scale = course_config.scale()
    data_dir = data_dir_for(scale)
    if scale == "gpu" and name not in read_manifest(data_dir)["artifacts"]:
        _build_gpu_chapter(name, data_dir)
    return verify(name, data_dir)


def _build_gpu_chapter(name: str, data_dir: Path) -> None:
    """Build the gpu data of the chapter that owns artifact `name` (its prefix: chapter 12 asking for
    `ch08_base` builds chapter 08's) into `data_dir`, leaving the caller's random state as it was."""
    from course_lib.lab import build  # imports the chapters; `course_lib.data` must not at import

    chapter = name.split("_")[0]
    command = _command_for(name, "gpu")
    if command is None:
        chapters = ", ".join(build.builders())
        raise DataError(f"artifact {name!r}: no command builds it at the gpu scale (chapters with data: {chapters})")
    print(f"building {chapter}'s gpu data into {data_dir} ({name} is not there yet): {command}", flush=True)
    # A chapter seeds its run and then loads its base: without this, the first run (which builds) and every
    # later run (which only loads) would draw different random numbers after the load.
    with _random_state_kept():
        build.build(chapter, data_dir, seed=0, progress=True, scale="gpu")


@contextmanager
def _random_state_kept() -> Iterator[None]:
    """Python's, NumPy's and torch's (CPU and CUDA) global random state restored on exit."""
    import random

    import numpy as np
    import torch

    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng():
            yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def _label(name: str, model, data_dir: Path) -> str:
    """`base ch00_base: gpu preset, model preset small, 2,345,678 parameters, from <folder>`."""
    from course_lib import course_config
    from course_lib.models import count_parameters, preset_of

    scale = "gpu preset (shrunk by COURSE_GPU_TINY=1, a smoke test)" if course_config.gpu_tiny() else "gpu preset"
    return (
        f"base {name}: {scale}, model preset {preset_of(model.config)}, "
        f"{count_parameters(model):,} parameters, from {data_dir / name}"
    )


# Writing artifacts (each chapter's `build_data`; the `build` command is `course_lib.lab.build`) ------------
def write_artifact(
    name: str,
    write: Callable[[Path], object],
    seed: int,
    data_dir: Path = DATA_DIR,
    scale: str = "cpu",
    command: str | None = None,
) -> None:
    """Build artifact `name` with `write(folder)` and record its files in the manifest, with the command that
    rebuilds it: `command` if given (an artifact of your own: e.g. `python my_env.py build`), else the course's
    (`--scale gpu` for a gpu artifact; none for an artifact no chapter's `build_data` builds)."""
    _replace(data_dir / name, write)
    record(name, command or _command_for(name, scale), seed, data_dir)


def write_task_set(
    name: str,
    splits: dict[str, dict[str, list]],
    seed: int,
    data_dir: Path = DATA_DIR,
    scale: str = "cpu",
    command: str | None = None,
) -> None:
    """Save columns per split (e.g. `{"train": {...}, "test": {...}}`) as a `DatasetDict` artifact (`command` as
    in `write_artifact`)."""
    from datasets import Dataset, DatasetDict, disable_progress_bars

    disable_progress_bars()
    tasks = DatasetDict({split: Dataset.from_dict(columns) for split, columns in splits.items()})
    write_artifact(name, lambda folder: tasks.save_to_disk(str(folder)), seed, data_dir, scale, command)


def _command_for(name: str, scale: str = "cpu") -> str | None:
    """The command that builds artifact `name` of preset `scale`, or None when no course command does.

    The committed manifest names the command of every course artifact (one of them, chapter 08's design base, is
    not a chapter build); another artifact is its chapter's (the name's prefix) if that chapter's module defines
    `build_data` (`course_lib.lab.build.builders()`), else nobody's: a name such as `counter_base` must not send
    the reader to `python -m course_lib.data build counter`, which does not exist."""
    from course_lib.lab import build  # here: importing `data` loads no chapter

    chapter = name.split("_")[0]
    try:
        committed = read_manifest(REPO_DATA_DIR)["artifacts"].get(name, {}).get("command")
    except DataError:  # a broken committed manifest has its own message; fall back to the chapter table
        committed = None
    build_command = f"python -m course_lib.data build {chapter}"
    if committed is not None and committed != build_command:
        return committed if scale == "cpu" else None  # a one-off cpu build (the design base): no gpu variant
    if chapter not in build.builders():
        return None
    if scale == "cpu":
        return build_command
    from course_lib import course_config

    # A smoke-test build lives in its own folder, which only COURSE_GPU_TINY=1 selects.
    prefix = "COURSE_GPU_TINY=1 " if course_config.gpu_tiny() else ""
    return f"{prefix}{build_command} --scale {scale}"


def _how_to_build(name: str, command: str | None, data_dir: Path) -> str:
    """`build it with: `<command>`` for a `DataError`, the command as typed for `data_dir`: a cpu build writes into
    `DATA_DIR`, so a folder other than the repository's `data/` gets `COURSE_DATA=<folder>` in front."""
    if command is None:
        from course_lib.lab import build

        return (
            f"build it with the code that wrote it: no course command builds {name!r} (the chapters with data are "
            f"{', '.join(sorted(build.builders()))}: a chapter module that defines build_data, see docs/data.md)"
        )
    return f"build it with: `{_in_folder(data_dir)}{command}`"


def _in_folder(data_dir: Path) -> str:
    """`COURSE_DATA=<folder> ` when a cpu build command must be told to write into `data_dir`, else nothing."""
    elsewhere = Path(data_dir).resolve() != REPO_DATA_DIR.resolve()
    return f"COURSE_DATA={data_dir} " if elsewhere and _scale_of(data_dir) == "cpu" else ""


def _restore_manifest(data_dir: Path) -> str:
    """How to get a readable manifest back: git has the committed one; another folder's is rebuilt."""
    if Path(data_dir).resolve() == REPO_DATA_DIR.resolve():
        return f"restore it with `git -C {REPO_DATA_DIR.parent} checkout -- data/{MANIFEST}`"
    return (
        "delete it, then rebuild that folder's artifacts chapter by chapter "
        f"(`{_in_folder(data_dir)}python -m course_lib.data build --help` lists the chapters)"
    )


def _scale_of(data_dir: Path) -> str:
    """`gpu` for the gpu preset's data directory, else `cpu` (for the command an error message names)."""
    return "gpu" if Path(data_dir).resolve() == gpu_data_dir().resolve() else "cpu"


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
    # The command line (`build chNN`, `verify`) lives in `course_lib.lab.build`, so that importing this module loads
    # no chapter: the chapters import `data`, and only the build command imports them.
    from course_lib.lab.build import main

    sys.exit(main())
