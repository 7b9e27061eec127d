"""Chapter 12's MI monitor with rollback (`diagnostics.MIStop`, chapter 12's `monitor_mi`) on verl.

RAGEN-2 (arXiv 2604.06268) watches the mutual information between a prompt and the policy's first action:
every first action z_i is scored under every monitor prompt x_j, logp[i, j] = mean log p(z_i | x_j), and
`diagnostics.mutual_information` turns the matrix into nats. Chapter 12 stops training when the MI falls below
(1 - drop) times the base policy's, and rolls back to the last policy whose MI passed.

On verl, four parts:

- **The decision** (`MIGate`): the same rule as `MIStop` on the same sequence of measurements, but it remembers a
  training step instead of a copy of the weights: rollback is verl's checkpoint of that step,
  `<trainer.default_local_dir>/global_step_<k>`, which verl writes when `trainer.save_freq` divides k (set
  `save_freq` = `test_freq`, so every measured step has one; verl saves before it validates within a step).
  Step 0 is the base model itself (nothing saved: rolling back to it is starting again from
  `actor_rollout_ref.model.path`). `resume_overrides` gives what reloads a checkpoint.
- **The measurement in verl's layout** (`first_actions`, `pair_batch`, `logp_matrix`): the first actions read
  from the agent loop's batch (`action_spans[0]` of each row's response), every (action, prompt) pair laid out as
  verl's actor reads a batch (prompt left-padded to its width, response right-padded, position ids from the
  attention mask), and the per-token log-probs of the pairs' responses averaged into logp `[Z, P]`.
- **The measurement in a run** (`measure_policy`): chapter 12's monitor prompts (`monitor_prompts` training
  questions, seeds `MONITOR_SEED + p`) as a `DataProto` of the course's agent-loop rows (`monitor_batch`), played
  once each by the trainer's own `async_rollout_manager` (the course's agent loop, at the rollout temperature: not
  validation's greedy settings, since chapter 12 samples its monitor episodes); the pairs scored by the trainer's
  `_compute_old_log_prob`, the method `fit` scores its batches with (it converts the padded batch to verl's
  no-padding `TensorDict`, calls `actor_rollout_wg.compute_log_prob` and pads the result back), at temperature 1 as
  `diagnostics.teacher_forced_logp` scores, with the rollout servers asleep meanwhile as in `fit`.
- **The hook** (`monitored_validate`, `install_monitor`): verl 0.9.1's legacy trainer has no per-step callback; the
  smallest place that runs every `test_freq` steps, and once before training with `trainer.val_before_train=True`,
  is `RayPPOTrainer._validate`, whose metrics `fit` logs. `verl_patch.setup` (Ray's worker-process setup hook)
  wraps it in every process; the wrapper does nothing unless the config has `trainer.course.mi_monitor`
  (`MonitorSettings`). After verl's own validation it measures, feeds the gate (the base MI is the first
  measurement, the base policy's at step 0, unless `base_mi` is given), and on a stop ends training by setting
  `total_training_steps` to the current step (verl then runs one more step, whose weights the rollback discards,
  and which the monitor no longer measures) and writes `mi_stop.json` beside the checkpoints: the rollback folder
  and the overrides that resume from it.

What is checked where: `tests_verl/test_monitor.py` runs the installed wrapper with chapter 12's drop and seeds on its
own task, chapter 08's (`integrations.course_verl.chapter_tasks("08")`), on a trainer object whose rollout manager
replays
the course engine's episodes through verl's own `AgentLoopWorker` and whose `compute_log_prob` is chapter 08's
torch base, against chapter 12's `monitor_mi` itself; only a run on GPUs (vLLM/SGLang serving, FSDP actor in bf16)
exercises the real servers and actor.

Nothing in this module imports verl at import time.
"""

from __future__ import annotations

