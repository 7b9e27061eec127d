"""Scale presets, seeding and device choice shared by every chapter.

`COURSE_SCALE` picks a preset (`cpu`, the default and what CI runs, or `gpu`); `COURSE_SEED`
(default 0) seeds Python, NumPy and torch. Both are read when called, so a notebook can set them
with `os.environ` before importing a chapter module.

`COURSE_GPU_TINY=1` is a smoke-test switch for the gpu code path on a laptop: under the gpu scale only, every
chapter's gpu preset is shrunk (`skeleton.by_scale`: model preset `micro`, a few demonstrations, SFT steps and
GRPO iterations) and its data is built under a `tiny/` folder of the gpu data directory, apart from real gpu
bases. Its numbers mean nothing; every gpu base label says when it is on.
"""

from __future__ import annotations

import os
import random

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
