"""The command line of `course_lib.data`: build a chapter's data, or verify every file against the manifest.

    python -m course_lib.data build ch00                # rebuild chapter 00's tasks and base checkpoint
    python -m course_lib.data verify                    # check every file against the manifest
    python -m course_lib.data build ch00 --scale gpu    # the gpu preset's larger base, into data.gpu_data_dir()
    python -m course_lib.data verify --scale gpu        # check the gpu data directory
    python -m course_lib.data build smollm2             # a real pretrained model, into real_models.models_dir()

`course_lib.data` (hashes, manifest, loading) imports no chapter; the chapter modules import it. This module
closes the loop the other way: a chapter whose module defines `build_data(data_dir, seed, progress, scale)` has
data (`builders()`, found by importing the chapters when a build or an error message needs the table).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import sys
from pathlib import Path

from course_lib import data, real_models


@functools.cache
def builders() -> dict[str, str]:
    """Chapter key -> the module whose `build_data` writes its artifacts: every chapter module that defines one
    (`chapters.modules()`, imported: a few seconds; chapter 02 reuses chapter 01's data, so it has none). A new
    chapter with data is found here without an edit."""
    from course_lib import chapters

    found = {}
    for key, name in chapters.modules().items():
        module = f"course_lib.chapters.{name}"
        if hasattr(importlib.import_module(module), "build_data"):
            found[key] = module
    return found


def build(chapter: str, data_dir: Path | None = None, seed: int = 0, progress: bool = True, scale: str = "cpu") -> None:
    """Write chapter `chapter`'s artifacts of preset `scale` (`python -m course_lib.data build <chapter>
    [--scale gpu]`) into `data_dir`, by default that scale's directory (`data.data_dir_for`)."""
    if chapter in real_models.MODELS:
        real_models.build(chapter, data_dir)
        return
    if chapter not in builders():
        raise KeyError(f"no data to build for {chapter!r}; chapters with data: {', '.join(sorted(builders()))}")
    module = importlib.import_module(builders()[chapter])
    module.build_data(data.data_dir_for(scale) if data_dir is None else data_dir, seed, progress, scale=scale)


def verify_all(data_dir: Path | None = None, scale: str = "cpu") -> list[str]:
    """Every artifact of the manifest checked; the problems found (empty when all files match)."""
    data_dir = data.data_dir_for(scale) if data_dir is None else data_dir
    problems = []
    for name in data.read_manifest(data_dir)["artifacts"]:
        try:
            data.verify(name, data_dir)
        except data.DataError as err:
            problems.append(str(err))
    return problems


def parser() -> argparse.ArgumentParser:
    """The command line's parser (a test parses every command a `DataError` names with it, without building)."""
    cli = argparse.ArgumentParser(prog="python -m course_lib.data", description=data.__doc__.splitlines()[0])
    sub = cli.add_subparsers(dest="command", required=True)
    command = sub.add_parser("build", help="build a chapter's data, or a real model's cache")
    command.add_argument("chapter", choices=sorted(builders()) + sorted(real_models.MODELS))
    command.add_argument("--seed", type=int, default=0)
    scales = dict(choices=("cpu", "gpu"), default="cpu", help="cpu: the committed data/; gpu: data.gpu_data_dir()")
    command.add_argument("--scale", **scales)
    sub.add_parser("verify", help="check every file against the manifest").add_argument("--scale", **scales)
    return cli


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    data_dir = data.data_dir_for(args.scale)
    if args.command == "build" and args.chapter in real_models.MODELS:
        print(f"built {args.chapter} under {real_models.build(args.chapter)}")
        return 0
    if args.command == "build":
        build(args.chapter, data_dir, args.seed, True, args.scale)
        print(f"built {args.chapter} under {data_dir}")
        return 0
    if not data.read_manifest(data_dir)["artifacts"]:
        print(f"no artifacts recorded in {data_dir / data.MANIFEST} yet")
        return 0
    problems = verify_all(data_dir)
    print("\n".join(problems) or "all data files match the manifest")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
