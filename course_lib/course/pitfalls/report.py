"""What every pitfall check returns: a small report that says whether the pitfall was found, with the numbers it
was found on, and that raises or warns when asked to.

A check is meant to sit inside a user's own loop (after a rollout, before an update, over a run's history), so it
must be cheap, return something printable, and fail loudly only when the caller wants it to: `on_flag="warn"` (the
default) emits a `PitfallWarning`, `"raise"` raises `PitfallError`, `"return"` only returns the report.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

ON_FLAG = ("warn", "raise", "return")
"""What a check does when it flags its pitfall."""


class PitfallError(RuntimeError):
    """A check flagged its pitfall and was asked to raise (`on_flag="raise"`); the message is the report's."""


class PitfallWarning(UserWarning):
    """A check flagged its pitfall (`on_flag="warn"`, the default)."""


@dataclass(frozen=True)
class PitfallReport:
    """One check's verdict: `name` of the pitfall, `flagged` when it was found, the `numbers` it was judged on, and
    a one-line `message` that says what was seen and, when flagged, what to do."""

    name: str
    flagged: bool
    numbers: dict[str, float] = field(default_factory=dict)
    message: str = ""

    def __str__(self) -> str:
        return f"{'FLAG' if self.flagged else 'ok  '} {self.name}: {self.message}"


def finish(report: PitfallReport, on_flag: str) -> PitfallReport:
    """Return `report`, after warning or raising as `on_flag` asks when it is flagged."""
    if on_flag not in ON_FLAG:
        raise ValueError(f"on_flag must be one of {ON_FLAG}, got {on_flag!r}")
    if report.flagged and on_flag == "raise":
        raise PitfallError(str(report))
    if report.flagged and on_flag == "warn":
        warnings.warn(str(report), PitfallWarning, stacklevel=3)
    return report
