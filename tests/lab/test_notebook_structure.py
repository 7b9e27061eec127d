"""Every chapter notebook follows the course's template (title cell, sections 1-8) and is committed cleanly executed."""

import json
import re
from pathlib import Path

import pytest

from course_lib.course.claims import NOT_MET, NOT_REPRODUCED, NOT_RUN_HERE, NOT_SUPPORTED

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SECTIONS = ["## 1 ", "## 2 ", "## 3 ", "## 4 ", "## 5 ", "## 6 · Claims", "## 7 ", "## 8 "]


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def test_there_are_notebooks():
    assert NOTEBOOKS, "no chapter notebooks found"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_template_sections_in_order(path):
    markdown = "\n".join("".join(c["source"]) for c in load(path)["cells"] if c["cell_type"] == "markdown")
    assert markdown.startswith("# "), "the first cell is the chapter title"
    assert re.search(r"arXiv \d{4}\.\d{4,5}", markdown), "the title cell cites the paper's arXiv id"
    assert "**Time.**" in markdown, "the title cell states the time on CPU"
    positions = [markdown.find(section) for section in SECTIONS]
    assert all(p >= 0 for p in positions), f"missing sections: {[s for s, p in zip(SECTIONS, positions) if p < 0]}"
    assert positions == sorted(positions), "template sections out of order"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_outputs_are_clean(path):
    code = [c for c in load(path)["cells"] if c["cell_type"] == "code"]
    counts = [c["execution_count"] for c in code]
    assert None not in counts and counts == sorted(counts), (
        "execute top to bottom with course_lib.lab.notebooks refresh"
    )
    for cell in code:
        for output in cell["outputs"]:
            assert output["output_type"] != "error", "an error output is committed"
            assert output.get("name") != "stderr", f"stderr in committed output: {''.join(output['text'])[:80]!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_claims_cell_prints_this_run_beside_the_course_verdict_which_is_compared(path):
    """The claims cell says whether this run's machine is the one its seed was recorded on, then prints this run's
    verdict (machine-dependent, so not compared) beside the course-level one; the cell after it prints the
    course-level verdicts read from results/ (deterministic, so compared)."""
    code = [c for c in load(path)["cells"] if c["cell_type"] == "code"]
    claims = [i for i, c in enumerate(code) if "report(" in "".join(c["source"])]
    assert len(claims) == 1, "exactly one claims cell"
    cell, after = code[claims[0]], code[claims[0] + 1]
    assert "nbval-ignore-output" in cell["metadata"].get("tags", []), "this run's verdicts depend on the machine"
    source = "".join(cell["source"])
    assert "verdicts.course_lines(" in source, "this run's result is printed beside the course's"
    assert "recorded.origin(" in source, "the cell says which numbers came from this run"
    text = "".join("".join(o.get("text", "")) for o in cell["outputs"])
    origin, against, *lines = text.strip().splitlines()
    assert origin.startswith("this run: seed "), origin
    # this run against its recorded seed: how many numbers are equal, then each that differs, indented
    assert re.match(r"\d+ of \d+ numbers equal the recorded seed's", against), against
    lines = [line for line in lines if not line.startswith("  ")]
    statuses = "|".join(
        re.escape(status) for status in ("PASS", "FAIL", NOT_MET, NOT_REPRODUCED, NOT_SUPPORTED, NOT_RUN_HERE)
    )
    verdict_line = re.compile(
        rf"^C\d+\.\d+[a-z]?\s+(finding|hypothesis|mechanism|design|description)\s+this run ({statuses}); "
        r"recorded \d+ of \d+ seeds: \S"
    )  # ids such as C4.3a; NOT_RUN_HERE for a claim whose arms the notebook does not train live
    assert lines and all(verdict_line.match(ln) for ln in lines), lines
    assert "verdicts.print_chapter(" in "".join(after["source"]), "the course-level verdicts follow the claims cell"
    assert "nbval-ignore-output" not in after["metadata"].get("tags", []), "the course-level verdicts are compared"
    shown = "".join("".join(o.get("text", "")) for o in after["outputs"])
    assert shown.startswith("course-level verdicts") and "findings reproduced" in shown


