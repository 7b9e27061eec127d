"""`course_lib.chapters.modules()` and `designs()`: the chapters are found from the package's files, not listed, so
that a new chapter is its module, its notebook and its test."""

from __future__ import annotations

from pathlib import Path

import pytest

from course_lib import chapters

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def test_a_chapter_file_is_found_and_a_design_or_another_file_is_not(tmp_path):
    for name in ("ch20_my_line.py", "ch20_design.py", "helpers.py", "ch2_short.py", "skeleton.py"):
        (tmp_path / name).write_text("")
    assert chapters.modules(tmp_path) == {"ch20": "ch20_my_line"}
    assert chapters.designs(tmp_path) == {"ch20": "course_lib.chapters.ch20_design"}
    (tmp_path / "ch20_other.py").write_text("")
    with pytest.raises(ValueError, match="two modules claim chapter ch20: ch20_my_line.py and ch20_other.py"):
        chapters.modules(tmp_path)


def test_the_course_chapters_are_its_notebooks():
    """Every numbered notebook has its chapter module and every chapter module its notebook."""
    found = chapters.modules()
    assert list(found) == sorted(found)
    assert set(found) == {f"ch{path.name[:2]}" for path in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")}
    assert set(chapters.designs()) == {"ch08", "ch09", "ch10", "ch11", "ch12"}


def test_load_gives_the_chapter_its_module_describes_itself_with(monkeypatch):
    chapter = chapters.load("07")
    assert chapter.id == "ch07" and chapter.checkpoint and chapters.load("ch07") is chapter
    assert [key for key, found in chapters.index().items() if found.checkpoint] == [
        "ch00",
        "ch04",
        "ch06",
        "ch07",
        "ch08",
    ]
    monkeypatch.setattr(chapters, "modules", lambda: {"ch99": "skeleton"})  # a module that defines no Chapter
    with pytest.raises(ValueError, match="course_lib.chapters.skeleton defines 0 skeleton.Chapter objects"):
        chapters.load("ch99")


def test_a_new_chapter_module_reaches_every_table_of_the_course(monkeypatch):
    """A chapter is described once: a module with its `Chapter` (and `build_data`) is found by the data build, the
    leakage audit, the golden run, the tool tasks, verl's export and the chapters' command, with no other file
    edited (the course's own chapters reach them the same way). A new chapter is its module, its notebook and its
    test: three files."""
    import sys
    import types

    from course_lib import envs
    from course_lib.chapters import skeleton
    from course_lib.course import leakage
    from course_lib.engine.rollout import SamplingConfig
    from course_lib.integrations import course_verl as verl
    from course_lib.lab import audit, build, golden
    from course_lib.tasks.tool_task import ToolTask, held_out_on_test

    def make_env(split: str = "train"):
        return envs.make("tool_arithmetic", split=split)

    split = leakage.SplitAudit("ch99", "test", 4, 4)
    module = types.ModuleType("course_lib.chapters.ch99_new_line")
    module.build_data = lambda data_dir, seed=0, progress=True, scale="cpu": None
    module.CHAPTER = skeleton.Chapter(
        "ch99", "Chapter 99", run=lambda seed: {}, claim_numbers=lambda results: {}, claims=(),
        task=lambda: ToolTask("tool_arithmetic", "ch00_base", SamplingConfig(), make_env,
                              held_out_on_test(lambda count: list(range(count)), make_env)),
        audit=lambda: [split], golden=lambda: {"ch99 case": lambda: 1},
    )  # fmt: skip
    monkeypatch.setitem(sys.modules, module.__name__, module)
    found = {**chapters.modules(), "ch99": "ch99_new_line"}
    monkeypatch.setattr(chapters, "modules", lambda folder=None: found)
    verl.chapter_tasks.cache_clear()
    build.builders.cache_clear()
    try:
        assert build.builders()["ch99"] == "course_lib.chapters.ch99_new_line"
        assert audit.audits()["ch99"]() == [split]
        assert golden.cases()["ch99 case"]() == 1
        assert chapters.module("ch99") is module and chapters.index()["ch99"] is module.CHAPTER
        assert chapters.load("ch99") is module.CHAPTER  # what `python -m course_lib.chapters ch99` runs
        assert chapters.tool_tasks()["ch99"].chapter == "ch99"
        exported = verl.chapter_tasks("99")
        assert exported.chapter == "ch99" and exported.held_out_seeds("test", 3) == [0, 1, 2]
    finally:
        verl.chapter_tasks.cache_clear()
        build.builders.cache_clear()


def test_without_an_optional_package_its_chapter_is_left_out_and_said_why():
    """Chapter 13 needs `trl` at import; without it (verl's environment) the course's tables still work, and the
    audit reports the chapter as skipped."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['trl'] = None\n"  # `import trl` then fails as if it were not installed
        "from course_lib import chapters\n"
        "from course_lib.lab import audit\n"
        "print(sorted(chapters.index()) == sorted(set(chapters.modules()) - {'ch13'}), chapters.unavailable())\n"
        "print(audit.audits()['ch13']()[0].lines())\n"
        "print(sorted(chapters.tool_tasks()))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("True {'ch13': ") and "trl" in lines[0]
    assert lines[1].startswith("['ch13 test: skipped (")
    assert lines[2] == "['ch00', 'ch03', 'ch04', 'ch05', 'ch06']"
