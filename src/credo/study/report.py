"""The report of a study: learning curves at equal cost, a table with intervals over seeds, plain-word findings.

For each difficulty of the grid, from the finished runs' `metrics.jsonl` and `summary.json`:
- curves of held-out metrics against optimiser steps, rollout tokens (every generated token: seeds,
  localisation, revisions) and wall time, the mean over seeds with a 95% t-interval (`plots/*.png`), and for a
  study of many methods the headline metric's curves family by family (`family_figures`);
- a table: final scores; the area under the curve (its mean height) over an equal rollout-token budget;
  the paired difference of that area to the baseline's (and to a method's like-for-like baseline, when the study
  names one), and of the areas against optimiser steps; the paired difference of the final largest pass@k; the
  share of the oracle's gain (`credo.study.curves.share_of_gain`); rollout tokens needed to reach the baseline's
  final score; blame precision (`credo.diagnostics`); unstable runs (collapsed curves, exploded gradient norms); cost;
- findings in plain words, derived from the table (`verdict`: beats / falls behind / not distinguishable from /
  identical to the baseline);
- a credit heatmap page (`credit_<difficulty>.html`, `credo.study.heatmap`; its records beside it in
  `credit_<difficulty>.jsonl`).
Written as `report.md` (and `report.html` on request) with `report.json` holding the same numbers and the
mean curves the figures draw, so that `write_report(..., from_json=True)` draws the figures and writes the
report again from a report folder alone (a committed report, whose runs are gone). A study directory with
no finished run is an error that leaves an existing report as it was.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from credo.io import iter_jsonl, write_text_atomic
from credo.plots import (
    FAMILY_COLOURS,
    family_key,
    fitted_range,
    legend_below,
    legend_rows,
    method_family,
    method_styles,
    save_figure,
)
from credo.study.curves import Curve, Estimate, Share, area, first_crossing, mean_curve, mean_interval, share_of_gain
from credo.study.document import Block, Bullets, Code, Heading, Image, Paragraph, Table, to_html, to_markdown
from credo.study.grid import STUDY_FILE, ReportConfig, run_path
from credo.study.heatmap import collect_samples, write_heatmap

AXES = {"step": "optimiser steps (rollout batches)", "rollout_tokens": "rollout tokens generated", "wall_s": "wall time (s)"}


EXPLODED = 10.0
"""A run's gradient norm *explodes* at a step whose norm exceeds this multiple of the run's median norm."""


class NoFinishedRuns(ValueError):
    """A study directory without a single finished run: nothing to report (an existing report is kept)."""


@dataclass(frozen=True)
class Run:
    method: str
    seed: int
    path: Path
    evals: list[dict]
    """Eval records: `step`, `rollout_tokens`, `wall_s`, `eval` (the metrics)."""
    summary: dict
    grad_norms: tuple[float, ...] = ()
    """Each optimiser step's gradient norm before clipping (`grad_norm` of the step records that have one)."""

    def unstable(self, metric: str) -> bool:
        """Whether the run collapsed (its last evaluation of `metric` below its first) or its gradient norm exploded
        (a step above `EXPLODED` times the run's median)."""
        curve = self.curve(metric, "step")
        norms = sorted(self.grad_norms)
        exploded = bool(norms) and norms[-1] > EXPLODED * norms[len(norms) // 2]
        return curve.y[-1] < curve.y[0] or exploded

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
            for seed in seeds_of(study, method):
                path = run_path(directory, difficulty, method, seed)
                if (path / "summary.json").exists():
                    evals, norms = [], []
                    for record in iter_jsonl(path / "metrics.jsonl"):
                        if "eval" in record:
                            evals.append(record)
                        elif "grad_norm" in record:
                            norms.append(float(record["grad_norm"]))
                    runs.append(Run(method, seed, path, evals,
                                    json.loads((path / "summary.json").read_text()), tuple(norms)))
            out[difficulty][method] = runs
    return study, out


def seeds_of(study: dict, method: str) -> list[int]:
    """A method's seeds in a resolved study file: its own, else the study's."""
    return study["methods"][method].get("seeds") or study["seeds"]


@dataclass(frozen=True)
class MethodRow:
    """One method's numbers in one difficulty."""

    method: str
    seeds: int
    final: dict[str, Estimate]
    auc: Estimate
    auc_vs_baseline: Estimate | None
    """Paired difference of the areas to the baseline's (seeds both ran)."""
    steps_auc_vs_baseline: Estimate | None
    """Paired difference of the areas against optimiser steps, each pair over the steps both runs trained."""
    like_for_like: str | None
    """The method's like-for-like baseline (`ReportConfig.like_for_like`), if any."""
    auc_vs_like: Estimate | None
    """Paired difference of the areas to the like-for-like baseline's."""
    final_vs_baseline: dict[str, Estimate]
    """Paired differences of the final metrics to the baseline's."""
    unstable: int
    """Runs that collapsed or whose gradient norm exploded (`Run.unstable`)."""
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
            "steps_auc_vs_baseline": est(self.steps_auc_vs_baseline), "like_for_like": self.like_for_like,
            "auc_vs_like_for_like": est(self.auc_vs_like),
            "final_vs_baseline": {k: est(v) for k, v in self.final_vs_baseline.items()}, "unstable_runs": self.unstable,
            "share_of_oracle_gain": None if self.share is None else
            {"value": self.share.value, "low": self.share.low, "high": self.share.high, "seeds": self.share.seeds},
            "tokens_to_baseline_final": est(self.tokens_to_target), "reached_baseline_final": self.reached,
            "blame_precision": est(self.blame_precision), "rollout_tokens": est(self.rollout_tokens),
            "wall_s": est(self.wall_s),
        }

    @classmethod
    def from_json(cls, data: dict) -> MethodRow:
        """The row `as_json` wrote (`report.json`)."""
        def est(e: dict | None) -> Estimate | None:
            return None if e is None else Estimate(e["mean"], e["low"], e["high"], e["n"])

        share = data["share_of_oracle_gain"]
        return cls(
            method=data["method"], seeds=data["seeds"], final={k: est(v) for k, v in data["final"].items()},
            auc=est(data["auc"]), auc_vs_baseline=est(data["auc_vs_baseline"]),
            steps_auc_vs_baseline=est(data.get("steps_auc_vs_baseline")), like_for_like=data.get("like_for_like"),
            auc_vs_like=est(data.get("auc_vs_like_for_like")),
            final_vs_baseline={k: est(v) for k, v in data.get("final_vs_baseline", {}).items()},
            unstable=data.get("unstable_runs", 0),
            share=None if share is None else Share(share["value"], share["low"], share["high"], share["seeds"]),
            tokens_to_target=est(data["tokens_to_baseline_final"]), reached=data["reached_baseline_final"],
            blame_precision=est(data["blame_precision"]), rollout_tokens=est(data["rollout_tokens"]),
            wall_s=est(data["wall_s"]),
        )


