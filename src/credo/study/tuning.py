"""The tuning rule of a tuning study (`StudyConfig.tune`): each method's value of the tuned setting, and its margin.

One rule for every method, the baseline and the yardsticks included (docs/guides/studies.md, "Tuning"):

- **one metric**, fixed before the runs: the study's headline (`ReportConfig.metric`), as its area at equal rollout
  tokens (`credo.study.seeds`), on the tuning study's own seeds and its evaluation problems (a tuning study
  evaluates on the validation problems, `task.eval_split: validation`, so the study's test problems choose nothing);
- **the mean over the tuning seeds** chooses: the value with the largest mean area over the study's seeds, among the
  values finished at every one of them (an unfinished value is named, never chosen); no tie-break by a second metric;
- **its margin** is reported: the chosen value's mean minus the runner-up's, and that margin in standard deviations of
  their per-seed paired differences (a margin under 1 sd is one the next seed may well reverse);
- **the grid's edge**: a choice at the smallest or largest value tried is not bracketed; the grid should be extended
  one step that way for that method (`Tune.extend`, on the same seeds) before the choice stands.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from credo.study.grid import method_values, tune_label
from credo.study.runs import seeds_of
from credo.study.seeds import RegimeValues


@dataclass(frozen=True)
class Choice:
    """One method's tuned value and how clearly the rule chose it."""

    method: str
    means: dict[float, float]
    """Per value tried, the mean area over `seeds`."""
    seeds: list[int]
    """The tuning seeds of the method's cells (the means are over all of them)."""
    chosen: float
    runner_up: float | None
    """The value with the second largest mean (None with one value finished)."""
    margin: float | None
    """The chosen value's mean area minus the runner-up's."""
    margin_sd: float | None
    """`margin` over the sd of the per-seed differences chosen - runner-up (None under 2 seeds or with no spread)."""
    where: str
    """"bracketed", or "extend lower" / "extend higher" where the choice is at the grid's edge."""
    missing: list[float]
    """Values of the grid not yet finished at every one of `seeds` (the choice is among the others)."""
    update_sizes: dict[float, float] = field(default_factory=dict)
    """Per finished value whose runs all logged it, the mean over `seeds` of a run's mean update size
    (`optim/update_norm`), which matches a method to its step-size control (`step_size_controls`)."""

    def as_json(self) -> dict:
        return {"method": self.method, "chosen": self.chosen, "runner_up": self.runner_up, "margin": self.margin,
                "margin_sd": self.margin_sd, "where": self.where, "seeds": self.seeds, "missing": self.missing,
                "mean_area": {f"{v:g}": m for v, m in self.means.items()},
                "mean_update_size": {f"{v:g}": m for v, m in self.update_sizes.items()}}


def choose(areas: dict[float, dict[int, float]], grid: list[float], seeds: list[int], method: str = "",
           update_sizes: dict[float, dict[int, float | None]] | None = None) -> Choice | None:
    """The rule on one method's areas `{value: {seed: area}}`: among the values of `grid` finished at every one of
    `seeds` (the others are `missing`); None when none is.

    >>> c = choose({1e-4: {1: 0.5, 2: 0.6}, 2e-4: {1: 0.4, 2: 0.45}, 5e-5: {1: 0.3}}, [5e-5, 1e-4, 2e-4], [1, 2])
    >>> c.chosen, c.runner_up, round(c.margin, 3), round(c.margin_sd, 2), c.where, c.missing
    (0.0001, 0.0002, 0.125, 3.54, 'bracketed', [5e-05])
    """
    finished = {v: areas[v] for v in grid if v in areas and all(s in areas[v] for s in seeds)}
    if not finished:
        return None
    means = {v: statistics.fmean(by_seed[s] for s in seeds) for v, by_seed in finished.items()}
    ranked = sorted(means, key=means.__getitem__, reverse=True)
    chosen, runner_up = ranked[0], (ranked[1] if len(ranked) > 1 else None)
    margin = margin_sd = None
    if runner_up is not None:
        margin = means[chosen] - means[runner_up]
        spread = statistics.stdev([finished[chosen][s] - finished[runner_up][s] for s in seeds]) if len(seeds) > 1 else 0
        margin_sd = margin / spread if spread > 1e-12 else None  # below: equal differences but for rounding
    where = "extend lower" if chosen == grid[0] else "extend higher" if chosen == grid[-1] else "bracketed"
    sizes = {v: statistics.fmean(by_seed[s] for s in seeds) for v, by_seed in (update_sizes or {}).items()
             if v in finished and all(by_seed.get(s) is not None for s in seeds)}
    return Choice(method, means, list(seeds), chosen, runner_up, margin, margin_sd, where,
                  [v for v in grid if v not in finished], sizes)


