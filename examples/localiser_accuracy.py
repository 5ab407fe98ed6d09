"""How accurate must a localiser be before resets pay? Share of the oracle's gain against localiser accuracy.

Reads a finished study (`credo compare`) whose reset methods localise differently (the policy's own, the sampled
localiser, the noisy oracle at several accuracies): each reset method's measured accuracy is the mean over its
runs' steps of `resets/localiser_exact` (the share of seeds whose localised thought is the step checker's first
wrong one), its share of the oracle's gain the report's (area at equal rollout tokens, baseline 0, oracle 1,
with its interval over paired seeds). Prints a markdown table and draws `plots/<difficulty>_localiser_accuracy.png`
into the study directory.

    python examples/localiser_accuracy.py runs/studies/testbed-hard-step-credit
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from credo.io import read_jsonl
from credo.plots import method_styles, save_figure


def localiser_rows(study: Path, difficulty: str = "default") -> list[dict]:
    """One row per method that logged `resets/localiser_exact`: its measured accuracy and share of the oracle's gain."""
    report = json.loads((study / "report.json").read_text())[difficulty]
    rows = []
    for method in report["methods"]:
        runs = sorted((study / difficulty / method["method"]).glob("seed*/metrics.jsonl"))
        exact = [r["resets/localiser_exact"] for path in runs for r in read_jsonl(path) if "resets/localiser_exact" in r]
        if not exact:
            continue
        share = method["share_of_oracle_gain"] or {}
        rows.append({"method": method["method"], "accuracy": sum(exact) / len(exact), "share": share.get("value"),
                     "low": share.get("low"), "high": share.get("high"), "seeds": method["seeds"],
                     "blame_precision": (method["blame_precision"] or {}).get("mean")})
    return sorted(rows, key=lambda r: r["accuracy"])


def table(rows: list[dict]) -> str:
    def number(value):
        return "-" if value is None else f"{value:+.2f}"

    lines = ["| method | localiser accuracy | share of the oracle's gain (95% interval) | blame precision |",
             "|---|---|---|---|"]
    for r in rows:
        interval = f" ({number(r['low'])} to {number(r['high'])})" if r["low"] is not None else ""
        precision = "-" if r["blame_precision"] is None else f"{r['blame_precision']:.3f}"
        lines.append(f"| {r['method']} | {r['accuracy']:.2f} | {number(r['share'])}{interval} | {precision} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    styles = method_styles([r["method"] for r in rows])
    markers = "osD^vP*X"
    for index, r in enumerate(rows):
        if r["share"] is None:
            continue
        low, high = r["low"], r["high"]
        errors = [[r["share"] - low], [high - r["share"]]] if low is not None else None
        ax.errorbar(r["accuracy"], r["share"], yerr=errors, fmt=markers[index % len(markers)], capsize=3,
                    color=styles[r["method"]].colour, label=r["method"])
    ax.axhline(0.0, color="#7F7F7F", linewidth=0.8)
    ax.axhline(1.0, color="#000000", linewidth=0.8, linestyle=":")
    ax.set(xlabel="localiser accuracy (share of seeds reset to the first wrong thought)",
           ylabel="share of the oracle's gain (area)", xlim=(0, 1.05),
           title="resets: what a localiser's accuracy buys")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=3, fontsize="small", frameon=False)
    return save_figure(fig, path, dpi=110)


def main(argv: list[str]) -> None:
    study = Path(argv[0])
    difficulty = argv[1] if len(argv) > 1 else "default"
    rows = localiser_rows(study, difficulty)
    if not rows:
        raise SystemExit(f"{study}: no run logged resets/localiser_exact (a study of reset methods on a task with a step checker)")
    print(table(rows))
    print(plot(rows, study / "plots" / f"{difficulty}_localiser_accuracy.png"))


if __name__ == "__main__":
    main(sys.argv[1:])
