"""The machine a number was computed on: CPU, vector instruction sets, library versions, threads.

Floating-point results depend on more than the code: other CPUs and BLAS builds pick other vector kernels
and round differently. Two modules key their records by this description: `golden` (a digest is only
comparable on the machine it was recorded on) and `results` (each seed's provenance). It lives here, below
both, so that the records layer does not import the golden run and, through it, the rollout engine.
"""

from __future__ import annotations

import platform
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

THREADS = 2
"""Intra-op threads of every recorded run, notebook and golden digest (`config.use_threads`): a 2-core machine's
default, so that a notebook run on the recording machine repeats its recorded seed bit for bit."""
SIMD_FLAGS = ("sse", "ssse", "avx", "fma", "f16c", "amx")
"""CPU feature flags that decide which vector kernels BLAS and torch pick (other flags do not)."""


def cpu_info() -> dict[str, str]:
    """Model name, family, model number and flags of the first core in `/proc/cpuinfo` (the first core
    describes them all); only the model name (from `platform`) where that file does not exist."""
    cpu = {"model name": platform.processor(), "cpu family": "", "model": "", "flags": ""}
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        first = cpuinfo.read_text().split("\n\n")[0]
        for line in first.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in cpu:
                cpu[key.strip()] = value.strip()
    return cpu


def machine() -> dict[str, str]:
    """What the arithmetic depends on besides the code: CPU (model and vector instruction sets, which
    decide the BLAS kernels), the instruction set torch uses, library versions, threads."""
    # Imported here: importing this module stays cheap for callers that only want the CPU line.
    import peft
    import torch
    import transformers

    cpu = cpu_info()
    return {
        "cpu": cpu_description(cpu),
        "cpu_simd": " ".join(sorted(f for f in cpu["flags"].split() if f.startswith(SIMD_FLAGS))),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "threads": str(THREADS),
    }


def cpu_description(cpu: dict[str, str] | None = None) -> str:
    """One line naming the CPU, e.g. `AMD EPYC 7B13 (family 25, model 1)`: `machine()["cpu"]` without
    importing torch, transformers and peft."""
    cpu = cpu if cpu is not None else cpu_info()
    return f"{cpu['model name']} (family {cpu['cpu family']}, model {cpu['model']})"


def cpu_attention(device_type: str, dtype) -> AbstractContextManager:
    """Attention's math kernel for bfloat16 on a CPU whose ATen capability was lowered below AVX512 (as `.ci/run`
    lowers it with `ATEN_CPU_CAPABILITY=avx2`), else nothing. torch 2.13's fused CPU attention packs bfloat16 with
    AVX512 VNNI instructions when the hardware has them, then refuses under the lowered capability ("pack_vnni2 is
    only supported when avx512 is supported"); the math kernel computes the same attention without them. At the
    machine's own capability nothing changes, so recorded runs keep their arithmetic."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    lowered = torch.backends.cpu.get_cpu_capability() in ("AVX2", "DEFAULT", "NO AVX")
    if device_type == "cpu" and dtype == torch.bfloat16 and lowered:
        return sdpa_kernel(SDPBackend.MATH)
    return nullcontext()
