"""GRPO-lambda: lambda-returns through eligibility traces over token log-probs (arXiv 2510.00194).

The paper's equations were not recoverable; this follows the author's verl fork
(`compute_eligibility_trace`, loss `grpol`), with one change: the positional weights use each row's own
length `n`, not the padded batch width, so a row's credit never depends on other rows.

With decay `d = gamma * lam`, per-row positional weights (`k = 0 .. n-1`, floored at 1e-7):

    recent: w_k = d^(n-1-k)      early: w_k = d^k      both: w_k = max(d^(n-k), d^k)

With `lam_length = L` the decay is rescaled per row to its own length, `d_b = d^(L / n)`, so the weights
depend on the relative position only (a "recent" trace then peaks the same share of a response before its
end whatever its length; a fixed `d` makes short responses uniform and long ones sharply local).

and an accumulating trace over the trained tokens `x_t + sum_{k<t} w_k x_k` (an exclusive prefix sum,
O(B*T)). Applications:
- `trace`: traced log-prob `z_t = logp_t + sum_{k<t} w_k logp_k`, likewise `z_old`; ratio
  `exp(z_t - z_old_t)` (gradient through every earlier token), clipped like GRPO.
- `weight`: a per-token weight `e_t = u_t + sum_{k<t} w_k u_k`, `u_k = 1 + sigmoid(logp_k - 1)`,
  multiplies GRPO's clipped loss (detached by default).
Identities (tests/test_grpo_lambda.py): `lam = 0` with `recent` is GRPO up to the floor; on the first
on-policy mini-batch the `trace` gradient is GRPO's times `c_k = 1 + (n-1-k) w_k` per token.
"""

from __future__ import annotations

import torch
from torch import Tensor

from credo.credit.scan import shift_right

STYLES = ("recent", "early", "both")
APPLICATIONS = ("trace", "weight")


def row_decay(lengths: Tensor, decay: float, per_length: int | None) -> Tensor:
    """(B,) each row's decay: `decay` itself, or with `per_length = L` the decay rescaled to the row's own
    length, `decay ** (L / n_b)`, so that `d_b ** n_b = decay ** L`: the weights then depend only on the
    relative position `k / n_b`, and `decay` is the decay over `L` tokens whatever a response's length.

    >>> [round(d, 6) for d in row_decay(torch.tensor([16, 32, 64]), 0.81, 32).tolist()]
    [0.6561, 0.81, 0.9]
    """
    n = lengths.to(torch.float64).clamp(min=1)
    base = torch.full_like(n, decay)
    return base if per_length is None else base ** (per_length / n)


def positional_weights(
    lengths: Tensor,
    width: int,
    *,
    decay: float,
    style: str,
    floor: float = 1e-7,
    per_length: int | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """(B, T) weights `w[b, k]` of GRPO-lambda's trace for rows of `lengths[b]` tokens (0 off the row),
    with each row's decay from `row_decay(lengths, decay, per_length)`.

    >>> positional_weights(torch.tensor([3]), 4, decay=0.5, style="recent").tolist()
    [[0.25, 0.5, 1.0, 0.0]]
    """
    k = torch.arange(width, device=lengths.device, dtype=torch.float64).unsqueeze(0)  # (1, T)
    n = lengths.to(torch.float64).unsqueeze(1)  # (B, 1)
    base = row_decay(lengths, decay, per_length).unsqueeze(1)  # (B, 1)
    if style == "recent":
        w = torch.pow(base, (n - 1 - k).clamp(min=0))
    elif style == "early":
        w = torch.pow(base, k).expand(n.shape[0], -1)
    else:  # both
        w = torch.maximum(torch.pow(base, (n - k).clamp(min=0)), torch.pow(base, k))
    on_row = k < n  # (B, T)
    return torch.where(on_row, w.clamp(min=floor), 0.0).to(dtype)


def accumulate_trace(x: Tensor, weights: Tensor) -> Tensor:
    """`x_t + sum_{k<t} w_k x_k` along the last axis (exclusive prefix sum, gradients through all x)."""
    return x + shift_right(torch.cumsum(weights * x, dim=-1))