@dataclass(frozen=True)
class DifficultyResult:
    difficulty: str
    metric: str
    budget: float
    """Rollout-token budget of the areas."""
    target: float
    """The baseline's mean final score (the tokens-to-target threshold)."""
    rows: list[MethodRow]

    @property
    def largest_pass_k(self) -> str | None:
        """The final pass@k with the largest k > 1 any method reports, if any."""
        keys = {k for r in self.rows for k in r.final if k.startswith("pass@") and k != "pass@1"}
        return max(keys, key=lambda k: int(k.split("@")[1])) if keys else None


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
    by_seed = {m: {r.seed: r for r in rs} for m, rs in finished.items()}
    rows = []
    for method, method_runs in finished.items():
        paired = sorted(set(auc[method]) & set(auc[report.baseline]))
        vs_baseline = share = steps_vs_baseline = vs_like = None
        final_vs_baseline = {}
        if method != report.baseline and paired:
            vs_baseline = paired_difference(auc[method], auc[report.baseline])
            runs_of, base_of = by_seed[method], by_seed[report.baseline]
            steps_vs_baseline = mean_interval([steps_area_difference(runs_of[s], base_of[s], metric) for s in paired])
            final_vs_baseline = {k: mean_interval([runs_of[s].summary["eval_end"][k] - base_of[s].summary["eval_end"][k]
                                                   for s in paired])
                                 for k in final_metrics([*runs_of.values(), *base_of.values()])}
        like = report.like_for_like.get(method)
        if like in auc and set(auc[method]) & set(auc[like]):
            vs_like = paired_difference(auc[method], auc[like])
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
            auc=mean_interval(list(auc[method].values())), auc_vs_baseline=vs_baseline,
            steps_auc_vs_baseline=steps_vs_baseline, like_for_like=like, auc_vs_like=vs_like,
            final_vs_baseline=final_vs_baseline, unstable=sum(r.unstable(metric) for r in method_runs), share=share,
            tokens_to_target=mean_interval(reached) if reached else None, reached=len(reached),
            blame_precision=mean_interval(precisions) if precisions else None,
            rollout_tokens=mean_interval([r.summary["rollout_tokens"] for r in method_runs]),
            wall_s=mean_interval([r.summary["wall_s"] for r in method_runs]),
        ))
    return DifficultyResult(difficulty, metric, budget, target, rows)


