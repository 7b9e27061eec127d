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
    assert [key for key, found in chapters.all().items() if found.checkpoint] == [
        "ch00",
        "ch04",
        "ch06",
        "ch07",
        "ch08",
    ]
    monkeypatch.setattr(chapters, "modules", lambda: {"ch99": "skeleton"})  # a module that defines no Chapter
    with pytest.raises(ValueError, match="course_lib.chapters.skeleton defines 0 skeleton.Chapter objects"):
        chapters.load("ch99")
