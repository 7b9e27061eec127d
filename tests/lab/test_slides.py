"""Issue 59: `make slides` builds a deck per chapter from its notebook and its recorded verdicts."""

from __future__ import annotations

import html
import re

import nbformat

from course_lib.lab import slides, verdicts


def test_every_chapter_has_a_deck_with_its_idea_figure_loop_line_and_verdicts(tmp_path):
    notebooks = sorted(path.name[:2] for path in slides.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    assert list(slides.LOOP_LINES) == [f"ch{number}" for number in notebooks]
    written = slides.build(tmp_path)
    assert [path.name for path in written] == [f"{chapter}.slides.html" for chapter in slides.LOOP_LINES]
    for path in written:
        chapter = path.name.split(".")[0]
        page = html.unescape(re.sub(r"<[^>]+>", "", path.read_text(encoding="utf-8")))
        assert page.count("The idea") >= 1 and "What it changes in chapter 00's loop" in page, chapter
        assert slides.LOOP_LINES[chapter] in page, chapter
        for verdict in verdicts.chapter_verdicts(chapter):
            assert verdict.line(statistics=False) in page, (chapter, verdict.id)
        has_figure = slides.figure(nbformat.read(slides.notebook_path(chapter), as_version=4)) is not None
        assert ("<img" in path.read_text(encoding="utf-8")) == has_figure, chapter


def test_the_makefile_has_the_slides_target():
    makefile = (slides.NOTEBOOKS.parent / "Makefile").read_text(encoding="utf-8")
    assert "\nslides: " in makefile and "course_lib.lab.slides --out build/slides" in makefile