def paired_difference(ours: dict[int, float], theirs: dict[int, float]) -> Estimate:
    """The mean difference of two methods' values over the seeds both ran, with its 95% t-interval."""
    return mean_interval([ours[s] - theirs[s] for s in sorted(set(ours) & set(theirs))])


def steps_area_difference(run: Run, baseline: Run, metric: str) -> float:
    """The difference of two runs' areas against optimiser steps, over the steps both trained (a method that spends
    more tokens per step trains fewer steps at an equal token budget)."""
    ours, theirs = run.curve(metric, "step"), baseline.curve(metric, "step")
    budget = min(ours.x[-1], theirs.x[-1])
    return area(ours, budget) - area(theirs, budget)


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
    largest = result.largest_pass_k
    for row in result.rows:
        if row.method in (report.baseline, report.oracle) or row.auc_vs_baseline is None:
            continue
        diff = row.auc_vs_baseline
        sentence = f"`{row.method}` {_verdict(diff)} `{report.baseline}` (area {row.auc.mean:.3f}, paired difference {_signed(diff)})"
        if row.auc_vs_like is not None:
            sentence += (f"; it {_verdict(row.auc_vs_like)} its like-for-like `{row.like_for_like}` "
                         f"({_signed(row.auc_vs_like)})")
        if largest and largest in row.final_vs_baseline:
            sentence += f"; final {largest} {_signed(row.final_vs_baseline[largest])} against the baseline's"
        if row.share is not None:
            sentence += f"; share of the oracle's gain {row.share}"
        if row.reached == 0:
            sentence += f"; it never reached the baseline's final {result.metric} ({result.target:.3f})"
        elif base_tokens:
            sentence += (f"; it reached the baseline's final score in {row.reached} of {row.seeds} seeds, after "
                         f"{row.tokens_to_target.mean / base_tokens:.2f}x the baseline's tokens")
        out.append(sentence + ".")
    return out


def verdict(diff: Estimate) -> str:
    """The report's rule for a paired difference: "beats" or "falls behind" when its 95% interval excludes 0, "not
    distinguishable" otherwise, "one seed" when there is no interval, and "identical" when every seed's difference is
    exactly 0 (the same runs: a method that reduces to the baseline, as REINFORCE does to GRPO on policy)."""
    if diff.low is None:
        return "one seed"
    if diff.low == diff.high == 0.0:
        return "identical"
    if diff.low > 0:
        return "beats"
    if diff.high < 0:
        return "falls behind"
    return "not distinguishable"


def _verdict(diff: Estimate) -> str:
    """`verdict` as the verb of a findings sentence."""
    said = verdict(diff)
    return {"one seed": "cannot be told apart (one seed) from", "not distinguishable": "is not distinguishable from",
            "identical": "is identical on every seed to"}.get(said, said)


def bracketed(e: Estimate) -> str:
    """A paired difference as a table cell: `+0.024 [-0.018, +0.065]` (the 95% interval in brackets)."""
    if e.low is None:
        return f"{e.mean:+.3f}"
    return f"{e.mean:+.3f} [{e.low:+.3f}, {e.high:+.3f}]"