def choices(values: RegimeValues, study: dict) -> list[Choice]:
    """The rule for every tuned method of a regime of a resolved tuning study (its `tune`, with its methods), on the
    headline metric's area at equal rollout tokens, over each method's values (the grid and its extensions)."""
    tune, out = study["tune"], []
    for method in tune["methods"]:
        grid = method_values(tune, method)
        labels = {value: tune_label(method, tune["key"], value) for value in grid}
        areas = {value: {seed: v.area[values.metric] for seed, v in values.cells.get(label, {}).items()}
                 for value, label in labels.items()}
        sizes = {value: {seed: v.update_norm for seed, v in values.cells.get(label, {}).items()}
                 for value, label in labels.items()}
        seeds = seeds_of(study, labels[grid[0]])
        choice = choose(areas, grid, seeds, method, sizes)
        if choice is not None:
            out.append(choice)
    return out


def tuned_method(study: dict, label: str | None) -> str | None:
    """The tuned method one of a tuning study's cell labels belongs to (its `report.baseline`, `report.oracle`)."""
    tune = study["tune"]
    return next((m for m in tune["methods"] for v in method_values(tune, m) if tune_label(m, tune["key"], v) == label),
                None)


def tuned_cells(choices: list[Choice], study: dict) -> dict:
    """The cells a study runs after this tuning, as its file writes them: `methods` (each tuned method as
    `<method>@tuned` at its chosen value, with its tuning cell's config and settings; then each step-size control, the
    baseline at another value of its grid, under its tuning label) and `report` (the baseline, the oracle and the
    controls). Copied into a study file, no rate is typed by hand."""
    key, chosen = study["tune"]["key"], {c.method: c.chosen for c in choices}

    def cell(method: str, value: float) -> dict:
        entry = study["methods"][tune_label(method, key, value)]
        return {"config": entry["config"], **({"set": entry["set"]} if entry.get("set") else {})}

    methods = {f"{m}@tuned": cell(m, v) for m, v in chosen.items()}
    report = study.get("report", {})
    baseline, oracle = tuned_method(study, report.get("baseline")), tuned_method(study, report.get("oracle"))
    controls = {}
    if baseline in chosen:
        for method, value in step_size_controls(choices, baseline).items():
            if value is not None and value != chosen[baseline]:
                label = tune_label(baseline, key, value)
                methods.setdefault(label, cell(baseline, value))
                controls[f"{method}@tuned"] = label
    return {"methods": methods,
            "report": {**({"baseline": f"{baseline}@tuned"} if baseline in chosen else {}),
                       **({"oracle": f"{oracle}@tuned"} if oracle in chosen else {}),
                       **({"step_size_controls": controls} if controls else {})}}


def step_size_controls(choices: list[Choice], baseline: str) -> dict[str, float | None]:
    """Per method other than `baseline`, the baseline's value whose mean update size is nearest (by ratio) the
    method's at its chosen value: the baseline moved as far per batch, the method's step-size control (None where
    either lacks update sizes). Where it is the baseline's own chosen value, the baseline is its control.

    >>> grpo = Choice("grpo", {1: .2, 2: .3, 4: .1}, [1], 2, 1, .1, None, "bracketed", [], {1: .01, 2: .02, 4: .04})
    >>> oracle = Choice("oracle", {1: .5, 2: .6}, [1], 2, 1, .1, None, "bracketed", [], {1: .02, 2: .035})
    >>> step_size_controls([grpo, oracle], "grpo")
    {'oracle': 4}
    """
    by_method = {c.method: c for c in choices}
    base = by_method.get(baseline)
    out: dict[str, float | None] = {}
    for choice in choices:
        if choice.method == baseline:
            continue
        size = choice.update_sizes.get(choice.chosen)
        if base is None or not base.update_sizes or size is None or size <= 0:
            out[choice.method] = None
            continue
        out[choice.method] = min((v for v, s in base.update_sizes.items() if s > 0),
                                 key=lambda v: abs(math.log(base.update_sizes[v] / size)))
    return out
