"""The words and tables of a regime's report: the verdict table, every metric's table, the findings, the glossary.

Each is a function of a `credo.study.analysis.DifficultyResult`: `table` (the headline metric: areas, the paired
differences with their raw 95% intervals beside the Holm verdicts, the share of the oracle's gain, cost),
`metrics_table` (every compared metric's paired differences to the baseline), `regime_notes` (the family, its
detectable effect, how the areas were measured), `findings` (plain-word sentences; a method whose metrics
disagree says so first), `unrecomputed` (what a report without per-seed values could not recompute) and
`glossary` (every column).
"""

from __future__ import annotations

from credo.study.analysis import (
    ALPHA,
    AXES,
    POWER,
    Contrast,
    DifficultyResult,
    MethodRow,
    direction,
    disagreement,
    measures,
)
from credo.study.document import Block, Bullets, Heading, Paragraph, Table
from credo.study.grid import ReportConfig, endpoint_label, method_values
from credo.study.runs import EXPLODED
from credo.study.stats import Estimate, smallest_exact_p
from credo.study.tuning import Choice, step_size_controls, tuned_method

NEEDS_RUNS = "needs per-seed values (runs not committed)"


def tokens_text(n: float) -> str:
    """A token count as `900k` or `1.20M`."""
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.0f}k"


def bracketed(e: Estimate) -> str:
    """A paired difference as a table cell: `+0.024 [-0.018, +0.065]` (the raw 95% interval in brackets)."""
    if e.low is None:
        return f"{e.mean:+.3f}"
    return f"{e.mean:+.3f} [{e.low:+.3f}, {e.high:+.3f}]"


def p_text(p: float) -> str:
    """A p-value to three decimals, `<0.001` below."""
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def per_seed_text(c: Contrast) -> str:
    """A descriptive contrast's per-seed differences: `+0.010, +0.030`."""
    return ", ".join(f"{v:+.3f}" for v in c.values)


def difference_cell(c: Contrast) -> str:
    """A contrast's paired difference as a table cell: `bracketed`, or for a descriptive one (too few seeds for a
    test) its mean and per-seed values: `+0.020 (per seed +0.010, +0.030)`."""
    if c.descriptive:
        return f"{c.estimate.mean:+.3f}" + (f" (per seed {per_seed_text(c)})" if c.values else "")
    return bracketed(c.estimate)


def verdict_cell(c: Contrast) -> str:
    """A contrast's verdict with its Holm-adjusted p: `beats (0.003)`; an exploratory one's with its raw p:
    `beats, exploratory (raw p 0.030)`; `identical`, `one seed` and `descriptive` (its seeds) alone."""
    if c.descriptive:
        return f"descriptive ({c.estimate.n} seeds, no test)"
    if c.exploratory and c.p is not None and c.verdict != "identical":
        return f"{c.verdict}, exploratory (raw p {p_text(c.p)})"
    if c.p_holm is None or c.verdict == "identical":
        return c.verdict
    return f"{c.verdict} ({p_text(c.p_holm)})"


def signed(e: Estimate) -> str:
    """A paired difference in a sentence: `+0.024, interval -0.018 to +0.065`."""
    if e.low is None:
        return f"{e.mean:+.3f}"
    return f"{e.mean:+.3f}, interval {e.low:+.3f} to {e.high:+.3f}"


def tested(c: Contrast) -> str:
    """A contrast in a sentence: `signed` with its Holm-adjusted p (an exploratory one's raw p, said so; a
    descriptive one's per-seed values)."""
    if c.descriptive:
        return f"{c.estimate.mean:+.3f}" + (f", per seed {per_seed_text(c)}" if c.values else "") + (
            f"; {c.estimate.n} seeds: descriptive, no test")
    if c.exploratory and c.p is not None:
        return signed(c.estimate) + f", raw p {p_text(c.p)}, exploratory: outside the Holm family"
    return signed(c.estimate) + ("" if c.p_holm is None else f", Holm p {p_text(c.p_holm)}")


def verb(c: Contrast) -> str:
    """A contrast's verdict as the verb of a findings sentence."""
    said = c.verdict
    return {"one seed": "cannot be told apart (one seed) from",
            "descriptive": "is described (too few seeds to test) against",
            "not distinguishable": "is not distinguishable from",
            "equivalent": "is equivalent (TOST at the plan's margin) to",
            "identical": "is identical on every seed to"}.get(said, said)


