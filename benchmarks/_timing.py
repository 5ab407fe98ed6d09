"""Clocks for the benchmarks: wall time that counts queued CUDA work, and the machine's matrix-product rate.

Not a benchmark itself (the leading underscore keeps it out of tests/test_benchmarks.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch


def synchronize() -> None:
    """Wait for queued CUDA work, so that a clock read after it counts that work (nothing on CPU)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def seconds(work: Callable[[], Any]) -> float:
    """Wall seconds of `work()`, queued CUDA work included."""
    synchronize()
    started = time.perf_counter()
    work()
    synchronize()
    return time.perf_counter() - started


def matmul_rate(device: torch.device, dtype: torch.dtype, n: int, repeats: int = 10) -> float:
    """FLOP/s of an n x n x n matrix product on `device` in `dtype`, with the current torch threads (mean of
    `repeats` after 3 warm-ups)."""
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))

    def products(count: int) -> None:
        for _ in range(count):
            a @ b

    products(3)
    return 2 * n**3 * repeats / seconds(lambda: products(repeats))
