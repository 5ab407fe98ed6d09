"""Learning-rate schedules, as multipliers of the base learning rate (for `torch.optim.lr_scheduler.LambdaLR`).

A leaf module: the trainer (`credo.train`) and the testbed's SFT (`credo.testbed`) both use it.
"""

from __future__ import annotations

import math


def warmup_cosine(step: int, total: int, warmup: int) -> float:
    """Learning-rate multiplier: linear warm-up over `warmup` steps, then cosine decay to 0 at `total`.

    `(step + 1) / warmup` while `step < warmup`, then `(1 + cos(pi * p)) / 2` with
    `p = min(1, (step - warmup) / max(1, total - warmup))`.

    >>> [round(warmup_cosine(s, 6, 2), 3) for s in range(7)]
    [0.5, 1.0, 1.0, 0.854, 0.5, 0.146, 0.0]
    """
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def lr_multiplier(schedule: str, update: int, total: int, warmup: int) -> float:
    """The trainer's learning-rate multiplier at optimiser update `update` (0-based) of `total`.

    Both schedules warm up linearly over the first `warmup` updates: `(update + 1) / warmup` while
    `update < warmup` (no warm-up when `warmup` is 0). After it,
    - "constant": `1`;
    - "cosine": `(1 + cos(pi * p)) / 2` with `p = min(1, (update - warmup) / max(1, total - warmup))`, which
      decays from 1 to 0 at `update = total` (`warmup_cosine`).

    >>> [lr_multiplier("constant", u, 10, 4) for u in (0, 1, 3, 4, 9)]
    [0.25, 0.5, 1.0, 1.0, 1.0]
    >>> lr_multiplier("cosine", 10, 10, 4)
    0.0
    """
    if schedule == "cosine":
        return warmup_cosine(update, total, warmup)
    if schedule == "constant":
        return min(1.0, (update + 1) / warmup) if warmup else 1.0
    raise ValueError(f"unknown learning-rate schedule {schedule!r} (expected 'constant' or 'cosine')")
