"""The report of a study: learning curves at equal cost, a table with intervals over seeds, plain-word findings.

For each difficulty of the grid, from the finished runs' `metrics.jsonl` and `summary.json`:
- curves of held-out metrics against optimiser steps, rollout tokens (every generated token: seeds,
  localisation, revisions) and wall time, the mean over seeds with a 95% t-interval (`plots/*.png`);
- a table: final scores; the area under the curve (its mean height) over an equal rollout-token budget;
  the paired difference of that area to the baseline's; the share of the oracle's gain
  (`credo.study.curves.share_of_gain`); rollout tokens needed to reach the baseline's final score; blame
  precision (`credo.diagnostics`); cost;
- findings in plain words, derived from the table (better / worse / not distinguishable from the baseline);
- a credit heatmap page (`credit_<difficulty>.html`, `credo.study.heatmap`).
Written as `report.md` (and `report.html` on request) with `report.json` holding the same numbers.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from credo.io import iter_jsonl, write_json_atomic, write_text_atomic
from credo.plots import save_figure
from credo.study.curves import Curve, Estimate, Share, area, first_crossing, mean_curve, mean_interval, share_of_gain
from credo.study.document import Block, Bullets, Code, Heading, Image, Paragraph, Table, to_html, to_markdown
from credo.study.grid import STUDY_FILE, ReportConfig, run_path
from credo.study.heatmap import write_heatmap

AXES = {"step": "optimiser steps (rollout batches)", "rollout_tokens": "rollout tokens generated", "wall_s": "wall time (s)"}


@dataclass(frozen=True)
class Run:
    method: str
    seed: int
    path: Path
    evals: list[dict]
    """Eval records: `step`, `rollout_tokens`, `wall_s`, `eval` (the metrics)."""
    summary: dict

    def curve(self, metric: str, axis: str) -> Curve:
        points = [(r[axis], r["eval"][metric]) for r in self.evals if metric in r["eval"]]
        if not points:
            raise ValueError(f"{self.path}: no evaluation holds the metric {metric!r}; it has {sorted(self.evals[0]['eval'])}")
        return Curve(tuple(float(x) for x, _ in points), tuple(float(y) for _, y in points))


def load_runs(directory: Path) -> tuple[dict, dict[str, dict[str, list[Run]]]]:
    """The study file and its finished runs: `{difficulty: {method: [runs by seed]}}` in the study's order."""
    study_file = directory / STUDY_FILE
    if not study_file.exists():
        raise FileNotFoundError(f"{directory} is not a study directory (no {STUDY_FILE}); run `credo compare` first")
    study = yaml.safe_load(study_file.read_text())
    out: dict[str, dict[str, list[Run]]] = {}
    for difficulty in study["difficulties"]:
        out[difficulty] = {}
        for method in study["methods"]:
            runs = []
            for seed in study["seeds"]:
                path = run_path(directory, difficulty, method, seed)
                if (path / "summary.json").exists():
                    evals = [r for r in iter_jsonl(path / "metrics.jsonl") if "eval" in r]
                    runs.append(Run(method, seed, path, evals,
                                    json.loads((path / "summary.json").read_text())))
            out[difficulty][method] = runs
    return study, out


@dataclass(frozen=True)
class MethodRow:
    """One method's numbers in one difficulty."""

    method: str
    seeds: int
    final: dict[str, Estimate]
    auc: Estimate
    auc_vs_baseline: Estimate | None
    """Paired difference of the areas to the baseline's (seeds both ran)."""
    share: Share | None
    tokens_to_target: Estimate | None
    reached: int
    blame_precision: Estimate | None
    rollout_tokens: Estimate
    wall_s: Estimate

    def as_json(self) -> dict:
        def est(e: Estimate | None):
            return None if e is None else {"mean": e.mean, "low": e.low, "high": e.high, "n": e.n}

        return {
            "method": self.method, "seeds": self.seeds, "final": {k: est(v) for k, v in self.final.items()},
            "auc": est(self.auc), "auc_vs_baseline": est(self.auc_vs_baseline),
            "share_of_oracle_gain": None if self.share is None else
            {"value": self.share.value, "low": self.share.low, "high": self.share.high, "seeds": self.share.seeds},
            "tokens_to_baseline_final": est(self.tokens_to_target), "reached_baseline_final": self.reached,
            "blame_precision": est(self.blame_precision), "rollout_tokens": est(self.rollout_tokens),
            "wall_s": est(self.wall_s),
        }


@dataclass(frozen=True)
class DifficultyResult:
    difficulty: str
    metric: str
    budget: float
    """Rollout-token budget of the areas."""
    target: float
    """The baseline's mean final score (the tokens-to-target threshold)."""
    rows: list[MethodRow]


