"""Check and print a chapter's claims (every chapter's last section).

Each claim is a paper's headline finding restated for the miniature; the ids (`C0.1`, `C4.3a`, ...)
are stable and are the ones the course's list of claims uses (`docs/claims.md`). A chapter declares
its claims once, as `ClaimSpec`s in its module's `CLAIMS`: a check is a pure function of the flat
dictionary of numbers that the chapter's `claim_numbers(results)` extracts from a run, so a verdict
can be recomputed from recorded numbers alone (`course_lib.results`, `tests/test_results.py`).

The claims cell prints one line per claim, with no raw numbers (those go in the cell before, so that
the compared output stays deterministic), and raises if a required claim fails, which makes a
chapter that stops reproducing its paper fail `pytest --nbval`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

CHECK_DECIMALS = 9
"""Checks see every number rounded to this many decimals. Success rates are multiples of 1/N and their
differences should compare exactly with a margin, but float subtraction leaves residues of about 1e-16
(0.905 - 0.855 = 0.05000000000000004, 0.85 - 0.80 = 0.04999999999999993), which would otherwise decide a
`>= 0.05` margin by rounding error. No check of the course uses a threshold finer than 1e-5."""


def settled(numbers: Mapping[str, float]) -> dict[str, float]:
    """`numbers` with every finite float rounded to `CHECK_DECIMALS` decimals (NaN, infinities and other values
    unchanged): what a claim's check sees."""
    return {
        key: round(value, CHECK_DECIMALS) if isinstance(value, float) and math.isfinite(value) else value
        for key, value in numbers.items()
    }


NOT_REPRODUCED = "not reproduced at this scale"


class ClaimFailed(AssertionError):
    """A required claim did not hold."""


@dataclass(frozen=True)
class Claim:
    id: str
    """Stable id, e.g. `C0.1`."""
    name: str
    """Short statement of what is checked."""
    passed: bool
    """Outcome of the check, computed from measured numbers."""
    required: bool = True
    """False for a claim already documented as not reproduced at this scale."""

    @property
    def status(self) -> str:
        if self.passed:
            return "PASS"
        return "FAIL" if self.required else NOT_REPRODUCED


@dataclass(frozen=True)
class ClaimSpec:
    """A claim as data: what the paper found, what the miniature checks, and the check itself."""

    id: str
    """Stable id, e.g. `C4.3a`."""
    statement: str
    """The miniature's test and its margin: exactly what `check` computes."""
    paper: str
    """The paper's own number or finding, with its source (short)."""
    value: str
    """Key, in the chapter's `claim_numbers`, of the claim's headline quantity (shown in tables)."""
    check: Callable[[Mapping[str, float]], bool]
    """Verdict from the chapter's numbers alone (no access to models or trajectories)."""
    required: bool = True
    """False for a claim documented as not reproduced at this scale (it reports instead of failing)."""

    def evaluate(self, numbers: Mapping[str, float]) -> Claim:
        """Today's `Claim`: run the check on `numbers`, rounded first (`settled`)."""
        return Claim(self.id, self.statement, bool(self.check(settled(numbers))), self.required)


def evaluate_all(specs: Sequence[ClaimSpec], numbers: Mapping[str, float]) -> list[Claim]:
    """Every spec evaluated on the same numbers, in order."""
    return [spec.evaluate(numbers) for spec in specs]


def report(claims: list[Claim]) -> None:
    """Print `ID  STATUS  name` per claim; raise `ClaimFailed` if a required claim failed."""
    for claim in claims:
        print(f"{claim.id:<6}{claim.status}  {claim.name}")
    failed = [claim.id for claim in claims if claim.required and not claim.passed]
    if failed:
        raise ClaimFailed(f"required claims failed: {', '.join(failed)}")