def share_text(row: MethodRow, result: DifficultyResult) -> str:
    """The share of the oracle's gain; a report without per-seed values keeps its value and has no interval."""
    if result.per_seed or row.share.value is None or row.share.seeds < 2:
        return str(row.share)
    return f"{row.share.value:.2f} [interval {NEEDS_RUNS}]"


def area_header(result: DifficultyResult) -> str:
    where = "token checkpoints" if result.token_grid else "interpolated between evaluations"
    return f"area ≤{tokens_text(result.budget)} tok ({where})"


def table(result: DifficultyResult, report: ReportConfig) -> Table:
    """The headline metric's table: a row per method."""
    reported = {k for r in result.rows for k in r.final}
    columns = [
        ("method", lambda r: f"`{r.method}`"),
        ("seeds", lambda r: str(r.seeds)),
        *((f"final {k}", lambda r, k=k: str(r.final[k]) if k in r.final else "–") for k in result.metrics if k in reported),
        (area_header(result), lambda r: str(r.auc)),
        (f"Δ area vs {report.baseline} (raw 95%)", lambda r: difference_cell(r.auc_vs_baseline) if r.auc_vs_baseline else "–"),
        ("verdict (Holm p)", lambda r: verdict_cell(r.auc_vs_baseline) if r.auc_vs_baseline else "–"),
    ]
    if report.like_for_like:
        columns += [
            ("Δ area vs like-for-like (raw 95%)",
             lambda r: f"{difference_cell(r.auc_vs_like)} vs `{r.like_for_like}`" if r.auc_vs_like else "–"),
            ("verdict vs like-for-like (Holm p)", lambda r: verdict_cell(r.auc_vs_like) if r.auc_vs_like else "–"),
        ]
    if report.step_size_controls:
        columns += [
            ("Δ area vs step-size control (raw 95%)",
             lambda r: f"{difference_cell(r.auc_vs_control)} vs `{r.step_size_control}`" if r.auc_vs_control else "–"),
            ("verdict vs step-size control (Holm p)",
             lambda r: verdict_cell(r.auc_vs_control) if r.auc_vs_control else "–"),
        ]
    if report.oracle:
        columns.append((f"share of {report.oracle} gain (Fieller 95%)",
                        lambda r: share_text(r, result) if r.share else "–"))
    columns += [
        (f"tokens to {report.baseline} final ({result.target:.3f})",
         lambda r: f"{tokens_text(r.tokens_to_target.mean)} ({r.reached}/{r.seeds})" if r.tokens_to_target
         else f"not reached (0/{r.seeds})"),
        ("blame precision", lambda r: str(r.blame_precision) if r.blame_precision else "–"),
        ("unstable runs", lambda r: f"{r.unstable}/{r.seeds}"),
        ("rollout tokens", lambda r: tokens_text(r.rollout_tokens.mean)),
        ("wall s", lambda r: f"{r.wall_s.mean:.0f}"),
    ]
    if any(r.update_norm is not None for r in result.rows):  # runs logged before update sizes have none
        columns.append(("update size", lambda r: f"{r.update_norm.mean:.3g}" if r.update_norm else "–"))
    return Table(tuple(name for name, _ in columns), tuple(tuple(cell(r) for _, cell in columns) for r in result.rows))


def metrics_table(result: DifficultyResult, report: ReportConfig) -> Table | None:
    """Every compared metric's paired differences to the baseline (raw 95% intervals): its areas at equal rollout
    tokens and at equal steps where it has curves, its final; columns without a number are left out. None when
    nothing but the headline's area at equal tokens (the verdict table's) was measured."""
    columns = [("method", lambda r: f"`{r.method}`")]
    for metric in result.metrics:
        for axis, label in AXES.items():
            columns.append((f"Δ {metric} area, {label}", lambda r, m=metric, a=axis:
                            bracketed(r.areas_vs_baseline[m][a]) if a in r.areas_vs_baseline.get(m, {}) else "–"))
        columns.append((f"Δ final {metric}", lambda r, m=metric:
                        bracketed(r.final_vs_baseline[m]) if m in r.final_vs_baseline else "–"))
    columns.append(("metrics agree", lambda r: "–" if sum(direction(e) is not None for _, e in measures(r, result)) < 2
                    else "no" if disagreement(r, result) else "yes"))
    rows = [r for r in result.rows if r.method != report.baseline and r.auc_vs_baseline is not None]
    cells = [[cell(r) for _, cell in columns] for r in rows]
    keep = [i for i in range(len(columns)) if i == 0 or any(c[i] != "–" for c in cells)]
    if len(keep) <= 2:
        return None
    return Table(tuple(columns[i][0] for i in keep), tuple(tuple(c[i] for i in keep) for c in cells))


