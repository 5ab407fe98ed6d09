"""The arithmetic of a comparison: curves, areas, crossings, intervals over seeds, the share of a gain.

A learning curve is a run's held-out metric at each evaluation against a cost axis (optimiser steps,
rollout tokens or wall time), read as piecewise linear between evaluations. Everything here is a pure
function of numbers; `credo.study.report` applies it to run directories.

- `area`: the mean of the curve over `[0, budget]` (area under the curve divided by the budget), so an
  area is on the metric's own scale (0-1) and runs of different lengths compare at an equal budget.
- `first_crossing`: the cost at which the curve first reaches a target (linear between evaluations).
- `mean_interval`: mean and two-sided 95% Student-t interval over seeds.
- `share_of_gain`: `(AUC_method - AUC_base) / (AUC_oracle - AUC_base)` over paired seeds, with a paired
  bootstrap interval; undefined (None) when the oracle is no better than the base, never a division by 0.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
         20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}
"""Two-sided 95% quantiles of Student's t by degrees of freedom; between entries the smaller df's (wider)."""


@dataclass(frozen=True)
class Curve:
    """Points `(x, y)` with `x` non-decreasing: a metric against a cost."""

    x: tuple[float, ...]
    y: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.x) != len(self.y) or not self.x:
            raise ValueError(f"a curve needs as many x as y values and at least one point, got {len(self.x)} and {len(self.y)}")
        if any(b < a for a, b in zip(self.x, self.x[1:])):
            raise ValueError(f"a curve's x values must not decrease: {self.x}")

    def at(self, x: float) -> float:
        """The curve at `x`, linear between points, constant beyond the last (and before the first) point."""
        if x <= self.x[0]:
            return self.y[0]
        for (x0, y0), (x1, y1) in zip(zip(self.x, self.y), zip(self.x[1:], self.y[1:])):
            if x <= x1:
                return y1 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
        return self.y[-1]


def area(curve: Curve, budget: float) -> float:
    """Mean of the curve over `[x_0, budget]` (trapezoids on the piecewise-linear curve); `budget` must lie
    within the curve's x range.

    >>> area(Curve((0, 10), (0.0, 1.0)), 10), area(Curve((0, 10), (0.0, 1.0)), 5)
    (0.5, 0.25)
    """
    start = curve.x[0]
    if not start < budget <= curve.x[-1]:
        raise ValueError(f"budget {budget} must lie in ({start}, {curve.x[-1]}], the curve's x range")
    xs = [x for x in curve.x if x < budget] + [budget]
    ys = [curve.at(x) for x in xs]
    total = sum((x1 - x0) * (y0 + y1) / 2 for x0, x1, y0, y1 in zip(xs, xs[1:], ys, ys[1:]))
    return total / (budget - start)


def first_crossing(curve: Curve, target: float) -> float | None:
    """The smallest x at which the curve reaches `target` (linear between points); None if it never does.

    >>> first_crossing(Curve((0, 10, 20), (0.25, 0.5, 1.0)), 0.75)
    15.0
    """
    if curve.y[0] >= target:
        return float(curve.x[0])
    for (x0, y0), (x1, y1) in zip(zip(curve.x, curve.y), zip(curve.x[1:], curve.y[1:])):
        if y1 >= target:
            return float(x0 + (x1 - x0) * (target - y0) / (y1 - y0))
    return None


@dataclass(frozen=True)
class Estimate:
    """A mean over seeds with its 95% interval (`low`, `high` are None with fewer than two values)."""

    mean: float
    low: float | None
    high: float | None
    n: int

    @property
    def half_width(self) -> float | None:
        """Half the width of the 95% interval (None without one)."""
        return None if self.low is None else (self.high - self.low) / 2

    def __str__(self) -> str:
        if self.low is None:
            return f"{self.mean:.3f}"
        return f"{self.mean:.3f} ± {self.half_width:.3f}"


def t_quantile(df: int) -> float:
    """Two-sided 95% Student-t quantile for `df >= 1` degrees of freedom (table, rounded towards wider)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return T_975[max(k for k in T_975 if k <= df)] if df <= 120 else 1.960


