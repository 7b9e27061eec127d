"""Watching a chapter command's training as it happens: progress lines, a bar, and experiment trackers.

A chapter's `run(seed)` calls `train.train_grpo` once per arm (chapter 07: four arms and a noisy-view pair), and
`train_grpo` hands each finished history record to its `on_iteration` callback. The chapters do not pass one, and
they should not have to: `observing(chapter, seed, observers)` adds an observer to the run session (`session.observing`)
for the block, so every `train_grpo` run inside it (the chapters', a chapter run as `python -m`, a fork's) reports
each record to `observers` as well, and its start and end. An observer sees each record after it is complete and
draws no random numbers, so the run's numbers are those of an unobserved run. The notebooks call the chapters' `run`
directly, outside any `observing`, so their outputs are unchanged.

Observers (`Observer`): `Progress` prints one line per evaluation and, on an interactive terminal, shows a tqdm bar
labelled with the method and its current metrics; the trackers of `TRACKERS` (`jsonl`, always available;
`tensorboard`, `trackio`, `wandb` from the optional `track` extra) log every record.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
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
    start: int = 0
    """The first iteration this process trains: 0, or k + 1 for a run resumed from iteration k's checkpoint (its
    earlier records were logged by the process that made them)."""

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
    """Within the block, every `train_grpo` run (`session.observing`) reports each record to `observers`,
    numbered in the order the runs start; afterwards every observer is closed."""
    from course_lib.rl import session, train

    calls = 0

    def observer(config, sampling, start=0):
        nonlocal calls
        calls += 1
        plain = {"grpo": overrides.as_dict(config), "sampling": overrides.as_dict(sampling)}
        run = TrainingRun(chapter, seed, calls, train.method_label(config), config.iterations, plain, start)
        for each in observers:
            each.start(run)

        def log(record: Mapping[str, float]) -> None:
            for each in observers:
                each.log(run, record)

        def end() -> None:
            for each in observers:
                each.finish(run)

        return log, end

    try:
        with session.observing(observer):
            yield
    finally:
        for each in observers:
            each.close()


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


# Trackers ----------------------------------------------------------------------------------------------------------
def run_folder(run_dir: str | Path, chapter: str, seed: int) -> Path:
    """`<run_dir>/<chapter>-seed<seed>`: where a seed's tracker files go."""
    return Path(run_dir) / f"{chapter}-seed{seed}"


class JsonlTracker:
    """`<folder>/metrics.jsonl`: one JSON object per history record, `{"run": "2-gigpo", "method": "gigpo",
    "iteration": 3, ...metrics}`, flushed as written (so `tail -f` follows a run).

    A seed whose first run starts fresh rewrites the file. A resumed run (`TrainingRun.start` > 0) keeps what the
    processes before it logged and appends; rows of that run from its `start` on (logged after the checkpoint it
    resumes from was written, then killed) are dropped first, since the run logs those iterations again, so the file
    holds the records of an uninterrupted run. A fresh run drops its own earlier rows likewise."""

    def __init__(self, folder: Path, chapter: str, seed: int):
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / "metrics.jsonl"
        self.file = None

    def start(self, run: TrainingRun) -> None:
        kept = []
        if (self.file is not None or run.start > 0) and self.path.exists():
            for line in self.path.read_text().splitlines():
                row = json.loads(line)
                if row.get("run") != run.name or row.get("iteration", 0) < run.start:
                    kept.append(line + "\n")
        if self.file is not None:
            self.file.close()
        scratch = self.path.with_suffix(".jsonl.tmp")
        scratch.write_text("".join(kept))
        scratch.replace(self.path)  # never a half-written file
        self.file = self.path.open("a")

    def log(self, run: TrainingRun, record: Mapping[str, float]) -> None:
        line = {"run": run.name, "method": run.method, "iteration": record["iteration"], **metrics(record)}
        self.file.write(json.dumps(line) + "\n")
        self.file.flush()

    def finish(self, run: TrainingRun) -> None:
        pass

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


