"""The first code cell of every notebook installs the course where it is missing (a hosted notebook with the
repository but not the package), and does nothing where it is installed; run in a fresh virtual environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course_lib.lab.notebooks import INSTALL_CELL

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_opens_with_the_install_cell_and_it_prints_nothing_here(path):
    cells = nbformat.read(path, as_version=4).cells
    first = next(cell for cell in cells if cell.cell_type == "code")
    assert first.source == INSTALL_CELL, "the first code cell is course_lib.lab.notebooks.INSTALL_CELL"
    assert first.outputs == [], "where the course is installed the cell does nothing"


FIND = "import importlib.util; spec = importlib.util.find_spec('course_lib'); print(spec and spec.origin)"


@pytest.mark.slow
def test_the_install_cell_installs_the_course_into_a_fresh_environment(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    # The course's own package only: installing torch and the rest into a throwaway environment is not what this
    # test checks (PIP_NO_DEPS is pip's --no-deps, read from the environment).
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PIP_NO_DEPS"] = "1"

    def run(code: str, cwd: Path) -> subprocess.CompletedProcess:
        return subprocess.run([python, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)

    assert run(FIND, tmp_path).stdout.strip() == "None", "a fresh environment has no course_lib"
    outside = run(INSTALL_CELL, tmp_path)
    assert outside.returncode != 0 and "clone the course" in outside.stderr, "outside the repository it says what to do"
    installed = run(INSTALL_CELL + "\n" + FIND, ROOT / "notebooks")
    assert installed.returncode == 0, installed.stderr[-2000:]
    assert installed.stdout.strip() == str(ROOT / "course_lib" / "__init__.py"), "importable in the same kernel"
    assert run(FIND, tmp_path).stdout.strip() == str(ROOT / "course_lib" / "__init__.py"), "and in a new one"
    again = run(INSTALL_CELL, ROOT / "notebooks")
    assert again.returncode == 0 and again.stdout == "" and again.stderr == "", "installed: the cell does nothing"
