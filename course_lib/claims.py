"""Check and print a chapter's claims (every chapter's last section).

Each claim is a paper's headline finding restated for the miniature (ids from claims.md). The
claims cell prints one line per claim, with no raw numbers (those go in the cell before, so that
the compared output stays deterministic), and raises if a required claim fails, which makes a
chapter that stops reproducing its paper fail `pytest --nbval`.
"""

from __future__ import annotations

from dataclasses import dataclass


class ClaimFailed(AssertionError):
    """A required claim did not hold."""


@dataclass(frozen=True)
class Claim:
    id: str
    """Stable id from claims.md, e.g. `C0.1`."""
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
        return "FAIL" if self.required else "not reproduced at this scale"


def report(claims: list[Claim]) -> None:
    """Print `ID  STATUS  name` per claim; raise `ClaimFailed` if a required claim failed."""
    for claim in claims:
        print(f"{claim.id:<6}{claim.status}  {claim.name}")
    failed = [claim.id for claim in claims if claim.required and not claim.passed]
    if failed:
        raise ClaimFailed(f"required claims failed: {', '.join(failed)}")
