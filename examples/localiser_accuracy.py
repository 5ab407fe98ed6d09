"""How accurate must a localiser be before resets pay? Share of the oracle's gain against localiser accuracy.

Reads a finished study (`credo compare`) whose reset methods localise differently (the policy's own, the sampled
localiser, the noisy oracle at several accuracies): each reset method's measured accuracy is the mean over its
runs' steps of `resets/localiser_exact` (the share of seeds whose localised thought is the step checker's first
wrong one), its share of the oracle's gain the report's (area at equal rollout tokens, baseline 0, oracle 1,
with its interval over paired seeds), beside its paired difference of the area to the baseline's (which stays
readable where the oracle's own gain is small and the share's interval unbounded). Prints a markdown table and draws
`plots/<difficulty>_localiser_accuracy.png` into the report's directory (the study directory unless `--report`
names the folder `credo report --output` wrote).

    python examples/localiser_accuracy.py runs/studies/testbed-hard-step-credit
    python examples/localiser_accuracy.py runs/studies/credit-decisive decisive --report docs/results/credit-decisive
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from credo.io import read_jsonl
from credo.plots import method_styles, save_figure


def localiser_rows(study: Path, difficulty: str = "default", report_dir: Path | None = None) -> list[dict]:
    """One row per method that logged `resets/localiser_exact`: its measured accuracy, its paired difference of the
    area to the baseline's and its share of the oracle's gain (from `report.json` in `report_dir`, by default the
    study directory)."""
    report = json.loads(((report_dir or study) / "report.json").read_text())[difficulty]
    rows = []
    for method in report["methods"]:
        runs = sorted((study / difficulty / method["method"]).glob("seed*/metrics.jsonl"))
        exact = [r["resets/localiser_exact"] for path in runs for r in read_jsonl(path) if "resets/localiser_exact" in r]
        if not exact:
            continue
        share = method["share_of_oracle_gain"] or {}
        delta = method.get("auc_vs_baseline") or {}
        rows.append({"method": method["method"], "accuracy": sum(exact) / len(exact), "share": share.get("value"),
                     "low": share.get("low"), "high": share.get("high"), "delta": delta.get("mean"),
                     "delta_low": delta.get("low"), "delta_high": delta.get("high"), "seeds": method["seeds"],
                     "blame_precision": (method["blame_precision"] or {}).get("mean")})
    return sorted(rows, key=lambda r: r["accuracy"])


def table(rows: list[dict]) -> str:
    def with_interval(value, low, high, digits):
        if value is None:
            return "-"
        interval = f" ({low:+.{digits}f} to {high:+.{digits}f})" if low is not None else ""
        return f"{value:+.{digits}f}{interval}"

    lines = ["| method | localiser accuracy | Δ area vs baseline (95% interval) | share of the oracle's gain (95% interval) "
             "| blame precision |", "|---|---|---|---|---|"]
    for r in rows:
        precision = "-" if r["blame_precision"] is None else f"{r['blame_precision']:.3f}"
        lines.append(f"| {r['method']} | {r['accuracy']:.2f} | "
                     f"{with_interval(r['delta'], r['delta_low'], r['delta_high'], 3)} | "
                     f"{with_interval(r['share'], r['low'], r['high'], 2)} | {precision} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> Path:
    """Two panels against the measured localiser accuracy: the paired difference of the area to the baseline's,
    and the share of the oracle's gain (0: the baseline, 1: perfect blame), each with its 95% interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4), layout="constrained")
    styles = method_styles([r["method"] for r in rows])
    markers = "osD^vP*X"
    panels = (("delta", "delta_low", "delta_high", "Δ area vs baseline", (0.0,)),
              ("share", "low", "high", "share of the oracle's gain (area)", (0.0, 1.0)))
    for ax, (key, low_key, high_key, label, references) in zip(axes, panels):
        for index, r in enumerate(rows):
            if r[key] is None:
                continue
            low, high = r[low_key], r[high_key]
            errors = [[r[key] - low], [high - r[key]]] if low is not None else None
            ax.errorbar(r["accuracy"], r[key], yerr=errors, fmt=markers[index % len(markers)], capsize=3,
                        color=styles[r["method"]].colour, label=r["method"])
        for y in references:
            ax.axhline(y, color="#7F7F7F" if y == 0.0 else "#000000", linewidth=0.8, linestyle="-" if y == 0.0 else ":")
        ax.set(xlabel="localiser accuracy (share of seeds reset to the first wrong thought)", ylabel=label,
               xlim=(0, 1.05))
        ax.grid(alpha=0.3)
    fig.suptitle("resets: what a localiser's accuracy buys")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=4, fontsize="small", frameon=False)
    return save_figure(fig, path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path, help="the study's run directory (credo compare's output)")
    parser.add_argument("difficulty", nargs="?", default="default")
    parser.add_argument("--report", type=Path, default=None,
                        help="the folder holding report.json (credo report --output); the plot is drawn there")
    args = parser.parse_args(argv)
    rows = localiser_rows(args.study, args.difficulty, args.report)
    if not rows:
        raise SystemExit(f"{args.study}: no run logged resets/localiser_exact (a study of reset methods on a task "
                         "with a step checker)")
    print(table(rows))
    print(plot(rows, (args.report or args.study) / "plots" / f"{args.difficulty}_localiser_accuracy.png"))


if __name__ == "__main__":
    main()
