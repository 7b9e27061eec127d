"""pytest for the implement-it exercises: `pytest exercises/` runs every check on your implementations in
`exercises/<module>.py`; `pytest exercises/ --impl library` (or `EXERCISES_IMPL=library`) runs them on the library's.

The measured solutions are scripts that train or load models when imported, not tests: they are never collected.
"""

from __future__ import annotations

import os

import pytest

from exercises.checks import implementation, run_case

collect_ignore = ["solutions", "measure.py"]


def pytest_addoption(parser):
    parser.addoption(
        "--impl",
        choices=("mine", "library"),
        default=None,
        help="run the exercise checks on your implementation (exercises/<module>.py, the default) or the library's",
    )


@pytest.fixture(scope="session")
def impl(request) -> str:
    return request.config.getoption("--impl", default=None) or os.environ.get("EXERCISES_IMPL") or "mine"


@pytest.fixture
def verify(impl):
    """`verify(case)`: run one check on the chosen implementation; fail with its teaching message, no traceback."""

    def run(case) -> None:
        try:
            fn = implementation(case.exercise, impl)
        except ValueError as error:  # `--impl library` in the student edition, which has no reference to run
            pytest.fail(str(error), pytrace=False)
        message = run_case(case, fn)
        if message is not None:
            pytest.fail(message, pytrace=False)

    return run
