"""Apply the study's tuning rule to a tuning study's report: each method's learning rate, and whether it is bracketed.

A tuning study's cells are `<method>@lr=<rate>` (`configs/studies/plan/long_tuning.yaml`,
`configs/studies/plan/decisive_retune.yaml`). The rule (docs/results/long-study/plan.md, "Tuning"): each method takes
the rate with the best mean area of `--metric` at equal rollout tokens over the tuning seeds; rates within `--tie`
of the best are broken by `--tie-metric`'s area; a best rate at the edge of the rates tried is not bracketed, and
the grid is extended one step that way before the choice stands. Reads `report.json` (written by `credo report`), so
it needs no runs. Prints a markdown table.

    python docs/results/long-study/choose_rates.py runs/studies/plan-long-tuning
    python docs/results/long-study/choose_rates.py runs/studies/plan-decisive-retune --metric greedy_pass@1 \\
        --tie-metric pass@1
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path


def areas(report: dict, metric: str) -> dict[str, dict[float, float]]:
    """Per method, per learning rate, the mean over seeds of `metric`'s area at equal rollout tokens (a metric the
    runs did not measure along the curve, such as sampled pass@1 with `eval.samples: 0`, is NaN there: left out)."""
    out: dict[str, dict[float, float]] = defaultdict(dict)
    for label, seeds in report["per_seed"].items():
        method, sep, rate = label.partition("@lr=")
        values = [s["area_tokens"][metric] for s in seeds.values()
                  if math.isfinite(s.get("area_tokens", {}).get(metric, math.nan))]
        if sep and values:
            out[method][float(rate)] = statistics.fmean(values)
    return out


def choose(main: dict[float, float], tie: dict[float, float], within: float) -> tuple[float, str]:
    """The chosen rate and where it sits: "bracketed", or "extend lower" / "extend higher" at an edge.

    >>> choose({5e-5: 0.40, 1e-4: 0.45, 2e-4: 0.30}, {}, 0.005)
    (0.0001, 'bracketed')
    >>> choose({5e-5: 0.448, 1e-4: 0.45, 2e-4: 0.30}, {5e-5: 0.7, 1e-4: 0.6}, 0.005)
    (5e-05, 'extend lower')
    """
    best = max(main.values())
    close = [rate for rate, value in main.items() if value >= best - within]
    rate = max(close, key=lambda r: (tie.get(r, float("-inf")), main[r]))
    rates = sorted(main)
    where = "extend lower" if rate == rates[0] else "extend higher" if rate == rates[-1] else "bracketed"
    return rate, where


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path, help="a tuning study's directory (or a folder holding its report.json)")
    parser.add_argument("--difficulty", help="the regime (default: the report's first)")
    parser.add_argument("--metric", default="pass@1")
    parser.add_argument("--tie-metric", default="greedy_pass@1")
    parser.add_argument("--tie", type=float, default=0.005)
    args = parser.parse_args()
    reports = json.loads((args.study / "report.json").read_text())
    report = reports[args.difficulty or next(iter(reports))]
    main_areas, tie_areas = areas(report, args.metric), areas(report, args.tie_metric)

    def tie(method: str, rate: float) -> str:
        value = tie_areas.get(method, {}).get(rate)
        return "–" if value is None else f"{value:.3f}"

    print(f"| method | {args.metric} area by learning rate ({args.tie_metric} area) | chosen | grid |")
    print("|---|---|---|---|")
    for method in main_areas:
        rate, where = choose(main_areas[method], tie_areas.get(method, {}), args.tie)
        tried = ", ".join(f"{r:.2e}: {v:.3f} ({tie(method, r)})" for r, v in sorted(main_areas[method].items()))
        print(f"| `{method}` | {tried} | {rate:.2e} | {where} |")


if __name__ == "__main__":
    main()
