"""A training run's resumable state: what `train_grpo(..., checkpoint_dir=..., resume=True)` saves and restores.

To continue a run bit for bit, weights are not enough: the optimizer's moments, the iteration, the history so far
and every random state that sampling or an update draws from must come back too. A checkpoint folder holds

    <checkpoint_dir>/latest/            model and tokenizer (`save_pretrained`: a usable checkpoint by itself)
    <checkpoint_dir>/latest/training_state.pt
        model state_dict, optimizer state, last finished iteration, history, random states, run fingerprint

Writing is atomic at the level of the folder: everything goes into `.latest.partial/`, then `latest/` is moved
aside to `.latest.previous/` and the new folder renamed into its place. A process killed at any point leaves a
complete checkpoint under `latest/` or (between the two renames) `.latest.previous/`, which `load` falls back on.

The fingerprint is the run's settings as canonical JSON: the `GRPOConfig` without `iterations` (so a finished run
can be extended: the task seeds of iteration i depend only on the seed and i), the `SamplingConfig`, the seed, and
the chapter's whole resolved config when the caller gives it (`train_grpo(settings=...)`: its environment's kwargs
and its evaluation change what a history says, so two of them must not mix in one).
A checkpoint from other settings is refused, naming the fields that differ. What cannot be fingerprinted is the
caller's: the same model (architecture; its weights are restored), `make_env`, and `evaluate` and `stop` callbacks
that are functions of the model (the course's evaluators seed their own generators).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

LATEST = "latest"
STATE_FILE = "training_state.pt"
_PARTIAL = ".latest.partial"
_PREVIOUS = ".latest.previous"


UNFINGERPRINTED = ("iterations", "checkpoint_dir", "resume")
"""Keys left out of a chapter's settings in the fingerprint (at any depth): how long a run goes (so a finished run
can be extended) and where and whether it resumes (so a checkpoint can move), none of which changes a step."""


def fingerprint(config: Any, sampling: Any, seed: int, settings: Any = None) -> str:
    """Canonical JSON of what determines a run's iterations: `config` (a dataclass) less `iterations`, `sampling`
    and `seed`, and, when given, `settings`: the chapter's whole resolved config (a dataclass or mapping; its
    environment's kwargs, its evaluation's size, ...) less `UNFINGERPRINTED`. Two runs with equal fingerprints take
    the same steps from the same state and measure them alike."""
    from course_lib.overrides import as_dict

    plain = dataclasses.asdict(config)
    plain.pop("iterations", None)
    fields = {"config": plain, "sampling": dataclasses.asdict(sampling), "seed": seed}
    if settings is not None:
        fields["settings"] = _without(as_dict(settings), UNFINGERPRINTED)
    return json.dumps(fields, sort_keys=True)


def _without(value: Any, keys: tuple[str, ...]) -> Any:
    """`value` (plain data) with every mapping's `keys` removed, at any depth."""
    if isinstance(value, dict):
        return {k: _without(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [_without(item, keys) for item in value]
    return value


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(value, dict):
        return {prefix: value}
    return {k: v for key, item in value.items() for k, v in _flatten(item, f"{prefix}{key}.").items()}


def check_fingerprint(saved: str, current: str, folder: Path) -> None:
    """Raise a ValueError naming each setting whose saved value differs from the current one."""
    if saved == current:
        return
    old, new = _flatten(json.loads(saved)), _flatten(json.loads(current))
    changed = [f"{key[:-1]}: {old.get(key)!r} there, {new.get(key)!r} here" for key in sorted(old | new)
               if old.get(key) != new.get(key)]  # fmt: skip
    raise ValueError(
        f"the checkpoint in {folder} is from another run ({'; '.join(changed)}); resume with that run's settings, "
        "or pass a fresh checkpoint_dir (or resume=False) to start over"
    )


def random_states(generator: torch.Generator) -> dict[str, Any]:
    """Every random state a training iteration may draw from: the rollout `generator` (sampling), torch's global
    generator (dropout, `torch.randint` without a generator), CUDA's, python's `random` and numpy's. Plain
    lists and tensors only, so the file loads with `torch.load(weights_only=True)`."""
    name, keys, position, has_gauss, cached = np.random.get_state()
    states = {
        "generator": generator.get_state(),
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": [name, keys.tolist(), position, has_gauss, cached],
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_random_states(states: dict[str, Any], generator: torch.Generator) -> None:
    """Put back what `random_states` captured (the CUDA states only where this machine has CUDA)."""
    generator.set_state(states["generator"])
    torch.set_rng_state(states["torch"])
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, position, has_gauss, cached = states["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), position, has_gauss, cached))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def plain_history(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history with numpy scalars (an evaluator's `np.mean`) as Python numbers, equal in value, so that the
    state file loads with `weights_only=True`, which refuses numpy objects."""
    return [{k: v.item() if isinstance(v, np.generic) else v for k, v in record.items()} for record in history]


def save(folder: str | Path, model: torch.nn.Module, tokenizer, state: dict[str, Any]) -> Path:
    """Write model, tokenizer and `state` to `folder/latest/` atomically (module docstring); returns that path.
    For a LoRA model `save_pretrained` writes the adapter; `state["model"]` holds every weight either way."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    latest, previous, partial = folder / LATEST, folder / _PREVIOUS, folder / _PARTIAL
    if not latest.exists() and (previous / STATE_FILE).exists():
        os.replace(previous, latest)  # the last save stopped between its renames: its checkpoint is the newest
    shutil.rmtree(partial, ignore_errors=True)  # a save that was interrupted while writing
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    torch.save(state, partial / STATE_FILE)
    shutil.rmtree(previous, ignore_errors=True)
    if latest.exists():
        os.replace(latest, previous)
    os.replace(partial, latest)
    shutil.rmtree(previous, ignore_errors=True)
    return latest


def load(folder: str | Path) -> dict[str, Any] | None:
    """The newest complete training state under `folder`, or None when it holds none (a fresh run). A state file
    that cannot be read (truncated, overwritten) is a ValueError naming it: resuming from it is impossible, and
    starting over in its place would throw away the run it belongs to."""
    folder = Path(folder)
    for candidate in (folder / LATEST, folder / _PREVIOUS):
        path = candidate / STATE_FILE
        if path.exists():
            try:
                return torch.load(path, map_location="cpu", weights_only=True)
            except Exception as error:  # torch raises OSError, RuntimeError or an unpickling error by the damage
                raise ValueError(
                    f"{path} cannot be read ({type(error).__name__}: {str(error).splitlines()[0][:200]}): the "
                    "checkpoint is damaged; resume from a copy of the folder, or start over with a fresh "
                    "checkpoint_dir"
                ) from error
    return None


def check_resumable(folder: str | Path) -> None:
    """Refuse (ValueError) to resume from `folder` when it cannot hold this run's checkpoint: a folder that does not
    exist (a mistyped path would otherwise start a fresh run and write there), or a `latest/` without its training
    state (a model copied there, a save from another tool), which a fresh run would overwrite."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"resume=True: {folder} does not exist, so there is no checkpoint to resume from; check the "
                         "path, or start a fresh run with resume=False")  # fmt: skip
    latest = folder / LATEST
    if latest.is_dir() and not (latest / STATE_FILE).exists() and not (folder / _PREVIOUS / STATE_FILE).exists():
        raise ValueError(f"resume=True: {latest} holds no {STATE_FILE} (the optimizer, history and random states a "
                         "resume needs), so it is not a checkpoint of train_grpo's; move it aside or pass another "
                         "checkpoint_dir")  # fmt: skip