def _signed(e: Estimate) -> str:
    if e.low is None:
        return f"{e.mean:+.3f}"
    return f"{e.mean:+.3f}, interval {e.low:+.3f} to {e.high:+.3f}"


def table(result: DifficultyResult, report: ReportConfig) -> Table:
    reported = {k for r in result.rows for k in r.final}
    largest = result.largest_pass_k
    finals = [result.metric] + [k for k in ("pass@1", largest) if k and k != result.metric and k in reported]
    columns = [
        ("method", lambda r: f"`{r.method}`"),
        ("seeds", lambda r: str(r.seeds)),
        *((f"final {k}", lambda r, k=k: str(r.final[k]) if k in r.final else "–") for k in finals),
        (f"area ≤{_tokens(result.budget)} tok", lambda r: str(r.auc)),
        (f"Δ area vs {report.baseline}", lambda r: bracketed(r.auc_vs_baseline) if r.auc_vs_baseline else "–"),
        (f"Δ area vs {report.baseline} at equal steps",
         lambda r: bracketed(r.steps_auc_vs_baseline) if r.steps_auc_vs_baseline else "–"),
    ]
    if report.like_for_like:
        columns.append(("Δ area vs like-for-like",
                        lambda r: f"{bracketed(r.auc_vs_like)} vs `{r.like_for_like}`" if r.auc_vs_like else "–"))
    if largest:
        columns.append((f"Δ final {largest} vs {report.baseline}",
                        lambda r: bracketed(r.final_vs_baseline[largest]) if largest in r.final_vs_baseline
                        else "–"))
    if report.oracle:
        columns.append((f"share of {report.oracle} gain", lambda r: str(r.share) if r.share else "–"))
    columns += [
        (f"tokens to {report.baseline} final ({result.target:.3f})",
         lambda r: f"{_tokens(r.tokens_to_target.mean)} ({r.reached}/{r.seeds})" if r.tokens_to_target
         else f"not reached (0/{r.seeds})"),
        ("blame precision", lambda r: str(r.blame_precision) if r.blame_precision else "–"),
        ("unstable runs", lambda r: f"{r.unstable}/{r.seeds}"),
        ("rollout tokens", lambda r: _tokens(r.rollout_tokens.mean)),
        ("wall s", lambda r: f"{r.wall_s.mean:.0f}"),
    ]
    return Table(tuple(name for name, _ in columns), tuple(tuple(cell(r) for _, cell in columns) for r in result.rows))


def _tokens(n: float) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.0f}k"


def mean_curves(runs: dict[str, list[Run]], metric: str) -> dict[str, dict[str, dict]]:
    """`{method: {axis: {"x", "mean", "low", "high", "seeds"}}}`: per method with finished runs and per axis
    (`AXES`), the seeds' mean curve of `metric` with its 95% interval (`low`/`high` null with one seed),
    rounded for `report.json`."""
    def rounded(values, digits):
        return [None if v is None else round(v, digits) for v in values]

    out: dict[str, dict[str, dict]] = {}
    for method, method_runs in runs.items():
        if not method_runs:
            continue
        out[method] = {}
        for axis in AXES:
            grid, estimates = mean_curve([r.curve(metric, axis) for r in method_runs], points=None)
            out[method][axis] = {"x": rounded(grid, 2), "mean": rounded([e.mean for e in estimates], 5),
                                 "low": rounded([e.low for e in estimates], 5),
                                 "high": rounded([e.high for e in estimates], 5), "seeds": len(method_runs)}
    return out


def _tick_tokens(value: float, _position=None) -> str:
    return "0" if value == 0 else f"{value / 1e6:g}M" if abs(value) >= 1e6 else f"{value / 1e3:g}k"


