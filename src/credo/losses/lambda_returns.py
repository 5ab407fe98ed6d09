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
Identities (tests/losses/test_grpo_lambda.py): `lam = 0` with `recent` is GRPO up to the floor; on the first
on-policy mini-batch the `trace` gradient is GRPO's times `c_k = 1 + (n-1-k) w_k` per token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from credo.batch import RolloutBatch
from credo.checks import check_choice, check_range
from credo.losses.base import Importance, masked_mean, masked_quantile
from credo.losses.clipped import ClippedSurrogate
from credo.scan import shift_right

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


@dataclass(frozen=True, kw_only=True)
class LambdaLoss(ClippedSurrogate):
    """GRPO-lambda (arXiv 2510.00194): eligibility traces over token log-probs, with the positional weights
    and the trace of this module (see its docstring). The trace runs over the trained tokens (`loss_mask`), so
    no gradient reaches a token outside it.

    - `apply="trace"`: `log rho_t = d_t + sum_{k<t} w_k d_k` (`d = logp - old_logp`), clipped.
    - `apply="weight"`: GRPO's clipped loss times `e_t = u_t + sum_{k<t} w_k u_k`,
      `u_k = 1 + sigmoid(logp_k - 1)`, detached unless `detach_weight=False`.
    """

    lam: float = 0.99
    gamma: float = 1.0
    lam_length: int | None = None
    """None: one decay `gamma * lam` for every row. L: the decay is rescaled to each row's length,
    `(gamma * lam) ** (L / n)`, so that `lam` is the decay over L tokens (see `row_decay`)."""
    style: str = "both"
    """Positional weights: "recent" d^(n-1-k) | "early" d^k | "both" max(d^(n-k), d^k); d = gamma*lam."""
    apply: str = "trace"
    """"trace": traced log-prob ratio | "weight": per-token weight on GRPO's loss."""
    weight_floor: float = 1e-7
    detach_weight: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("LambdaLoss", "lam", self.lam, 0.0, 1.0)
        check_range("LambdaLoss", "gamma", self.gamma, 0.0, 1.0)
        check_choice("LambdaLoss", "style", self.style, STYLES)
        check_choice("LambdaLoss", "apply", self.apply, APPLICATIONS)
        check_range("LambdaLoss", "weight_floor", self.weight_floor, 0.0)
        if self.lam_length is not None:
            check_range("LambdaLoss", "lam_length", self.lam_length, 1)

    def importance(self, logp: Tensor, batch: RolloutBatch) -> Importance:
        mask = batch.loss_mask
        weights = positional_weights(
            batch.lengths, batch.width, decay=self.gamma * self.lam, style=self.style,
            floor=self.weight_floor, per_length=self.lam_length, dtype=logp.dtype,
        ) * mask  # (B, T)
        d = torch.where(mask, logp - batch.old_logp, 0.0)
        if self.apply == "trace":
            log_rho = accumulate_trace(d, weights)
            trace_weight = torch.exp(log_rho.detach() - d.detach())
            token_weight = None
        else:
            u = torch.where(mask, 1.0 + torch.sigmoid(logp - 1.0), 0.0)
            token_weight = accumulate_trace(u, weights)
            if self.detach_weight:
                token_weight = token_weight.detach()
            log_rho, trace_weight = d, token_weight.detach()
        metrics = {
            "trace/weight_mean": masked_mean(trace_weight, mask),
            "trace/weight_p99": masked_quantile(trace_weight, mask, 0.99),
        }
        return Importance(log_rho, weight=token_weight, metrics=metrics)