def secondary_table(result: DifficultyResult, report: ReportConfig) -> Table | None:
    """The secondary endpoints' contrasts (`ReportConfig.secondary`): per method and endpoint the paired difference of
    its area at equal rollout tokens (or its final value) with its raw 95% interval and its verdict in the regime's
    one Holm family; None without secondary endpoints."""
    rows = [r for r in result.rows if r.secondary_vs_baseline]
    if not report.secondary or not rows:
        return None
    header = ["method"]
    for name in report.secondary:
        header += [f"Δ {endpoint_label(name)} vs {report.baseline} (raw 95%)", f"{endpoint_label(name)} verdict (Holm p)"]
    cells = []
    for r in rows:
        cells.append((f"`{r.method}`", *(text for m in report.secondary for text in (
            (difference_cell(r.secondary_vs_baseline[m]), verdict_cell(r.secondary_vs_baseline[m]))
            if m in r.secondary_vs_baseline else ("–", "–")))))
    return Table(tuple(header), tuple(cells))


def second_baselines(report: ReportConfig) -> str:
    """The family's contrasts beside the baseline's, as the notes name them: `", and to its like-for-like baseline's
    and its step-size control's"`, each where the study names any; "" where it names none."""
    named = [name for name, pairs in (("its like-for-like baseline's", report.like_for_like),
                                      ("its step-size control's", report.step_size_controls)) if pairs]
    return f", and to {' and '.join(named)}" if named else ""


def regime_notes(result: DifficultyResult, report: ReportConfig) -> list[Paragraph]:
    """How the regime's verdicts and areas were made: the family, its detectable effect, the areas' points."""
    family = result.family
    contrasts = (f"each method's paired difference of the {result.metric} area (the primary endpoint) to "
                 f"`{report.baseline}`'s"
                 + (f", of the secondary endpoints ({_names(report.secondary)})" if report.secondary else "")
                 + second_baselines(report))
    notes = [f"Verdicts: Holm's correction over this regime's {family.size} contrasts ({contrasts}) at family-wise "
             f"level {ALPHA:g}; the tables give each raw 95% interval beside the Holm-adjusted p." if family.size else
             f"Verdicts: none of this regime's contrasts ({contrasts}) has a test."]
    described = [r.method for r in result.rows if r.auc_vs_baseline is not None and r.auc_vs_baseline.descriptive]
    if described:
        notes.append(f"Descriptive, without a test or a verdict (fewer than {report.min_verdict_seeds} paired seeds: a "
                     f"survey), each with its per-seed differences: {_names(described)}.")
    if family.mde is not None:
        notes.append(f"Minimum detectable effect after the correction: {family.mde:.3f} in area at {POWER:.0%} power "
                     f"with {family.seeds} paired seeds (paired t-test at level {ALPHA:g}/{family.size} = "
                     f"{family.level:.2g}, Bonferroni's bound, which is Holm's first step and so conservative; median "
                     f"paired sd {family.sd:.3f} of the {family.counted} contrasts at {family.seeds} seeds). A smaller "
                     "true effect may be reported as not distinguishable. Each contrast's own (its own paired sd): "
                     "report.json's `mde`.")
        exact = smallest_exact_p(family.seeds)
        if family.size and exact >= family.level:
            notes.append(f"With {family.seeds} seeds an exact sign-flip test cannot give a p below {exact:.2g}, above "
                         f"Holm's first threshold {family.level:.2g}: only the t-test's distributional assumption "
                         "lets a contrast pass the correction here; more seeds would let the data alone decide.")
    if result.devices:
        notes.append(where_runs_ran(result.devices))
    exploratory = [r.method for r in result.rows if r.method in report.exploratory]
    if exploratory:
        notes.append(f"Exploratory, outside the family (added after results were seen; verdicts at the raw p): "
                     f"{_names(exploratory)}.")
    grid = result.token_grid
    if grid is not None and grid.mean_lateness is None:
        areas = [f"Areas at equal rollout tokens are trapezoid means over the token checkpoints 0, "
                 f"{tokens_text(grid.every)}, ..., {tokens_text(grid.budget)} every run measured "
                 f"(`train.eval_every_tokens`), each the value of the first evaluation at or after it (as this report "
                 f"was written; the largest overshoot of an evaluation past its checkpoint is {grid.largest_lateness:.1%} "
                 "of the spacing, which flatters a curve that was still rising)."]
    else:
        areas = [f"Areas at equal rollout tokens are the curves' means over [0, {tokens_text(result.budget)}] tokens, "
                 "each curve read as linear between its own neighbouring evaluations at every point (never beyond its "
                 "last)" + ("." if grid is None else
                            f"; the runs evaluated at the first step after each token checkpoint (every "
                            f"{tokens_text(grid.every)}, `train.eval_every_tokens`), on average {grid.mean_lateness:.1%} "
                            f"of the spacing after it, at most {grid.largest_lateness:.1%}.")]
    if result.update_budget is not None:
        areas.append(f"Areas at equal optimiser updates are the curves' means over the first "
                     f"{result.update_budget:.0f} updates (the regime's shortest run; rollout batches x mini-batches x "
                     "epochs), read the same way.")
    elif result.per_seed:
        areas.append("This report was written before areas at equal optimiser updates: its per-seed steps counted "
                     "rollout batches, so no equal-update contrast is drawn from them.")
    if any("steps" in by_axis for r in result.rows for by_axis in r.areas_vs_baseline.values()):
        areas.append("Areas at equal steps were computed, before the report kept per-seed values, over the rollout "
                     "batches both runs trained (not optimiser updates), each curve interpolated between its own "
                     "evaluations.")
    finals_only = [m for m in result.metrics if m not in result.curve_metrics]
    if finals_only and result.per_seed:
        areas.append(f"{_names(finals_only)} {'was' if len(finals_only) == 1 else 'were'} measured only at the final "
                     "evaluation (`eval.final_samples`): finals, no areas.")
    return [Paragraph(" ".join(notes)), Paragraph(" ".join(areas))]


