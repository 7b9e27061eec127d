"""The project's house files: `LICENSE` and `CITATION.cff` exist, agree with each other and with
`pyproject.toml` (a release that bumps the version must bump the citation too)."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import yaml

import course_lib

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest itself depends on tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
CFF_REQUIRED = {"cff-version", "message", "title", "authors"}
"""Keys the Citation File Format 1.2.0 schema requires."""


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def citation() -> dict:
    return yaml.safe_load((ROOT / "CITATION.cff").read_text())


def test_citation_is_valid_cff_1_2_0():
    cff = citation()
    assert CFF_REQUIRED <= set(cff), CFF_REQUIRED - set(cff)
    assert cff["cff-version"] == "1.2.0"
    assert cff["type"] == "software"
    assert isinstance(cff["message"], str) and cff["message"].strip()
    # Authors as an entity: a `name` (a person would have family-names/given-names instead).
    assert cff["authors"] == [{"name": "the agentic-RL course authors"}]
    # CFF wants strings: an unquoted version such as 0.10 would parse as the float 0.1.
    assert isinstance(cff["version"], str)
    datetime.date.fromisoformat(str(cff["date-released"]))


def test_citation_version_is_the_package_version():
    assert citation()["version"] == project()["version"] == course_lib.__version__


def test_license_is_mit_everywhere():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert re.search(r"^Copyright \(c\) 2026 the agentic-RL course authors$", text, re.MULTILINE)
    assert 'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND' in text
    assert citation()["license"] == project()["license"] == "MIT"
    assert project()["license-files"] == ["LICENSE"]
    # The copyright holder is the citation's author.
    assert citation()["authors"][0]["name"] in text