class TensorBoardTracker:
    """`<folder>/tensorboard/<run name>/`: one TensorBoard run per training run, a scalar per metric at step
    `iteration`, the run's config as text (`tensorboard --logdir <folder>/tensorboard` compares the arms). A resumed
    run writes on in the same run, its config not again, and hides the steps from its `start` on that an interrupted
    process logged after its last checkpoint (`purge_step`): the run logs them again."""

    def __init__(self, folder: Path, chapter: str, seed: int):
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        self.folder, self.writer_class, self.writer = folder / "tensorboard", SummaryWriter, None

    def start(self, run: TrainingRun) -> None:
        self.writer = self.writer_class(log_dir=str(self.folder / run.name), purge_step=run.start or None)
        if run.start == 0:
            self.writer.add_text("config", "```\n" + json.dumps(run.config, indent=1) + "\n```")

    def log(self, run: TrainingRun, record: Mapping[str, float]) -> None:
        for key, value in metrics(record).items():
            self.writer.add_scalar(key, value, global_step=int(record["iteration"]))

    def finish(self, run: TrainingRun) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def close(self) -> None:
        self.finish(None)  # type: ignore[arg-type]


class TrackioTracker:
    """One trackio run per training run (project `course-<chapter>`, run `<chapter>-seed<k>-<name>`), stored
    locally by trackio (its dashboard: `trackio show`)."""

    def __init__(self, folder: Path, chapter: str, seed: int):
        import trackio

        self.trackio = trackio

    def start(self, run: TrainingRun) -> None:
        self.trackio.init(project=f"course-{run.chapter}", name=f"{run.chapter}-seed{run.seed}-{run.name}",
                          config=dict(run.config))  # fmt: skip

    def log(self, run: TrainingRun, record: Mapping[str, float]) -> None:
        self.trackio.log(metrics(record), step=int(record["iteration"]))

    def finish(self, run: TrainingRun) -> None:
        self.trackio.finish()

    def close(self) -> None:
        pass


class WandbTracker:
    """One Weights & Biases run per training run (project `course-<chapter>`, grouped by seed), written under
    `<folder>/wandb`. Offline unless `WANDB_MODE` says otherwise: `wandb sync <folder>/wandb/offline-run-*` uploads."""

    def __init__(self, folder: Path, chapter: str, seed: int):
        import wandb

        folder.mkdir(parents=True, exist_ok=True)
        self.wandb, self.folder, self.run = wandb, folder, None

    def start(self, run: TrainingRun) -> None:
        self.run = self.wandb.init(
            project=f"course-{run.chapter}", group=f"{run.chapter}-seed{run.seed}",
            name=f"{run.chapter}-seed{run.seed}-{run.name}", dir=str(self.folder), config=dict(run.config),
            mode=os.environ.get("WANDB_MODE", "offline"),
        )  # fmt: skip

    def log(self, run: TrainingRun, record: Mapping[str, float]) -> None:
        self.run.log(metrics(record), step=int(record["iteration"]))

    def finish(self, run: TrainingRun) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None

    def close(self) -> None:
        self.finish(None)  # type: ignore[arg-type]


TRACKERS: dict[str, tuple[Callable[[Path, str, int], Observer], str | None]] = {
    "jsonl": (JsonlTracker, None),
    "tensorboard": (TensorBoardTracker, "tensorboard"),
    "trackio": (TrackioTracker, "trackio"),
    "wandb": (WandbTracker, "wandb"),
}
"""`--report-to` name -> (tracker, the package it needs or None)."""


def missing(names: Sequence[str]) -> list[str]:
    """The packages `names`' trackers need that are not installed (checked before a run, not after its base)."""
    import importlib.util

    packages = [TRACKERS[name][1] for name in names]
    return [package for package in packages if package and importlib.util.find_spec(package) is None]


def trackers(names: Sequence[str], run_dir: str | Path, chapter: str, seed: int) -> list[Observer]:
    """The trackers `names` (keys of `TRACKERS`) for one seed, writing under `run_folder(run_dir, chapter, seed)`."""
    unknown = [name for name in names if name not in TRACKERS]
    if unknown:
        raise ValueError(f"unknown tracker {unknown[0]!r}: choose from {', '.join(TRACKERS)}")
    folder = run_folder(run_dir, chapter, seed)
    return [TRACKERS[name][0](folder, chapter, seed) for name in dict.fromkeys(names)]
