"""How many seeds does a comparison need? The seed-to-seed spread of paired area differences in a finished study.

For each pair `method:baseline` of a study's runs (`credo compare`), the area under each run's held-out curve
against rollout tokens up to an equal budget (`credo.study.curves.area`, as the report computes it), the paired
differences over the seeds both ran, their standard deviation `sd`, and the half-width of their 95% interval,
`t_{n-1} * sd / sqrt(n)`, now and at more seeds; `seeds_for` is the fewest seeds whose half-width reaches 0.03,
0.02 and 0.01 at that `sd`. The evaluation's own share of the spread is bounded by `eval_sd`: the standard
deviation a run's area would have from a finite held-out set alone, sum_i w_i sqrt(p_i (1 - p_i) / problems)
(w_i the trapezoid weights of the curve's points, p_i its scores; the bound of fully correlated points).

    python examples/study_power.py runs/studies/plan-crn-pilot oracle_blame:grpo oracle_blame_crn:grpo_crn
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from credo.study.curves import Curve, area
from credo.study.runs import Run, load_runs
from credo.study.stats import half_width, sample_sd

TARGETS = (0.03, 0.02, 0.01)


def seeds_for(sd: float, target: float) -> int:
    """The fewest seeds (at least 2) whose 95% half-width `t_{n-1} sd / sqrt(n)` is at most `target`."""
    n = 2
    while half_width(sd, n) > target:
        n += 1
    return n


def eval_sd(curve: Curve, budget: float, problems: int) -> float:
    """Bound on the SD of a run's area from the finite held-out set alone (see the module docstring)."""
    xs = [x for x in curve.x if x < budget] + [budget]
    weights = [0.0] * len(xs)
    for i, (x0, x1) in enumerate(zip(xs, xs[1:])):
        weights[i] += (x1 - x0) / 2
        weights[i + 1] += (x1 - x0) / 2
    span = budget - xs[0]
    return sum(w / span * math.sqrt(max(0.0, curve.at(x) * (1 - curve.at(x))) / problems) for w, x in zip(weights, xs))


def pair_spread(runs: dict[str, list[Run]], method: str, baseline: str, *, metric: str = "greedy_pass@1",
                budget: float | None = None, problems: int | None = None) -> dict:
    """The paired-difference statistics of `method` against `baseline` (see the module docstring), from one
    difficulty's finished runs by method (`credo.study.runs.load_runs`)."""
    by_seed = {name: {r.seed: r for r in runs[name]} for name in (method, baseline)}
    seeds = sorted(set(by_seed[method]) & set(by_seed[baseline]))
    if len(seeds) < 2:
        raise ValueError(f"{method} and {baseline} share {len(seeds)} finished seed(s); a spread needs 2")
    curves = {name: {s: by_seed[name][s].curve(metric, "rollout_tokens") for s in seeds} for name in by_seed}
    budget = budget or min(c.x[-1] for cs in curves.values() for c in cs.values())
    diffs = [area(curves[method][s], budget) - area(curves[baseline][s], budget) for s in seeds]
    n = len(diffs)
    mean = sum(diffs) / n
    sd = sample_sd(diffs)
    out = {"pair": f"{method} - {baseline}", "seeds": n, "budget": budget, "mean": mean, "sd": sd,
           "half_width": half_width(sd, n), **{f"seeds_for_{t}": seeds_for(sd, t) for t in TARGETS}}
    if problems:
        out["eval_sd"] = sum(eval_sd(c, budget, problems) for cs in curves.values() for c in cs.values()) / (2 * n)
    return out


def main(argv: list[str]) -> None:
    study, pairs = Path(argv[0]), [p.split(":") for p in argv[1:]]
    _, by_difficulty = load_runs(study)
    if len(by_difficulty) != 1:
        raise SystemExit(f"{study} has the difficulties {', '.join(by_difficulty)}; this script reads one")
    runs = next(iter(by_difficulty.values()))
    first = next(r for rs in runs.values() for r in rs)  # held-out problems per evaluation: its buckets' sizes
    problems = sum(bucket["problems"] for bucket in first.evals[0]["eval"]["by_difficulty"].values())
    print("| pair | seeds | budget | mean diff | sd | half-width | eval sd (bound, one run) | seeds for 0.03 / 0.02 / 0.01 |")
    print("|---|---|---|---|---|---|---|---|")
    for method, baseline in pairs:
        row = pair_spread(runs, method, baseline, problems=problems)
        print(f"| {row['pair']} | {row['seeds']} | {row['budget']:,.0f} | {row['mean']:+.3f} | {row['sd']:.3f} | "
              f"{row['half_width']:.3f} | {row['eval_sd']:.3f} | {row['seeds_for_0.03']} / {row['seeds_for_0.02']} / "
              f"{row['seeds_for_0.01']} |")


if __name__ == "__main__":
    main(sys.argv[1:])
