"""What a study's report shows of each difficulty (a regime), from the finished runs or from a saved report.

`results_from_runs` reads the runs (`credo.study.runs`) and computes each regime's per-seed values
(`credo.study.seeds`), statistics (`credo.study.analysis`), mean curves (`credo.study.figures.mean_curves`) and
heatmap records (`credo.study.heatmap.collect_samples`); `results_from_json` reads them back from a report folder's
`report.json` (recomputing the statistics from its per-seed values, or recovering them from its rows where an older
report kept none), which `report_json` writes. `credo.study.report` turns them into the report.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from credo.config import read_yaml_mapping
from credo.io import check_regular_file, iter_jsonl, path_inside
from credo.study.analysis import DifficultyResult, analyse, recovered_result
from credo.study.figures import mean_curves
from credo.study.grid import STUDY_FILE, ReportConfig
from credo.study.heatmap import collect_samples
from credo.study.runs import NoFinishedRuns, load_runs, seeds_of
from credo.study.seeds import RegimeValues, regime_values
from credo.study.tuning import Choice, choices


@dataclass(frozen=True)
class DifficultyReport:
    """What the report shows of one difficulty, from the runs or from a saved `report.json`."""

    result: DifficultyResult
    values: RegimeValues | None
    """The per-seed values; None when read from a `report.json` written before the report kept them."""
    curves: dict[str, dict[str, dict]] | None
    """`{metric: mean_curves(...)}`; None when read from a `report.json` made before it kept the curves."""
    unfinished: list[str] = field(default_factory=list)
    samples: list[dict] | None = None
    """The heatmap's records (`credo.study.heatmap.collect_samples`); None: none at hand (a page there stays)."""
    tuning: list[Choice] = field(default_factory=list)
    """A tuning study's choices (`credo.study.tuning.choices`); empty in any other study."""

    def metrics(self) -> list[str]:
        """The metrics with a figure: the compared metrics with curves."""
        if self.curves is not None:
            return list(self.curves)
        return self.result.metrics

    def as_json(self) -> dict:
        out = {"metric": self.result.metric, "auc_tokens": self.result.budget, "baseline_final": self.result.target,
               "family": {"contrasts": self.result.family.size, "seeds": self.result.family.seeds,
                          "median_sd": self.result.family.sd, "mde": self.result.family.mde},
               "methods": [r.as_json() for r in self.result.rows]}
        if self.unfinished:
            out["unfinished"] = self.unfinished
        if self.curves is not None:
            out["curves"] = self.curves
        if self.tuning:
            out["tuning"] = [c.as_json() for c in self.tuning]
        if self.values is not None:
            out.update(self.values.as_json())
        return out


def results_from_runs(directory: Path, report: ReportConfig) -> dict[str, DifficultyReport | None]:
    """Every difficulty's report from the finished runs (None: a difficulty without any); NoFinishedRuns if
    the whole directory has none."""
    study, runs = load_runs(directory)
    if not any(rs for by_method in runs.values() for rs in by_method.values()):
        cells = len(study["difficulties"]) * sum(len(seeds_of(study, m)) for m in study["methods"])
        raise NoFinishedRuns(f"{directory}: no finished run yet (none of its {cells} run folders holds a summary.json); "
                             "nothing to report, so an existing report there is left as it was")
    out: dict[str, DifficultyReport | None] = {}
    for difficulty, by_method in runs.items():
        if not any(by_method.values()):
            out[difficulty] = None
            continue
        values = regime_values(by_method, report, difficulty)
        result = analyse(values, report, difficulty)
        out[difficulty] = DifficultyReport(
            result, values, {metric: mean_curves(by_method, metric) for metric in values.curve_metrics},
            [f"{m} ({len(rs)}/{len(seeds_of(study, m))})" for m, rs in by_method.items()
             if len(rs) < len(seeds_of(study, m))],
            collect_samples(by_method, report.heatmap_step), tuned(values, study))
    return out


def tuned(values: RegimeValues | None, study: dict) -> list[Choice]:
    """A tuning study's choices in one regime (none without per-seed values or outside a tuning study)."""
    return choices(values, study) if values is not None and study.get("tune") else []


def results_from_json(directory: Path, study: dict) -> dict[str, DifficultyReport | None]:
    """Every difficulty's report as a report folder's `report.json` (and `credit_<difficulty>.jsonl`) saved it: from
    its per-seed values, or recovered from its rows where it has none."""
    path = directory / "report.json"
    if not path.exists():
        raise FileNotFoundError(f"{directory}: no report.json to draw the report from (--from-json re-draws a written report)")
    try:
        data = json.loads(check_regular_file(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not the JSON `credo report` writes ({error})") from None
    if not isinstance(data, dict) or not all(isinstance(saved, dict) for saved in data.values()):
        raise ValueError(f"{path}: not the JSON `credo report` writes (a mapping of difficulties to their results)")
    if not data:
        raise NoFinishedRuns(f"{path} holds no results; nothing to draw, so the report there is left as it was")
    report = ReportConfig(**study.get("report", {}))
    out: dict[str, DifficultyReport | None] = {}
    for difficulty in study["difficulties"]:
        saved = data.get(difficulty)
        if saved is None:
            out[difficulty] = None
            continue
        values = RegimeValues.from_json(saved) if "per_seed" in saved else None
        result = recovered_result(saved, report, difficulty) if values is None else analyse(values, report, difficulty)
        records = path_inside(directory, f"credit_{difficulty}.jsonl")
        out[difficulty] = DifficultyReport(result, values, saved.get("curves"), saved.get("unfinished", []),
                                           list(iter_jsonl(records)) if records.exists() else None,
                                           tuned(values, study))
    return out


def written_areas(folder: Path, difficulty: str) -> tuple[dict, DifficultyReport, dict[str, dict[int, float]]] | None:
    """A written report's study file, its `difficulty`'s report and each cell's per-seed headline area at equal
    rollout tokens (`{cell: {seed: area}}`), as the results scripts read them; None where `folder` holds no
    `report.json` yet, SystemExit where it holds no per-seed values of `difficulty`."""
    if not (folder / "report.json").exists():
        return None
    study = read_yaml_mapping(check_regular_file(folder / STUDY_FILE), "a resolved study")
    report = results_from_json(folder, study)[difficulty]
    if report is None or report.values is None:
        raise SystemExit(f"{folder}/report.json: no per-seed values of {difficulty} (report it from the run records)")
    metric = report.result.metric
    areas = {cell: {seed: v.area[metric] for seed, v in by_seed.items()}
             for cell, by_seed in report.values.cells.items()}
    return study, report, areas


def report_json(results: dict[str, DifficultyReport | None]) -> str:
    """`report.json`'s text: indented, each list of numbers (a curve) on one line."""
    text = json.dumps({d: r.as_json() for d, r in results.items() if r is not None}, indent=2)
    return re.sub(r"\[\s*([^\[\]{}\"]*?)\s*\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text) + "\n"
