"""`machine.cpu_attention`: the math attention kernel for bfloat16 on a CPU whose capability was lowered (as `.ci/run`
lowers it), where torch's fused kernel refused with "pack_vnni2 is only supported when avx512 is supported" (the
fresh-clone CI of this stop failed on 20 tests with it); nothing anywhere else."""

from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.nn.functional as F

from course_lib import machine


def test_the_math_kernel_only_for_bf16_on_a_lowered_cpu(monkeypatch):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert isinstance(machine.cpu_attention("cpu", torch.bfloat16), nullcontext)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert isinstance(machine.cpu_attention("cpu", torch.float32), nullcontext)
    assert isinstance(machine.cpu_attention("cpu", None), nullcontext)
    assert isinstance(machine.cpu_attention("cuda", torch.bfloat16), nullcontext)
    assert not isinstance(machine.cpu_attention("cpu", torch.bfloat16), nullcontext)


def test_the_math_kernel_computes_the_same_attention():
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8, generator=generator).to(torch.bfloat16) for _ in range(3))
    mask = torch.ones(1, 1, 5, 5, dtype=torch.bool).tril()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        math = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    fused = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.allclose(math.float(), fused.float(), atol=2e-2)
