"""Every chapter notebook follows the course's template (title cell, sections 1-8) and is committed cleanly executed."""

import json
import re
from pathlib import Path

import pytest

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
def test_claims_cell_is_compared_and_prints_no_floats(path):
    code = [c for c in load(path)["cells"] if c["cell_type"] == "code"]
    claims = [c for c in code if "report(" in "".join(c["source"])]
    assert len(claims) == 1, "exactly one claims cell"
    cell = claims[0]
    assert "nbval-ignore-output" not in cell["metadata"].get("tags", []), "the claims cell must be compared by nbval"
    text = "".join("".join(o.get("text", "")) for o in cell["outputs"])
    lines = text.strip().splitlines()
    verdict_line = re.compile(r"^C\d+\.\d+[a-z]?\s+(PASS|FAIL|not reproduced at this scale)\s+\S")  # ids such as C4.3a
    assert lines and all(verdict_line.match(ln) for ln in lines)
    statements = [line.split(None, 1)[1] for line in lines]
    assert not any(re.search(r"\d\.\d", s) for s in statements), "no raw floats in the claims cell"
