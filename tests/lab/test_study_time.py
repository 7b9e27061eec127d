"""The study time (`lab.study_time`): the README's chapter map and docs/teaching.md show what the notebooks give.

Fast: it reads the committed notebooks and `results/minutes.json`, nothing runs.
"""

from __future__ import annotations

from course_lib.lab import study_time
from course_lib.lab.study_time import StudyTime


def test_the_readme_and_teaching_md_agree_with_the_notebooks():
    """Edit a notebook and forget `python -m course_lib.lab.study_time --sync`, and this fails."""
    assert study_time.drift() == [], "run `python -m course_lib.lab.study_time --sync`"


def test_every_chapter_has_its_study_time_in_the_readme_and_in_teaching_md():
    """The README's chapter map has a study-time cell per chapter, and docs/teaching.md its table of the parts and
    plans whose weeks cover every chapter once."""
    chapters = study_time.chapters()
    readme = study_time.README.read_text(encoding="utf-8")
    rows = [row for table in study_time.tables(readme) for row in table if study_time.STUDY_TIME in row]
    assert {row["#"]: row[study_time.STUDY_TIME] for row in rows} == {c: study_time.hours_label(c) for c in chapters}
    teaching = study_time.TEACHING.read_text(encoding="utf-8")
    assert study_time.TABLE_START in teaching and study_time.TOTAL_START in readme
    plans = [table for table in study_time.tables(teaching) if table and "chapters" in table[0]]
    assert len(plans) == 2, "a 6-week and a 12-week plan"
    for plan, weeks in zip(plans, (6, 12), strict=True):
        assert len(plan) == weeks
        named = [chapter for row in plan for chapter in study_time.named_chapters(row)]
        assert sorted(named) == chapters, f"the {weeks}-week plan takes every chapter once"


def test_a_study_time_column_is_written_from_the_rows_chapters():
    """`synced` on a made-up page: a chapter's row gets its hours, a week's row the sum of its chapters', a row that
    names none is left; the other columns and the text around them are kept; the total block is rewritten."""
    times = {"00": StudyTime(reading=30, running=1, exercises=60), "01": StudyTime(reading=20, running=0, exercises=0)}
    page = "\n".join([
        "Text.",
        study_time.TOTAL_START,
        "stale",
        study_time.TOTAL_END,
        "",
        "| # | title | study time |",
        "|---|---|---|",
        "| 00 | a \\| b | ? |",
        "| 01 | c | ? |",
        "",
        "| week | chapters | study time | assign |",
        "|---|---|---|---|",
        "| 1 | 00, 01 | ? | x |",
        "| 2 | (reading week) | keep | y |",
    ])  # fmt: skip
    out = study_time.synced(page, times)
    assert "| 00 | a \\| b | 1.5 h |" in out and "| 01 | c | 0.5 h |" in out
    assert "| 1 | 00, 01 | 2 h | x |" in out and "| 2 | (reading week) | keep | y |" in out
    assert "stale" not in out and "About 2 hours in all" in out
    assert study_time.synced(out, times) == out, "syncing twice changes nothing"


def test_fill_column_finds_its_column_by_header():
    """The generated columns of the chapter map are found by their header, wherever they stand."""
    page = "| a | # | CPU minutes |\n|---|---|---|\n| x | 00 | 9 |\n\n| # | other |\n|---|---|\n| 00 | 9 |"
    out = study_time.fill_column(page, "CPU minutes", lambda row: "0.3" if row["#"] == "00" else None)
    assert out == page.replace("| 9 |\n\n", "| 0.3 |\n\n")


def test_check_exits_1_on_drift(tmp_path, monkeypatch):
    """On copies: `--sync` must never write the repository's files from a test."""
    stale, teaching = tmp_path / "README.md", tmp_path / "teaching.md"
    stale.write_text(
        study_time.README.read_text(encoding="utf-8").replace(study_time.TOTAL_END, f"old\n{study_time.TOTAL_END}")
    )
    teaching.write_text(study_time.TEACHING.read_text(encoding="utf-8"))
    monkeypatch.setattr(study_time, "README", stale)
    monkeypatch.setattr(study_time, "TEACHING", teaching)
    assert study_time.main(["--check"]) == 1
    assert study_time.main(["--sync"]) == 0 and study_time.main(["--check"]) == 0
