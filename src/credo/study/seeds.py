"""What a report keeps of each run: its per-seed values, from which every number of the report follows.

For one difficulty of a study (a regime), `regime_values` reduces each finished run to a `SeedValues`:

- `final`: every eval metric at the run's last evaluation (`summary.json`'s `eval_end`);
- `area`: for each compared metric with a curve (evaluated at least twice by every run of the regime; a metric
  sampled only at the final evaluation, `eval.final_samples`, has a final and no area), the area at equal
  rollout tokens. When every run carries token checkpoints (`train.eval_every_tokens`), it is the trapezoid
  mean over the nominal checkpoints `0, X, 2X, ..., budget` that every run reached, of the values measured there
  (`curves.checkpoint_curve`, `curves.measured_area`: nothing interpolated; `TokenGrid` holds the largest
  overshoot). Otherwise it is the curve's mean over `[0, budget]` read as linear between evaluations
  (`curves.area`: interpolated), with budget `report.auc_tokens` or the smallest final rollout-token count of the
  regime;
- `steps`: for each metric with a curve, the measured points against optimiser steps. An area at equal steps
  depends on the pair compared (it uses the steps both runs evaluated, `curves.common_x`), so the points are
  kept rather than one area;
- `tokens_to_target`: the rollout tokens until the headline curve first reaches the baseline's mean final score
  (linear between evaluations; None where it never does);
- blame precision, rollout tokens, wall time and whether the run was unstable (`Run.unstable`).

`RegimeValues` holds them by method and seed with the regime's facts, and writes and reads them as the
`per_seed` part of a difficulty in `report.json`, so that any two cells can be compared from a report folder.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from credo.study.curves import Curve, area, common_x, first_crossing, measured_area
from credo.study.grid import ReportConfig
from credo.study.runs import Run


def compared_metrics(headline: str, reported: Iterable[str]) -> list[str]:
    """The metrics a report compares, those among `reported`: the headline, greedy and sampled pass@1, and the
    largest pass@k with k > 1.

    >>> compared_metrics("greedy_pass@1", ["greedy_pass@1", "pass@1", "pass@4", "pass@16", "avg@16"])
    ['greedy_pass@1', 'pass@1', 'pass@16']
    """
    keys = set(reported)
    larger = [k for k in keys if k.startswith("pass@") and k != "pass@1"]
    largest = max(larger, key=lambda k: int(k.split("@")[1])) if larger else None
    return [k for k in dict.fromkeys((headline, "greedy_pass@1", "pass@1", largest)) if k in keys]


@dataclass(frozen=True)
class SeedValues:
    """One run's values (see the module docstring)."""

    final: dict[str, float]
    area: dict[str, float]
    steps: dict[str, Curve]
    tokens_to_target: float | None
    blame_precision: float | None
    rollout_tokens: float
    wall_s: float
    unstable: bool
    update_norm: float | None = None
    """The run's mean update size per rollout batch (`optim/update_norm`; None for runs logged before it)."""

    def as_json(self) -> dict:
        return {"final": self.final, "area_tokens": self.area,
                "steps": {k: {"step": list(c.x), "value": list(c.y)} for k, c in self.steps.items()},
                "tokens_to_baseline_final": self.tokens_to_target, "blame_precision": self.blame_precision,
                "rollout_tokens": self.rollout_tokens, "wall_s": self.wall_s, "unstable": self.unstable,
                "update_norm": self.update_norm}

    @classmethod
    def from_json(cls, data: dict) -> SeedValues:
        return cls(data["final"], data["area_tokens"],
                   {k: Curve(tuple(c["step"]), tuple(c["value"])) for k, c in data["steps"].items()},
                   data["tokens_to_baseline_final"], data["blame_precision"], data["rollout_tokens"], data["wall_s"],
                   data["unstable"], data.get("update_norm"))


@dataclass(frozen=True)
class TokenGrid:
    """The token checkpoints of a regime's equal-token areas: every run measured each of them."""

    every: int
    """The grid's spacing (the runs' `train.eval_every_tokens`)."""
    budget: int
    """The last checkpoint every run reached: the areas' budget."""
    overshoot: float
    """The largest overshoot of an evaluation past its nominal checkpoint, as a share of its run's spacing."""

    def as_json(self) -> dict:
        return {"every": self.every, "budget": self.budget, "largest_overshoot": self.overshoot}


