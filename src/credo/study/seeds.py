"""What a report keeps of each run: its per-seed values, from which every number of the report follows.

For one difficulty of a study (a regime), `regime_values` reduces each finished run to a `SeedValues`:

- `final`: every eval metric at the run's last evaluation (`summary.json`'s `eval_end`);
- `area`: for each compared metric with a curve (evaluated at least twice by every run of the regime; a metric
  sampled only at the final evaluation, `eval.final_samples`, has a final and no area), the area at equal
  rollout tokens: the curve's mean over `[0, budget]`, each point read between the run's own neighbouring
  evaluations (`curves.area`), with budget the smallest final rollout-token count of the regime (at most
  `report.auc_tokens`), and where every run carries the same token checkpoints (`train.eval_every_tokens`) the last
  checkpoint every run reached; `TokenGrid` then holds how late the runs' evaluations came after the checkpoints
  (`curves.lateness`);
- `area_updates`: for each metric with a curve, the area at equal optimiser updates (rollout batches x
  `optim.minibatches * optim.epochs`, so a cell with 4 mini-batches spends 4 updates a batch): the curve against
  updates, its mean over `[0, the smallest final update count of the regime]`, read the same way;
- `tokens_to_target`: the rollout tokens until the headline curve first reaches the baseline's mean final score
  (linear between evaluations; None where it never does);
- blame precision, rollout tokens, wall time and whether the run was unstable (`Run.unstable`).

`RegimeValues` holds them by method and seed with the regime's facts, and writes and reads them as the
`per_seed` part of a difficulty in `report.json`, so that any two cells can be compared from a report folder.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from credo.study.curves import area, first_crossing, lateness
from credo.study.grid import ReportConfig
from credo.study.runs import Run


def compared_metrics(headline: str, reported: Iterable[str]) -> list[str]:
    """The metrics a report compares, those among `reported`: the headline, greedy and sampled pass@1, and the
    largest pass@k with k > 1.

    >>> compared_metrics("greedy_pass@1", ["greedy_pass@1", "pass@1", "pass@4", "pass@16", "avg@16", "pass@32@t0.6"])
    ['greedy_pass@1', 'pass@1', 'pass@16']
    """
    keys = set(reported)
    larger = [k for k in keys if re.fullmatch(r"pass@\d+", k) and k != "pass@1"]  # not pass@k@t0.6
    largest = max(larger, key=lambda k: int(k.split("@")[1])) if larger else None
    return [k for k in dict.fromkeys((headline, "greedy_pass@1", "pass@1", largest)) if k in keys]


@dataclass(frozen=True)
class SeedValues:
    """One run's values (see the module docstring)."""

    final: dict[str, float]
    area: dict[str, float]
    area_updates: dict[str, float]
    tokens_to_target: float | None
    blame_precision: float | None
    rollout_tokens: float
    wall_s: float
    unstable: bool
    update_norm: float | None = None
    """The run's mean update size per rollout batch (`optim/update_norm`; None for runs logged before it)."""
    device: str | None = None
    """Where the run trained (`summary.json`'s `device`, `credo.run_setup.device_name`; None for runs that finished
    before summaries recorded it)."""

    def as_json(self) -> dict:
        return {"final": self.final, "area_tokens": self.area, "area_updates": self.area_updates,
                "tokens_to_baseline_final": self.tokens_to_target, "blame_precision": self.blame_precision,
                "rollout_tokens": self.rollout_tokens, "wall_s": self.wall_s, "unstable": self.unstable,
                "update_norm": self.update_norm, **({"device": self.device} if self.device is not None else {})}

    @classmethod
    def from_json(cls, data: dict) -> SeedValues:
        """The values `as_json` wrote; a report written before areas at equal updates has none (its per-seed
        `steps` counted rollout batches, not optimiser updates, and are not read)."""
        return cls(data["final"], data["area_tokens"], data.get("area_updates", {}),
                   data["tokens_to_baseline_final"], data["blame_precision"], data["rollout_tokens"], data["wall_s"],
                   data["unstable"], data.get("update_norm"), data.get("device"))


