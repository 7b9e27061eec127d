"""A golden run: digests of exactly what the rollout engine and a GRPO update compute.

Every RL result in the course depends on exact floating-point arithmetic. A change to the engine
that moves one log-prob by 1e-6 changes the loss, then the weights, then which tokens are sampled:
sixty iterations later the run ends somewhere else. (It happened once: prefilling shared prompts
once left chapter 00 bit-identical but moved chapter 05's LoRA log-probs by up to 2.6e-6, and its
RL arms by up to 14 points.) Tests with tolerances cannot see such a change; this module can.

It rolls out fixed batches with every chapter's committed base model, runs chapter 01's world
model, takes two GRPO iterations of chapter 00, and three GRPO iterations (with evaluations) and
three SFT steps of chapter 05's LoRA arms; it hashes token ids, log-probs, entropies, rewards,
metrics and the updated weights. The digests are stored with the machine and library versions
they were computed on, because other CPUs and BLAS builds round differently.

    python -m course_lib.lab.golden            # compare with tests/golden_run.json
    python -m course_lib.lab.golden --update   # after a deliberate change: then re-run every chapter's
                                           # seeds and refresh the notebooks
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from course_lib.machine import THREADS, machine  # callers use `golden.machine` too

GOLDEN_FILE = Path(__file__).resolve().parents[2] / "tests" / "golden_run.json"


def digest(value) -> str:
    """SHA-256 of `repr(value)`: Python floats print exactly, so equal digests mean equal bits."""
    return hashlib.sha256(repr(value).encode()).hexdigest()[:16]


@contextmanager
def intra_op_threads(count: int) -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def cases() -> dict[str, Callable[[], object]]:
    """Name -> a function computing the values to hash (each loads what it needs): every chapter's
    `Chapter.golden` cases, in chapter order."""
    from course_lib import chapters  # the course's table of chapters: imports every chapter module

    found: dict[str, Callable[[], object]] = {}
    for chapter in chapters.index().values():
        if chapter.golden is not None:
            found.update(chapter.golden())
    return found


def digests() -> dict[str, str]:
    """The digest of every case, computed with `THREADS` intra-op threads."""
    with intra_op_threads(THREADS):
        return {name: digest(compute()) for name, compute in cases().items()}


def recorded(path: Path = GOLDEN_FILE) -> dict:
    """The committed `{"machine": ..., "digests": ...}`."""
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python -m course_lib.lab.golden --update` to record it")
    return json.loads(path.read_text())


def differences(path: Path = GOLDEN_FILE) -> list[str]:
    """Names of the cases whose digest differs from the recorded one (empty: bit-identical)."""
    expected = recorded(path)["digests"]
    actual = digests()
    return [name for name in expected.keys() | actual.keys() if expected.get(name) != actual.get(name)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.lab.golden", description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="record this machine's digests")
    args = parser.parse_args(argv)
    if args.update:
        GOLDEN_FILE.write_text(json.dumps({"machine": machine(), "digests": digests()}, indent=1) + "\n")
        print(f"recorded {GOLDEN_FILE}")
        return 0
    stored = recorded()
    if stored["machine"] != machine():
        print(f"recorded on {stored['machine']}, this is {machine()}: digests are not comparable here")
        return 0
    changed = differences()
    for name in sorted(changed):
        print(f"changed: {name}")
    print("golden run: bit-identical" if not changed else "golden run: CHANGED (see the module docstring)")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