def plot_curves(curves: dict[str, dict[str, dict]], metric: str, path: Path, title: str, *,
                budget: float | None = None) -> Path:
    """The metric against steps, rollout tokens and wall time (`mean_curves`): per method the mean over seeds
    with its shaded 95% interval, each method its own colour and line style (a hue per family), the legend
    under the panels. The tokens panel stops at `budget` (the areas' equal budget); the y-range fits what is
    drawn
    (the means; the intervals' shading may run past it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    styles = method_styles(list(curves))
    height = 4.4 + 0.2 * legend_rows(list(styles), 17)  # the panels keep their height under a long legend
    fig, panels = plt.subplots(1, 3, figsize=(17, height), sharey=True, layout="constrained")
    handles, shown = [], []
    alpha = 0.08 if len(curves) <= 6 else 0.04
    for method in styles:  # family by family: the legend's order
        by_axis, style = curves[method], styles[method]
        for panel, axis in zip(panels, AXES):
            c = by_axis[axis]
            (line,) = panel.plot(c["x"], c["mean"], color=style.colour, linestyle=style.linestyle, linewidth=1.6)
            bands = c["low"][0] is not None
            low = [max(0.0, v) for v in c["low"]] if bands else c["mean"]  # accuracies: shading cut at [0, 1]
            high = [min(1.0, v) for v in c["high"]] if bands else c["mean"]
            if bands:
                panel.fill_between(c["x"], low, high, color=style.colour, alpha=alpha, linewidth=0)
            limit = budget if axis == "rollout_tokens" and budget else None
            shown += [m for x, m in zip(c["x"], c["mean"]) if limit is None or x <= limit]
            if limit is not None and c["x"][0] < limit < c["x"][-1]:
                shown.append(Curve(tuple(c["x"]), tuple(c["mean"])).at(limit))
        handles.append(line)
    for panel, (axis, label) in zip(panels, AXES.items()):
        panel.set(xlabel=label)
        panel.grid(alpha=0.3)
        panel.margins(x=0.01)
    tokens = panels[list(AXES).index("rollout_tokens")]
    tokens.xaxis.set_major_formatter(FuncFormatter(_tick_tokens))
    if budget:
        tokens.set_xlim(min(c["rollout_tokens"]["x"][0] for c in curves.values()), budget)
        tokens.set_xlabel(f"rollout tokens generated, up to the areas' budget ({_tokens(budget)})")
    panels[0].set(ylabel=f"held-out {metric}", ylim=fitted_range(shown, pad=0.08))
    banded = any(c[axis]["low"][0] is not None for c in curves.values() for axis in AXES)
    fig.suptitle(f"{title}: held-out {metric}, mean over seeds" + (" (shaded: 95% interval)" if banded else ""),
                 fontsize=12)
    legend_below(fig, handles, list(styles), title=family_key(styles))
    return save_figure(fig, path)


FAMILY_FIGURES_ABOVE = 10
"""A difficulty with more methods than this also draws its headline curves family by family: one figure of every
method cannot be read."""


def family_figures(methods: list[str], report: ReportConfig) -> dict[str, list[str]]:
    """The methods of each family's figure, family by family (`credo.plots.FAMILY_COLOURS`' order, labels of no
    registered method last as "other"): the family's methods with their like-for-like baselines, the baseline and
    the oracle, in the given order. Empty when there are `FAMILY_FIGURES_ABOVE` methods or fewer.

    >>> report = ReportConfig(like_for_like={"s_trace": "grpo_4mb"})
    >>> family_figures(["grpo", "grpo_4mb", "s_trace", "srpo", "oracle_blame"] + [f"x{i}" for i in range(7)], report)["trace"]
    ['grpo', 'grpo_4mb', 's_trace', 'oracle_blame']
    """
    if len(methods) <= FAMILY_FIGURES_ABOVE:
        return {}
    anchors = {report.baseline, report.oracle} - {None}
    families = {m: method_family(m) or "other" for m in methods if m not in anchors}
    rank = {family: i for i, family in enumerate(FAMILY_COLOURS)}
    figures = {}
    for family in sorted(set(families.values()), key=lambda f: rank.get(f, len(rank))):
        members = {m for m, f in families.items() if f == family}
        members |= {report.like_for_like[m] for m in members if m in report.like_for_like} | anchors
        figures[family] = [m for m in methods if m in members]
    return figures


def plot_differences(result: DifficultyResult, baseline: str, path: Path, title: str) -> Path | None:
    """A forest plot: each method's paired difference of the area to the baseline's, with its 95% interval, coloured
    by its `verdict` (blue: beats, vermillion: falls behind, grey: the rest)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    rows = [r for r in result.rows if r.auc_vs_baseline is not None]
    if not rows:
        return None
    styles = {"beats": ("#0072B2", "o"), "falls behind": ("#D55E00", "s"), "not distinguishable": ("#777777", "D"),
              "identical": ("#777777", "x"), "one seed": ("#777777", "D")}
    single = all(r.auc_vs_baseline.low is None for r in rows)
    fig, ax = plt.subplots(figsize=(9, 1.6 + 0.3 * len(rows)), layout="constrained")
    used = set()
    for y, row in enumerate(reversed(rows)):
        d = row.auc_vs_baseline
        low, high = (d.low, d.high) if d.low is not None else (d.mean, d.mean)
        said = verdict(d)
        used.add(said)
        colour, marker = styles[said]
        ax.errorbar(d.mean, y, xerr=[[d.mean - low], [high - d.mean]], fmt=marker, color=colour, capsize=3)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(rows)), [r.method for r in reversed(rows)])
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set(xlabel=f"paired difference of the area to {baseline}'s (≤{_tokens(result.budget)} rollout tokens"
                  + (", one seed: no interval)" if single else ", 95% interval)"), title=title)
    ax.grid(axis="x", alpha=0.3)
    labels = {"beats": f"beats {baseline}", "falls behind": f"falls behind {baseline}",
              "not distinguishable": f"not distinguishable from {baseline}", "identical": f"identical to {baseline}",
              "one seed": "one seed (no interval)"}
    handles = [Line2D([], [], color=styles[v][0], marker=styles[v][1], linestyle="", label=labels[v])
               for v in styles if v in used]
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=9, frameon=False)
    return save_figure(fig, path)


