"""The command line of `course_lib.data`: build a chapter's data, or verify every file against the manifest.

    python -m course_lib.data build ch00      # rebuild chapter 00's tasks and base checkpoint
    python -m course_lib.data verify          # check every file against the manifest

`course_lib.data` (hashes, manifest, loading) imports no chapter; the chapter modules import it. This module
closes the loop the other way: it maps a chapter key to the module whose `build_data(data_dir, seed,
progress)` writes its artifacts, and imports that module only when asked to build.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from course_lib import data

BUILDERS: dict[str, str] = {
    "ch00": "course_lib.chapters.ch00_tool_agent",
    "ch01": "course_lib.chapters.ch01_rap",
    "ch03": "course_lib.chapters.ch03_planner_r1",
    "ch04": "course_lib.chapters.ch04_torl",
    "ch05": "course_lib.chapters.ch05_toolrl",
    "ch06": "course_lib.chapters.ch06_artist",
    "ch07": "course_lib.chapters.ch07_gigpo",
    "ch08": "course_lib.chapters.ch08_arpo",
    "ch09": "course_lib.chapters.ch09_ragen",
    "ch11": "course_lib.chapters.ch11_aepo",
}
"""Chapter key -> module with `build_data` (chapter 02 reuses chapter 01's data). A new chapter adds a row."""


def build(chapter: str, data_dir: Path | None = None, seed: int = 0, progress: bool = True) -> None:
    """Write chapter `chapter`'s artifacts (`python -m course_lib.data build <chapter>`)."""
    if chapter not in BUILDERS:
        raise KeyError(f"no data to build for {chapter!r}; chapters with data: {', '.join(sorted(BUILDERS))}")
    module = importlib.import_module(BUILDERS[chapter])
    module.build_data(data.DATA_DIR if data_dir is None else data_dir, seed, progress)


def verify_all(data_dir: Path | None = None) -> list[str]:
    """Every artifact of the manifest checked; the problems found (empty when all files match)."""
    data_dir = data.DATA_DIR if data_dir is None else data_dir
    problems = []
    for name in data.read_manifest(data_dir)["artifacts"]:
        try:
            data.verify(name, data_dir)
        except data.DataError as err:
            problems.append(str(err))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.data", description=data.__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    command = sub.add_parser("build", help="build a chapter's data")
    command.add_argument("chapter", choices=sorted(BUILDERS))
    command.add_argument("--seed", type=int, default=0)
    sub.add_parser("verify", help="check every file against the manifest")
    args = parser.parse_args(argv)
    if args.command == "build":
        build(args.chapter, data.DATA_DIR, args.seed, True)
        print(f"built {args.chapter} under {data.DATA_DIR}")
        return 0
    problems = verify_all()
    print("\n".join(problems) or "all data files match the manifest")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