def where_runs_ran(devices: dict[str, dict[str, list[int]]]) -> str:
    """Which runs trained where (`summary.json`'s `device`): one device in a sentence; several each with its runs,
    since wall times compare only between runs on one device."""
    counts = {device: sum(len(seeds) for seeds in by_method.values()) for device, by_method in devices.items()}
    if len(devices) == 1:
        (device, count), = counts.items()
        return f"Every run whose summary records its device ({count}) trained on {device}."

    def runs(by_method: dict[str, list[int]]) -> str:
        return ", ".join(f"`{method}` seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"
                         for method, seeds in by_method.items())

    listed = "; ".join(f"{device} ({counts[device]}): {runs(by_method)}" for device, by_method in devices.items())
    return f"The runs trained on {len(devices)} devices, so wall times compare only within one: {listed}."


def unrecomputed(result: DifficultyResult, drawn: list[str]) -> Paragraph:
    """What a report written without per-seed values could not recompute (`drawn`: the metrics whose mean curves it
    kept)."""
    others = [m for m in result.metrics if m != result.metric]
    with_curves, final_only = [m for m in others if m in drawn], [m for m in others if m not in drawn]
    recovered = ("the verdicts use p-values recovered exactly from the written 95% t-intervals (t = mean / "
                 "(half-width / t_{0.975, n-1}), n - 1 degrees of freedom); " if result.family.size else "")
    parts = ["The runs are not committed and this report's `report.json` was written before the report kept per-seed "
             f"values. Per-seed values: {recovered}the share of the oracle's gain keeps its value, but Fieller's "
             "interval needs each seed's areas; no contrast between two cells other than those written can be made "
             "(`examples/contrast.py`)."]
    if with_curves:
        parts.append(f"Areas of the sampled metrics: {_names(with_curves)} have curves only as means over seeds, so "
                     "their paired area differences need the runs.")
    if final_only:
        parts.append(f"{_names(final_only)} {'was' if len(final_only) == 1 else 'were'} measured only at the final "
                     "evaluation: finals, no areas.")
    if not any(r.final_vs_baseline for r in result.rows):
        parts.append("The paired differences of the final metrics: this `report.json` predates them.")
    parts.append("Measured-point alignment: the areas at equal tokens are interpolated between evaluations (the runs "
                 "had no token checkpoints)" + (", and the areas at equal steps interpolate each curve between its own "
                 "evaluations over the steps both runs trained, where restricting them to the steps both runs evaluated "
                 "needs the runs." if any("steps" in a for r in result.rows for a in r.areas_vs_baseline.values())
                 else "; this report has no areas at equal steps."))
    return Paragraph(" ".join(parts))