@dataclass(frozen=True)
class TokenGrid:
    """The token checkpoints of a regime's equal-token areas and how late the runs evaluated after them."""

    every: int
    """The grid's spacing (the runs' `train.eval_every_tokens`)."""
    budget: int
    """The last checkpoint every run reached: the areas' budget."""
    largest_lateness: float
    """The largest lateness of an evaluation after its checkpoint (`curves.lateness`), as a share of the spacing."""
    mean_lateness: float | None
    """The mean lateness over every run's checkpoints; None in a report written before the areas read each curve
    between its neighbours (its areas took the first evaluation at or after each checkpoint as the value there)."""

    def as_json(self) -> dict:
        return {"every": self.every, "budget": self.budget, "largest_lateness": self.largest_lateness,
                "mean_lateness": self.mean_lateness}

    @classmethod
    def from_json(cls, saved: dict) -> TokenGrid:
        if "largest_lateness" in saved:
            return cls(saved["every"], saved["budget"], saved["largest_lateness"], saved["mean_lateness"])
        return cls(saved["every"], saved["budget"], saved["largest_overshoot"], None)


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
    """The token checkpoints of the areas; None: the runs had none."""
    cells: dict[str, dict[int, SeedValues]]
    """`{method: {seed: values}}` for the methods with finished runs, in the study's order."""
    update_budget: float | None = None
    """The optimiser-update budget of the areas at equal updates (None: a report written before them)."""

    @property
    def curve_metrics(self) -> list[str]:
        """The compared metrics with areas (a curve in every run)."""
        return list(next(iter(next(iter(self.cells.values())).values())).area)

    def as_json(self) -> dict:
        return {"token_checkpoints": None if self.token_grid is None else self.token_grid.as_json(),
                "update_budget": self.update_budget, "per_seed": {m: {str(s): v.as_json() for s, v in by_seed.items()} for m, by_seed in self.cells.items()}}

    @classmethod
    def from_json(cls, saved: dict) -> RegimeValues:
        """The values `as_json` wrote into a difficulty of `report.json` (with its `metric`, `auc_tokens` and
        `baseline_final`)."""
        grid = saved["token_checkpoints"]
        return cls(saved["metric"], saved["auc_tokens"], saved["baseline_final"],
                   None if grid is None else TokenGrid.from_json(grid),
                   {m: {int(s): SeedValues.from_json(v) for s, v in by_seed.items()}
                    for m, by_seed in saved["per_seed"].items()}, saved.get("update_budget"))


def token_grid(runs: list[Run], metric: str, up_to: float) -> TokenGrid | None:
    """The token checkpoints up to `up_to` (the regime's smallest final rollout-token count, or the report's
    `auc_tokens`) and the runs' lateness after them; None unless every run carries the same token checkpoints and at
    least one lies past 0."""
    spacings = {r.eval_every_tokens for r in runs}
    every = spacings.pop() if len(spacings) == 1 else None
    if every is None or up_to < every:
        return None
    budget = int(up_to // every) * every
    late = [lateness(r.curve(metric, "rollout_tokens").x, every, budget) for r in runs]
    flat = [x for run in late for x in run]
    return TokenGrid(every, budget, max(flat), sum(flat) / len(flat))


def regime_values(runs: dict[str, list[Run]], report: ReportConfig, difficulty: str) -> RegimeValues:
    """The per-seed values of one difficulty's finished runs (see the module docstring)."""
    if not runs.get(report.baseline):
        raise ValueError(f"{difficulty}: the baseline {report.baseline!r} has no finished run; the report compares with it")
    finished = {m: rs for m, rs in runs.items() if rs}
    every_run = [r for rs in finished.values() for r in rs]
    metric = report.metric
    reported = set.intersection(*(set(r.summary["eval_end"]) for r in every_run))
    curves = [metric] + [k for k in compared_metrics(metric, reported) if k != metric and all(r.has_curve(k) for r in every_run)]
    shortest = min(r.curve(metric, "rollout_tokens").x[-1] for r in every_run)
    up_to = min(shortest, report.auc_tokens or shortest)
    grid = token_grid(every_run, metric, up_to)
    budget = grid.budget if grid is not None else up_to
    update_budget = min(r.curve(metric, "updates").x[-1] for r in every_run)
    target = sum(r.summary["eval_end"][metric] for r in finished[report.baseline]) / len(finished[report.baseline])
    cells = {method: {r.seed: SeedValues(
        final={k: v for k, v in r.summary["eval_end"].items() if k != "by_difficulty"},
        area={k: area(r.curve(k, "rollout_tokens"), budget) for k in curves},
        area_updates={k: area(r.curve(k, "updates"), update_budget) for k in curves},
        tokens_to_target=first_crossing(r.curve(metric, "rollout_tokens"), target),
        blame_precision=r.summary.get("blame_precision"),
        rollout_tokens=r.summary["rollout_tokens"], wall_s=r.summary["wall_s"], unstable=r.unstable(metric),
        update_norm=r.summary.get("update_norm"), device=r.summary.get("device"),
    ) for r in method_runs} for method, method_runs in finished.items()}
    return RegimeValues(metric, budget, target, grid, cells, update_budget)