@dataclass(frozen=True)
class RegimeValues:
    """Every finished run of one regime reduced to its `SeedValues`, with the regime's facts."""

    metric: str
    """The headline metric (`ReportConfig.metric`)."""
    budget: float
    """The rollout-token budget of the areas."""
    target: float
    """The baseline's mean final headline score (the tokens-to-target threshold)."""
    token_grid: TokenGrid | None
    """The token checkpoints of the areas; None: areas interpolated between evaluations."""
    cells: dict[str, dict[int, SeedValues]]
    """`{method: {seed: values}}` for the methods with finished runs, in the study's order."""

    @property
    def curve_metrics(self) -> list[str]:
        """The compared metrics with areas (a curve in every run)."""
        return list(next(iter(next(iter(self.cells.values())).values())).area)

    def as_json(self) -> dict:
        return {"token_checkpoints": None if self.token_grid is None else self.token_grid.as_json(),
                "per_seed": {m: {str(s): v.as_json() for s, v in by_seed.items()} for m, by_seed in self.cells.items()}}

    @classmethod
    def from_json(cls, saved: dict) -> RegimeValues:
        """The values `as_json` wrote into a difficulty of `report.json` (with its `metric`, `auc_tokens` and
        `baseline_final`)."""
        grid = saved["token_checkpoints"]
        return cls(saved["metric"], saved["auc_tokens"], saved["baseline_final"],
                   None if grid is None else TokenGrid(grid["every"], grid["budget"], grid["largest_overshoot"]),
                   {m: {int(s): SeedValues.from_json(v) for s, v in by_seed.items()}
                    for m, by_seed in saved["per_seed"].items()})


def token_grid(runs: list[Run], metric: str, up_to: float | None) -> tuple[TokenGrid, tuple[int, ...]] | None:
    """The checkpoints every run measured (at most `up_to`) and the largest overshoot; None unless every run carries
    token checkpoints and they share at least two."""
    curves = [r.checkpoint_curve(metric) for r in runs]
    if any(c is None for c in curves):
        return None
    grid = common_x([c for c, _ in curves], up_to)
    if len(grid) < 2:
        return None
    overshoot = max(o / r.eval_every_tokens for r, (_, o) in zip(runs, curves))
    return TokenGrid(math.gcd(*grid), grid[-1], overshoot), grid


def regime_values(runs: dict[str, list[Run]], report: ReportConfig, difficulty: str) -> RegimeValues:
    """The per-seed values of one difficulty's finished runs (see the module docstring)."""
    if not runs.get(report.baseline):
        raise ValueError(f"{difficulty}: the baseline {report.baseline!r} has no finished run; the report compares with it")
    finished = {m: rs for m, rs in runs.items() if rs}
    every_run = [r for rs in finished.values() for r in rs]
    metric = report.metric
    reported = set.intersection(*(set(r.summary["eval_end"]) for r in every_run))
    curves = [metric] + [k for k in compared_metrics(metric, reported) if k != metric and all(r.has_curve(k) for r in every_run)]
    checkpoints = token_grid(every_run, metric, report.auc_tokens)
    if checkpoints is None:
        budget = report.auc_tokens or min(r.curve(metric, "rollout_tokens").x[-1] for r in every_run)

        def token_area(run: Run, key: str) -> float:
            return area(run.curve(key, "rollout_tokens"), budget)
    else:
        grid = checkpoints[1]
        budget = grid[-1]

        def token_area(run: Run, key: str) -> float:
            return measured_area(run.checkpoint_curve(key)[0], grid)

    target = sum(r.summary["eval_end"][metric] for r in finished[report.baseline]) / len(finished[report.baseline])
    cells = {method: {r.seed: SeedValues(
        final={k: v for k, v in r.summary["eval_end"].items() if k != "by_difficulty"},
        area={k: token_area(r, k) for k in curves},
        steps={k: r.curve(k, "step") for k in curves},
        tokens_to_target=first_crossing(r.curve(metric, "rollout_tokens"), target),
        blame_precision=r.summary.get("blame_precision"),
        rollout_tokens=r.summary["rollout_tokens"], wall_s=r.summary["wall_s"], unstable=r.unstable(metric),
        update_norm=r.summary.get("update_norm"),
    ) for r in method_runs} for method, method_runs in finished.items()}
    return RegimeValues(metric, budget, target, None if checkpoints is None else checkpoints[0], cells)
