"""What every exercise's checks share: the failure they raise and comparisons whose messages show the numbers."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch


class ExerciseFailure(AssertionError):
    """A check failed; the message says what is wrong and why."""


@dataclass(frozen=True)
class Case:
    """One check: `run(fn)` calls the implementation `fn` and raises `ExerciseFailure` if it is wrong."""

    exercise: str
    title: str
    run: Callable[[Callable], None]

    def __str__(self) -> str:  # the pytest id
        return self.title.replace(" ", "-")


@dataclass(frozen=True)
class Exercise:
    """An implement-it exercise: `name` is `<module>.<function>` of the stub in `exercises/`."""

    name: str
    chapter: str
    reference: str  # the library file that holds the reference solution
    library: Callable  # the library's implementation, adapted to the stub's signature
    cases: tuple[tuple[str, Callable[[Callable], None]], ...]  # (title, check) in the order they run

    @property
    def module(self) -> str:
        return self.name.split(".")[0]

    @property
    def function(self) -> str:
        return self.name.split(".")[1]

    @property
    def stub(self) -> str:
        return f"exercises/{self.module}.py::{self.function}"


def floats(values) -> list[float]:
    """A flat list of floats from a tensor, a number or a (nested) list; ExerciseFailure if it is none of them."""
    if isinstance(values, torch.Tensor):
        return [float(v) for v in values.detach().reshape(-1).tolist()]
    if isinstance(values, (int, float)):
        return [float(values)]
    if isinstance(values, Sequence) and not isinstance(values, str):
        return [v for item in values for v in floats(item)]
    raise ExerciseFailure(f"expected numbers (a tensor or a list), got a {type(values).__name__}")


def show(values: Sequence[float]) -> str:
    """Numbers rounded to 4 decimals, so that a message reads the same on every machine."""
    return "[" + ", ".join("nan" if math.isnan(v) else f"{v:.4f}".replace("-0.0000", "0.0000") for v in values) + "]"


def expect_close(got, expected, why: str, atol: float = 1e-4, rtol: float = 1e-4) -> None:
    """Fail with `why` and both values unless `got` equals `expected` elementwise within the tolerances."""
    got_values, want = floats(got), floats(expected)
    if len(got_values) != len(want):
        raise ExerciseFailure(f"{why} (expected {len(want)} values {show(want)}, got {len(got_values)})")
    for g, w in zip(got_values, want):
        if math.isnan(g) or abs(g - w) > atol + rtol * abs(w):
            raise ExerciseFailure(f"{why} (expected {show(want)}, got {show(got_values)})")


def expect_same(got, expected, why: str) -> None:
    """Fail with `why` unless `got == expected` (booleans, sets, exact values)."""
    if got != expected:
        raise ExerciseFailure(f"{why} (expected {expected}, got {got})")


def expect_tensor_with_grad(value, of: str) -> torch.Tensor:
    """The value must be a tensor that backpropagates to the inputs: training differentiates it."""
    if not isinstance(value, torch.Tensor):
        raise ExerciseFailure(
            f"return a torch tensor, not a {type(value).__name__}: training backpropagates through {of}"
        )
    if not value.requires_grad:
        raise ExerciseFailure(
            f"{of} must stay connected to logprobs (no .item(), .detach() or torch.no_grad()): "
            "training backpropagates through it"
        )
    return value


def value_and_gradient(f: Callable, of: str, old: torch.Tensor, shift: torch.Tensor, *args) -> tuple:
    """A policy loss `f(logprobs, old, *args, 0.2, 0.28)` at `logprobs = old + shift`: its value (summed to a scalar
    for the backward pass) and the gradient with respect to `logprobs`, which it must keep (`of` names it)."""
    logprobs = (old + shift).requires_grad_()
    value = expect_tensor_with_grad(f(logprobs, old, *args, 0.2, 0.28), of)
    value.sum().backward()
    return value.detach(), logprobs.grad


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


RECORDED = Path(__file__).with_name("recorded.json")
"""The library's values on the checks' seeded cases, written by the student edition's build
(`course_lib.lab.student_edition`), whose library holds no reference to compute them with. Absent here, and never
read here: the instructor's edition computes them."""
_recording: dict | None = None
_recorded: dict | None = None


def reference(key: str, compute: Callable, *args):
    """The reference's value for the seeded case `key`: `compute(*args)` by the library in the instructor's edition,
    read from `RECORDED` in the student edition. While `recording` runs, the computed value is kept."""
    global _recorded
    if _recording is not None:
        value = compute(*args)
        if key in _recording:
            raise KeyError(f"two seeded cases share the key {key!r}")
        _recording[key] = _encode(value)
        return value
    from course_lib import implement_it

    if implement_it.EDITION != "student":
        return compute(*args)
    if _recorded is None:
        try:
            _recorded = json.loads(RECORDED.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise RecordedValuesMissing(f"{RECORDED} is missing or unreadable ({error})") from None
    if key not in _recorded:
        raise RecordedValuesMissing(f"{RECORDED} holds no value for the case {key!r}")
    return _decode(_recorded[key])


class RecordedValuesMissing(RuntimeError):
    """The student edition's recorded reference values cannot be read: no check can be graded without them, and
    the student's code is not to blame (the edition's checks never fall back to comparing the student's code with
    itself, which is what its library would compute)."""

    def __init__(self, what: str):
        super().__init__(f"{what}: unpack the student edition again, or ask your instructor to rebuild it")


def recording(run: Callable[[], None]) -> dict:
    """Run `run` (the checks on the library) and return every `reference` value it computed, encoded for JSON."""
    global _recording
    _recording = {}
    try:
        run()
        return _recording
    finally:
        _recording = None


def _encode(value):
    if isinstance(value, torch.Tensor):
        return {"tensor": value.detach().tolist(), "dtype": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, tuple):
        return {"tuple": [_encode(v) for v in value]}
    if isinstance(value, (set, frozenset)):
        return {"set": sorted(value)}
    if isinstance(value, dict):
        return {"dict": {str(k): _encode(v) for k, v in value.items()}}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot record a {type(value).__name__}")


def _decode(value):
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "tensor" in value:
        return torch.tensor(value["tensor"], dtype=getattr(torch, value["dtype"]))
    if "tuple" in value:
        return tuple(_decode(v) for v in value["tuple"])
    if "set" in value:
        return set(value["set"])
    return {k: _decode(v) for k, v in value["dict"].items()}
