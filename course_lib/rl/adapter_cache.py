"""Warm-started adapters kept on disk, so that a study which trains several arms from one warm start per seed does
not fit the same adapter twice.

A warm start of SmolLM2 on a survey task costs 1-9 minutes on 2 cores (the survey's pilots), and chapter 16's
comparisons start each seed's arms from the very warm start its warm-start record measured (same task, settings and
seed). The adapter it fits is
deterministic on one machine and thread count, so it is saved once (its trainable weights and its loss history)
under a key that names everything it depends on: the model's files, the demonstrations' text, the settings, the
seed, the device, the libraries' versions and the source of the code that trains it. Change any of them and the
key changes, so a stale adapter is never read; a reader then trains as if there were no cache.

`COURSE_ADAPTER_CACHE` names the folder (default `~/.cache/course_lib/adapters`); the cache holds a few MB per
adapter (LoRA r 16 on SmolLM2's top 8 blocks: 2.4 M float32 weights).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from collections.abc import Sequence
from pathlib import Path

import torch

from course_lib.algos import grpo
from course_lib.rl import checkpoint, micro_batch, warm_start

TRAINING_SOURCES = (
    checkpoint.load_checkpoint,
    checkpoint.add_adapter,
    checkpoint.demonstration_examples,
    warm_start.supervised_warm_start,
    micro_batch,
    grpo.masked_aggregate,
)
"""The functions (and the one module, all of it numerics) whose source computes an adapter: the model loaded, the
adapter added, the demonstrations tokenised, the steps taken. Their text is part of every key; not the whole text of
`checkpoint` and `warm_start`, so that an edit elsewhere in them (a message, a check) keeps the kept adapters."""


def folder() -> Path:
    """The cache's folder: `COURSE_ADAPTER_CACHE`, default `~/.cache/course_lib/adapters`, read now."""
    default = Path.home() / ".cache" / "course_lib" / "adapters"
    return Path(os.environ.get("COURSE_ADAPTER_CACHE", default))


def key(model_path: str | Path, texts: Sequence, settings: dict, seed: int, device: str) -> str:
    """A hex digest naming one warm start: the model folder's file names and sizes with its config's text, the
    demonstrations `texts` (as `repr`), the `settings` (JSON-able), `seed`, `device`'s type, the versions of torch,
    transformers and peft, and the source of the functions in `TRAINING_SOURCES`."""
    import peft
    import transformers

    digest = hashlib.sha256()
    model_path = Path(model_path)
    for file in sorted(model_path.iterdir()):
        digest.update(f"{file.name}:{file.stat().st_size};".encode())
    digest.update((model_path / "config.json").read_bytes())
    digest.update(repr(list(texts)).encode())
    digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
    digest.update(f"{seed};{torch.device(device).type};{torch.__version__};{transformers.__version__};".encode())
    digest.update(f"{peft.__version__};".encode())
    for source in TRAINING_SOURCES:
        digest.update(inspect.getsource(source).encode())
    return digest.hexdigest()[:32]


def save(name: str, model: torch.nn.Module, history: list[dict]) -> Path:
    """Write `model`'s trainable weights and the warm start's `history` under `name` (a `key`); returns the file."""
    path = folder() / f"{name}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    weights = {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}
    partial = path.with_suffix(".partial")
    torch.save({"weights": weights, "history": history}, partial)
    partial.replace(path)  # a reader never sees half a file
    return path


def exists(name: str) -> bool:
    """Whether an adapter is kept under `name`."""
    return (folder() / f"{name}.pt").is_file()


def load(name: str, model: torch.nn.Module) -> list[dict] | None:
    """Copy the weights saved under `name` into `model`'s trainable parameters and return the saved history, or
    None (the model untouched) when there is no such file. A file whose weights do not match the model's trainable
    parameters one to one, in name and shape, is an error: the key should have made that impossible."""
    path = folder() / f"{name}.pt"
    if not path.is_file():
        return None
    saved = torch.load(path, map_location="cpu", weights_only=True)
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    shapes = {n: tuple(p.shape) for n, p in trainable.items()}
    if shapes != {n: tuple(w.shape) for n, w in saved["weights"].items()}:
        raise ValueError(f"{path} does not hold this model's adapter; delete it and run again")
    with torch.no_grad():
        for n, parameter in trainable.items():
            parameter.copy_(saved["weights"][n])
    return saved["history"]