@dataclass(frozen=True)
class DifficultyReport:
    """What the report shows of one difficulty, from the runs or from a saved `report.json`."""

    result: DifficultyResult
    curves: dict[str, dict[str, dict[str, dict]]] | None
    """`{metric: mean_curves(...)}`; None when read from a `report.json` made before it kept the curves."""
    unfinished: list[str] = field(default_factory=list)
    samples: list[dict] | None = None
    """The heatmap's records (`credo.study.heatmap.collect_samples`); None: none at hand (a page there stays)."""

    def metrics(self) -> list[str]:
        """The metrics with a figure: the report's, pass@1 and the largest pass@k."""
        if self.curves is not None:
            return list(self.curves)
        largest = self.result.largest_pass_k
        return [self.result.metric] + [k for k in ("pass@1", largest) if k and k != self.result.metric]

    def as_json(self) -> dict:
        out = {"metric": self.result.metric, "auc_tokens": self.result.budget, "baseline_final": self.result.target,
               "methods": [r.as_json() for r in self.result.rows]}
        if self.unfinished:
            out["unfinished"] = self.unfinished
        if self.curves is not None:
            out["curves"] = self.curves
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
        result = analyse(by_method, report, difficulty)
        metrics = [result.metric] + [k for k in ("pass@1", result.largest_pass_k)
                                     if k and k != result.metric and _has_curve(by_method, k)]
        out[difficulty] = DifficultyReport(
            result, {metric: mean_curves(by_method, metric) for metric in metrics},
            [f"{m} ({len(rs)}/{len(seeds_of(study, m))})" for m, rs in by_method.items()
             if len(rs) < len(seeds_of(study, m))],
            collect_samples(by_method, report.heatmap_step))
    return out


