"""Execute the course notebooks headless (the README's "run the course" command).

    python -m course_lib.notebooks run --out build      # executed copies + HTML index under build/
    python -m course_lib.notebooks refresh              # re-execute in place: the committed outputs

`refresh` is the only way committed outputs are produced: it forces the cpu preset, executes each
notebook top to bottom in a fresh kernel, and strips volatile metadata so diffs stay small.
"""

from __future__ import annotations

import argparse
import html
import importlib.util
import os
import shutil
import sys
import time
from pathlib import Path

import nbformat
import zmq
from nbclient import NotebookClient
from nbconvert import HTMLExporter
from traitlets.config import Config

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"


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


def run(paths: list[Path], out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    mathjax = local_mathjax(out)
    exporter = HTMLExporter(mathjax_url=mathjax) if mathjax else HTMLExporter()
    rows = []
    for path in paths:
        notebook, seconds = execute(path)
        nbformat.write(notebook, out / path.name)
        body, _ = exporter.from_notebook_node(notebook)
        (out / path.with_suffix(".html").name).write_text(body)
        rows.append((path.stem, seconds))
        print(f"{path.name}: {seconds / 60:.1f} min")
    links = "\n".join(
        f'<li><a href="{html.escape(name)}.html">{html.escape(name)}</a> ({seconds / 60:.1f} min)</li>'
        for name, seconds in rows
    )
    (out / "index.html").write_text(
        f"<!doctype html><title>Agentic RL course</title><h1>Chapters</h1><ul>\n{links}\n</ul>\n"
    )
    print(f"wrote {out / 'index.html'}")
    return 0


def refresh(paths: list[Path]) -> int:
    os.environ["COURSE_SCALE"] = "cpu"
    os.environ.setdefault("COURSE_SEED", "0")
    for path in paths:
        notebook, seconds = execute(path)
        strip_volatile(notebook)
        nbformat.write(notebook, path)
        print(f"{path.name}: refreshed in {seconds / 60:.1f} min")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.notebooks", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="execute notebooks into an output folder with an HTML index")
    run_parser.add_argument("--out", type=Path, default=ROOT / "build")
    run_parser.add_argument("notebooks", nargs="*", type=Path)
    refresh_parser = sub.add_parser("refresh", help="re-execute notebooks in place (committed outputs)")
    refresh_parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args(argv)
    paths = [p.resolve() for p in args.notebooks] or sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    return run(paths, args.out) if args.command == "run" else refresh(paths)


if __name__ == "__main__":
    sys.exit(main())
