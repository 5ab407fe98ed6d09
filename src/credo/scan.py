"""Decayed prefix sums `y_t = sum_{k <= t} lam^(t-k) x_k` along the last axis, in O(B*T).

A decayed prefix sum is the linear recurrence `y_t = lam * y_{t-1} + x_t`. The closed form through
`cumsum(lam^-k x_k)` overflows for long rows (0.9^-4096 is ~1e187), and a Python loop over `T` is slow,
so this is a chunked scan: inside chunks of `C` tokens a `(C, C)` lower-triangular decay matrix does the
work as one matmul; the chunk totals form the same recurrence with decay `lam^C` one level up, solved by
recursion; each chunk then adds its carry-in times `lam^(i+1)`. Cost `O(B*T*C)` per level with
`log_C(T)` levels: linear in `B*T`, no `T x T` matrix, no overflow (powers only decay).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

CHUNK = 64


def _decay_matrix(size: int, lam: float, like: Tensor) -> Tensor:
    """(size, size) matrix `M[t, k] = lam^(t-k)` for `k <= t`, else 0, so that `y = x @ M.T`."""
    steps = torch.arange(size, dtype=torch.float64, device=like.device)
    exponent = steps.unsqueeze(1) - steps.unsqueeze(0)  # (C, C): t - k
    matrix = torch.where(exponent >= 0, torch.pow(torch.tensor(lam, dtype=torch.float64), exponent.clamp(min=0)), 0.0)
    return matrix.to(like.dtype)


def decayed_cumsum(x: Tensor, lam: float, chunk: int = CHUNK) -> Tensor:
    """Inclusive decayed prefix sum over the last axis: `y[..., t] = sum_{k<=t} lam^(t-k) x[..., k]`.

    `lam` in [0, 1]; `lam = 0` returns a copy of `x`, `lam = 1` is `cumsum`. Gradients flow through `x`.

    >>> decayed_cumsum(torch.tensor([[1.0, 1.0, 1.0]]), 0.5).tolist()
    [[1.0, 1.5, 1.75]]
    """
    T = x.shape[-1]
    if T <= chunk:
        return x @ _decay_matrix(T, lam, x).T
    lead = x.shape[:-1]
    num_chunks = -(-T // chunk)
    padded = F.pad(x, (0, num_chunks * chunk - T)).reshape(*lead, num_chunks, chunk)  # (..., n, C)
    local = padded @ _decay_matrix(chunk, lam, x).T  # (..., n, C): sums inside each chunk
    totals = decayed_cumsum(local[..., -1], lam**chunk, chunk)  # (..., n): everything up to each chunk's end
    carry_in = F.pad(totals[..., :-1], (1, 0))  # (..., n): everything before each chunk
    offsets = torch.pow(
        torch.tensor(lam, dtype=torch.float64), torch.arange(1, chunk + 1, dtype=torch.float64, device=x.device)
    ).to(x.dtype)  # (C,): lam^(i+1)
    out = local + carry_in.unsqueeze(-1) * offsets  # (..., n, C)
    return out.reshape(*lead, num_chunks * chunk)[..., :T]


def shift_right(x: Tensor) -> Tensor:
    """`y[..., t] = x[..., t-1]`, `y[..., 0] = 0`: turns an inclusive prefix sum into an exclusive one."""
    return F.pad(x[..., :-1], (1, 0))
