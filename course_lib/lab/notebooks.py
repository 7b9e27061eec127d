"""Execute the course notebooks headless (the README's "run the course" command).

    python -m course_lib.lab.notebooks run --out build      # executed copies + HTML index under build/
    python -m course_lib.lab.notebooks refresh              # re-execute in place: the committed outputs
    python -m course_lib.lab.notebooks minutes .ci-junit.xml [--write]   # each notebook's minutes in CI's nbval run
    python -m course_lib.lab.notebooks student-edition --out DIR   # the edition without answers (student_edition)
    python -m course_lib.lab.notebooks minutes --sync       # README and title-cell minutes from the record

`refresh` is the only way committed outputs are produced: it forces the cpu preset, executes each
notebook top to bottom in a fresh kernel, and strips volatile metadata so diffs stay small.

`run` builds a small site that works without the repository: one HTML page per chapter, the README as
`README.html` and every `docs/**/*.md` as `docs/**/*.html`, and links between them re-pointed at those pages (a
chapter's link to `01_rap_world_model_mcts.ipynb` goes to `01_rap_world_model_mcts.html`, `../README.md` to
`README.html`, `../docs/claims.md` to `docs/claims.html`); the library's and the exercises' Python files are
copied under `code/`, where a chapter's link to the file that implements a method lands; the index links the
chapters and the README.
"""

from __future__ import annotations

import argparse
import html
import importlib.util
import json
import os
import posixpath
import re
import shutil
import sys
import time
from pathlib import Path

import nbformat
import zmq
from nbclient import NotebookClient
from nbconvert import HTMLExporter
from nbconvert.filters.markdown_mistune import markdown2html_mistune
from traitlets.config import Config

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
DOCS = ROOT / "docs"
MINUTES = ROOT / "results" / "minutes.json"
"""Each notebook's minutes in CI's nbval run (the sum of its cells' times, 2 cores): the one source of a chapter's
minutes, which the README's chapter map and each title cell's **Time.** sentence show (`minutes --sync`)."""
TIME_SENTENCE = re.compile(r"\*\*Time\.\*\* The cells run in ([\d.]+) minutes? on 2 CPU cores \(CI's nbval run, "
                           r"`results/minutes\.json`\)\.")  # fmt: skip
README = ROOT / "README.md"


INSTALL_CELL = """\
# On a hosted notebook (a JupyterHub, Colab) that has the course's repository but not its package, this installs it
# into this kernel's environment from the repository this notebook sits in. Where it is installed, it does nothing.
import importlib.util
import pathlib
import subprocess
import sys

if importlib.util.find_spec("course_lib") is None:
    root = pathlib.Path.cwd().resolve().parent
    if not (root / "course_lib").is_dir():
        raise SystemExit("course_lib is not installed: clone the course and open this notebook from its notebooks/")
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "-e", str(root)])
    sys.path.insert(0, str(root))  # importable in this kernel at once, without a restart\
"""
"""Every notebook's first code cell (tested): it installs the course where it is missing."""


def kernel_config() -> Config:
    """Kernel-manager settings: encrypt the kernel's local TCP sockets (CurveZMQ) where pyzmq can, as
    ipykernel 7.3+ otherwise prints a warning about unencrypted TCP at every kernel start."""
    # "auto" provisions keys only for kernels whose kernelspec declares support.
    return Config({"KernelManager": {"transport_encryption": "auto"}}) if zmq.has("curve") else Config()


def execute(path: Path, timeout: int = 1200) -> tuple[nbformat.NotebookNode, float]:
    """Run a notebook in a fresh kernel with the notebooks folder as working directory."""
    notebook = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        config=kernel_config(),
    ).execute()
    return notebook, time.perf_counter() - start


def strip_volatile(notebook: nbformat.NotebookNode) -> None:
    """Drop execution timestamps and widget state, which change on every run."""
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
    notebook.metadata.pop("widgets", None)


MATHJAX_CONFIG = "TeX-AMS-MML_HTMLorMML-full,Safe"
"""The MathJax 2 configuration that `jupyter-server-mathjax` ships (TeX input, HTML output, safe mode)."""


def local_mathjax(out: Path) -> str | None:
    """Copy the MathJax that the `jupyter-server-mathjax` package ships into `out/mathjax` and return the
    relative URL the HTML pages load it from, so equations render without network access; None (nbconvert's
    default, a CDN) when the package is not installed."""
    spec = importlib.util.find_spec("jupyter_server_mathjax")
    if spec is None or spec.origin is None:
        return None
    static = Path(spec.origin).parent / "static"
    if not (static / "MathJax.js").exists():
        return None
    shutil.copytree(static, out / "mathjax", dirs_exist_ok=True)
    return f"mathjax/MathJax.js?config={MATHJAX_CONFIG}"


