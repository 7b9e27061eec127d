"""Chapter 12's MI monitor with rollback as a `transformers.TrainerCallback`, for TRL's `GRPOTrainer` (or any
`Trainer`).

RAGEN-2 (chapter 10) reads template collapse off the mutual information between the input and the first action;
chapter 12 stops training when a monitor's MI falls below (1 - drop) x the base's and rolls back to
the last state whose MI passed (`diagnostics.MIStop` inside the course's `train_grpo`). A callback is transformers'
own hook for this: `on_train_begin` sees the starting weights, `on_step_end` those after every optimizer step, and
`control.should_training_stop` ends the run there. The schedule is the course's: a measurement before the first
update, every `every` updates, and after the last, each checked before the next update.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from transformers import TrainerCallback

from course_lib.diagnostics import MIStop


class MIRollback(TrainerCallback):
    """Measure `measure(model)` (e.g. chapter 12's `monitor_mi`) at step 0, every `every` steps and at the last
    step, and apply chapter 12's own gate to it (`diagnostics.MIStop`: remember the weights whenever the MI is at
    least (1 - `drop`) x `base_mi`; the first time it is below, stop and load the remembered weights; none
    remembered: the weights training started from, which is what the course's loop keeps when its first check
    fails, since it then never updates)."""

    def __init__(self, measure: Callable[[object], float], base_mi: float, drop: float, every: int):
        if every < 1:
            raise ValueError(f"every must be at least 1, got {every}")
        self.measure, self.every = measure, every
        self.gate = MIStop(base_mi, drop)
        self.threshold = self.gate.threshold
        self.history: list[tuple[int, float]] = []
        """(step, MI) of every measurement."""
        self._start: dict | None = None

    @property
    def stopped_at(self) -> int | None:
        """The step whose measurement fired the stop (None: it never fired)."""
        return self.gate.stopped_at

    def _check(self, model, step: int, control) -> None:
        mi = float(self.measure(model))
        self.history.append((step, mi))
        self.gate.remember(model, mi)
        if self.gate.check({"eval_monitor_mi": mi, "iteration": step}):
            control.should_training_stop = True
            self.gate.restore(model)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._start = copy.deepcopy(model.state_dict())
        self._check(model, state.global_step, control)
        if self.stopped_at is None:
            self._start = None
        return control

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.stopped_at is not None:  # failed before any update: undo the one step transformers still takes
            model.load_state_dict(self._start)
            control.should_training_stop = True
            return control
        step = state.global_step
        if step % self.every == 0 or step == state.max_steps:
            self._check(model, step, control)
        return control