def results_from_json(directory: Path, study: dict) -> dict[str, DifficultyReport | None]:
    """Every difficulty's report as a report folder's `report.json` (and `credit_<difficulty>.jsonl`) saved it."""
    path = directory / "report.json"
    if not path.exists():
        raise FileNotFoundError(f"{directory}: no report.json to draw the report from (--from-json re-draws a written report)")
    data = json.loads(path.read_text())
    if not data:
        raise NoFinishedRuns(f"{path} holds no results; nothing to draw, so the report there is left as it was")
    out: dict[str, DifficultyReport | None] = {}
    for difficulty in study["difficulties"]:
        saved = data.get(difficulty)
        if saved is None:
            out[difficulty] = None
            continue
        result = DifficultyResult(difficulty, saved["metric"], saved["auc_tokens"], saved["baseline_final"],
                                  [MethodRow.from_json(m) for m in saved["methods"]])
        records = directory / f"credit_{difficulty}.jsonl"
        out[difficulty] = DifficultyReport(result, saved.get("curves"), saved.get("unfinished", []),
                                           list(iter_jsonl(records)) if records.exists() else None)
    return out


def report_json(results: dict[str, DifficultyReport | None]) -> str:
    """`report.json`'s text: indented, each list of numbers (a curve) on one line."""
    text = json.dumps({d: r.as_json() for d, r in results.items() if r is not None}, indent=2)
    return re.sub(r"\[\s*([^\[\]{}\"]*?)\s*\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text) + "\n"


def write_report(directory: str | Path, output: str | Path | None = None, *, html: bool = False,
                 from_json: bool = False) -> Path:
    """Write `report.md` (and `report.html`), `report.json`, plots and credit heatmaps; returns the Markdown path.

    `output` (default: the study directory) receives the report; the runs stay where they are. With
    `from_json`, `directory` is a report folder (its `study.yaml`, `report.json` and heatmap records; no runs
    needed): the figures are drawn and the report written again from what it saved. Everything is read and
    computed before the first file is written; a directory without any finished run is `NoFinishedRuns`.
    """
    directory = Path(directory)
    out = Path(output) if output is not None else directory
    study_file = directory / STUDY_FILE
    if not study_file.exists():
        raise FileNotFoundError(f"{directory} is not a study directory (no {STUDY_FILE}); run `credo compare` first")
    study = yaml.safe_load(study_file.read_text())
    report = ReportConfig(**study.get("report", {}))
    results = results_from_json(directory, study) if from_json else results_from_runs(directory, report)

    blocks: list[Block] = [Heading(f"Study: {study['name']}", 1)]
    if study.get("command"):
        blocks += [Paragraph("Made by:"), Code(study["command"])]
    methods = ", ".join(f"`{m}`" for m in study["methods"])
    blocks.append(Paragraph(f"Methods {methods}; seeds {study['seeds']}; the seeds pair runs across methods (same "
                            "starting model, same prompt stream per seed). Intervals are 95% Student-t intervals over "
                            "seeds; `share` intervals are paired bootstraps over seeds."))
    out.mkdir(parents=True, exist_ok=True)
    for difficulty, saved in results.items():
        if saved is None:
            blocks += [Heading(f"{difficulty}"), Paragraph("No finished runs yet.")]
            continue
        result = saved.result
        blocks.append(Heading(f"{difficulty}" if len(results) > 1 else "Results"))
        if saved.unfinished:
            blocks.append(Paragraph(f"Unfinished (finished seeds / all): {', '.join(saved.unfinished)}."))
        blocks += [table(result, report), Heading("Findings", 3), Bullets(tuple(findings(result, report)))]
        forest = f"plots/{difficulty}_area_vs_{report.baseline}.png"
        if plot_differences(result, report.baseline, out / forest, f"{study['name']} · {difficulty}"):
            blocks.append(Image(forest, f"paired difference of the area to {report.baseline}'s"))
        kept = []
        for metric in saved.metrics():
            name = f"plots/{difficulty}_{metric.replace('@', '_at_')}.png"
            if saved.curves is not None:
                plot_curves(saved.curves[metric], metric, out / name, f"{study['name']} · {difficulty}",
                            budget=result.budget)
            elif _keep(directory, out, name):
                kept.append(name)
            else:
                continue
            blocks.append(Image(name, f"{metric} against steps, rollout tokens and wall time"))
            if saved.curves is not None and metric == report.metric:
                blocks += family_curves(saved.curves[metric], metric, report, out, name,
                                        f"{study['name']} · {difficulty}", result.budget)
        if kept:
            blocks.insert(len(blocks) - len(kept), Paragraph(
                "The curves below are as an earlier version of the report drew them: this report's `report.json` "
                "holds no curve data to draw them again (it was written before the report kept the curves)."))
        page = f"credit_{difficulty}.html"
        if saved.samples is not None:
            write_heatmap(saved.samples, out / page, scale=report.heatmap_scale,
                          title=f"{study['name']} · {difficulty}: credit per token at step {report.heatmap_step}")
        elif not _keep(directory, out, page):
            continue
        blocks.append(Paragraph(f"Credit heatmaps of sample responses: [{page}]({page})."))
    blocks += glossary()
    if out.resolve() != directory.resolve():
        shutil.copyfile(study_file, out / STUDY_FILE)
    write_text_atomic(out / "report.json", report_json(results))
    write_text_atomic(out / "report.md", to_markdown(blocks))
    if html:
        write_text_atomic(out / "report.html", to_html(blocks, f"credo study {study['name']}"))
    return out / "report.md"


def family_curves(curves: dict[str, dict], metric: str, report: ReportConfig, out: Path, name: str, title: str,
                  budget: float) -> list[Block]:
    """The headline curves family by family (`family_figures`), each beside the baseline and the oracle: one figure
    per family, `<name>_<family>.png`, and their images."""
    blocks: list[Block] = []
    for family, methods in family_figures(list(curves), report).items():
        path = name.removesuffix(".png") + f"_{family}.png"
        plot_curves({m: curves[m] for m in methods}, metric, out / path, f"{title} · {family} methods", budget=budget)
        beside = " and ".join(f"`{m}`" for m in (report.baseline, report.oracle) if m in methods)
        blocks.append(Image(path, f"{metric} of the {family} methods beside {beside}"))
    return blocks


def _keep(directory: Path, out: Path, name: str) -> bool:
    """Whether a file the report cannot make again is there (copied into `out` when it writes elsewhere)."""
    source = directory / name
    if not source.exists():
        return False
    if out.resolve() != directory.resolve():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, out / name)
    return True