def site_page(repo_path: str) -> str | None:
    """Where the site holds a repository file (paths relative to the repository root and to the site's folder):
    `notebooks/N.ipynb` is `N.html`, `README.md` is `README.html`, `docs/**/X.md` is `docs/**/X.html`,
    `course_lib/**/X.py` is `code/course_lib/**/X.py` (likewise `exercises/`), a derivation's worked solutions
    `exercises/solutions/derivations/X.md` are `code/exercises/solutions/derivations/X.html`; None for a file the
    site does not hold."""
    folder, name = posixpath.split(repo_path)
    if folder == "notebooks" and name.endswith(".ipynb"):
        return name[: -len(".ipynb")] + ".html"
    if repo_path == "README.md" or (repo_path.startswith("docs/") and name.endswith(".md")):
        return repo_path[: -len(".md")] + ".html"
    if repo_path.startswith(SOURCE_FOLDERS) and name.endswith(".py"):
        return "code/" + repo_path
    if folder == DERIVATIONS and name.endswith(".md"):
        return "code/" + repo_path[: -len(".md")] + ".html"
    return None


DERIVATIONS = "exercises/solutions/derivations"
"""The derivation problems' worked solutions (markdown), pages of the site beside the code they go with."""


SOURCE_FOLDERS = ("course_lib/", "exercises/")
"""The code the lessons link to (the file that implements a method, an exercise's stub): the site holds a copy under
`code/`, so a link from a chapter's page opens the source as it opens in JupyterLab."""


def copy_sources(out: Path) -> None:
    """Copy the Python files of `SOURCE_FOLDERS` to `out/code/`, where `site_page` points links to them."""
    for folder in SOURCE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            target = out / "code" / path.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)


LINK = re.compile(r'(?P<attribute>\b(?:href|src))="(?P<url>[^"]*)"')
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def rewrite_links(page: str, source: str, target: str) -> str:
    """`page` (HTML made from the repository file `source`, written at `target` in the site; both relative paths)
    with every relative `href` or `src` that names a repository file the site holds (`site_page`) re-pointed at
    that page, its `#fragment` kept. Other links (absolute, in-page, to files the site does not hold) are left."""

    def replace(match: re.Match) -> str:
        url = match["url"]
        if not url or url.startswith(("#", "/")) or SCHEME.match(url):
            return match[0]
        path = re.split(r"[?#]", url, maxsplit=1)[0]
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(source), path))
        page_path = None if resolved.startswith("..") else site_page(resolved)
        if page_path is None:
            return match[0]
        relative = posixpath.relpath(page_path, posixpath.dirname(target) or ".")
        return f'{match["attribute"]}="{html.escape(relative)}{url[len(path) :]}"'

    return LINK.sub(replace, page)


MATHJAX_INLINE = (
    '<script type="text/x-mathjax-config">MathJax.Hub.Config({tex2jax: {inlineMath: [["$", "$"], ["\\\\(", "\\\\)"]], '
    "processEscapes: true}});</script>"
)
"""MathJax 2's setting for `$...$` inline maths (its default knows only `\\(...\\)`), for the markdown pages."""


def markdown_page(path: Path, out: Path, mathjax: str | None) -> str:
    """Write the repository's markdown file `path` as its site page under `out` (links re-pointed); returns the
    page's path relative to `out`."""
    source = path.relative_to(ROOT).as_posix()
    target = site_page(source)
    assert target is not None, source
    title = "Agentic RL course" if target == "README.html" else path.stem
    head = f'<meta charset="utf-8"><title>{html.escape(title)}</title>'
    if mathjax:  # inline $...$ as in the notebooks' pages
        up = posixpath.relpath(".", posixpath.dirname(target) or ".")
        head += f"\n{MATHJAX_INLINE}\n" + f'<script src="{html.escape(posixpath.join(up, mathjax))}"></script>'
    body = markdown2html_mistune(path.read_text())
    page = f"<!doctype html><html><head>{head}</head><body>\n{body}\n</body></html>\n"
    (out / target).parent.mkdir(parents=True, exist_ok=True)
    (out / target).write_text(rewrite_links(page, source, target))
    return target


