"""Scale presets, seeding and device choice shared by every chapter.

`COURSE_SCALE` picks a preset (`cpu`, the default and what CI runs, or `gpu`); `COURSE_SEED`
(default 0) seeds Python, NumPy and torch. Both are read when called, so a notebook can set them
with `os.environ` before importing a chapter module.

`COURSE_GPU_TINY=1` is a smoke-test switch for the gpu code path on a laptop: under the gpu scale only, every
chapter's gpu preset is shrunk (`by_scale`: model preset `micro`, a few demonstrations, SFT steps and
GRPO iterations) and its data is built under a `tiny/` folder of the gpu data directory, apart from real gpu
bases. Its numbers mean nothing; every gpu base label says when it is on.
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Mapping

import numpy as np
import torch

SCALES = ("cpu", "gpu")


def scale() -> str:
    """The active preset name, from `COURSE_SCALE` (default `cpu`)."""
    value = os.environ.get("COURSE_SCALE", "cpu").strip().lower()
    if value not in SCALES:
        raise ValueError(f"COURSE_SCALE must be one of {SCALES}, got {value!r}")
    return value


def gpu_tiny() -> bool:
    """Whether `COURSE_GPU_TINY` asks for the shrunk smoke-test version of the gpu preset (`1`/`true`/`yes`)."""
    return os.environ.get("COURSE_GPU_TINY", "").strip().lower() in ("1", "true", "yes")


def seed() -> int:
    """The active seed, from `COURSE_SEED` (default 0)."""
    value = os.environ.get("COURSE_SEED", "0").strip()
    try:
        return int(value)
    except ValueError as err:
        raise ValueError(f"COURSE_SEED must be an integer, got {value!r}") from err


def device() -> torch.device:
    """CUDA when a GPU is visible, else CPU. The cpu preset always uses the CPU."""
    if scale() == "gpu" and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def use_threads() -> int:
    """Set torch's intra-op threads to the course's count (`machine.THREADS`, 2: a 2-core laptop's and CI's) and
    return it. The chapter commands that record `results/`, `notebooks refresh` and every notebook's first cell call
    it, because floating-point sums split over another number of threads round differently: on the machine a seed
    was recorded on, a notebook's live run of that seed then equals the recorded one."""
    from course_lib.machine import THREADS

    torch.set_num_threads(THREADS)
    return THREADS


def seed_everything(value: int) -> torch.Generator:
    """Seed Python, NumPy and torch; return a torch generator seeded with the same value."""
    random.seed(value)
    np.random.seed(value % 2**32)
    torch.manual_seed(value)
    return torch.Generator().manual_seed(value)


def by_scale(cpu, gpu, name: str | None = None):
    """`cpu` or `gpu` according to `COURSE_SCALE` (or the scale `name`): a chapter's preset in one line.

    With `COURSE_GPU_TINY=1` the gpu preset comes back shrunk (`shrink_for_smoke_test`), so that a CPU test can
    run the gpu code path (build a gpu base, load it, train) in seconds; the cpu preset never changes."""
    name = name or scale()
    if name not in SCALES:
        raise ValueError(f"scale must be 'cpu' or 'gpu', got {name!r}")
    if name == "cpu":
        return cpu
    if gpu_tiny():
        _announce_tiny()
        return shrink_for_smoke_test(gpu)
    return gpu


TINY_MODEL = "micro"
"""`COURSE_GPU_TINY`'s model preset (every `model_preset`, `critic_preset` and `model_presets` value)."""
TINY_CAPS: Mapping[str, int] = {
    # warm start: demonstrations (and chapter 01's corpus counts), SFT steps and batch
    "demonstrations": 64, "plans": 64, "steps": 16, "transitions": 64, "warmup_steps": 1, "batch_size": 8,
    # RL and search budgets (GRPOConfig, MCTS and LATS iterations)
    "iterations": 2, "prompts_per_iteration": 2, "group_size": 4, "eval_every": 1, "budget_iterations": 2,
    "noisy_iterations": 1, "ablation_iterations": 2,
    # measurements
    "eval_tasks": 4, "tasks_per_length": 2, "world_model_test": 8, "variance_prompts": 2, "sampler_prompts": 2,
    "check_prompts": 2, "monitor_prompts": 2, "mi_samples": 4, "bucket_maps": 4,
}  # fmt: skip
"""`COURSE_GPU_TINY`'s caps: a field of one of these names, anywhere in a preset, is cut to at most this value.
SFT `steps` shares its name with chapter 01's corpus `steps` (a count of examples); 16 serves both."""
_tiny_announced = False


def shrink_for_smoke_test(preset):
    """A copy of `preset` (a dataclass tree) with every model preset `TINY_MODEL` and every field named in
    `TINY_CAPS` cut to its cap (never raised), recursively; other values are returned unchanged."""
    if not dataclasses.is_dataclass(preset) or isinstance(preset, type):
        return preset
    changes = {}
    for spec in dataclasses.fields(preset):
        if not spec.init:
            continue
        value = getattr(preset, spec.name)
        if spec.name in ("model_preset", "critic_preset") and isinstance(value, str):
            changes[spec.name] = TINY_MODEL
        elif spec.name == "model_presets" and isinstance(value, Mapping):
            changes[spec.name] = {size: TINY_MODEL for size in value}
        elif spec.name in TINY_CAPS and isinstance(value, int) and not isinstance(value, bool):
            changes[spec.name] = min(value, TINY_CAPS[spec.name])
        elif dataclasses.is_dataclass(value):
            changes[spec.name] = shrink_for_smoke_test(value)
    return dataclasses.replace(preset, **changes)


def _announce_tiny() -> None:
    """Say once per process that the gpu preset is the shrunk one, so no number is mistaken for a gpu result."""
    global _tiny_announced
    if not _tiny_announced:
        _tiny_announced = True
        print(
            f"COURSE_GPU_TINY=1: the gpu preset is shrunk for a smoke test (model preset {TINY_MODEL}, "
            "a few demonstrations, steps and iterations); its numbers mean nothing",
            flush=True,
        )
