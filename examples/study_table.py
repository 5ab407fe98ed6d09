"""The powered study's table (docs/results/powered-study.md) of one study report: a row per method with every
number the study compares.

    python examples/study_table.py docs/results/credit-decisive runs/studies/credit-decisive

reads the report folder's `report.json` and `study.yaml` (written by `credo report`; `credo.study.results.
results_from_json`, so Holm's correction applies as in the report) and prints, per difficulty, a Markdown table:
seeds, final greedy pass@1 and area (mean ± 95% half-width), the paired difference of the area to the baseline's at
equal rollout tokens with its raw 95% interval and its Holm verdict and adjusted p (`credo.study.tables.verdict_cell`),
the same to the like-for-like baseline, the paired difference at equal optimiser updates (at equal rollout batches
in a report written before updates were counted), the share of the oracle's
gain (Fieller's interval), the paired differences of the final sampled pass@1 and pass@16, blame precision. With the
study's runs folder as a second argument a last column gives the mean number of optimiser steps a run took (from
each run's `summary.json`; the report does not keep it). `examples/study_verdicts.py` gives the verdicts of several
reports side by side.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import yaml

from credo.study.analysis import AXES, Contrast, DifficultyResult, MethodRow
from credo.study.grid import ReportConfig
from credo.study.results import results_from_json
from credo.study.stats import Estimate
from credo.study.tables import bracketed, share_text, verdict_cell


def interval(diff: Estimate | None) -> str:
    """The report's cell for a paired difference (`credo.study.tables.bracketed`: `+0.026 [+0.018, +0.034]`), `–`
    where none was measured and `(one seed)` where no interval exists."""
    if diff is None:
        return "–"
    if diff.low is None:
        return f"{diff.mean:+.3f} (one seed)"
    return bracketed(diff)


def verdict(contrast: Contrast | None) -> str:
    """The Holm verdict with its adjusted p (`credo.study.tables.verdict_cell`), `–` where there is no contrast."""
    return "–" if contrast is None else verdict_cell(contrast)


def share_cell(r: MethodRow, result: DifficultyResult) -> str:
    """The share of the oracle's gain with Fieller's interval, as the report writes it (`credo.study.tables.share_text`)."""
    return "–" if r.share is None else share_text(r, result)


def mean_steps(runs: Path, difficulty: str, method: str) -> str:
    steps = [json.loads(f.read_text())["steps"] for f in (runs / difficulty / method).glob("seed*/summary.json")]
    return f"{statistics.mean(steps):.0f}" if steps else "–"


def row(r: MethodRow, result: DifficultyResult, axis: str, steps: str | None) -> str:
    like = "–" if r.auc_vs_like is None else f"{interval(r.auc_vs_like.estimate)} vs `{r.like_for_like}`"
    precision = "–" if r.blame_precision is None else f"{r.blame_precision.mean:.2f}"
    cells = [f"`{r.method}`", str(r.seeds), str(r.final[result.metric]), str(r.auc),
             interval(r.auc_vs_baseline and r.auc_vs_baseline.estimate), verdict(r.auc_vs_baseline), like,
             verdict(r.auc_vs_like), interval(r.areas_vs_baseline.get(result.metric, {}).get(axis)),
             share_cell(r, result), interval(r.final_vs_baseline.get("pass@1")),
             interval(r.final_vs_baseline.get("pass@16")), precision] + ([] if steps is None else [steps])
    return "| " + " | ".join(cells) + " |"


def tables(folder: Path, runs: Path | None = None) -> str:
    study = yaml.safe_load((folder / "study.yaml").read_text())
    baseline = ReportConfig(**study.get("report", {})).baseline
    out = []
    for difficulty, report in results_from_json(folder, study).items():
        if report is None:
            continue
        result = report.result
        written = any("steps" in r.areas_vs_baseline.get(result.metric, {}) for r in result.rows)
        axis = "steps" if written else "updates"
        header = ["method", "seeds", "final greedy", "area", f"Δ area vs {baseline} (raw 95%)", "verdict (Holm p)",
                  "Δ vs like-for-like", "verdict (Holm p)", f"Δ at {AXES[axis]}", "share of oracle gain",
                  "Δ final pass@1", "Δ final pass@16", "blame precision"] + ([] if runs is None else ["steps"])
        lines = [f"### {study['name']} · {difficulty}", "", "| " + " | ".join(header) + " |",
                 "|" + "---|" * len(header)]
        for r in result.rows:
            lines.append(row(r, result, axis, None if runs is None else mean_steps(runs, difficulty, r.method)))
        out.append("\n".join(lines))
    return "\n\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python examples/study_table.py REPORT_DIR [RUNS_DIR]")
    print(tables(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) == 3 else None))