import functools
import json
import warnings
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
        """The folder verl wrote for the remembered step. None if no measurement passed (nothing to roll back to, as
        `MIStop.restore` then leaves the model alone) or if the remembered step is 0 (the base model: no folder)."""
        if not self.remembered:
            return None
        return Path(default_local_dir) / f"global_step_{self.remembered}"

    def resume_overrides(self, default_local_dir: str | Path) -> list[str]:
        """The hydra overrides that load the rollback checkpoint (empty when there is none)."""
        path = self.checkpoint(default_local_dir)
        return [] if path is None else ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={path}"]

    def report(self, default_local_dir: str | Path) -> dict[str, Any]:
        path = self.checkpoint(default_local_dir)
        return {"base_mi": self.base_mi, "threshold": self.threshold, "stopped_at": self.stopped_at,
                "remembered": self.remembered, "rollback": None if path is None else str(path),
                "rollback_is_base_model": self.remembered == 0, "history": self.history}  # fmt: skip


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


# The monitor in a run ------------------------------------------------------------------------------------------
CONFIG_KEY = "mi_monitor"
"""The block `trainer.course.mi_monitor` of verl's config (added with `+`: verl's yaml does not define it)."""


@dataclass(frozen=True)
class MonitorSettings:
    """`+trainer.course.mi_monitor.<key>=...`; a key left out takes chapter 12's value (`Chapter12Config`)."""

    chapter: str
    """The chapter whose training questions the monitor plays (`integrations.course_verl.chapter_tasks`); chapter 12's
    monitor plays chapter 08's (`08`), the task it trains on."""
    drop: float
    """`Chapter12Config.gate_drop`: stop when the MI falls below (1 - drop) x the base's."""
    prompts: int
    """`Chapter12Config.monitor_prompts`: training questions played once each and cross-scored."""
    first_seed: int
    """chapter 12's `MONITOR_SEED`: the questions are seeds first_seed, first_seed + 1, ..."""
    base_mi: float | None = None
    """The base policy's MI, when the first measurement is not the base's (a resumed run: `mi_stop.json` says it)."""

    @classmethod
    def from_trainer_config(cls, trainer_config) -> MonitorSettings | None:
        """The settings in verl's `config.trainer` (a DictConfig or mapping); None when the monitor is not asked for."""
        course = _get(trainer_config, "course")
        block = _get(course, CONFIG_KEY) if course is not None else None
        if block is None:
            return None
        from course_lib.tasks import two_hop_search

        chapter = _get(block, "chapter")
        if chapter is None:
            raise KeyError(f"trainer.course.{CONFIG_KEY}.chapter is not set: the chapter whose questions it plays")
        base = _get(block, "base_mi")
        return cls(
            chapter=str(chapter),
            drop=float(_get(block, "drop", two_hop_search.GATE_DROP)),
            prompts=int(_get(block, "prompts", two_hop_search.MONITOR_PROMPTS)),
            first_seed=int(_get(block, "first_seed", two_hop_search.MONITOR_SEED)),
            base_mi=None if base is None else float(base),
        )


def _get(config, key: str, default=None):
    if config is None:
        return default
    value = config.get(key, default) if hasattr(config, "get") else getattr(config, key, default)
    return default if value is None else value


def monitor_rows(settings: MonitorSettings) -> dict[str, list]:
    """The monitor's questions as the course's exported rows (`export_rows`' columns: the agent loop rebuilds each
    episode from `extra_info`), with chapter 12's seeds `first_seed + p` instead of the export's 0, 1, ..."""
    from course_lib.integrations.course_verl import chapter_tasks, export_rows

    columns = export_rows(settings.chapter, "train", settings.prompts)
    env = chapter_tasks(settings.chapter).make_env("train")
    for p in range(settings.prompts):
        seed = settings.first_seed + p
        obs, _ = env.reset(seed=seed)
        columns["prompt"][p] = [{"role": "user", "content": obs}]
        columns["reward_model"][p] = {"style": "rule", "ground_truth": str(env.problem_key())}
        columns["extra_info"][p] = {**columns["extra_info"][p], "seed": seed}
    return columns