def _names(metrics: list[str]) -> str:
    quoted = [f"`{m}`" for m in metrics]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def disagreement_sentence(row: MethodRow, result: DifficultyResult, baseline: str) -> str:
    """`"`m`'s metrics disagree (raw 95% intervals): ahead of `b` on ...; behind on ...; not distinguishable on
    ... ."` where they do (`analysis.disagreement`); empty otherwise."""
    sides = disagreement(row, result)
    if sides is None:
        return ""
    said = [f"{label} {', '.join(sides[side])}" for side, label in
            ((1, f"ahead of `{baseline}` on"), (-1, "behind on"), (0, "not distinguishable on")) if side in sides]
    return f"`{row.method}`'s metrics disagree (raw 95% intervals): {'; '.join(said)}. "


def secondary_clause(row: MethodRow) -> str:
    """`"; on the pass@1 area (a secondary endpoint) it beats it (+0.1, ..., Holm p 0.01)"` per secondary endpoint."""
    return "".join(f"; on the {endpoint_label(name)} (a secondary endpoint) it {verb(c)} it ({tested(c)})"
                   for name, c in row.secondary_vs_baseline.items())


STEP_SIZE_TOLERANCE = 1.1
"""A cell whose mean update size is more than this multiple of the baseline's moves the policy further per batch."""


def control_clause(row: MethodRow) -> str:
    """`"; against its step-size control `grpo@lr=4e-04` it beats it (+0.1, ..., Holm p 0.01)"` where the row has a
    contrast to its step-size control (`ReportConfig.step_size_controls`); "" otherwise."""
    c = row.auc_vs_control
    if c is None:
        return ""
    return f"; against its step-size control `{row.step_size_control}` it {verb(c)} it ({tested(c)})"


def step_size_clause(row: MethodRow, base: MethodRow) -> str:
    """For a gain whose cell takes larger steps than the baseline (mean update size over `STEP_SIZE_TOLERANCE` x the
    baseline's): a clause saying so, since a larger step alone shows up as an early gain
    (docs/guides/studies.md, "The report"), and pointing to the contrast with its step-size control where the report
    has one (`control_clause`), or asking for that control where it has none; "" otherwise."""
    gain = row.auc_vs_baseline
    if (gain is None or gain.estimate.mean <= 0 or gain.verdict == "falls behind" or row.update_norm is None
            or base.update_norm is None or base.update_norm.mean <= 0):
        return ""
    ratio = row.update_norm.mean / base.update_norm.mean
    if ratio <= STEP_SIZE_TOLERANCE:
        return ""
    if row.auc_vs_control is not None:
        return (f"; its updates are {ratio:.2f}x the baseline's in size, so the contrast with its step-size control "
                f"`{row.step_size_control}`, not the baseline's, says whether this gain is credit")
    return (f"; its updates are {ratio:.2f}x the baseline's in size, so before this gain is called credit, compare "
            "the baseline at a matched step size (a larger learning rate or more mini-batches)")


