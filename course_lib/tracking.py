"""Watching a chapter command's training as it happens: progress lines and a bar.

A chapter's `run(seed)` calls `train.train_grpo` once per arm (chapter 07: four arms and a noisy-view pair), and
`train_grpo` hands each finished history record to its `on_iteration` callback. The chapters do not pass one, and
they should not have to: `observing(chapter, seed, observers)` makes every `train_grpo` call inside it report to
`observers` as well, by putting a wrapper in place of `train_grpo` in the course's modules for the duration (the
chapter modules import the function by name) and taking it out afterwards. The wrapper adds a callback and changes
nothing else: a callback sees each record after it is complete and draws no random numbers, so the run's numbers are
those of an unobserved run. The notebooks call the chapters' `run` directly, outside any `observing`, so their
outputs are unchanged.

Observers (`Observer`): `Progress` prints one line per evaluation and, on an interactive terminal, shows a tqdm bar
labelled with the method and its current metrics.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from course_lib import overrides


@dataclass(frozen=True)
class TrainingRun:
    """One `train_grpo` call inside a chapter's seed."""

    chapter: str
    seed: int
    index: int
    """1 for the seed's first `train_grpo` call, 2 for the next, ... (chapter 07 trains six times per seed)."""
    method: str
    """`train.method_label`: `grpo`, `gigpo [step mode]`, `grpo [tree]` (ARPO), ..."""
    iterations: int
    config: Mapping
    """The run's `GRPOConfig` (and `sampling`) as plain data."""

    @property
    def name(self) -> str:
        """`"2-gigpo-step-mode"`: unique within the seed, fit for a tracker's run name or a folder."""
        return f"{self.index}-" + "-".join(re.findall(r"[A-Za-z0-9_.]+", self.method))


class Observer(Protocol):
    """Something that watches training runs: `start` before a run's first record, `log` with each record (its
    `iteration` and metrics), `finish` after the last; `close` once, after the seed."""

    def start(self, run: TrainingRun) -> None: ...

    def log(self, run: TrainingRun, record: Mapping[str, float]) -> None: ...

    def finish(self, run: TrainingRun) -> None: ...

    def close(self) -> None: ...


def metrics(record: Mapping) -> dict[str, float]:
    """A record's finite numbers, `iteration` left out (trackers take it as the step)."""
    return {
        key: float(value)
        for key, value in record.items()
        if key != "iteration" and isinstance(value, (int, float)) and math.isfinite(value)
    }


@contextlib.contextmanager
def observing(chapter: str, seed: int, observers: Sequence[Observer]) -> Iterator[None]:
    """Within the block, every `train_grpo` call made through a course module reports each record to `observers`
    (besides its caller's own `on_iteration`); afterwards the modules hold the original function again and every
    observer is closed."""
    from course_lib import train

    original = train.train_grpo
    signature = inspect.signature(original)
    calls = 0

    @functools.wraps(original)
    def observed(*args, **kwargs):
        nonlocal calls
        bound = signature.bind(*args, **kwargs)
        config, sampling = bound.arguments["config"], bound.arguments["sampling"]
        calls += 1
        plain = {"grpo": overrides.as_dict(config), "sampling": overrides.as_dict(sampling)}
        run = TrainingRun(chapter, seed, calls, train.method_label(config), config.iterations, plain)
        own = bound.arguments.get("on_iteration")

        def on_iteration(record):
            if own is not None:
                own(record)
            for observer in observers:
                observer.log(run, record)

        bound.arguments["on_iteration"] = on_iteration
        for observer in observers:
            observer.start(run)
        try:
            return original(*bound.args, **bound.kwargs)
        finally:
            for observer in observers:
                observer.finish(run)

    patched = [
        module
        for name, module in list(sys.modules.items())
        if (name == "course_lib" or name.startswith("course_lib.")) and getattr(module, "train_grpo", None) is original
    ]
    try:
        for module in patched:
            module.train_grpo = observed
        yield
    finally:
        for module in patched:
            module.train_grpo = original
        for observer in observers:
            observer.close()


# Progress ----------------------------------------------------------------------------------------------------------
class Progress:
    """One printed line per evaluation (`seed 0 2-gigpo-step-mode iteration 10/20: eval_success 0.420, ...`), as it
    happens;
    with `bar` (default: when stderr is an interactive terminal) also a tqdm bar per run on stderr, labelled with
    the method, showing the latest training success, loss and held-out success."""

    BAR_KEYS = ("success", "loss", "eval_success")

    def __init__(self, bar: bool | None = None, stream=None):
        self.stream = stream or sys.stdout
        self.show_bar = sys.stderr.isatty() if bar is None else bar
        self.bar = None
        self.shown: dict[str, float] = {}

    def start(self, run: TrainingRun) -> None:
        if self.show_bar:
            from tqdm import tqdm

            self.bar = tqdm(total=run.iterations + 1, desc=f"seed {run.seed} {run.method}", leave=False,
                            file=sys.stderr, dynamic_ncols=True)  # fmt: skip
        self.shown = {}

    def log(self, run: TrainingRun, record: Mapping[str, float]) -> None:
        evaluated = {key: value for key, value in metrics(record).items() if key.startswith("eval_")}
        if evaluated:
            numbers = ", ".join(f"{key} {value:.3f}" for key, value in evaluated.items())
            line = f"  seed {run.seed} {run.name} iteration {record['iteration']}/{run.iterations}: {numbers}"
            if self.bar is not None:
                self.bar.write(line, file=self.stream)
            else:
                print(line, file=self.stream, flush=True)
        if self.bar is not None:
            self.shown |= {key: value for key, value in metrics(record).items() if key in self.BAR_KEYS}
            self.bar.set_postfix({key: f"{value:.3f}" for key, value in self.shown.items()}, refresh=False)
            self.bar.update(1)

    def finish(self, run: TrainingRun) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def close(self) -> None:
        self.finish(None)  # type: ignore[arg-type]