def monitor_batch(settings: MonitorSettings, tokenizer, global_steps: int):
    """The monitor's questions as the `DataProto` the rollout manager takes: the non-tensor columns an `RLHFDataset`
    row hands the agent loop (`raw_prompt` with `data.return_raw_chat=True`), one row per question."""
    import numpy as np
    from verl import DataProto

    columns = monitor_rows(settings)
    columns["raw_prompt"] = columns.pop("prompt")

    def array(values: list) -> np.ndarray:
        out = np.empty(len(values), dtype=object)  # element by element: lists of messages must stay objects
        for k, value in enumerate(values):
            out[k] = value
        return out

    non_tensors = {key: array(values) for key, values in columns.items()}
    non_tensors["index"] = np.arange(settings.prompts)
    meta = {"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id,
            "validate": False, "global_steps": int(global_steps)}  # fmt: skip
    return DataProto.from_dict(non_tensors=non_tensors, meta_info=meta)


def actor_logprobs(trainer, pairs: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Per-token log-probs `[Z*P, R]` of `pair_batch`'s responses under the trainer's actor: `_compute_old_log_prob`
    on a `DataProto` of the pairs, padded to the actor's data-parallel size (verl's dispatch splits evenly)."""
    from verl import DataProto
    from verl.protocol import pad_dataproto_to_divisor

    meta = {"temperature": 1.0, "global_token_num": pairs["attention_mask"].sum(-1).tolist()}
    data = DataProto.from_dict(tensors=dict(pairs), meta_info=meta)
    padded, _ = pad_dataproto_to_divisor(data, trainer._get_dp_size(trainer.actor_rollout_wg, "actor"))
    scored, _ = trainer._compute_old_log_prob(padded)
    return scored.batch["old_log_probs"][: len(data)]


def measure_policy(trainer, settings: MonitorSettings) -> dict[str, Any]:
    """Chapter 12's `monitor_mi` with verl's parts: play the monitor questions with the trainer's rollout manager,
    take each row's first action, score every pair with the actor. Keys of `diagnostics.mutual_information` plus
    `actions` (rows with a first action); MI is NaN with fewer than two (as `reasoning_mutual_information`)."""
    from verl.protocol import pad_dataproto_to_divisor, unpad_dataproto

    batch = monitor_batch(settings, trainer.tokenizer, trainer.global_steps)
    workers = int(trainer.config.actor_rollout_ref.rollout.agent.num_workers)
    padded, pad = pad_dataproto_to_divisor(batch, workers)  # the manager hands each worker an equal chunk
    out = unpad_dataproto(trainer.async_rollout_manager.generate_sequences(padded), pad_size=pad)
    width = out.batch["prompts"].shape[1]
    prompts, actions = first_actions(
        out.batch["prompts"], out.batch["attention_mask"][:, :width], out.batch["responses"],
        out.non_tensor_batch["action_spans"],
    )  # fmt: skip
    if len(actions) < 2:
        return {"mi": float("nan"), "actions": float(len(actions))}
    pad_token = trainer.tokenizer.pad_token_id if trainer.tokenizer.pad_token_id is not None else 0
    # The actor and the rollout servers share the GPUs: `fit` puts the servers to sleep between generating and the
    # actor's log-probs and wakes them with `update_weights` (as `_validate` does around a colocated reward model).
    trainer.checkpoint_manager.sleep_replicas()
    try:
        measured = first_action_mi(prompts, actions, lambda pairs: actor_logprobs(trainer, pairs), pad_token)
    finally:
        trainer.checkpoint_manager.update_weights(trainer.global_steps)
    return {**{k: v for k, v in measured.items() if k != "logp"}, "actions": float(len(actions))}


@dataclass
class MIMonitor:
    """`after_validation(trainer)` measures, decides and stops (module docstring). `measure(trainer)` returns the MI
    (a float, or a mapping with `mi`: `measure_policy`'s). Without a `gate`, the first measurement sets the base
    (or `base_mi`, when given) and the gate is built with `drop`."""

    gate: MIGate | None
    measure: Callable[[Any], float | Mapping[str, float]]
    drop: float = 0.2
    base_mi: float | None = None

    def after_validation(self, trainer) -> dict[str, float]:
        if self.gate is not None and self.gate.stopped_at is not None:
            return {"course/mi_stop": 1.0}  # the step verl runs after a stop: its weights are discarded, not measured
        measured = self.measure(trainer)
        mi = float(measured["mi"] if isinstance(measured, Mapping) else measured)
        if self.gate is None:
            self.gate = MIGate(mi if self.base_mi is None else self.base_mi, self.drop)
        stop = self.gate.observe(trainer.global_steps, mi)
        metrics = {"course/monitor_mi": mi, "course/mi_threshold": self.gate.threshold, "course/mi_stop": float(stop)}
        if isinstance(measured, Mapping) and "retrieval_accuracy" in measured:
            metrics["course/monitor_retrieval_accuracy"] = float(measured["retrieval_accuracy"])
        if stop:
            trainer.total_training_steps = trainer.global_steps  # verl ends after its next step
            self.write_stop(Path(trainer.config.trainer.default_local_dir))
        return metrics

    def write_stop(self, folder: Path) -> Path:
        """`mi_stop.json`: the gate's report, and the overrides that resume from the rollback checkpoint (with the
        base MI, so that a resumed monitor keeps the base policy's threshold)."""
        folder.mkdir(parents=True, exist_ok=True)
        resume = self.gate.resume_overrides(folder)
        if resume:
            resume.append(f"+trainer.course.{CONFIG_KEY}.base_mi={self.gate.base_mi!r}")
        report = {**self.gate.report(folder), "resume_overrides": resume}
        path = folder / "mi_stop.json"
        path.write_text(json.dumps(report, indent=1))
        return path

    def wrap(self, validate: Callable) -> Callable:
        """A validation function wrapped: its metrics plus the monitor's."""

        def validate_and_monitor(trainer, *args, **kwargs) -> Mapping[str, float]:
            metrics = dict(validate(trainer, *args, **kwargs) or {})
            return {**metrics, **self.after_validation(trainer)}

        return validate_and_monitor


def monitored_validate(validate: Callable) -> Callable:
    """`RayPPOTrainer._validate` wrapped: unchanged unless `trainer.course.mi_monitor` is set; then the trainer's
    monitor (built at its first validation, kept on the trainer as `course_mi_monitor`) runs after it."""

    @functools.wraps(validate)
    def _validate(self, *args, **kwargs):
        metrics = validate(self, *args, **kwargs)
        settings = MonitorSettings.from_trainer_config(self.config.trainer)
        if settings is None:
            return metrics
        monitor = getattr(self, "course_mi_monitor", None)
        if monitor is None:
            if settings.base_mi is None and self.global_steps != 0:
                warnings.warn(
                    f"the MI monitor's first measurement is at step {self.global_steps}, not the base policy's: set "
                    f"trainer.val_before_train=True, or +trainer.course.{CONFIG_KEY}.base_mi when resuming",
                    stacklevel=2,
                )
            measure = functools.partial(measure_policy, settings=settings)
            monitor = self.course_mi_monitor = MIMonitor(None, measure, settings.drop, settings.base_mi)
        return {**dict(metrics or {}), **monitor.after_validation(self)}

    _validate.course_monitor = True
    return _validate


def install_monitor() -> None:
    """Wrap verl's legacy `RayPPOTrainer._validate` in this process (idempotent; `verl_patch.install` calls it)."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    if not getattr(RayPPOTrainer._validate, "course_monitor", False):
        RayPPOTrainer._validate = monitored_validate(RayPPOTrainer._validate)