def export(notebook: nbformat.NotebookNode, path: Path, out: Path, exporter: HTMLExporter) -> str:
    """Write an (executed) notebook from the repository's `path` as its site page under `out`, links re-pointed;
    returns the page's path relative to `out`."""
    source = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else f"notebooks/{path.name}"
    target = path.with_suffix(".html").name
    body, _ = exporter.from_notebook_node(notebook)
    (out / target).write_text(rewrite_links(body, source, target))
    return target


def write_site(out: Path, chapters: list[tuple[str, float]], mathjax: str | None) -> None:
    """The README and `docs/**/*.md` as pages, the library's source files (`copy_sources`), and the index:
    `chapters` as (notebook stem, seconds it ran)."""
    copy_sources(out)
    markdown_page(ROOT / "README.md", out, mathjax)
    for path in [*sorted(DOCS.rglob("*.md")), *sorted((ROOT / DERIVATIONS).glob("*.md"))]:
        markdown_page(path, out, mathjax)
    links = "\n".join(
        f'<li><a href="{html.escape(name)}.html">{html.escape(name)}</a> ({seconds / 60:.1f} min)</li>'
        for name, seconds in chapters
    )
    (out / "index.html").write_text(
        '<!doctype html><title>Agentic RL course</title><h1>Chapters</h1><p><a href="README.html">README</a></p>'
        f"<ul>\n{links}\n</ul>\n"
    )


