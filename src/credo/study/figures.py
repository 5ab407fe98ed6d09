"""The report's figures: learning curves at equal cost with intervals over seeds, a forest plot of the verdicts.

- `mean_curves`: per method and cost axis (`AXES`), the seeds' mean curve of a metric with its 95% interval, as
  `report.json` keeps them (so that a report folder draws its figures again);
- `plot_curves`: the metric against steps, rollout tokens and wall time, a colour and line style per method;
- `family_curves`: for a study of many methods, the headline curves family by family (`family_figures`);
- `plot_differences`: each method's paired difference of the area to the baseline's with its raw 95% interval,
  coloured by its Holm verdict (`credo.study.analysis.Contrast.verdict`).
"""

from __future__ import annotations

from pathlib import Path

from credo.io import path_inside
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
from credo.study.analysis import DifficultyResult
from credo.study.curves import Curve, mean_curve
from credo.study.document import Block, Image
from credo.study.grid import ReportConfig
from credo.study.runs import Run
from credo.study.tables import tokens_text

AXES = {"step": "optimiser steps (rollout batches)", "rollout_tokens": "rollout tokens generated", "wall_s": "wall time (s)"}


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
        tokens.set_xlabel(f"rollout tokens generated, up to the areas' budget ({tokens_text(budget)})")
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
    registered method last as "other"): the family's methods with their like-for-like baselines and step-size
    controls, the baseline and the oracle, in the given order. Empty when there are `FAMILY_FIGURES_ABOVE` methods or
    fewer.

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
        members |= {pairs[m] for pairs in (report.like_for_like, report.step_size_controls) for m in members
                    if m in pairs} | anchors
        figures[family] = [m for m in methods if m in members]
    return figures


def plot_differences(result: DifficultyResult, baseline: str, path: Path, title: str) -> Path | None:
    """A forest plot: each method's paired difference of the area to the baseline's, with its raw 95% interval,
    coloured by its Holm verdict (blue: beats, vermillion: falls behind, grey: the rest); a descriptive contrast (too
    few seeds for a test) as its mean and per-seed differences."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    rows = [r for r in result.rows if r.auc_vs_baseline is not None]
    if not rows:
        return None
    styles = {"beats": ("#0072B2", "o"), "falls behind": ("#D55E00", "s"), "equivalent": ("#009E73", "^"),
              "not distinguishable": ("#777777", "D"), "identical": ("#777777", "x"), "one seed": ("#777777", "D"),
              "descriptive": ("#777777", "|")}
    single = all(r.auc_vs_baseline.p is None for r in rows)
    fig, ax = plt.subplots(figsize=(9, 1.6 + 0.3 * len(rows)), layout="constrained")
    used = set()
    for y, row in enumerate(reversed(rows)):
        d = row.auc_vs_baseline.estimate
        low, high = (d.low, d.high) if d.low is not None else (d.mean, d.mean)
        said = row.auc_vs_baseline.verdict
        used.add(said)
        colour, marker = styles[said]
        if said == "descriptive":  # too few seeds for an interval: the mean and each seed's difference
            ax.plot(row.auc_vs_baseline.values, [y] * len(row.auc_vs_baseline.values), ".", color=colour)
            ax.plot(d.mean, y, marker, color=colour, markersize=12)
            continue
        ax.errorbar(d.mean, y, xerr=[[d.mean - low], [high - d.mean]], fmt=marker, color=colour, capsize=3)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(rows)), [r.method for r in reversed(rows)])
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set(xlabel=f"paired Δ area vs {baseline} (≤{tokens_text(result.budget)} rollout tokens"
                  + (", one seed: no interval)" if single else "; raw 95% interval, colour: Holm verdict)"), title=title)
    ax.grid(axis="x", alpha=0.3)
    labels = {"beats": f"beats {baseline}", "falls behind": f"falls behind {baseline}",
              "equivalent": f"equivalent to {baseline} (TOST)",
              "not distinguishable": f"not distinguishable from {baseline}", "identical": f"identical to {baseline}",
              "one seed": "one seed (no interval)", "descriptive": "descriptive: mean and per-seed values (no test)"}
    handles = [Line2D([], [], color=styles[v][0], marker=styles[v][1], linestyle="", label=labels[v])
               for v in styles if v in used]
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=9, frameon=False)
    return save_figure(fig, path)


def family_curves(curves: dict[str, dict], metric: str, report: ReportConfig, out: Path, name: str, title: str,
                  budget: float) -> list[Block]:
    """The headline curves family by family (`family_figures`), each beside the baseline and the oracle: one figure
    per family, `<name>_<family>.png`, and their images."""
    blocks: list[Block] = []
    for family, methods in family_figures(list(curves), report).items():
        path = name.removesuffix(".png") + f"_{family}.png"
        plot_curves({m: curves[m] for m in methods}, metric, path_inside(out, path), f"{title} · {family} methods",
                    budget=budget)
        beside = " and ".join(f"`{m}`" for m in (report.baseline, report.oracle) if m in methods)
        blocks.append(Image(path, f"{metric} of the {family} methods beside {beside}"))
    return blocks
