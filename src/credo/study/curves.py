"""The geometry of learning curves: areas, measured points, crossings, the mean over seeds.

A learning curve is a run's held-out metric at each evaluation against a cost axis (optimiser updates, rollout
tokens or wall time). Everything here is a pure function of numbers; `credo.study.seeds` applies it to runs.

- `area`: the mean of the curve over `[x_0, budget]` (area under the curve divided by the span), the curve read
  as piecewise linear between evaluations (interpolated between them, and at the budget), so an area is on the
  metric's own scale (0-1) and runs of different lengths compare at an equal budget.
  Each point between evaluations is read from the curve's own measured neighbours (never from another curve, never
  beyond its last evaluation), so an area at an exact budget (equal rollout tokens, equal optimiser updates) is
  not biased by where each run happened to evaluate (exactly so where the curve is straight between them).
- `lateness`: how far after each nominal token checkpoint (`train.eval_every_tokens`) a run's next evaluation came.
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


def lateness(x: Sequence[float], every: int, budget: float) -> tuple[float, ...]:
    """How late a run's evaluations came after its nominal token checkpoints `0, every, 2 every, ..., budget`: for
    each checkpoint, the tokens from it to the first evaluation at or after it (`x`: the run's evaluations' rollout
    tokens), as a share of `every`. An equal-token area reads each curve between its own neighbours at the
    checkpoint (`area`), so lateness is no bias of the area; it says how far the nearest later measurement was
    (a lateness of 1 or more: the run evaluated nothing between this checkpoint and the next).

    >>> lateness((0, 104, 310), 100, 300)  # 200 and 300 are both served by the evaluation at 310
    (0.0, 0.04, 1.1, 0.1)
    """
    if budget > x[-1]:
        raise ValueError(f"the run's last evaluation ({x[-1]} tokens) is before the budget {budget}")
    checkpoints = [k * every for k in range(int(budget // every) + 1)]
    return tuple(round((next(t for t in x if t >= c) - c) / every, 12) for c in checkpoints)


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
