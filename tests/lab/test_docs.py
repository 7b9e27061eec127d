"""Mechanical checks of the prose: links resolve, claim ids agree, quoted parameter counts match the outputs.

Fast and model-free: they read the committed notebooks, README.md and docs/*.md as text.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
DOCS = sorted((ROOT / "docs").glob("*.md"))
MARKDOWN_FILES = [ROOT / "README.md", *DOCS]

# Paths that a command creates (`make course` writes build/, `make install` writes .venv/): prose may name them.
GENERATED = ("build/", ".venv/")
# A backticked path is taken as a file of this repository only when it starts at one of its top-level entries;
# `verl/utils/reward_score/rlla.py` (a file of another project) is left alone.
TOP_LEVEL = {p.name for p in ROOT.iterdir() if not p.name.startswith(".")} | {"docs"}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
BACKTICKED = re.compile(r"`([^`\s]+)`")
CLAIM_ID = re.compile(r"C\d+\.\d+[a-z]?")


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def markdown_cells(path: Path) -> list[tuple[int, str]]:
    return [(i, "".join(c["source"])) for i, c in enumerate(load(path)["cells"]) if c["cell_type"] == "markdown"]


def output_text(path: Path) -> str:
    """Every text a notebook's code cells printed or displayed, joined."""
    texts = []
    for cell in load(path)["cells"]:
        for output in cell.get("outputs", []):
            texts.append("".join(output.get("text", "")))
            texts.append("".join(output.get("data", {}).get("text/plain", "")))
    return "\n".join(texts)


def referenced_paths(text: str) -> list[tuple[str, bool]]:
    """`(path, is_link)` for every relative link target and every backticked repository path in `text`."""
    found = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue  # URLs, mailto:, in-page anchors
        found.append((target.split("#", 1)[0], True))
    for word in BACKTICKED.findall(text):
        word = word.rstrip(".,:;)")
        first = word.split("/", 1)[0]
        if first in TOP_LEVEL and ("/" in word or "." in word) and not re.search(r"[*?{}<>=(]", word):
            found.append((word, False))
    return found


def _path_cases() -> list:
    cases = []
    for path in MARKDOWN_FILES:
        if path.exists():
            cases.append(pytest.param(path, path.read_text(encoding="utf-8"), id=str(path.relative_to(ROOT))))
    for path in NOTEBOOKS:
        text = "\n".join(source for _, source in markdown_cells(path))
        cases.append(pytest.param(path, text, id=str(path.relative_to(ROOT))))
    return cases


def test_docs_exist():
    assert (ROOT / "docs" / "claims.md").is_file() and (ROOT / "docs" / "glossary.md").is_file()


@pytest.mark.parametrize(("source", "text"), _path_cases())
def test_referenced_files_exist(source: Path, text: str):
    """Links resolve from the file's own folder (as a Markdown viewer does); backticked paths name a file or
    folder of the repository (from its root, or from the file's folder)."""
    missing = []
    for target, is_link in referenced_paths(text):
        if target.startswith(GENERATED):
            continue
        bases = [source.parent] if is_link else [ROOT, source.parent]
        if not any((base / target).exists() for base in bases):
            missing.append(target)
    assert not missing, f"{source.relative_to(ROOT)} names files that do not exist: {missing}"


def test_referenced_paths_finds_links_and_paths():
    """The extractor itself: links, backticked repository paths, and nothing else."""
    text = "see [a](../docs/claims.md#x), [b](https://x.org), `course_lib/rl/train.py`, `verl/a.py`, `cfg.x = 1`"
    assert referenced_paths(text) == [("../docs/claims.md", True), ("course_lib/rl/train.py", False)]


