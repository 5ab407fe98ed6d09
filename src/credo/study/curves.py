"""The geometry of learning curves: areas, measured points, crossings, the mean over seeds.

A learning curve is a run's held-out metric at each evaluation against a cost axis (optimiser steps, rollout
tokens or wall time). Everything here is a pure function of numbers; `credo.study.seeds` applies it to runs.

- `area`: the mean of the curve over `[x_0, budget]` (area under the curve divided by the span), the curve read
  as piecewise linear between evaluations (interpolated between them, and at the budget), so an area is on the
  metric's own scale (0-1) and runs of different lengths compare at an equal budget.
- `measured_area`: the same trapezoid mean over a grid of x values at which the curve was measured, from the
  measured values alone (nothing interpolated); `common_x` gives the x values every curve of a comparison
  measured (the steps both runs evaluated, or the token checkpoints every run reached), `measured_difference` the
  difference of two curves' areas over the x both measured (an equal-step comparison).
- `checkpoint_curve`: a run's values at its nominal token checkpoints (`train.eval_every_tokens`): each served by
  the first evaluation at or after it, with the largest overshoot (tokens spent past the checkpoint).
- `first_crossing`: the cost at which the curve first reaches a target (linear between evaluations).
- `mean_curve`: the seeds' mean curve with its 95% interval on a common grid (for the figures).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from credo.study.stats import Estimate, mean_interval


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


def measured_area(curve: Curve, grid: Sequence[float]) -> float:
    """The trapezoid mean of the curve over `grid` (at least two increasing x values, each one the curve measured):
    `sum_i (x_{i+1} - x_i) (y_i + y_{i+1}) / 2 / (x_last - x_first)` with `y_i` the measured value at `x_i`.

    >>> measured_area(Curve((0, 5, 10, 20), (0.0, 0.9, 0.5, 1.0)), (0, 10, 20))  # the point at 5 is not on the grid
    0.5
    """
    measured = dict(zip(curve.x, curve.y))
    if len(grid) < 2 or any(b <= a for a, b in zip(grid, grid[1:])):
        raise ValueError(f"an area needs at least two increasing grid points, got {tuple(grid)}")
    missing = [x for x in grid if x not in measured]
    if missing:
        raise ValueError(f"the curve was not measured at {missing}: a measured area interpolates nothing")
    ys = [measured[x] for x in grid]
    total = sum((x1 - x0) * (y0 + y1) / 2 for x0, x1, y0, y1 in zip(grid, grid[1:], ys, ys[1:]))
    return total / (grid[-1] - grid[0])


def common_x(curves: Sequence[Curve], up_to: float | None = None) -> tuple[float, ...]:
    """The x values every curve measured (at most `up_to`), increasing.

    >>> common_x([Curve((0, 5, 10, 15, 20), (0,) * 5), Curve((0, 12, 20, 24), (0,) * 4)])  # every 5 and every 12
    (0, 20)
    """
    shared = set(curves[0].x).intersection(*(c.x for c in curves[1:]))
    return tuple(sorted(x for x in shared if up_to is None or x <= up_to))


def measured_difference(ours: Curve, theirs: Curve) -> float | None:
    """The difference of two curves' `measured_area`s over the x values both measured (`common_x`); None where they
    share fewer than two. Below, over (0, 10): 0.4 - 0.3; the first curve's point at 5 is not used.

    >>> round(measured_difference(Curve((0, 5, 10), (0.2, 0.3, 0.6)), Curve((0, 10, 20), (0.2, 0.4, 0.9))), 3)
    0.1
    """
    grid = common_x([ours, theirs])
    return None if len(grid) < 2 else measured_area(ours, grid) - measured_area(theirs, grid)


def checkpoint_curve(records: Sequence[tuple[int, float, float]], every: int) -> tuple[Curve, float]:
    """A run's values at its nominal token checkpoints, and its largest overshoot.

    `records` are the run's evaluations at token checkpoints in order, each `(token_checkpoint, rollout_tokens,
    value)`: the evaluation at the first step boundary at or after `token_checkpoint` tokens. A step that passed
    several checkpoints evaluated once, recording the largest; its value serves every multiple of `every` above
    the previous record's checkpoint. Returns the curve of `(k * every, value)` over the checkpoints served and
    the largest `rollout_tokens - k * every` among them.

    >>> curve, overshoot = checkpoint_curve([(0, 0, 0.1), (100, 104, 0.3), (300, 310, 0.5)], 100)
    >>> curve.x, curve.y, overshoot  # the step that passed 200 and 300 serves both; 310 - 200 = 110
    ((0, 100, 200, 300), (0.1, 0.3, 0.5, 0.5), 110)
    """
    xs, ys, overshoot, previous = [], [], 0, -1
    for checkpoint, tokens, value in records:
        if checkpoint % every or checkpoint <= previous:
            raise ValueError(f"token checkpoint {checkpoint} is not the next multiple of {every} after {previous}")
        for k in range(previous // every + 1, checkpoint // every + 1):
            xs.append(k * every)
            ys.append(value)
            overshoot = max(overshoot, tokens - k * every)
        previous = checkpoint
    return Curve(tuple(xs), tuple(ys)), overshoot


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
