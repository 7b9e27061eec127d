"""Every chapter notebook follows the course's template (title cell, sections 1-8) and is committed cleanly executed."""

import json
import re
from pathlib import Path

import pytest

from course_lib.claims import NOT_REPRODUCED, NOT_RUN_HERE

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))
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
    assert None not in counts and counts == sorted(counts), "execute top to bottom with course_lib.notebooks refresh"
    for cell in code:
        for output in cell["outputs"]:
            assert output["output_type"] != "error", "an error output is committed"
            assert output.get("name") != "stderr", f"stderr in committed output: {''.join(output['text'])[:80]!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_claims_cell_prints_this_run_beside_the_course_verdict_which_is_compared(path):
    """The claims cell prints this run's verdict (machine-dependent, so not compared) beside the course-level one;
    the cell after it prints the course-level verdicts read from results/ (deterministic, so compared)."""
    code = [c for c in load(path)["cells"] if c["cell_type"] == "code"]
    claims = [i for i, c in enumerate(code) if "report(" in "".join(c["source"])]
    assert len(claims) == 1, "exactly one claims cell"
    cell, after = code[claims[0]], code[claims[0] + 1]
    assert "nbval-ignore-output" in cell["metadata"].get("tags", []), "this run's verdicts depend on the machine"
    assert "verdicts.course_lines(" in "".join(cell["source"]), "this run's result is printed beside the course's"
    text = "".join("".join(o.get("text", "")) for o in cell["outputs"])
    lines = text.strip().splitlines()
    statuses = "|".join(re.escape(status) for status in ("PASS", "FAIL", NOT_REPRODUCED, NOT_RUN_HERE))
    verdict_line = re.compile(
        rf"^C\d+\.\d+[a-z]?\s+(finding|mechanism|design)\s+this run ({statuses}); recorded \d+ of \d+ seeds: \S"
    )  # ids such as C4.3a; NOT_RUN_HERE for a claim whose arms the notebook does not train live
    assert lines and all(verdict_line.match(ln) for ln in lines), lines
    assert "verdicts.print_chapter(" in "".join(after["source"]), "the course-level verdicts follow the claims cell"
    assert "nbval-ignore-output" not in after["metadata"].get("tags", []), "the course-level verdicts are compared"
    shown = "".join("".join(o.get("text", "")) for o in after["outputs"])
    assert shown.startswith("course-level verdicts") and "findings reproduced" in shown


STATUS_WORDS = re.compile(r"\b(C\d+\.\d+[a-z]?)\b([^.;:]*?)\b(not reproduced|reproduced)\b(?! in the designed)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_markdown_states_the_course_level_status(path):
    """Where a notebook's text says a claim is (not) reproduced, in one clause naming it, that is its course-level
    verdict from results/ (`course_lib.verdicts`): the takeaways and the claims cell cannot disagree."""
    from course_lib import verdicts

    status = {v.id: v.status for v in verdicts.chapter_verdicts("ch" + path.stem[:2])}
    for cell in load(path)["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        text = " ".join("".join(cell["source"]).split())
        for claim, between, said in STATUS_WORDS.findall(text):
            if claim not in status or re.search(r"\bC\d+\.\d", between):
                continue  # another chapter's claim, or a clause about several claims
            expected = "not reproduced" if status[claim] != "reproduced" else "reproduced"
            assert said == expected, f"{path.stem}: the text says {claim} {said!r}, results/ say {status[claim]!r}"