def committed_claim_ids(path: Path) -> list[str]:
    """The ids printed by a notebook's claims cell (the one that calls `report(`), in order, after `recorded.origin`'s
    lines: "this run: ..." (which machine ran the cell), then this run against the recorded seed ("k of n numbers
    equal ...", and each number that differs, indented)."""
    cells = [c for c in load(path)["cells"] if c["cell_type"] == "code" and "report(" in "".join(c["source"])]
    assert len(cells) == 1, "exactly one claims cell"
    text = "".join("".join(o.get("text", "")) for o in cells[0]["outputs"])
    origin, against, *lines = text.strip().splitlines()
    assert origin.startswith("this run: seed "), f"the claims cell starts with results.origin's line: {origin!r}"
    assert " numbers equal the recorded seed's" in against, against
    return [line.split()[0] for line in lines if not line.startswith("  ")]


# Committed outputs that fail today; each entry names the fix that flips it (then remove the entry).
STALE_CLAIMS_OUTPUT: dict[str, str] = {}


def _claims_cases() -> list:
    cases = []
    for path in NOTEBOOKS:
        marks = (
            [pytest.mark.xfail(strict=True, reason=STALE_CLAIMS_OUTPUT[path.stem])]
            if path.stem in STALE_CLAIMS_OUTPUT
            else []
        )
        cases.append(pytest.param(path, id=path.stem, marks=marks))
    return cases


@pytest.mark.parametrize("path", _claims_cases())
def test_claims_cell_ids_are_unique(path: Path):
    ids = committed_claim_ids(path)
    assert ids and all(CLAIM_ID.fullmatch(i) for i in ids), ids
    assert len(ids) == len(set(ids)), f"duplicate claim ids in the committed claims output: {ids}"


def readme_findings() -> dict[int, str]:
    """Chapter -> the README chapter map's "findings reproduced" cell (`2 of 2`, `none tested (...)`)."""
    from course_lib.lab import study_time, verdict_docs

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = [row for table in study_time.tables(text) for row in table if verdict_docs.FINDINGS_COLUMN in row]
    return {int(row["#"]): row[verdict_docs.FINDINGS_COLUMN] for row in rows}


def docs_tallies() -> dict[int, tuple[int, int]]:
    """Chapter -> (findings reproduced, findings tested): the tally line under each chapter's heading in
    docs/claims.md."""
    text = (ROOT / "docs" / "claims.md").read_text(encoding="utf-8")
    tally = r"^## (\d\d) (?:(?!^## ).)*?^\*\*Tally:\*\* findings reproduced (\d+) of (\d+)"
    found = re.findall(tally, text, flags=re.M | re.S)
    return {int(chapter): (int(held), int(tested)) for chapter, held, tested in found}


def docs_claim_ids() -> dict[int, set[str]]:
    """Chapter -> the ids docs/claims.md lists, with a part letter dropped (`C4.3a` counts as `C4.3`)."""
    text = (ROOT / "docs" / "claims.md").read_text(encoding="utf-8")
    out: dict[int, set[str]] = {}
    for found in re.findall(r"(?:^\| |\*\*)(C(\d+)\.\d+)[a-z]?\b", text, flags=re.M):
        claim, chapter = found
        out.setdefault(int(chapter), set()).add(claim)
    return out


def test_readme_findings_column_matches_docs():
    """For every chapter (`results.MODULES`): the README's "findings reproduced" count is docs/claims.md's tally
    (reproduced of tested), the number tested is the number of findings the chapter declares, and docs/claims.md
    lists exactly the ids the chapter modules declare (the ids live there, not in the README)."""
    import importlib

    from course_lib.chapters import modules
    from course_lib.lab import verdicts

    readme, tallies, docs = readme_findings(), docs_tallies(), docs_claim_ids()
    assert set(readme) == set(tallies) == set(docs) == {int(key[2:]) for key in modules()}, "every chapter, everywhere"
    for key, name in modules().items():
        module, chapter = importlib.import_module(f"course_lib.chapters.{name}"), int(key[2:])
        specs = (*module.CLAIMS, *(spec for setting in verdicts.settings(key) for spec in setting.claims))
        declared = {re.sub(r"[a-z]$", "", spec.id) for spec in specs}  # a designed setting's ids too (C0.5d)
        assert docs[chapter] == declared, (chapter, docs[chapter], declared)
        held, tested = tallies[chapter]
        untestable = sum(bool(v.untestable) for v in verdicts.chapter_verdicts(key) if v.kind == "finding")
        assert tested == sum(spec.kind == "finding" for spec in specs) - untestable, (chapter, tested)
        cell = readme[chapter]
        if tested:
            notes = r"( \((\d+ undecided)?(, )?(\d+ not testable)?\))?(; hypotheses \d+ of \d+ supported)?"
            assert re.fullmatch(rf"{held} of {tested}{notes}", cell), (chapter, cell, tallies[chapter])
        else:
            assert cell.startswith("none tested"), (chapter, cell)


