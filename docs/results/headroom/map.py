"""The headroom map's table and figure (plan.md, part A), rebuilt from the map's report and run records.

Reads `docs/results/headroom/map/report.json` (`credo report docs/results/headroom/records/headroom-map -o
docs/results/headroom/map`: per-seed areas of every cell), the run records (each run's mean update size
`optim/update_norm` and its wall time) and each regime's facts (`facts/<regime>.json`, `credo testbed facts`), and
writes `map.md` (one row per regime) and `headroom.png` (each oracle's paired gain over GRPO per regime, with its
95% t interval over the seeds).

    python docs/results/headroom/map.py
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECORDS = HERE / "records" / "headroom-map"
REPORT = HERE / "map" / "report.json"
ORACLES = ("oracle_steps", "oracle_blame")
BASELINE = "grpo"


def t_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95% t interval of paired differences (nan bounds below 2 values)."""
    from credo.study.stats import mean_interval

    if len(values) < 2:
        mean = values[0] if values else float("nan")
        return mean, float("nan"), float("nan")
    estimate = mean_interval(values)
    return estimate.mean, estimate.low, estimate.high


def run_means(regime: str, method: str) -> dict[str, float]:
    """Mean over the cell's finished runs of each run's mean update size and of its wall time."""
    updates, walls = [], []
    for run in sorted((RECORDS / regime / method).glob("seed*")):
        if not (run / "summary.json").exists():
            continue
        norms = [json.loads(line).get("optim/update_norm") for line in (run / "metrics.jsonl").open()]
        norms = [n for n in norms if n is not None]
        if norms:
            updates.append(statistics.fmean(norms))
        walls.append(json.loads((run / "summary.json").read_text())["wall_s"])
    return {"update": statistics.fmean(updates) if updates else float("nan"),
            "wall_s": statistics.fmean(walls) if walls else float("nan")}


def paired(per_seed: dict, method: str, metric: str) -> list[float]:
    """`method - grpo` in `metric`'s area at equal rollout tokens, on the seeds both finished."""
    ours, base = per_seed.get(method, {}), per_seed.get(BASELINE, {})
    return [ours[s]["area_tokens"][metric] - base[s]["area_tokens"][metric] for s in sorted(ours) if s in base]


def rows() -> list[dict]:
    report = json.loads(REPORT.read_text())
    out = []
    for regime, result in report.items():
        if result is None:
            continue
        per_seed = result["per_seed"]
        facts_file = HERE / "facts" / f"{regime}.json"
        facts = json.loads(facts_file.read_text()) if facts_file.exists() else {}
        row = {"regime": regime, "facts": facts, "seeds": len(per_seed.get(BASELINE, {})),
               "grpo_area": statistics.fmean(v["area_tokens"]["pass@1"] for v in per_seed[BASELINE].values())
               if per_seed.get(BASELINE) else float("nan"), "cells": {}}
        for method in (BASELINE, *ORACLES):
            row["cells"][method] = run_means(regime, method)
        for method in ORACLES:
            for metric in ("pass@1", "greedy_pass@1"):
                row[method, metric] = t_interval(paired(per_seed, method, metric))
        out.append(row)
    return out


def fmt(estimate: tuple[float, float, float]) -> str:
    mean, low, high = estimate
    return f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]" if low == low else f"{mean:+.3f}"


def table(data: list[dict]) -> str:
    lines = [
        "| regime | start success | groups without a success | instances per type per batch | seeds | GRPO pass@1 area "
        "| oracle_steps - GRPO, pass@1 area | oracle_blame - GRPO, pass@1 area | oracle_steps - GRPO, greedy area "
        "| update size oracle_steps / GRPO | run (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in data:
        facts, cells = row["facts"], row["cells"]
        ratio = cells["oracle_steps"]["update"] / cells[BASELINE]["update"]
        lines.append(
            f"| {row['regime']} | {facts.get('sampled_accuracy', float('nan')):.3f} "
            f"| {facts.get('no_success_group_share', float('nan')):.2f} "
            f"| {facts.get('instances_per_type_per_batch', float('nan')):.1f} | {row['seeds']} | {row['grpo_area']:.3f} "
            f"| {fmt(row['oracle_steps', 'pass@1'])} | {fmt(row['oracle_blame', 'pass@1'])} "
            f"| {fmt(row['oracle_steps', 'greedy_pass@1'])} | {ratio:.2f} | {cells[BASELINE]['wall_s']:.0f} |")
    return "\n".join(lines)


def figure(data: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.38
    for k, (method, colour) in enumerate(zip(ORACLES, ("tab:green", "tab:grey"))):
        xs = [i + (k - 0.5) * width for i in range(len(data))]
        means = [row[method, "pass@1"][0] for row in data]
        means = [0.0 if m != m else m for m in means]  # a cell without runs yet: no bar
        errors = [[m - row[method, "pass@1"][1] for m, row in zip(means, data)],
                  [row[method, "pass@1"][2] - m for m, row in zip(means, data)]]
        errors = [[0.0 if e != e else e for e in side] for side in errors]
        ax.bar(xs, means, width, yerr=errors, color=colour, capsize=3,
               label={"oracle_steps": "per-decision blame", "oracle_blame": "first-error blame"}[method])
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.axhline(0.15, color="tab:red", linewidth=0.8, linestyle="--", label="0.15: what the regime study needs")
    ax.set_xticks(range(len(data)), [row["regime"] for row in data], rotation=20)
    ax.set_ylabel("gain over GRPO, sampled pass@1 area")
    seeds = sorted({row["seeds"] for row in data})
    ax.set_title("Headroom: perfect blame's gain over GRPO per regime ("
                 + ("95% t intervals over paired seeds" if seeds[0] >= 2 else f"paired seeds per regime: {seeds}; one seed has no interval") + ")")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    if not REPORT.exists():
        print(f"map.py: {REPORT} does not exist; run `credo report {RECORDS} -o {REPORT.parent}` first", file=sys.stderr)
        return 1
    data = rows()
    (HERE / "map.md").write_text(
        "# The headroom map: each regime's facts and perfect blame's gain over GRPO\n\n"
        "Made by `python docs/results/headroom/map.py` from the map's report and records (plan.md). Gains are paired "
        "differences in the area under the sampled (or greedy) pass@1 curve at equal rollout tokens, mean and 95% t "
        "interval over the seeds; the facts are the starting model's (`credo testbed facts`).\n\n"
        + table(data) + "\n\n![headroom](headroom.png)\n")
    figure(data, HERE / "headroom.png")
    print((HERE / "map.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
