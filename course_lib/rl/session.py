"""One run session: what a chapter command (or a notebook, or a test) sets once for every training run the chapter
makes, without the chapter passing it on: the model in place of the chapter's base and how it is warm-started, the
chat role observations take, where checkpoints go and who observes the runs.

It is an explicit object (`RunSession`) held in a context variable: `using(**changes)` runs a block with a session
changed, and restores the one before when the block ends (an exception included); `current()` is the session the
code reads (`checkpoint.model_path`, `train.train_grpo`). Outside any block it is the environment's:
`COURSE_MODEL`, `COURSE_MODEL_FULL_FINETUNE=1` and `COURSE_MODEL_OBSERVATION_ROLE` name a checkpoint for a notebook
or a shell, as `--model`, `--full-finetune` and `--observation-role` do for a command. Nothing here writes the
environment, and no module keeps a stack of runs: two threads, or two sessions one inside the other, each see their
own.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODEL_VARIABLE = "COURSE_MODEL"
FULL_FINETUNE_VARIABLE = "COURSE_MODEL_FULL_FINETUNE"
OBSERVATION_ROLE_VARIABLE = "COURSE_MODEL_OBSERVATION_ROLE"

RunObserver = Callable[[Any, Any, int], tuple[Callable[[dict[str, float]], None], Callable[[], None]]]
"""Told of every `train_grpo` run as it starts (its `GRPOConfig`, `SamplingConfig` and first iteration: 0, or k + 1
when resumed from iteration k's checkpoint), it returns `(log, end)`: `log` is called with each record as
`on_iteration` is, `end` when the run ends."""


@dataclass
class Checkpoints:
    """Where a session's training runs checkpoint: run k of the session (in the order runs start, the same every time
    for a chapter) in a folder of its own under `folder`, `<k>-<method>`; with `resume`, each continues from its
    checkpoint. `settings` (the chapter's resolved config) goes into each run's fingerprint, so a resume with other
    settings is refused."""

    folder: Path
    resume: bool = False
    settings: object | None = None
    placed: int = 0
    """Runs placed so far."""

    def place(self, label: str) -> tuple[Path, bool, object | None]:
        """The next run's `(folder, resume, settings)`; `label` names its method (`train.method_label`)."""
        self.placed += 1
        name = f"{self.placed}-" + "-".join(re.findall(r"[A-Za-z0-9_.]+", label))
        run_folder = Path(self.folder) / name
        run_folder.mkdir(parents=True, exist_ok=True)
        return run_folder, self.resume, self.settings


@dataclass(frozen=True)
class RunSession:
    """What every training run of a block shares."""

    model: str | None = None
    """A checkpoint folder, or a real model's name (`smollm2`), in place of the chapter's base (`--model`)."""
    full_finetune: bool = False
    """Warm-start every weight of `model` instead of a LoRA adapter (`--full-finetune`)."""
    observation_role: str = "tool"
    """The chat role the environment's observations take in `model`'s template (`--observation-role`)."""
    checkpoints: Checkpoints | None = None
    """Where each training run checkpoints (`--checkpoint-dir`, `--resume`); None: nowhere."""
    observers: tuple[RunObserver, ...] = ()
    """Who hears of each training run (`--report-to`, the progress lines: `rl.tracking`)."""

    @classmethod
    def from_environment(cls) -> RunSession:
        """The session a shell or a notebook sets with environment variables (read, never written)."""
        return cls(
            model=os.environ.get(MODEL_VARIABLE) or None,
            full_finetune=os.environ.get(FULL_FINETUNE_VARIABLE, "") == "1",
            observation_role=os.environ.get(OBSERVATION_ROLE_VARIABLE) or "tool",
        )


_current: contextvars.ContextVar[RunSession | None] = contextvars.ContextVar("course_lib_run_session", default=None)


def current() -> RunSession:
    """The session of the block this runs in, or the environment's outside any."""
    session = _current.get()
    return session if session is not None else RunSession.from_environment()


@contextlib.contextmanager
def using(**changes) -> Iterator[RunSession]:
    """Within the block, the current session with `changes` (`RunSession`'s fields); the previous one after it."""
    token = _current.set(dataclasses.replace(current(), **changes))
    try:
        yield _current.get()
    finally:
        _current.reset(token)


def checkpointing(folder: str | Path, resume: bool = False, settings: object | None = None):
    """Within the block, every training run given no `checkpoint_dir` checkpoints under `folder` (`Checkpoints`), and
    with `resume` continues from its checkpoint: how a chapter command's `--checkpoint-dir` and `--resume` reach the
    runs a chapter makes."""
    return using(checkpoints=Checkpoints(Path(folder), resume, settings))


def observing(observer: RunObserver):
    """Within the block, every training run also reports to `observer` (after the session's own observers)."""
    return using(observers=(*current().observers, observer))