def findings(result: DifficultyResult, report: ReportConfig) -> list[str]:
    """Plain-word sentences: each method against the baseline, and against the oracle's gain."""
    rows = {r.method: r for r in result.rows}
    base = rows[report.baseline]
    base_tokens = base.tokens_to_target.mean if base.tokens_to_target else None
    out = [f"`{report.baseline}` (the baseline) ends at {result.metric} {base.final[result.metric]} and averages "
           f"{base.auc} over the first {result.budget:,.0f} rollout tokens (mean ± 95% interval over {base.seeds} seeds)."]
    oracle = rows.get(report.oracle)
    if oracle is not None and oracle.auc_vs_baseline is not None:
        gain = oracle.auc_vs_baseline
        out.append(disagreement_sentence(oracle, result, report.baseline)
                   + f"The yardstick `{report.oracle}` {verb(gain)} `{report.baseline}` (paired difference of the "
                   f"areas {tested(gain)}{control_clause(oracle)}{secondary_clause(oracle)}"
                   f"{step_size_clause(oracle, base)}); a method's "
                   "share of this gain says how much of perfect blame it recovers.")
    largest = next((m for m in result.metrics if m.startswith("pass@") and m != "pass@1"), None)
    for row in result.rows:
        if row.method in (report.baseline, report.oracle) or row.auc_vs_baseline is None:
            continue
        diff = row.auc_vs_baseline
        sentence = (disagreement_sentence(row, result, report.baseline)
                    + f"`{row.method}` {verb(diff)} `{report.baseline}` (area {row.auc.mean:.3f}, paired difference "
                    f"{tested(diff)})")
        if row.auc_vs_like is not None:
            sentence += f"; it {verb(row.auc_vs_like)} its like-for-like `{row.like_for_like}` ({tested(row.auc_vs_like)})"
            sentence += "".join(f"; on the {endpoint_label(name)} it {verb(c)} `{row.like_for_like}` ({tested(c)})"
                                for name, c in row.secondary_vs_like.items())
        sentence += control_clause(row) + secondary_clause(row) + step_size_clause(row, base)
        if largest and largest in row.final_vs_baseline:
            sentence += f"; final {largest} {signed(row.final_vs_baseline[largest])} against the baseline's"
        if row.share is not None:
            sentence += f"; share of the oracle's gain {share_text(row, result)}"
        if row.reached == 0:
            sentence += f"; it never reached the baseline's final {result.metric} ({result.target:.3f})"
        elif base_tokens:
            sentence += (f"; it reached the baseline's final score in {row.reached} of {row.seeds} seeds, after "
                         f"{row.tokens_to_target.mean / base_tokens:.2f}x the baseline's tokens")
        out.append(sentence + ".")
    return out


STEP_SIZE_CONTROL_NOTE = (
    "Δ area vs step-size control: the paired difference to the cell the study names as the method's step-size "
    "control (`report.step_size_controls`): the baseline's recipe at a step as large as the method's (e.g. its "
    "learning rate whose mean update size, `optim/update_norm`, is nearest the method's), so a gain that a larger "
    "step alone explains does not beat it; its verdict is in the same Holm family as the others.")
"""The glossary's line for the step-size controls' columns, in a report whose study names any."""


def glossary(report: ReportConfig) -> list[Block]:
    """The "How to read the tables" bullets: every column (the step-size controls' only where the study names
    any)."""
    return [Heading("How to read the tables", 3), Bullets((
        "final: the held-out metric at the last evaluation (mean ± half-width of the 95% Student-t interval over seeds).",
        "area: the mean height of the learning curve against rollout tokens, from 0 to the budget in the header (the "
        "smallest final budget in the grid unless the study sets `report.auc_tokens`): equal cost for every method. "
        "Each curve is read as linear between its own neighbouring evaluations at every point up to the budget. "
        "\"token checkpoints\": the runs evaluated at the first step after each nominal checkpoint 0, X, 2X, ... "
        "(`train.eval_every_tokens`), so every point's neighbours are close (the notes give how late they came); "
        "\"interpolated between evaluations\": at the evaluations a run happened to make (runs without token "
        "checkpoints).",
        "Δ area (raw 95%): the paired difference to the baseline's area, seed by seed, with its 95% t-interval in "
        "brackets, not corrected for the number of contrasts; vs like-for-like: to the baseline the study names for "
        "the method (`report.like_for_like`: the same optimiser steps per batch and learning rate).",
        *((STEP_SIZE_CONTROL_NOTE,) if report.step_size_controls else ()),
        "verdict (Holm p): beats / falls behind / not distinguishable, from the two-sided paired t-test's p-value "
        "after Holm's (1979) correction over the regime's family (every Δ area vs the baseline, on the primary and "
        "every secondary endpoint, and vs a like-for-like baseline): p~_(i) = max over j <= i of min(1, (m - j + 1) "
        "p_(j)) for the sorted p-values, significant "
        f"below {ALPHA:g}; identical: every seed's difference is 0 (the same runs); one seed: no test. A raw interval "
        "that excludes 0 with a verdict of not distinguishable did not survive the correction. exploratory: a cell "
        "added after results were seen (`report.exploratory`), read at its raw p, outside the family.",
        "every metric's table: the paired differences to the baseline of greedy pass@1, sampled pass@1 and the "
        "largest pass@k: their areas at equal rollout tokens, at equal optimiser steps (each pair of runs over the "
        "steps both evaluated: a method that spends more tokens per step trains fewer steps) and their finals (pass@k "
        "unbiased, from the final samples); a metric evaluated only at the end has no area. metrics agree: no when "
        "the raw intervals of these differences do not all lie on the same side of 0 (or all span it).",
        "unstable runs: runs whose last evaluation fell below their first, or whose gradient norm at some step exceeded "
        f"{EXPLODED:g}x the run's median.",
        "share of the oracle's gain: mean(area − baseline's) / mean(oracle's − baseline's) over paired seeds; 1 "
        "recovers all of perfect blame, 0 none, negative is worse than the baseline; undefined when the oracle is no "
        "better than the baseline. Its interval is Fieller's (1954): the ratios r for which the paired t-test of "
        "(method − baseline) − r (oracle − baseline) does not reject at 5%; unbounded when the oracle's gain is not "
        "significantly above 0.",
        "tokens to baseline final: rollout tokens until the curve first reaches the baseline's mean final score "
        "(linear between evaluations), over the seeds that reached it.",
        "blame precision: share of failed responses' negative credit (−dLoss/dlogp) on or after their first wrong step, "
        "averaged over training steps (`credo.diagnostics`).",
        "rollout tokens: every generated token (seeds, discarded draws, localisation, revisions), the cost axis.",
    ))]