def run(paths: list[Path], out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    mathjax = local_mathjax(out)
    exporter = HTMLExporter(mathjax_url=mathjax) if mathjax else HTMLExporter()
    rows = []
    for path in paths:
        notebook, seconds = execute(path)
        nbformat.write(notebook, out / path.name)
        export(notebook, path, out, exporter)
        rows.append((path.stem, seconds))
        print(f"{path.name}: {seconds / 60:.1f} min")
    write_site(out, rows, mathjax)
    print(f"wrote {out / 'index.html'}")
    return 0


def refresh(paths: list[Path]) -> int:
    # Each notebook's first cell sets torch to the course's thread count (`config.use_threads`), as the chapter
    # commands that record results/ do: on the recording machine a live seed then equals its recorded one.
    os.environ["COURSE_SCALE"] = "cpu"
    os.environ.setdefault("COURSE_SEED", "0")
    for path in paths:
        notebook, seconds = execute(path)
        strip_volatile(notebook)
        nbformat.write(notebook, path)
        print(f"{path.name}: refreshed in {seconds / 60:.1f} min")
    return 0


def nbval_minutes(junit_xml: Path) -> dict[str, float]:
    """Minutes each notebook's cells took in a `pytest --nbval --junitxml=...` run (the sum of its cells' times),
    by notebook file name, read from the JUnit XML report: what `make course` spends executing each chapter."""
    import xml.etree.ElementTree as ElementTree

    minutes: dict[str, float] = {}
    for case in ElementTree.parse(junit_xml).getroot().iter("testcase"):
        name = case.get("classname", "") + "/" + case.get("file", "")
        match = re.search(r"(\d\d_[\w-]+)\.ipynb", name + case.get("name", ""))
        if match:
            key = match.group(1) + ".ipynb"
            minutes[key] = minutes.get(key, 0.0) + float(case.get("time", 0.0)) / 60
    return dict(sorted(minutes.items()))


def write_minutes(junit_xml: Path) -> dict:
    """`results/minutes.json` from a CI run's JUnit report: minutes per chapter (`"00": 0.2`, one decimal), the
    total, and where they were measured."""
    from course_lib.course.recorded import _git
    from course_lib.machine import cpu_description

    per_notebook = nbval_minutes(junit_xml)
    minutes = {name[:2]: round(value, 1) for name, value in per_notebook.items()}
    record = {
        "minutes": minutes,
        "total": round(sum(per_notebook.values()), 1),
        "measured": {"cpu": cpu_description(), "git_commit": _git("rev-parse", "HEAD") or "unknown",
                     "how": "pytest --nbval under .ci/run: the sum of each notebook's cells' times, 2 cores, "
                            "ATEN_CPU_CAPABILITY=avx2"},
    }  # fmt: skip
    MINUTES.write_text(json.dumps(record, indent=1) + "\n")
    return record


def add_minutes(junit_xml: Path) -> dict:
    """Add to `results/minutes.json` the notebooks of `junit_xml` that it does not hold yet (a new chapter, measured
    under .ci/run's settings before the next full CI run records every notebook at once), each with where it was
    measured under `measured_apart`; the notebooks it holds keep their numbers. Returns the record."""
    from course_lib.course.recorded import _git
    from course_lib.machine import cpu_description

    record = json.loads(MINUTES.read_text())
    new = {name[:2]: value for name, value in nbval_minutes(junit_xml).items() if name[:2] not in record["minutes"]}
    for chapter, value in sorted(new.items()):
        record["minutes"][chapter] = round(value, 1)
        record.setdefault("measured_apart", {})[chapter] = {
            "cpu": cpu_description(), "git_commit": _git("rev-parse", "HEAD") or "unknown",
            "how": "pytest --nbval on this notebook alone, 2 cores, ATEN_CPU_CAPABILITY=avx2",
        }  # fmt: skip
    record["minutes"] = dict(sorted(record["minutes"].items()))
    record["total"] = round(record["total"] + sum(new.values()), 1)
    MINUTES.write_text(json.dumps(record, indent=1) + "\n")
    return record


def recorded_minutes() -> dict[str, float]:
    """`{"00": 0.2, ...}` from `results/minutes.json`."""
    return json.loads(MINUTES.read_text())["minutes"]


def time_sentence(minutes: float) -> str:
    """A title cell's **Time.** sentence for `minutes` (matched by `TIME_SENTENCE`)."""
    unit = "minute" if minutes == 1 else "minutes"
    return f"**Time.** The cells run in {minutes:.1f} {unit} on 2 CPU cores (CI's nbval run, `results/minutes.json`)."


MINUTES_COLUMN = "CPU minutes"
"""The header of the README chapter map's column that `readme_minutes` writes."""


def readme_minutes(text: str, minutes: dict[str, float]) -> str:
    """The README's chapter map with its CPU-minutes column (`MINUTES_COLUMN`, found by its header) from `minutes`."""
    from course_lib.lab.study_time import fill_column

    return fill_column(
        text, MINUTES_COLUMN, lambda row: f"{minutes[row['#']]:.1f}" if row.get("#") in minutes else None
    )


def sync_minutes() -> list[str]:
    """Write each title cell's **Time.** sentence and the README's minutes column from `results/minutes.json`;
    return the files changed."""
    minutes = recorded_minutes()
    changed = []
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        title = notebook.cells[0]
        sentence = time_sentence(minutes[path.name[:2]])
        new = TIME_SENTENCE.sub(lambda _, sentence=sentence: sentence, title.source)
        if new != title.source:
            title.source = new
            nbformat.write(notebook, path)
            changed.append(str(path.relative_to(ROOT)))
    text = README.read_text()
    if (new := readme_minutes(text, minutes)) != text:
        README.write_text(new)
        changed.append("README.md")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.lab.notebooks", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="execute notebooks into an output folder with an HTML index")
    run_parser.add_argument("--out", type=Path, default=ROOT / "build")
    run_parser.add_argument("notebooks", nargs="*", type=Path)
    refresh_parser = sub.add_parser("refresh", help="re-execute notebooks in place (committed outputs)")
    refresh_parser.add_argument("notebooks", nargs="*", type=Path)
    minutes_parser = sub.add_parser("minutes", help="minutes per notebook from a pytest --nbval JUnit XML report")
    minutes_parser.add_argument("junit_xml", type=Path, nargs="?")
    minutes_parser.add_argument("--write", action="store_true", help="record them in results/minutes.json")
    minutes_parser.add_argument("--sync", action="store_true", help="the README and title cells from the record")
    minutes_parser.add_argument(
        "--add", action="store_true", help="record only the notebooks results/minutes.json does not hold yet"
    )
    edition_parser = sub.add_parser(
        "student-edition", help="notebooks and exercises without solutions, expected outcomes and answers"
    )
    edition_parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "student-edition":
        from course_lib.lab import student_edition

        student_edition.main(["--out", str(args.out)])
        return 0
    if args.command == "minutes":
        if args.sync:
            for name in sync_minutes():
                print(f"wrote {name}")
            return 0
        if args.junit_xml is None:
            parser.error("minutes needs a JUnit XML report (or --sync)")
        if args.write:
            print(f"wrote {MINUTES.relative_to(ROOT)}: {write_minutes(args.junit_xml)['total']} minutes in all")
        elif args.add:
            print(
                f"added to {MINUTES.relative_to(ROOT)}: {sorted(add_minutes(args.junit_xml).get('measured_apart', {}))}"
            )
        minutes = nbval_minutes(args.junit_xml)
        for name, value in minutes.items():
            print(f"{name:45} {value:5.1f} min")
        print(f"{'all notebooks':45} {sum(minutes.values()):5.1f} min")
        return 0
    paths = [p.resolve() for p in args.notebooks] or sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    return run(paths, args.out) if args.command == "run" else refresh(paths)


if __name__ == "__main__":
    sys.exit(main())
