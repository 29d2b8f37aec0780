"""Which autocast dtype makes training faster on this CPU (bfloat16 or none).

bfloat16 autocast is about 2x faster than float32 on CPUs with native bf16 (Intel AMX,
AVX512-BF16) and more than 10x *slower* on CPUs without it (seen on an AVX2-only AMD EPYC:
13 s vs 0.9 s for one Transformer training step), so the choice is measured, not assumed.
"""

from __future__ import annotations

import functools
import time

import torch


@functools.lru_cache(maxsize=1)
def autocast_dtype() -> torch.dtype | None:
    """torch.bfloat16 when a bf16 matmul beats float32 here by 20% or more, else None (float32)."""
    a, b = torch.randn(256, 512), torch.randn(512, 512)

    def best(dtype: torch.dtype) -> float:
        x, y = a.to(dtype), b.to(dtype)
        times = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(10):
                x @ y
            times.append(time.perf_counter() - start)
        return min(times)

    return torch.bfloat16 if best(torch.bfloat16) < 0.8 * best(torch.float32) else None


def autocast(device: torch.device | str = "cpu") -> torch.autocast:
    """The autocast context for training: on a CPU bfloat16 where it pays (see `autocast_dtype`), else off;
    on a GPU always bfloat16 (every GPU the recipe targets has native bf16 matrix units)."""
    device = torch.device(device)
    if device.type != "cpu":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    dtype = autocast_dtype()
    return torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None)