def test_readme_findings_cell_reads_the_verdicts():
    """The README's cell, on verdicts made up for the purpose."""
    from types import SimpleNamespace

    from course_lib.lab import verdict_docs

    def verdict(kind, holds, decided=True, tested=True):
        return SimpleNamespace(kind=kind, holds=holds, decided=decided, tested=tested)

    mixed = [verdict("finding", True), verdict("finding", False), verdict("design", True)]
    assert verdict_docs.findings_cell(mixed) == "1 of 2"
    assert verdict_docs.findings_cell([verdict("finding", False, decided=False)]) == "0 of 1 (1 undecided)"
    untestable = [verdict("finding", False), verdict("finding", False, tested=False)]
    assert verdict_docs.findings_cell(untestable) == "0 of 1 (1 not testable)"
    hypotheses = [verdict("finding", True), verdict("hypothesis", True), verdict("hypothesis", False)]
    assert verdict_docs.findings_cell(hypotheses) == "1 of 1; hypotheses 1 of 2 supported"
    assert verdict_docs.findings_cell([verdict("mechanism", True), verdict("mechanism", True)]) == (
        "none tested (mechanism checks 2 of 2 hold)"
    )


# The start page --------------------------------------------------------------------------------------------------
README_WORDS = 1200
JARGON = re.compile(r"\b(findings?|mechanisms?|induc\w*|bootstrap|power)\b", re.I)


def words(text: str) -> int:
    """Words as a reader sees them: HTML comments and link targets (URLs, paths) are not counted, tables and code
    are."""
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    return len(re.sub(r"\]\([^)]*\)", "]", text).split())


