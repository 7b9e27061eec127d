"""Slides from the notebooks (`make slides`): per chapter a short reveal.js deck for a lecture, built from the
committed notebook and the recorded verdicts, so that it says what the chapter says.

    python -m course_lib.lab.slides --out build/slides          # every chapter: build/slides/chNN.slides.html
    python -m course_lib.lab.slides --out build/slides ch07     # one

Each deck has five slides: the chapter's title and papers (its first cell), the idea (the first paragraphs of its
section 1), one figure (the notebook's first image, as committed), the line of chapter 00's loop the method changes
(`LOOP_LINES`, written here by hand, one per chapter), and the verdicts (`verdicts.chapter_verdicts`, without the
statistics a first look does not need). nbconvert's `SlidesExporter` writes the HTML (reveal.js from its CDN).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
LOOP = "sample G episodes per task -> each episode's reward against its group -> clipped update on the policy's tokens"
"""Chapter 00's loop in one line, which every other chapter changes in one place."""
LOOP_LINES = {
    "ch00": "the loop itself: " + LOOP,
    "ch01": "no update: sampling becomes MCTS over states the model imagines (policy, world model and reward in one)",
    "ch02": "no update: sampling becomes tree search over real environment observations, scored by value and votes",
    "ch03": "reward: the plan's final pass, or dense reward terms and a curriculum (Planner-R1's shaping)",
    "ch04": "sampling: a turn stops at a code call, the interpreter's output is appended (masked), at most C calls",
    "ch05": "reward: a format and a tool-call correctness reward, their scale and schedule (ToolRL's design)",
    "ch06": "sampling: several tool calls per episode, each answer masked; reward: the answer with format terms",
    "ch07": "advantage: grpo -> gigpo (the episode's group plus step groups of repeated states, Eqs. 5-7)",
    "ch08": "sampling: groups -> tree (branch after a tool response where the entropy rose, at an equal budget)",
    "ch09": "batch filter: none -> starpo_s (keep the groups with the largest reward spread), clip-higher",
    "ch10": "batch filter: snr_top_p; monitor: the reasoning's mutual information with the input",
    "ch11": "sampling: AEPO's entropy pre-monitoring; policy loss: clipped -> entropy_balanced",
    "ch12": "several of the above at once, judged on one task against GRPO",
    "ch13": "the engine: the same loop in TRL's GRPOTrainer and on verl's workers",
    "ch14": "the model: a checkpoint of another family, its tokenizer and chat template",
    "ch15": "nothing on purpose: eight ways the loop goes wrong, each with a check",
    "ch16": "the model: SmolLM2-135M-Instruct, warm-started, the survey's premises measured",
    "ch17": "advantage: tree_grpo, igpo, graphgpo (the methods that came after the survey)",
}


def notebook_path(chapter: str) -> Path:
    found = sorted(NOTEBOOKS.glob(f"{chapter[2:]}_*.ipynb"))
    if len(found) != 1:
        raise FileNotFoundError(f"no single notebook for {chapter} in {NOTEBOOKS}")
    return found[0]


def title(notebook) -> str:
    """The first cell's heading and its papers line."""
    first = notebook.cells[0].source.split("\n\n")
    papers = next((block for block in first if block.startswith("**Paper")), "")
    return "\n\n".join([first[0], papers] if papers else [first[0]])


def idea(notebook) -> str:
    """The first two paragraphs of the section headed `## 1 · ...` (else of the second markdown cell), and the
    block a paragraph ending in a colon announces."""
    markdown = [cell.source for cell in notebook.cells if cell.cell_type == "markdown"]
    section = next((text for text in markdown if re.match(r"## 1 ·", text)), markdown[1] if len(markdown) > 1 else "")
    blocks = [block for block in section.split("\n\n") if block.strip() and not block.startswith("#")]
    count = 2
    while count < len(blocks) and blocks[count - 1].rstrip().endswith(":"):  # keep the equation a sentence announces
        count += 1
    return "\n\n".join(blocks[:count])


def figure(notebook) -> dict | None:
    """The notebook's first image output (as committed), or None."""
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if "image/png" in output.get("data", {}):
                return output
    return None


def verdict_lines(chapter: str) -> list[str]:
    from course_lib.lab import verdicts

    return [verdict.line(statistics=False) for verdict in verdicts.chapter_verdicts(chapter)]


def deck(chapter: str):
    """The chapter's deck as a notebook whose cells are slides."""
    import nbformat
    from nbformat import v4

    notebook = nbformat.read(notebook_path(chapter), as_version=4)

    def slide(cell):
        cell.metadata["slideshow"] = {"slide_type": "slide"}
        return cell

    cells = [
        slide(v4.new_markdown_cell(title(notebook))),
        slide(v4.new_markdown_cell("## The idea\n\n" + idea(notebook))),
    ]
    image = figure(notebook)
    if image is not None:
        shown = v4.new_code_cell("# the chapter's first figure, as committed")
        shown.outputs = [image]
        cells += [slide(v4.new_markdown_cell("## One figure")), shown]
    cells.append(slide(v4.new_markdown_cell(
        f"## What it changes in chapter 00's loop\n\n{LOOP}\n\n**{chapter}:** {LOOP_LINES[chapter]}"
    )))  # fmt: skip
    lines = verdict_lines(chapter)
    verdict = "\n".join(lines) if lines else "no recorded claims"
    cells.append(slide(v4.new_markdown_cell(f"## The verdicts (from `results/`)\n\n```text\n{verdict}\n```")))
    return v4.new_notebook(cells=cells, metadata=notebook.metadata)


def build(out: Path, chapters: list[str] | None = None) -> list[Path]:
    """Write `out/chNN.slides.html` for each chapter (default: every one in `LOOP_LINES`)."""
    from nbconvert import SlidesExporter

    out.mkdir(parents=True, exist_ok=True)
    exporter = SlidesExporter(exclude_input=True)
    written = []
    for chapter in chapters or list(LOOP_LINES):
        html, _ = exporter.from_notebook_node(deck(chapter))
        path = out / f"{chapter}.slides.html"
        path.write_text(html, encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", help="e.g. ch07 (default: every chapter)")
    parser.add_argument("--out", type=Path, default=Path("build/slides"))
    args = parser.parse_args(argv)
    for path in build(args.out, args.chapters or None):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
