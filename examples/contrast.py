"""The paired difference between any two cells of a written study report, from its folder alone.

    python examples/contrast.py docs/results/credit-decisive grpo_lambda 'grpo@min_adv=-0.1,clip=0.1'
    python examples/contrast.py REPORT_DIR A B --metric pass@1 --difficulty hard

A cell is a method in one difficulty of the study (the first difficulty unless `--difficulty` names one). From
`report.json`'s per-seed values (`credo.study.seeds.RegimeValues`) it prints `A - B` on the metric (default: the
report's headline) over the seeds both ran, as the report computes its contrasts (`credo.study.analysis.
differences`): the area at equal rollout tokens, the area at equal optimiser updates and the final, each with its raw 95% t-interval, the two-sided paired t-test's p and the seeds.
A metric evaluated only at the end has a final and no areas. The p is that of one contrast: it is not corrected for
the other comparisons one makes (a family of them wants Holm's correction, `credo.study.stats.holm`, as the report
applies within a regime).

A script rather than a `credo report --contrast A:B` option: `credo report` writes a report folder, and a contrast
is a question asked of a written folder, answered on stdout without rewriting it; the report's document has no place
for ad-hoc pairs, and the script reads nothing but what the folder holds.

A `report.json` written before the report kept per-seed values answers only the contrasts it wrote: a method against
the baseline (areas and finals) or against its like-for-like baseline (the headline area at equal tokens), with the p
recovered from the written interval (`credo.study.analysis.written_contrast`); any other pair needs per-seed values
(runs not committed).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from credo.study.analysis import AXES, Contrast, MethodRow, differences, written_contrast
from credo.study.grid import ReportConfig
from credo.study.seeds import RegimeValues
from credo.study.tables import bracketed, p_text

MEASURES = {**{axis: f"area at {name}" for axis, name in AXES.items()}, "final": "final"}


def written_contrasts(saved: dict, report: ReportConfig, a: str, b: str, metric: str) -> dict[str, Contrast]:
    """The contrasts of `a` against `b` a report without per-seed values wrote (see the module docstring)."""
    row = next((MethodRow.written(m, saved["metric"]) for m in saved["methods"] if m["method"] == a), None)
    if row is not None and b == report.baseline:
        found = {**row.areas_vs_baseline.get(metric, {}), "final": row.final_vs_baseline.get(metric)}
        return {k: written_contrast(e) for k, e in found.items() if e is not None}
    if row is not None and b == row.like_for_like and metric == saved["metric"]:
        return {"tokens": row.auc_vs_like}
    raise SystemExit(f"{a} - {b}: this report.json holds no per-seed values (written before the report kept them); "
                     f"it has only each method against {report.baseline} and its like-for-like baseline. Any other "
                     "pair needs per-seed values (runs not committed).")


def contrast_table(folder: Path, a: str, b: str, metric: str | None = None, difficulty: str | None = None) -> str:
    """`A - B` on `metric` as a Markdown table (see the module docstring)."""
    study = yaml.safe_load((folder / "study.yaml").read_text())
    report = ReportConfig(**study.get("report", {}))
    data = json.loads((folder / "report.json").read_text())
    difficulty = difficulty or next(iter(data))
    if difficulty not in data:
        raise SystemExit(f"{folder}: no difficulty {difficulty!r}; it has {', '.join(data)}")
    saved = data[difficulty]
    metric = metric or saved["metric"]
    if "per_seed" in saved:
        cells = RegimeValues.from_json(saved).cells
        for name in (a, b):
            if name not in cells:
                raise SystemExit(f"{folder} · {difficulty}: no cell {name!r}; it has {', '.join(cells)}")
        found = differences(cells[a], cells[b], metric)
        if not found:
            raise SystemExit(f"{a} and {b} share no seed with {metric!r} measured")
        recovered = ""
    else:
        found = written_contrasts(saved, report, a, b, metric)
        recovered = " (p recovered from the written interval; areas at equal steps over rollout batches)"
    lines = [f"{study['name']} · {difficulty}: `{a}` - `{b}`, {metric}; one contrast, its p not corrected for others"
             + recovered, "", "| measure | difference (raw 95% interval) | paired t p | seeds |", "|---|---|---|---|"]
    for key, label in MEASURES.items():
        c = found.get(key)
        if c is None and key == "steps":  # only a report written before updates were counted has it
            continue
        if c is None:
            lines.append(f"| {label} | not measured | – | – |")
        else:
            lines.append(f"| {label} | {bracketed(c.estimate)} | {'–' if c.p is None else p_text(c.p)} | "
                         f"{c.estimate.n} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="a report folder (credo report's output: report.json, study.yaml)")
    parser.add_argument("a", help="the first cell's method")
    parser.add_argument("b", help="the second cell's method (the difference is a - b)")
    parser.add_argument("--metric", default=None, help="an eval metric (default: the report's headline)")
    parser.add_argument("--difficulty", default=None, help="the difficulty of both cells (default: the first)")
    args = parser.parse_args(argv)
    print(contrast_table(args.report, args.a, args.b, args.metric, args.difficulty))


if __name__ == "__main__":
    main()