def mean_interval(values: Sequence[float]) -> Estimate:
    """Mean and 95% t-interval `mean ± t_{0.975, n-1} * sd / sqrt(n)` (sample sd, ddof 1).

    >>> str(mean_interval([1.0, 2.0, 3.0]))  # sd 1, t(2) = 4.303: 2 ± 4.303 / sqrt(3)
    '2.000 ± 2.484'
    """
    if not values:
        raise ValueError("mean_interval needs at least one value")
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return Estimate(mean, None, None, n)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(n - 1) * sd / math.sqrt(n)
    return Estimate(mean, mean - half, mean + half, n)


@dataclass(frozen=True)
class Share:
    """Share of the oracle's gain a method recovers; `value` None when undefined (oracle no better than
    the base), `low`/`high` None when the interval is unbounded (some resample has no oracle gain)."""

    value: float | None
    low: float | None
    high: float | None
    seeds: int

    def __str__(self) -> str:
        if self.value is None:
            return "undefined (oracle no better than baseline)"
        interval = "unbounded" if self.low is None else f"{self.low:.2f} to {self.high:.2f}"
        return f"{self.value:.2f} [{interval}]"


def share_of_gain(method: Sequence[float], base: Sequence[float], oracle: Sequence[float], *,
                  resamples: int = 2000, seed: int = 0) -> Share:
    """`mean(method - base) / mean(oracle - base)` over paired seeds, with a 95% paired-bootstrap interval.

    `method[i]`, `base[i]`, `oracle[i]` are one seed's scores (e.g. AUCs). The share is 0 for a method no
    better than the base, 1 for one as good as the oracle, negative for one worse than the base. If the
    oracle's mean gain is not positive the share is undefined (`value` None). A resample whose oracle gain
    is not positive makes the interval unbounded (`low`, `high` None): the data cannot bound the share.

    >>> str(share_of_gain([0.6, 0.7], [0.5, 0.6], [0.7, 0.8], resamples=100))
    '0.50 [0.50 to 0.50]'
    """
    if not len(method) == len(base) == len(oracle) > 0:
        raise ValueError(f"share_of_gain needs paired seeds: got {len(method)}, {len(base)} and {len(oracle)} scores")
    gains = [m - b for m, b in zip(method, base)]
    oracle_gains = [o - b for o, b in zip(oracle, base)]
    n = len(gains)
    if sum(oracle_gains) <= 0:
        return Share(None, None, None, n)
    value = sum(gains) / sum(oracle_gains)
    if n < 2:
        return Share(value, None, None, n)
    rng = random.Random(seed)
    draws = []
    for _ in range(resamples):
        picks = [rng.randrange(n) for _ in range(n)]
        denominator = sum(oracle_gains[i] for i in picks)
        if denominator <= 0:
            return Share(value, None, None, n)
        draws.append(sum(gains[i] for i in picks) / denominator)
    draws.sort()
    return Share(value, draws[int(0.025 * (resamples - 1))], draws[int(0.975 * (resamples - 1))], n)


def mean_curve(curves: Sequence[Curve], points: int | None = 60) -> tuple[list[float], list[Estimate]]:
    """The seeds' mean curve with its interval on a common grid over `[0, the shortest curve's end]`: `points`
    evenly spaced points, or with `points=None` the curves' own points in that range (where the piecewise
    linear mean bends: the same mean line, drawn from fewer points).

    >>> [round(x) for x in mean_curve([Curve((0, 10, 20), (0, 1, 1)), Curve((0, 15, 30), (0, 1, 1))], None)[0]]
    [0, 10, 15, 20]
    """
    end = min(c.x[-1] for c in curves)
    start = max(c.x[0] for c in curves)
    if points is None:
        grid = sorted({start, end} | {x for c in curves for x in c.x if start < x < end})
    else:
        grid = [start + (end - start) * i / (points - 1) for i in range(points)] if end > start else [start]
    return grid, [mean_interval([c.at(x) for c in curves]) for x in grid]
