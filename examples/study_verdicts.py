"""One table of verdicts across study reports: each method against the baseline, per study and difficulty.

    python examples/study_verdicts.py [--common] docs/results/credit-decisive docs/results/credit-nocancel \
        docs/results/credit-hard

reads each report folder's `report.json` and `study.yaml` (written by `credo report`; the runs are not needed) and
prints a Markdown table with a row per method and a column per study and difficulty: the paired difference of the
area to the baseline's, its 95% half-width and the report's verdict (`credo.study.report.verdict`: beats, falls
behind, not distinguishable). Rows `method vs like` follow for the like-for-like pairs the studies name
(`report.like_for_like`). The last row gives each column's *achieved minimum detectable effect*: the median
half-width of the paired differences to the baseline among the methods run on every seed of the baseline. With
`--common` the table keeps only the rows every column has a number for (the methods and pairs all studies ran); the
achieved MDE still counts every method of each column.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import yaml

from credo.study.curves import Estimate
from credo.study.grid import ReportConfig
from credo.study.report import MethodRow, results_from_json, verdict


def columns(folders: list[Path]) -> dict[str, tuple[str, list[MethodRow]]]:
    """`{"study · difficulty": (baseline, rows)}` for every difficulty of every report folder that has results."""
    out = {}
    for folder in folders:
        study = yaml.safe_load((folder / "study.yaml").read_text())
        baseline = ReportConfig(**study.get("report", {})).baseline
        for difficulty, report in results_from_json(folder, study).items():
            if report is not None:
                out[f"{study['name']} · {difficulty}"] = (baseline, report.result.rows)
    return out


def cell(diff: Estimate | None) -> str:
    if diff is None:
        return "–"
    if diff.low is None:
        return f"{diff.mean:+.3f} (one seed)"
    return f"{diff.mean:+.3f} ± {diff.half_width:.3f} {verdict(diff)}"


def achieved_mde(baseline: str, rows: list[MethodRow]) -> float | None:
    """The median 95% half-width of the paired differences to the baseline over the methods with its seed count."""
    seeds = next(r.seeds for r in rows if r.method == baseline)
    widths = [r.auc_vs_baseline.half_width for r in rows
              if r.auc_vs_baseline is not None and r.auc_vs_baseline.low is not None and r.seeds == seeds]
    return statistics.median(widths) if widths else None


def table(folders: list[Path], common: bool = False) -> str:
    found = columns(folders)
    names = list(found)
    methods = list(dict.fromkeys(r.method for _, rows in found.values() for r in rows))
    by_column = {name: {r.method: r for r in rows} for name, (_, rows) in found.items()}
    lines = ["| method | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for method in methods:
        if all(by_column[n].get(method) is None or by_column[n][method].auc_vs_baseline is None for n in names):
            continue
        cells = [cell(by_column[n][method].auc_vs_baseline if method in by_column[n] else None) for n in names]
        if common and "–" in cells:
            continue
        lines.append(f"| `{method}` | " + " | ".join(cells) + " |")
    pairs = dict.fromkeys((r.method, r.like_for_like) for _, rows in found.values() for r in rows if r.like_for_like)
    for method, like in pairs:
        cells = [cell(by_column[n][method].auc_vs_like if method in by_column[n] and
                      by_column[n][method].like_for_like == like else None) for n in names]
        if common and "–" in cells:
            continue
        lines.append(f"| `{method}` vs `{like}` | " + " | ".join(cells) + " |")
    mde = [achieved_mde(*found[n]) for n in names]
    lines.append("| achieved MDE (median half-width) | " + " | ".join("–" if m is None else f"{m:.3f}" for m in mde) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    arguments = sys.argv[1:]
    common = "--common" in arguments
    folders = [Path(a) for a in arguments if a != "--common"]
    if not folders:
        sys.exit("usage: python examples/study_verdicts.py [--common] REPORT_DIR [REPORT_DIR...]")
    print(table(folders, common))