def final_metrics(runs: list[Run]) -> list[str]:
    """The eval metrics every run reports (greedy_pass@1, pass@k, avg@n), in the runs' order."""
    keys = [k for k in runs[0].summary["eval_end"] if k != "by_difficulty"]
    return [k for k in keys if all(k in r.summary["eval_end"] for r in runs)]


def analyse(runs: dict[str, list[Run]], report: ReportConfig, difficulty: str) -> DifficultyResult:
    """The numbers of one difficulty (see the module docstring)."""
    baseline = runs.get(report.baseline) or []
    if not baseline:
        raise ValueError(f"{difficulty}: the baseline {report.baseline!r} has no finished run; the report compares with it")
    finished = {m: rs for m, rs in runs.items() if rs}
    metric = report.metric
    budget = report.auc_tokens or min(r.curve(metric, "rollout_tokens").x[-1] for rs in finished.values() for r in rs)
    target = mean_interval([r.curve(metric, "step").y[-1] for r in baseline]).mean
    auc = {m: {r.seed: area(r.curve(metric, "rollout_tokens"), budget) for r in rs} for m, rs in finished.items()}
    oracle = auc.get(report.oracle) if report.oracle else None
    rows = []
    for method, method_runs in finished.items():
        paired = sorted(set(auc[method]) & set(auc[report.baseline]))
        vs_baseline = share = None
        if method != report.baseline and paired:
            vs_baseline = mean_interval([auc[method][s] - auc[report.baseline][s] for s in paired])
        if oracle is not None and method not in (report.baseline, report.oracle):
            seeds = sorted(set(paired) & set(oracle))
            if seeds:
                share = share_of_gain([auc[method][s] for s in seeds], [auc[report.baseline][s] for s in seeds],
                                      [oracle[s] for s in seeds])
        crossings = [first_crossing(r.curve(metric, "rollout_tokens"), target) for r in method_runs]
        reached = [c for c in crossings if c is not None]
        precisions = [r.summary["blame_precision"] for r in method_runs if r.summary.get("blame_precision") is not None]
        rows.append(MethodRow(
            method=method, seeds=len(method_runs),
            final={k: mean_interval([r.summary["eval_end"][k] for r in method_runs]) for k in final_metrics(method_runs)},
            auc=mean_interval(list(auc[method].values())), auc_vs_baseline=vs_baseline, share=share,
            tokens_to_target=mean_interval(reached) if reached else None, reached=len(reached),
            blame_precision=mean_interval(precisions) if precisions else None,
            rollout_tokens=mean_interval([r.summary["rollout_tokens"] for r in method_runs]),
            wall_s=mean_interval([r.summary["wall_s"] for r in method_runs]),
        ))
    return DifficultyResult(difficulty, metric, budget, target, rows)


def findings(result: DifficultyResult, report: ReportConfig) -> list[str]:
    """Plain-word sentences: each method against the baseline, and against the oracle's gain."""
    rows = {r.method: r for r in result.rows}
    base = rows[report.baseline]
    base_tokens = base.tokens_to_target.mean if base.tokens_to_target else None
    out = [f"`{report.baseline}` (the baseline) ends at {result.metric} {base.final[result.metric]} and averages "
           f"{base.auc} over the first {result.budget:,.0f} rollout tokens (mean ± 95% interval over {base.seeds} seeds)."]
    if report.oracle in rows and rows[report.oracle].auc_vs_baseline is not None:
        gain = rows[report.oracle].auc_vs_baseline
        out.append(f"The yardstick `{report.oracle}` {_verdict(gain)} `{report.baseline}` (paired difference of the areas "
                   f"{_signed(gain)}); a method's share of this gain says how much of perfect blame it recovers.")
    for row in result.rows:
        if row.method in (report.baseline, report.oracle) or row.auc_vs_baseline is None:
            continue
        diff = row.auc_vs_baseline
        sentence = f"`{row.method}` {_verdict(diff)} `{report.baseline}` (area {row.auc.mean:.3f}, paired difference {_signed(diff)})"
        if row.share is not None:
            sentence += f"; share of the oracle's gain {row.share}"
        if row.reached == 0:
            sentence += f"; it never reached the baseline's final {result.metric} ({result.target:.3f})"
        elif base_tokens:
            sentence += (f"; it reached the baseline's final score in {row.reached} of {row.seeds} seeds, after "
                         f"{row.tokens_to_target.mean / base_tokens:.2f}x the baseline's tokens")
        out.append(sentence + ".")
    return out


