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
  one step that way for that method (`Tune.extend`, on the same seeds) before the choice stands. With
  `tune.auto_extend`, `credo compare` runs those extensions itself (`extensions`, `run_tuning`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from credo.study.grid import ReportConfig, Study, load_study, method_values, run_study, tune_label
from credo.study.runs import load_runs, seeds_of
from credo.study.seeds import RegimeValues, regime_values


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


def extensions(choices: list[Choice], tune: dict, limit: int) -> dict[str, list[float]]:
    """The rule's next step past the grid's edge: per method whose choice (every value finished at every seed) sits at
    the edge of its values, with fewer than `limit` values already beyond the common grid that way, the value one step
    of the common grid's ratio at that edge past the choice.

    >>> grid = [2.5e-5, 5e-5, 1e-4]
    >>> low = choose({2.5e-5: {1: .3}, 5e-5: {1: .2}, 1e-4: {1: .1}}, grid, [1], "grpo")
    >>> high = choose({2.5e-5: {1: .1}, 5e-5: {1: .2}, 1e-4: {1: .3}}, grid, [1], "oracle")
    >>> extensions([low, high], {"values": grid, "extend": {}}, limit=1)
    {'grpo': [1.25e-05], 'oracle': [0.0002]}
    >>> extensions([low], {"values": grid, "extend": {"grpo": [1.25e-5]}}, limit=1)  # the limit reached
    {}
    >>> unfinished = choose({2.5e-5: {1: .3}, 5e-5: {1: .2}}, grid, [1], "grpo")  # 1e-4 still running
    >>> extensions([unfinished], {"values": grid, "extend": {}}, limit=1)
    {}
    """
    values, written = tune["values"], tune.get("extend") or {}
    out: dict[str, list[float]] = {}
    for choice in choices:
        if choice.missing or choice.where == "bracketed":
            continue
        lower = choice.where == "extend lower"
        beyond = [v for v in written.get(choice.method, []) if (v < values[0] if lower else v > values[-1])]
        if len(beyond) >= limit:
            continue
        ratio = values[0] / values[1] if lower else values[-1] / values[-2]
        value = float(f"{choice.chosen * ratio:.12g}")  # 1.25e-05, not 1.2500000000000001e-05
        if value not in out.setdefault(choice.method, []):
            out[choice.method].append(value)
    return out


def grid_extensions(directory: Path, limit: int) -> dict[str, list[float]]:
    """`extensions` of the tuning study in `directory`, from its finished runs, in every difficulty."""
    study, runs = load_runs(directory)
    report = ReportConfig(**study.get("report", {}))
    out: dict[str, list[float]] = {}
    for difficulty, by_method in runs.items():
        if not by_method.get(report.baseline):
            continue
        found = extensions(choices(regime_values(by_method, report, difficulty), study), study["tune"], limit)
        for method, values in found.items():
            out.setdefault(method, []).extend(v for v in values if v not in out[method])
    return out


def run_tuning(path: Path, output: Path | None = None, *, jobs: int = 1, log: Callable[[str], None] = print,
               command: str = "") -> Study:
    """Run a tuning study file's grid and, as far as its `tune.auto_extend` allows, each method's extensions past an
    edge where its best sits (`grid_extensions`), until every choice is bracketed or has reached the limit; returns
    the study as last run (its directory's `study.yaml` records the extensions in `tune.extend`).

    The extensions are decided from finished runs only, so a study stopped and run again decides them again, the same
    way, and runs only what is left."""
    added: dict[str, list[float]] = {}
    while True:
        study = load_study(path, output, extend=added)
        run_study(study, jobs=jobs, log=log, command=command)
        tune = study.config.tune
        new = grid_extensions(study.output, tune.auto_extend) if tune is not None and tune.auto_extend else {}
        if not new:
            return study
        for method, values in new.items():
            log(f"{method}: its best sits at its grid's edge; tune.auto_extend runs "
                f"{', '.join(f'{v:g}' for v in values)} next")
            added.setdefault(method, []).extend(values)