STATUS_WORDS = re.compile(
    r"\b(C\d+\.\d+[a-z]?)\b([^.;:]*?)\b"
    r"(not reproduced|reproduced|not supported|supported|not testable|undecided|holds by design|holds|fails|held)"
    r"\b(?!-)"
)
"""A clause naming a claim and a status: in a notebook's markdown, a status typed by hand."""


def test_status_words_catch_the_ways_a_status_was_typed_by_hand():
    for typed in ("C1.3 is reproduced in the designed setting", "C11.2a, a mechanism check, holds on every seed",
                  "C9.3 (not reproduced)", "C8.2 is undecided on three seeds", "C17.13d is supported",
                  "C16.4 is not testable"):  # fmt: skip
        assert STATUS_WORDS.search(typed), typed
    assert not STATUS_WORDS.search("C7.1 asks whether GiGPO leads. The lead is reproduced below.")
    assert not STATUS_WORDS.search("C4.3b's metric (the mean held-out accuracy)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_markdown_states_a_claims_status_by_hand(path):
    """One status per claim, generated: a notebook's markdown names claims but never says whether they are
    reproduced; its takeaways are a `verdicts.takeaways` cell, filled from results/ (claims.md)."""
    for index, cell in enumerate(load(path)["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        text = " ".join("".join(cell["source"]).split())
        found = STATUS_WORDS.search(text)
        assert not found, f"{path.stem} cell {index} states a status by hand: {found.group(0)!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_takeaways_are_generated_from_results_and_committed_as_generated(path):
    """The takeaways cell renders its template with every `{C7.1}` and `{C7.1:key}` filled from results/
    (`verdicts.takeaways`); its committed output is what results/ give now (nbval compares it too), and its text
    agrees with each claim's course-level verdict."""
    import ast

    from course_lib.lab import verdicts

    cells = [
        c for c in load(path)["cells"] if c["cell_type"] == "code" and "verdicts.takeaways(" in "".join(c["source"])
    ]  # noqa: E501
    assert cells, f"{path.stem} has no generated takeaways (`verdicts.takeaways`)"
    for cell in cells:
        call = next(node for node in ast.walk(ast.parse("".join(cell["source"]))) if isinstance(node, ast.Call)
                    and getattr(node.func, "attr", "") == "takeaways")  # fmt: skip
        chapter, template = (ast.literal_eval(arg) for arg in call.args)
        committed = "".join(cell["outputs"][0]["data"]["text/markdown"])
        assert committed == verdicts.fill(chapter, template.strip()), "refresh the notebook: results/ changed"
    status = {v.id: v.status for v in verdicts.chapter_verdicts("ch" + path.stem[:2])}
    for cell in cells:
        rendered = "".join(cell["outputs"][0]["data"]["text/markdown"])
        for claim, said in re.findall(r"\*\*(C\d+\.\d+[a-z]?): ([^*]+)\*\*", rendered):
            assert said == status[claim], f"{path.stem}: {claim} rendered {said!r}, results/ say {status[claim]!r}"


LEFTOVERS = re.compile(
    r"the old (?:text|prediction)|\bthe prediction(?:,| assumed| was)|as (?:the|your) prediction", re.I
)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_lesson_argues_with_an_old_text(path):
    """A lesson states what was measured; it does not argue with an earlier version of itself."""
    for index, cell in enumerate(load(path)["cells"]):
        found = LEFTOVERS.search("".join(cell["source"]))
        assert not found, f"{path.stem} cell {index}: {found.group(0)!r}"


MAX_WORDS = 300
"""Longest markdown cell, in words of prose (code fences and HTML tags not counted): a lesson, not a report."""

FENCE = re.compile(r"```.*?```", re.S)
TAG = re.compile(r"<[^>]+>")


def prose_words(markdown: str) -> int:
    return len(TAG.sub(" ", FENCE.sub(" ", markdown)).split())


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_markdown_cells_are_short(path):
    """No markdown cell is longer than MAX_WORDS words of prose: long reasoning is split into cells, development
    history lives in docs/experiments/."""
    for index, cell in enumerate(load(path)["cells"]):
        if cell["cell_type"] == "markdown":
            text = "".join(cell["source"])
            words = prose_words(text)
            assert words <= MAX_WORDS, f"cell {index} has {words} words of prose (at most {MAX_WORDS}): {text[:80]!r}"


def test_prose_words_ignore_code_and_tags():
    assert prose_words("one two\n```python\nx = 1 + 2\n```\n<details><summary>three</summary>") == 3


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_figure_has_alt_text(path):
    """Every committed figure carries alt text (`plots.show(fig, alt=...)`), a sentence that says what it shows."""
    for index, cell in enumerate(load(path)["cells"]):
        for output in cell.get("outputs", []):
            if "image/png" in output.get("data", {}):
                alt = output.get("metadata", {}).get("image/png", {}).get("alt", "")
                assert len(alt.split()) >= 6, f"cell {index}: a figure without alt text (use plots.show(fig, alt=...))"


DECIDED_FIGURE = re.compile(r"the (\d+) seeds that decide (C\d+\.\d+[a-z]?)")
"""How a figure's alt text names the claim it plots and its seeds (`verdicts.deciding_numbers`)."""


def test_a_figure_of_a_claim_plots_the_seeds_that_decide_it():
    """A figure drawn for a claim says, in its committed alt text, how many seeds it plots; they are the seeds its
    course-level verdict is decided on (chapter 07's C7.1 on twenty, not the record's ten). A cell that draws a
    claim's margin reads its seeds through `verdicts.deciding_numbers`."""
    from course_lib.course.claims import chapter_of
    from course_lib.lab import verdicts

    checked = []
    for path in NOTEBOOKS:
        for index, cell in enumerate(load(path)["cells"]):
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and "paired_differences(" in source and "margin=" in source:
                assert "verdicts.deciding_numbers(" in source, f"{path.name} cell {index}: a claim's margin drawn"
            for output in cell.get("outputs", []):
                alt = output.get("metadata", {}).get("image/png", {}).get("alt", "")
                for seeds, claim in DECIDED_FIGURE.findall(alt):
                    verdict = {v.id: v for v in verdicts.chapter_verdicts(chapter_of(claim))}[claim]
                    assert int(seeds) == verdict.seeds, (path.name, index, claim, seeds, verdict.seeds)
                    checked.append(claim)
    assert {"C7.1", "C17.2"} <= set(checked), checked


LINK = re.compile(r"\]\(([^)#]+\.ipynb)\)")


@pytest.mark.parametrize("index", range(len(NOTEBOOKS)), ids=[p.stem for p in NOTEBOOKS])
def test_navigation_links_the_neighbours(index):
    """The title cell's **Navigation.** line links the previous and the next notebook (which exist), and the last cell
    links the next one, so a student can walk the course from either end of a chapter."""
    cells = load(NOTEBOOKS[index])["cells"]
    title = "".join(cells[0]["source"])
    assert "**Navigation.**" in title, "the title cell has a **Navigation.** line"
    navigation = title[title.index("**Navigation.**") :]
    previous = NOTEBOOKS[index - 1].name if index > 0 else None
    following = NOTEBOOKS[index + 1].name if index + 1 < len(NOTEBOOKS) else None
    linked = LINK.findall(navigation)
    assert linked == [name for name in (previous, following) if name], f"navigation links {linked}"
    assert "README.md" in navigation, "navigation links the chapter list"
    if following:
        last = "".join(cells[-1]["source"]) if cells[-1]["cell_type"] == "markdown" else ""
        assert following in LINK.findall(last), f"the last cell (markdown) links the next notebook, {following}"


IMPLEMENT = re.compile(r"^### Implement it · ", re.M)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_implement_it_cells_run_the_check(path):
    """An `### Implement it · ...` exercise is followed by a code cell that runs its checks (`exercises.check`), on the
    library's implementation in the committed notebook, on the student's with `use="mine"`."""
    cells = load(path)["cells"]
    for index, cell in enumerate(cells):
        if cell["cell_type"] == "markdown" and IMPLEMENT.search("".join(cell["source"])):
            after = cells[index + 1]
            if after["cell_type"] == "markdown" and "".join(after["source"]).startswith("<details><summary>Hint"):
                after = cells[index + 2]  # the collapsed hint cell sits between the task and its check
            assert after["cell_type"] == "code" and "check(" in "".join(after["source"]), f"cell {index + 1}"
            shown = "".join("".join(o.get("text", "")) for o in after["outputs"])
            assert "pass" in shown, f"cell {index + 1} prints the checks' result"


def test_each_chapters_minutes_come_from_one_record():
    """One source for a chapter's minutes (CI's nbval run, `results/minutes.json`): the README's chapter map and each
    title cell's **Time.** sentence show that number, identically (`notebooks minutes --sync` writes both)."""
    from course_lib.lab import notebooks

    minutes = notebooks.recorded_minutes()
    assert set(minutes) == {path.name[:2] for path in NOTEBOOKS}
    for path in NOTEBOOKS:
        title = "".join(load(path)["cells"][0]["source"])
        assert notebooks.time_sentence(minutes[path.name[:2]]) in title, f"{path.stem}: run `notebooks minutes --sync`"
    readme = (NOTEBOOKS[0].parent.parent / "README.md").read_text()
    assert notebooks.readme_minutes(readme, minutes) == readme, (
        "run `python -m course_lib.lab.notebooks minutes --sync`"
    )
    from course_lib.lab.study_time import tables

    shown = {
        row["#"]: row[notebooks.MINUTES_COLUMN] for t in tables(readme) for row in t if notebooks.MINUTES_COLUMN in row
    }
    assert shown == {chapter: f"{value:.1f}" for chapter, value in minutes.items()}, "a minutes cell per chapter"


def test_minutes_are_read_from_a_junit_report(tmp_path, monkeypatch):
    from course_lib.lab import notebooks

    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="notebooks.00_tool_agent_grpo.ipynb" name="Cell 0" time="6.0"/>'
        '<testcase classname="notebooks.00_tool_agent_grpo.ipynb" name="Cell 1" time="9.0"/>'
        '<testcase classname="notebooks.01_rap_world_model_mcts.ipynb" name="Cell 0" time="60.0"/>'
        '<testcase classname="tests.test_grpo" name="test_x" time="100.0"/>'
        "</testsuite></testsuites>"
    )
    monkeypatch.setattr(notebooks, "MINUTES", tmp_path / "minutes.json")
    record = notebooks.write_minutes(report)
    assert record["minutes"] == {"00": 0.2, "01": 1.0} and record["total"] == 1.2  # 15 s and 60 s
    assert notebooks.time_sentence(0.2).startswith("**Time.** The cells run in 0.2 minutes on 2 CPU cores")
    assert notebooks.TIME_SENTENCE.fullmatch(notebooks.time_sentence(1.0))


def test_a_new_notebook_is_added_to_the_minutes_without_touching_the_others(tmp_path, monkeypatch):
    from course_lib.lab import notebooks

    record = {"minutes": {"00": 0.3}, "total": 0.3, "measured": {"git_commit": "abc"}}
    monkeypatch.setattr(notebooks, "MINUTES", tmp_path / "minutes.json")
    notebooks.MINUTES.write_text(json.dumps(record))
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="notebooks.00_tool_agent_grpo.ipynb" name="Cell 0" time="600.0"/>'
        '<testcase classname="notebooks.16_appendix_real_model.ipynb" name="Cell 0" time="90.0"/>'
        "</testsuite></testsuites>"
    )
    added = notebooks.add_minutes(report)
    assert added["minutes"] == {"00": 0.3, "16": 1.5} and added["total"] == 1.8
    assert set(added["measured_apart"]) == {"16"} and added["measured"] == {"git_commit": "abc"}