def _verdict(diff: Estimate) -> str:
    if diff.low is None:
        return "cannot be told apart (one seed) from"
    if diff.low > 0:
        return "beats"
    if diff.high < 0:
        return "falls behind"
    return "is not distinguishable from"


def _signed(e: Estimate) -> str:
    if e.low is None:
        return f"{e.mean:+.3f}"
    return f"{e.mean:+.3f}, interval {e.low:+.3f} to {e.high:+.3f}"


def table(result: DifficultyResult, report: ReportConfig) -> Table:
    pass_k = sorted({k for r in result.rows for k in r.final if k.startswith("pass@") and k != "pass@1"},
                    key=lambda k: int(k.split("@")[1]))
    finals = [result.metric] + [k for k in ("pass@1", *pass_k[-1:]) if k != result.metric]
    columns = [
        ("method", lambda r: f"`{r.method}`"),
        ("seeds", lambda r: str(r.seeds)),
        *((f"final {k}", lambda r, k=k: str(r.final[k]) if k in r.final else "–") for k in finals),
        (f"area ≤{_tokens(result.budget)} tok", lambda r: str(r.auc)),
        (f"Δ area vs {report.baseline}", lambda r: _signed(r.auc_vs_baseline) if r.auc_vs_baseline else "–"),
    ]
    if report.oracle:
        columns.append((f"share of {report.oracle} gain", lambda r: str(r.share) if r.share else "–"))
    columns += [
        (f"tokens to {report.baseline} final ({result.target:.3f})",
         lambda r: f"{_tokens(r.tokens_to_target.mean)} ({r.reached}/{r.seeds})" if r.tokens_to_target
         else f"not reached (0/{r.seeds})"),
        ("blame precision", lambda r: str(r.blame_precision) if r.blame_precision else "–"),
        ("rollout tokens", lambda r: _tokens(r.rollout_tokens.mean)),
        ("wall s", lambda r: f"{r.wall_s.mean:.0f}"),
    ]
    return Table(tuple(name for name, _ in columns), tuple(tuple(cell(r) for _, cell in columns) for r in result.rows))


def _tokens(n: float) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.0f}k"


def plot_curves(runs: dict[str, list[Run]], metric: str, path: Path, title: str) -> Path:
    """The metric against steps, rollout tokens and wall time: per method the mean over seeds, shaded 95% interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, panels = plt.subplots(1, 3, figsize=(17, 5), sharey=True)
    colours = plt.get_cmap("tab10").colors
    for index, (method, method_runs) in enumerate(runs.items()):
        if not method_runs:
            continue
        colour, style = colours[index % len(colours)], ("-", "--", ":")[index // len(colours) % 3]
        for panel, axis in zip(panels, AXES):
            grid, estimates = mean_curve([r.curve(metric, axis) for r in method_runs])
            panel.plot(grid, [e.mean for e in estimates], color=colour, linestyle=style, label=method)
            if estimates[0].low is not None:
                panel.fill_between(grid, [e.low for e in estimates], [e.high for e in estimates], color=colour, alpha=0.07)
    for panel, label in zip(panels, AXES.values()):
        panel.set(xlabel=label, ylim=(0, 1))  # held-out accuracies; a t-interval's shading is cut at the range
        panel.grid(alpha=0.3)
    panels[0].set(ylabel=f"held-out {metric}", title=title)
    panels[-1].legend(fontsize=8, loc="lower right")
    return save_figure(fig, path)


def plot_differences(result: DifficultyResult, baseline: str, path: Path, title: str) -> Path | None:
    """A forest plot: each method's paired difference of the area to the baseline's, with its 95% interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result.rows if r.auc_vs_baseline is not None]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.32 * len(rows)))
    for y, row in enumerate(reversed(rows)):
        d = row.auc_vs_baseline
        low, high = (d.low, d.high) if d.low is not None else (d.mean, d.mean)
        colour = "tab:green" if low > 0 else "tab:red" if high < 0 else "tab:gray"
        ax.errorbar(d.mean, y, xerr=[[d.mean - low], [high - d.mean]], fmt="o", color=colour, capsize=3)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(rows)), [r.method for r in reversed(rows)])
    ax.set(xlabel=f"paired difference of the area to {baseline}'s (≤{_tokens(result.budget)} rollout tokens, 95% interval)",
           title=title)
    ax.grid(axis="x", alpha=0.3)
    return save_figure(fig, path)


