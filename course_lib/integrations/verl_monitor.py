"""Chapter 12's MI monitor with rollback (`ch12_capstone.MIStop`, `monitor_mi`) on verl.

RAGEN-2 (arXiv 2604.06268) watches the mutual information between a prompt and the policy's first action:
every first action z_i is scored under every monitor prompt x_j, logp[i, j] = mean log p(z_i | x_j), and
`diagnostics.mutual_information` turns the matrix into nats. Chapter 12 stops training when the MI falls below
(1 - drop) times the base policy's, and rolls back to the last policy whose MI passed.

On verl, three parts:

- **The decision** (`MIGate`): the same rule as `MIStop` on the same sequence of measurements, but it remembers a
  training step instead of a copy of the weights: rollback is verl's checkpoint of that step,
  `<trainer.default_local_dir>/global_step_<k>`, which verl writes when `trainer.save_freq` divides k (set
  `save_freq` = `test_freq`, so every measured step has one; verl saves before it validates within a step).
  `resume_overrides` gives what reloads it (`trainer.resume_mode=resume_path trainer.resume_from_path=...`).
- **The measurement in verl's layout** (`first_actions`, `pair_batch`, `logp_matrix`): the first actions read
  from the agent loop's batch (`action_spans[0]` of each row's response), every (action, prompt) pair laid out as
  verl's actor reads a batch (prompt left-padded to its width, response right-padded, position ids from the
  attention mask), and the per-token log-probs of the pairs' responses averaged into logp `[Z, P]`. In a run the
  log-probs come from the actor's `compute_log_prob` (`actor_rollout_wg.compute_log_prob` on a `DataProto` of
  `pair_batch`'s tensors; its `old_log_probs`), on GPUs; the tests compute them with the torch model on the same
  tensors and verl's `logprobs_from_logits`.
- **The hook** (`MIMonitor.after_validation`): verl 0.9.1's legacy trainer has no per-step callback, so the hook
  is meant to wrap `RayPPOTrainer._validate` (run every `test_freq` steps) the way `verl_patch` wraps
  `compute_advantage`: generate the monitor prompts' episodes with the trainer's rollout manager, score the pairs
  with the actor, feed the gate; on a stop it ends training by setting `total_training_steps` to the current step
  (verl then runs one more step, whose weights the rollback discards) and writes `mi_stop.json` beside the
  checkpoints. That wrapper needs a running trainer (GPUs, a vLLM/SGLang server); it is written but not run here.

Nothing in this module imports verl at import time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch


@dataclass
class MIGate:
    """`MIStop`'s rule on steps: `observe(step, mi)` after each measurement; `remembered` is the last step whose
    MI passed (its checkpoint is the rollback target), `stopped_at` the step whose MI failed."""

    base_mi: float
    drop: float
    remembered: int | None = None
    stopped_at: int | None = None
    history: list[tuple[int, float]] = field(default_factory=list)

    @property
    def threshold(self) -> float:
        return (1 - self.drop) * self.base_mi

    def observe(self, step: int, mi: float) -> bool:
        """Record one measurement; True when training should stop (the MI fell below the threshold). As in chapter
        12, the remember comes first (`MIStop.remember` in the evaluation) and the check second (`MIStop.check`)."""
        self.history.append((int(step), float(mi)))
        if mi >= self.threshold:
            self.remembered = int(step)
        if mi < self.threshold:
            self.stopped_at = int(step)
            return True
        return False

    def checkpoint(self, default_local_dir: str | Path) -> Path | None:
        """The folder verl wrote for the remembered step (None if no measurement passed: nothing to roll back to,
        as `MIStop.restore` then leaves the model alone)."""
        return None if self.remembered is None else Path(default_local_dir) / f"global_step_{self.remembered}"

    def resume_overrides(self, default_local_dir: str | Path) -> list[str]:
        """The hydra overrides that load the rollback checkpoint (empty when there is none)."""
        path = self.checkpoint(default_local_dir)
        return [] if path is None else ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={path}"]

    def report(self, default_local_dir: str | Path) -> dict[str, Any]:
        path = self.checkpoint(default_local_dir)
        return {"threshold": self.threshold, "stopped_at": self.stopped_at, "remembered": self.remembered,
                "rollback": None if path is None else str(path), "history": self.history}  # fmt: skip


def first_actions(
    prompts: torch.Tensor, prompt_mask: torch.Tensor, responses: torch.Tensor, action_spans: Sequence
) -> tuple[list[list[int]], list[list[int]]]:
    """Each row's prompt ids and first action ids from an agent-loop batch: `prompts` `[B, P]` left-padded with
    its attention mask `prompt_mask` `[B, P]`, `responses` `[B, R]`, `action_spans` the rows' `action_spans`
    column. Rows without an action are left out."""
    xs, zs = [], []
    for row, spans in enumerate(action_spans):
        if not len(spans):
            continue
        start, end = spans[0]
        if end <= start:
            continue
        xs.append(prompts[row][prompt_mask[row].bool()].tolist())
        zs.append(responses[row, start:end].tolist())
    return xs, zs


def pair_batch(
    prompts: Sequence[Sequence[int]], actions: Sequence[Sequence[int]], pad_id: int, prompt_width: int,
    response_width: int,
) -> dict[str, torch.Tensor]:  # fmt: skip
    """Every action scored under every prompt, in verl's actor layout: rows i * P + j for action i and prompt j.

    Returns `prompts` `[Z*P, prompt_width]` (left-padded), `responses` `[Z*P, response_width]` (right-padded),
    `input_ids`, `attention_mask`, `position_ids` `[Z*P, prompt_width + response_width]` and `response_mask`
    `[Z*P, response_width]` (1 on the action's tokens)."""
    rows = len(actions) * len(prompts)
    prompt_ids = torch.full((rows, prompt_width), pad_id, dtype=torch.long)
    response_ids = torch.full((rows, response_width), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros(rows, prompt_width, dtype=torch.long)
    response_mask = torch.zeros(rows, response_width, dtype=torch.long)
    for i, z in enumerate(actions):
        for j, x in enumerate(prompts):
            row = i * len(prompts) + j
            if len(x) > prompt_width or len(z) > response_width:
                raise ValueError(f"pair ({i}, {j}) does not fit widths {prompt_width} + {response_width}")
            prompt_ids[row, prompt_width - len(x) :] = torch.tensor(list(x))
            prompt_mask[row, prompt_width - len(x) :] = 1
            response_ids[row, : len(z)] = torch.tensor(list(z))
            response_mask[row, : len(z)] = 1
    attention = torch.cat([prompt_mask, response_mask], dim=1)
    return {
        "prompts": prompt_ids,
        "responses": response_ids,
        "input_ids": torch.cat([prompt_ids, response_ids], dim=1),
        "attention_mask": attention,
        "position_ids": (attention.cumsum(-1) - 1).clamp_min(0),  # verl: compute_position_id_with_mask
        "response_mask": response_mask,
    }


def logp_matrix(token_logprobs: torch.Tensor, response_mask: torch.Tensor, actions: int, prompts: int) -> torch.Tensor:
    """logp `[Z, P]`: the mean per-token log-prob of each pair's response (`token_logprobs`, `response_mask`:
    `[Z*P, R]`, rows as `pair_batch` lays them out), in float64 like `diagnostics.teacher_forced_logp`."""
    mask = response_mask.double()
    means = (token_logprobs.double() * mask).sum(-1) / mask.sum(-1)
    return means.view(actions, prompts)


def first_action_mi(
    prompts: Sequence[Sequence[int]], actions: Sequence[Sequence[int]], score: Callable[[dict], torch.Tensor],
    pad_id: int,
) -> dict[str, float]:  # fmt: skip
    """The monitor's MI: action i was played from prompt i (one episode per monitor prompt, as `monitor_mi`);
    `score(pair_batch)` returns the per-token log-probs `[Z*P, R]` of the pairs' responses (the actor's
    `compute_log_prob` in a run)."""
    from course_lib.diagnostics import mutual_information

    pairs = pair_batch(prompts, actions, pad_id, max(map(len, prompts)), max(map(len, actions)))
    logp = logp_matrix(score(pairs), pairs["response_mask"], len(actions), len(prompts))
    return {**mutual_information(logp, list(range(len(actions)))), "logp": logp}


@dataclass
class MIMonitor:
    """The verl hook: `after_validation(trainer)` measures, decides and stops (module docstring). `measure` is
    `measure(trainer) -> mi`: in a run, generate the monitor prompts with `trainer.async_rollout_manager`, take
    `first_actions`, score `pair_batch` with `trainer.actor_rollout_wg.compute_log_prob`."""

    gate: MIGate
    measure: Callable[[Any], float]

    def after_validation(self, trainer) -> dict[str, float]:
        mi = float(self.measure(trainer))
        stop = self.gate.observe(trainer.global_steps, mi)
        folder = Path(trainer.config.trainer.default_local_dir)
        if stop:
            trainer.total_training_steps = trainer.global_steps  # verl ends after its next step
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "mi_stop.json").write_text(json.dumps(self.gate.report(folder), indent=1))
        return {"course/monitor_mi": mi, "course/mi_stop": float(stop)}

    def wrap(self, validate: Callable) -> Callable:
        """`RayPPOTrainer._validate` wrapped: verl's validation metrics plus the monitor's."""

        def validate_and_monitor(trainer, *args, **kwargs) -> Mapping[str, float]:
            metrics = dict(validate(trainer, *args, **kwargs) or {})
            return {**metrics, **self.after_validation(trainer)}

        return validate_and_monitor


def install_monitor(monitor: MIMonitor) -> None:
    """Wrap verl's legacy `RayPPOTrainer._validate` with `monitor` in this process (the trainer's: call it from a
    Ray setup hook of your own, which builds the monitor with its base MI and measurement)."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    if not getattr(RayPPOTrainer._validate, "course_monitor", False):
        wrapped = monitor.wrap(RayPPOTrainer._validate)
        wrapped.course_monitor = True
        RayPPOTrainer._validate = wrapped