def _has_curve(runs: dict[str, list[Run]], metric: str) -> bool:
    """Whether every run evaluated `metric` at least twice (not only at its end, `eval.final_samples`)."""
    return all(sum(metric in e["eval"] for e in r.evals) >= 2 for rs in runs.values() for r in rs)


def glossary() -> list[Block]:
    return [Heading("How to read the table", 3), Bullets((
        "final: the held-out metric at the last evaluation (mean ± half-width of the 95% interval).",
        "area: the mean height of the learning curve against rollout tokens, from 0 to the budget in the header "
        "(the smallest final budget in the grid unless the study sets `report.auc_tokens`): equal cost for every method.",
        "Δ area: the paired difference to the baseline's area, seed by seed, with its 95% interval in brackets; at "
        "equal steps: of the areas against optimiser steps, each pair over the steps both runs trained; vs "
        "like-for-like: to the baseline the study "
        "names for the method (`report.like_for_like`: the same optimiser steps per batch and learning rate); "
        "Δ final pass@k: the paired difference of the final pass@k (unbiased, from the final samples) to the "
        "baseline's.",
        "unstable runs: runs whose last evaluation fell below their first, or whose gradient norm at some step exceeded "
        f"{EXPLODED:g}x the run's median.",
        "share of the oracle's gain: (area − baseline's) / (oracle's − baseline's) over paired seeds; 1 recovers all of "
        "perfect blame, 0 none, negative is worse than the baseline; undefined when the oracle is no better than the "
        "baseline; an unbounded interval means some bootstrap resample had no oracle gain.",
        "tokens to baseline final: rollout tokens until the curve first reaches the baseline's mean final score "
        "(linear between evaluations), over the seeds that reached it.",
        "blame precision: share of failed responses' negative credit (−dLoss/dlogp) on or after their first wrong step, "
        "averaged over training steps (`credo.diagnostics`).",
        "rollout tokens: every generated token (seeds, discarded draws, localisation, revisions), the cost axis.",
    ))]