def write_report(directory: str | Path, output: str | Path | None = None, *, html: bool = False) -> Path:
    """Write `report.md` (and `report.html`), `report.json`, plots and credit heatmaps; returns the Markdown path.

    `output` (default: the study directory) receives the report; the runs stay where they are.
    """
    directory = Path(directory)
    out = Path(output) if output is not None else directory
    study, runs = load_runs(directory)
    report = ReportConfig(**study.get("report", {}))
    blocks: list[Block] = [Heading(f"Study: {study['name']}", 1)]
    if study.get("command"):
        blocks += [Paragraph("Made by:"), Code(study["command"])]
    methods = ", ".join(f"`{m}`" for m in study["methods"])
    blocks.append(Paragraph(f"Methods {methods}; seeds {study['seeds']}; the seeds pair runs across methods (same "
                            "starting model, same prompt stream per seed). Intervals are 95% Student-t intervals over "
                            "seeds; `share` intervals are paired bootstraps over seeds."))
    numbers = {}
    for difficulty, by_method in runs.items():
        missing = [f"{m} ({len(rs)}/{len(study['seeds'])})" for m, rs in by_method.items() if len(rs) < len(study["seeds"])]
        if not any(by_method.values()):
            blocks += [Heading(f"{difficulty}"), Paragraph("No finished runs yet.")]
            continue
        result = analyse(by_method, report, difficulty)
        numbers[difficulty] = {"metric": result.metric, "auc_tokens": result.budget, "baseline_final": result.target,
                               "methods": [r.as_json() for r in result.rows]}
        blocks.append(Heading(f"{difficulty}" if len(runs) > 1 else "Results"))
        if missing:
            blocks.append(Paragraph(f"Unfinished (finished seeds / all): {', '.join(missing)}."))
        blocks += [table(result, report), Heading("Findings", 3), Bullets(tuple(findings(result, report)))]
        forest = f"plots/{difficulty}_area_vs_{report.baseline}.png"
        if plot_differences(result, report.baseline, out / forest, f"{study['name']} · {difficulty}"):
            blocks.append(Image(forest, f"paired difference of the area to {report.baseline}'s"))
        metrics = [result.metric] + [k for k in ("pass@1", _largest_pass_k(by_method)) if k and k != result.metric]
        for metric in metrics:
            name = f"plots/{difficulty}_{metric.replace('@', '_at_')}.png"
            plot_curves(by_method, metric, out / name, f"{study['name']} · {difficulty}")
            blocks.append(Image(name, f"{metric} against steps, rollout tokens and wall time"))
        heatmap = write_heatmap(by_method, out / f"credit_{difficulty}.html", step=report.heatmap_step,
                                title=f"{study['name']} · {difficulty}: credit per token at step {report.heatmap_step}")
        blocks.append(Paragraph(f"Credit heatmaps of sample responses: [{heatmap.name}]({heatmap.name})."))
    blocks += glossary()
    out.mkdir(parents=True, exist_ok=True)
    if out.resolve() != directory.resolve():
        shutil.copyfile(directory / STUDY_FILE, out / STUDY_FILE)
    write_json_atomic(out / "report.json", numbers)
    write_text_atomic(out / "report.md", to_markdown(blocks))
    if html:
        write_text_atomic(out / "report.html", to_html(blocks, f"credo study {study['name']}"))
    return out / "report.md"


def _largest_pass_k(runs: dict[str, list[Run]]) -> str | None:
    keys = {k for rs in runs.values() for r in rs for k in r.summary["eval_end"] if k.startswith("pass@") and k != "pass@1"}
    return max(keys, key=lambda k: int(k.split("@")[1])) if keys else None


def glossary() -> list[Block]:
    return [Heading("How to read the table", 3), Bullets((
        "final: the held-out metric at the last evaluation (mean ± half-width of the 95% interval).",
        "area: the mean height of the learning curve against rollout tokens, from 0 to the budget in the header "
        "(the smallest final budget in the grid unless the study sets `report.auc_tokens`): equal cost for every method.",
        "Δ area: the paired difference to the baseline's area, seed by seed.",
        "share of the oracle's gain: (area − baseline's) / (oracle's − baseline's) over paired seeds; 1 recovers all of "
        "perfect blame, 0 none, negative is worse than the baseline; undefined when the oracle is no better than the "
        "baseline; an unbounded interval means some bootstrap resample had no oracle gain.",
        "tokens to baseline final: rollout tokens until the curve first reaches the baseline's mean final score "
        "(linear between evaluations), over the seeds that reached it.",
        "blame precision: share of failed responses' negative credit (−dLoss/dlogp) on or after their first wrong step, "
        "averaged over training steps (`credo.diagnostics`).",
        "rollout tokens: every generated token (seeds, discarded draws, localisation, revisions), the cost axis.",
    ))]