def test_the_readme_is_a_start_page():
    """At most `README_WORDS` words; its first screen says where to start (`make lab`, then chapter 00); no course
    jargon before the first chapter link; the chapter map keeps its `#chapters` anchor, which every notebook links."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert words(text) <= README_WORDS, f"README.md has {words(text)} words: move detail to docs/"
    first_screen = "\n".join(text.splitlines()[:25])
    assert "Start here" in first_screen and "make lab" in first_screen, "the first 25 lines say where to start"
    assert "](notebooks/00_" in first_screen, "the first 25 lines link chapter 00"
    before = text[: text.index("](notebooks/")]
    assert not JARGON.search(before), f"jargon before the first chapter: {JARGON.findall(before)}"
    assert "\n## Chapters\n" in text


def test_words_ignores_comments_and_link_targets():
    assert words("See [the page](docs/a.md) <!-- hidden words --> and `make lab`.") == 6


def test_the_docs_index_lists_every_page():
    """docs/README.md links every page of docs/ (its own subfolders aside)."""
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    linked = set(LINK.findall(index))
    assert {path.name for path in DOCS if path.name != "README.md"} <= linked


# Parameter counts quoted in prose: "511,616 parameters", "0.7M-parameter", "1.0M parameters", "500K parameters".
_COUNT = r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?[MK])"
# the count before "parameters", and the first of a pair ("0.47M and 1.0M parameters")
QUOTED_COUNT = re.compile(rf"{_COUNT}(?:[- ]parameters?\b|(?= and \S+[- ]parameters?\b))")
PRINTED_COUNT = re.compile(r"(?<![\w.])\d{1,3}(?:,\d{3})+(?![\d,])|(?<![\w.,])\d{4,}(?![\w.])")


def printed_counts(text: str) -> set[int]:
    """Every integer of at least four digits in `text` (with or without thousands separators)."""
    return {int(m.replace(",", "")) for m in PRINTED_COUNT.findall(text)}


def quote_matches(quote: str, counts: set[int]) -> bool:
    """An exact quote must be printed verbatim; "0.47M" must equal some printed count rounded to 2 decimals."""
    if quote[-1] in "MK":
        scale = 1e6 if quote[-1] == "M" else 1e3
        number = quote[:-1]
        decimals = len(number.split(".")[1]) if "." in number else 0
        return any(round(count / scale, decimals) == float(number) for count in counts)
    return int(quote.replace(",", "")) in counts


def test_quote_matching():
    """The matcher itself, on chapter 04's case and near misses."""
    assert quote_matches("0.5M", {511_616}) and quote_matches("0.51M", {511_616})
    assert not quote_matches("0.7M", {511_616}) and not quote_matches("0.52M", {511_616})
    assert quote_matches("511,616", {511_616}) and not quote_matches("511,617", {511_616})
    assert quote_matches("1.0M", {1_017_984}) and quote_matches("500K", {499_712})
    assert QUOTED_COUNT.findall("a 0.7M-parameter model, 511,616 parameters, 2.25x the compute") == ["0.7M", "511,616"]
    assert QUOTED_COUNT.findall("0.47M and 1.0M parameters (a 2.2x ratio)") == ["0.47M", "1.0M"]
    assert printed_counts("parameters: 511,616  vocabulary: 664 words, 1024 tokens") == {511_616, 1024}


# Prose that quotes a count no output of its notebook prints, today. The coordinator rewrites the prose; then the
# case disappears (its id names the quote) or turns into an unexpected pass, which strict=True reports.
MISMATCHED_COUNTS: dict[str, str] = {}


def _count_cases() -> list:
    cases = []
    for path in NOTEBOOKS:
        for index, source in markdown_cells(path):
            for quote in QUOTED_COUNT.findall(source):
                case_id = f"{path.stem}-cell{index}-{quote}"
                reason = MISMATCHED_COUNTS.get(case_id)
                marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
                if not any(c.id == case_id for c in cases):
                    cases.append(pytest.param(path, quote, id=case_id, marks=marks))
    return cases


@pytest.mark.parametrize(("path", "quote"), _count_cases())
def test_quoted_parameter_counts_match_the_outputs(path: Path, quote: str):
    counts = printed_counts(output_text(path))
    assert quote_matches(quote, counts), f"{path.stem} says {quote} parameters; no printed count matches"


def test_every_notebook_quote_is_checked():
    """Guard against the pattern silently matching nothing: the chapters quote model sizes."""
    assert len(_count_cases()) >= len(NOTEBOOKS)


def test_the_glossary_is_alphabetical_and_defines_the_verdicts_statistics():
    """Entries sorted by their letters and digits (case and punctuation ignored), and every statistic a claim's
    verdict line shows is defined."""
    import re

    text = (ROOT / "docs" / "glossary.md").read_text()
    terms = re.findall(r"^\*\*(.+?)\*\*", text, flags=re.MULTILINE)
    letters = [re.sub(r"[^a-z0-9 ]", "", term.lower()) for term in terms]
    assert letters == sorted(letters), "docs/glossary.md: keep the entries in alphabetical order"
    for needed in ("IQM", "Probability of improvement", "Detectable effect", "Power", "Paired bootstrap", "Spearman",
                   "Student-t interval", "Sign-flip test"):  # fmt: skip
        assert any(term.startswith(needed) for term in terms), needed
