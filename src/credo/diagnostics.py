"""Credit diagnostics: where a method's update puts the blame, measured from the gradient it takes.

The credit a token receives is what the update does to its log-probability, `-dLoss/dlogp[b, t]`: positive
pushes the token up, negative pushes it down. It folds every ingredient of a method into one number per
token (advantage, token weight, trace, clip, loss mask, normaliser), so methods with very different
machinery are compared on the same scale. The trainer reads it from the backward pass it takes anyway.

Blame precision, on a task whose step checker knows each failed response's first wrong step
(`blame_start`, the first token of that step): of all the negative credit that failed responses receive,
the share that falls on or after their first wrong step,

    precision = sum_{b failed, t >= s_b} max(0, -c[b, t]) / sum_{b failed, t} max(0, -c[b, t]).

GRPO spreads a failure's blame evenly over its tokens, so its precision is the share of failed tokens on
or after the first wrong step; `oracle_blame` is 1 by construction; a credit method that localises
errors without a checker moves towards 1. Rows without a located step (`blame_start < 0`) are left out.
"""

from __future__ import annotations

import torch
from torch import Tensor


def blame_precision(credit: Tensor, response_mask: Tensor, blame_start: Tensor, failed: Tensor) -> float | None:
    """Share of failed rows' negative credit on or after their first wrong step; None if they got none.

    >>> credit = torch.tensor([[-1.0, -1.0, -2.0], [0.5, 0.5, 0.5]])
    >>> mask = torch.ones(2, 3, dtype=torch.bool)
    >>> blame_precision(credit, mask, torch.tensor([2, -1]), torch.tensor([True, False]))
    0.5
    """
    positions = torch.arange(credit.shape[1], device=credit.device).unsqueeze(0)  # (1, T)
    rows = (failed & (blame_start >= 0)).unsqueeze(1)  # (B, 1)
    blame = (-credit).clamp(min=0) * (response_mask & rows)  # (B, T)
    total = float(blame.sum())
    if total == 0.0:
        return None
    return float(blame[positions >= blame_start.unsqueeze(1)].sum()) / total
