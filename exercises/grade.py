"""Grade the implement-it exercises: the autograder's results as the rubric's points (docs/teaching.md, "Rubrics").

    python -m exercises.grade                   # the files in exercises/ (a student's submission)
    python -m exercises.grade --json grades.json  # also write the table, for a gradebook

The rubric gives each implement-it exercise 10 points, 4 of them for "the checks pass": that criterion is the one a
program can grade, so this command grades it and leaves the other 6 (correctness beyond the checks, code quality,
the explanation) to the instructor. Weights, stated: every exercise weighs the same; within one, the 4 points are
shared equally by its checks, each check run on its own (a failure in one does not hide the others), so an
implementation that passes 3 of 4 checks gets 3 points. A check passed by special-casing its input still counts
here: the rubric's "no partial credit" for it is the instructor's to apply, reading the code.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import exercises

CHECK_POINTS = 4.0
"""The rubric's points for "the checks pass", out of 10 per exercise."""
RUBRIC_POINTS = 10.0


@dataclass(frozen=True)
class Grade:
    """One exercise's automated grade."""

    exercise: str
    passed: int
    checks: int
    points: float
    """`CHECK_POINTS` x passed / checks."""
    first_failure: str | None


def grade(use: str = "mine") -> list[Grade]:
    """Every exercise's checks on the implementation `use` ("mine": the files in `exercises/`; "library": the
    reference, which gets full points), each check run on its own."""
    from exercises.checks import cases, implementation, run_case

    grades = []
    for name in exercises.NAMES:
        fn = implementation(name, use)
        messages = [run_case(case, fn) for case in cases(name)]
        failures = [message for message in messages if message is not None]
        passed = len(messages) - len(failures)
        points = round(CHECK_POINTS * passed / len(messages), 2)
        grades.append(Grade(name, passed, len(messages), points, failures[0] if failures else None))
    return grades


def report(grades: list[Grade]) -> str:
    """The grades as a table, with the total of the automated points and what is left to the instructor."""
    width = max(len(g.exercise) for g in grades)
    lines = [f"{'exercise':<{width}}  checks  points (of {CHECK_POINTS:g})"]
    for g in grades:
        lines.append(f"{g.exercise:<{width}}  {g.passed:>2}/{g.checks:<3}  {g.points:g}")
    total, most = sum(g.points for g in grades), CHECK_POINTS * len(grades)
    lines.append(
        f'automated: {total:g} of {most:g} points ("the checks pass", {CHECK_POINTS:g} of each exercise\'s '
        f"{RUBRIC_POINTS:g}); the other {RUBRIC_POINTS - CHECK_POINTS:g} per exercise are the instructor's"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The implement-it exercises' automated points (the rubric's 4 of 10).")
    parser.add_argument("--use", choices=("mine", "library"), default="mine", help="whose implementations to grade")
    parser.add_argument("--json", type=Path, help="also write the grades to this file")
    args = parser.parse_args(argv)
    try:
        grades = grade(args.use)
    except ValueError as error:  # `--use library` in the student edition
        raise SystemExit(f"grade: {error}") from None
    print(report(grades))
    if args.json:
        args.json.write_text(json.dumps([asdict(g) for g in grades], indent=1) + "\n")


if __name__ == "__main__":
    main()