def tuning_blocks(choices: list[Choice], study: dict, metric: str) -> list[Block]:
    """A tuning study's choices (`credo.study.tuning`): per method its mean area at each value, the chosen value, its
    margin over the runner-up (also in sds of their per-seed differences) and whether the grid brackets it."""
    tune = study["tune"]
    setting = tune["key"]

    def margin(c: Choice) -> str:
        if c.margin is None:
            return "–"
        return f"{c.margin:+.3f}" + ("" if c.margin_sd is None else f" ({c.margin_sd:.2f} sd)")

    columns = sorted({v for method in tune["methods"] for v in method_values(tune, method)})

    def mean(c: Choice, value: float) -> str:
        if value in c.means:
            return f"{c.means[value]:.3f}"
        return "unfinished" if value in method_values(tune, c.method) else "–"

    def size(c: Choice) -> str:
        return f"{c.update_sizes[c.chosen]:.3g}" if c.chosen in c.update_sizes else "–"

    rows = tuple((f"`{c.method}`", *(mean(c, v) for v in columns), f"{c.chosen:g}", margin(c), c.where, size(c))
                 for c in choices)
    narrow = [c.method for c in choices if c.margin_sd is not None and c.margin_sd < 1]
    text = (f"The rule (one for every method): the {setting} with the largest mean {metric} area at equal rollout tokens "
            f"over the tuning seeds, no tie-break; margin: the chosen value's mean minus the runner-up's, and in "
            "standard deviations of their per-seed differences; a choice at the grid's edge is not bracketed (extend "
            "the grid one step that way before it stands); – a value the method's grid does not hold.")
    if narrow:
        text += f" Chosen by less than one sd (the next seed may reverse it): {_names(narrow)}."
    blocks = [Heading("Tuning", 3), Paragraph(text),
              Table(("method", *(f"{setting} {v:g}" for v in columns), "chosen", "margin", "grid",
                     "update size at the choice"), rows)]
    baseline = tuned_method(study, study.get("report", {}).get("baseline"))
    controls = {m: v for m, v in step_size_controls(choices, baseline).items() if v is not None} if baseline else {}
    if controls:
        base = next(c for c in choices if c.method == baseline)
        pairs = [f"`{m}` -> {'its tuned value' if v == base.chosen else f'{setting} {v:g}'}"
                 for m, v in controls.items()]
        blocks.append(Paragraph(
            f"Step-size controls: for each method, `{baseline}` at the value of its grid whose mean update size "
            f"(`optim/update_norm`) is nearest, by ratio, the method's at its choice: {'; '.join(pairs)}."))
    return blocks
