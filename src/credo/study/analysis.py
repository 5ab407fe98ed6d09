"""The statistics of one regime (one difficulty of a study): paired contrasts, Holm's correction, verdicts.

From the per-seed values of a regime (`credo.study.seeds.RegimeValues`), `analyse` gives each method's row:
final scores and the headline area with 95% t-intervals over seeds; the paired differences to the baseline of
every compared metric (greedy and sampled pass@1, the largest pass@k: areas at equal rollout tokens and at
equal optimiser updates where the metric has curves, finals always); the share of the oracle's gain with
Fieller's interval (`credo.study.stats.share_of_gain`); tokens to the baseline's final score; blame
precision, instability and cost.

Verdicts. The family of a regime is every contrast that gets a verdict: each method's paired difference of the
headline area (the primary endpoint) to the baseline's, to its like-for-like baseline's where the study names one
(`ReportConfig.like_for_like`) and to its step-size control's where it names one (`ReportConfig.step_size_controls`),
and of each secondary endpoint (an area, or a final value) to the baseline's (`ReportConfig.secondary`) and, where
the study's plan registered it so (`ReportConfig.like_for_like_endpoints`), to the like-for-like baseline's:
one family over every metric that yields a verdict, so adding a metric makes every verdict harder, never easier.
Each has the two-sided p of the paired t-test over seeds (`stats.paired_p`); Holm's (1979) step-down adjustment over the family's m p-values (`stats.holm`) decides the
verdict at family-wise level `ALPHA`: "beats" / "falls behind" where the adjusted p is below it (by the sign of
the mean), "not distinguishable" otherwise, "identical" where every seed's difference is 0, "one seed" where
there is no test. `Family` states the minimum detectable effect after the correction at 80% power: a paired
t-test at level `ALPHA / m` (Bonferroni's bound, Holm's first step: the most demanding, so conservative) with the
median paired sd of the family's contrasts at the regime's main seed count (the baseline's).

A report written before the report kept per-seed values (`report.json` without `per_seed`) gives its rows
through `recovered_result`: each contrast's sd and p come back exactly from its written t-interval
(`stats.recovered` with `stats.written_quantile`), so Holm's correction applies; the share of the oracle's gain,
the other metrics' areas and the measured-point alignment cannot be recomputed without the runs.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from credo.study.grid import ReportConfig, endpoint
from credo.study.seeds import RegimeValues, SeedValues, TokenGrid, compared_metrics
from credo.study.stats import (
    Estimate,
    Share,
    detectable,
    equivalence_p,
    holm,
    mean_interval,
    paired_p,
    recovered,
    sample_sd,
    share_of_gain,
    written_quantile,
)

ALPHA = 0.05
"""The family-wise error rate of a regime's verdicts."""

POWER = 0.8
"""The power of the stated minimum detectable effect."""

AXES = {"tokens": "equal rollout tokens", "updates": "equal optimiser updates",
        "steps": "equal steps (rollout batches)"}
"""The axes of the areas and their names: equal rollout tokens, equal optimiser updates, and equal steps as a report
written before the updates were counted has them (rollout batches, whatever the mini-batches)."""


@dataclass(frozen=True)
class Contrast:
    """A paired difference of two cells over the seeds both ran, with its paired t-test."""

    estimate: Estimate
    sd: float | None
    """The sample sd of the per-seed differences (None with one seed)."""
    p: float | None
    """Two-sided p-value of the paired t-test (None with one seed)."""
    p_holm: float | None = None
    """The p-value after Holm's correction within the regime (None: not part of a corrected family)."""
    exploratory: bool = False
    """A contrast of a cell added after results were seen (`ReportConfig.exploratory`): outside the family, its
    verdict read at the raw p."""
    p_equivalent: float | None = None
    """The Holm-adjusted p of its equivalence test (TOST at `ReportConfig.equivalence_margin`; None: no margin)."""
    mde: float | None = None
    """Its own minimum detectable effect: 80% power at the family's Bonferroni level with its own paired sd and seeds
    (None outside a family or without spread); the family's median-sd one can hide a contrast that is noisier."""
    values: tuple[float, ...] = ()
    """The per-seed differences (empty for a contrast recovered from a written interval)."""
    descriptive: bool = False
    """Fewer paired seeds than `ReportConfig.min_verdict_seeds`: reported by its per-seed values, with no test."""

    @property
    def verdict(self) -> str:
        """"beats" / "falls behind" where the (Holm-adjusted, if adjusted) p is below `ALPHA`; "equivalent" where
        it is not but the equivalence test at the plan's margin is (`p_equivalent` below `ALPHA`); "not
        distinguishable" otherwise, never "level" or "equal"; "identical" when every seed's difference is exactly 0
        (the same runs: a method that reduces to the baseline, as REINFORCE does to GRPO on policy), "one seed"
        without a test; "descriptive" under `ReportConfig.min_verdict_seeds` paired seeds."""
        e = self.estimate
        if self.descriptive:
            return "descriptive"
        if self.p is None:
            return "one seed"
        if e.low == e.high == 0.0:
            return "identical"
        if (self.p if self.p_holm is None else self.p_holm) < ALPHA:
            return "beats" if e.mean > 0 else "falls behind"
        if self.p_equivalent is not None and self.p_equivalent < ALPHA:
            return "equivalent"
        return "not distinguishable"

    def as_json(self) -> dict:
        e = self.estimate
        return {"mean": e.mean, "low": e.low, "high": e.high, "n": e.n, "sd": self.sd, "p": self.p,
                "p_holm": self.p_holm, "verdict": self.verdict, **({"exploratory": True} if self.exploratory else {}),
                **({"p_equivalent": self.p_equivalent} if self.p_equivalent is not None else {}),
                **({"mde": self.mde} if self.mde is not None else {}),
                **({"descriptive": True, "per_seed": list(self.values)} if self.descriptive else {})}


def contrast(differences: list[float]) -> Contrast:
    """The contrast of per-seed differences: mean, 95% interval, sd and paired t-test."""
    e = mean_interval(differences)
    if e.n < 2:
        return Contrast(e, None, None, values=tuple(differences))
    sd = sample_sd(differences)
    return Contrast(e, sd, paired_p(e.mean, sd, e.n), values=tuple(differences))


def written_contrast(e: Estimate | None) -> Contrast | None:
    """The contrast behind an interval a report wrote before it kept per-seed values (`stats.recovered`)."""
    if e is None:
        return None
    if e.low is None:
        return Contrast(e, None, None)
    return Contrast(e, *recovered(e, written_quantile(e.n - 1)))


def direction(e: Estimate) -> int | None:
    """The raw 95% interval's side of 0: 1 above, -1 below, 0 spanning it; None without an interval."""
    if e.low is None:
        return None
    return 1 if e.low > 0 else -1 if e.high < 0 else 0


def paired(ours: dict[int, SeedValues], theirs: dict[int, SeedValues],
           value: Callable[[SeedValues, SeedValues], float | None]) -> Contrast | None:
    """The contrast of `value(ours, theirs)` over the seeds both ran where it is defined; None where it is nowhere."""
    differences = [d for s in sorted(set(ours) & set(theirs)) if (d := value(ours[s], theirs[s])) is not None]
    return contrast(differences) if differences else None


def differences(ours: dict[int, SeedValues], theirs: dict[int, SeedValues], metric: str) -> dict[str, Contrast]:
    """Two cells' paired differences on `metric`, where measured: `tokens` (the area at equal rollout tokens),
    `updates` (the area at equal optimiser updates) and `final`."""
    found = {
        "tokens": paired(ours, theirs, lambda a, b: a.area[metric] - b.area[metric]
                         if metric in a.area and metric in b.area else None),
        "updates": paired(ours, theirs, lambda a, b: a.area_updates[metric] - b.area_updates[metric]
                          if metric in a.area_updates and metric in b.area_updates else None),
        "final": paired(ours, theirs, lambda a, b: a.final[metric] - b.final[metric]
                        if metric in a.final and metric in b.final else None),
    }
    return {k: c for k, c in found.items() if c is not None}


@dataclass(frozen=True)
class MethodRow:
    """One method's numbers in one regime."""

    method: str
    seeds: int
    final: dict[str, Estimate]
    auc: Estimate
    """The headline metric's area at equal rollout tokens."""
    auc_vs_baseline: Contrast | None
    """Paired difference of the headline area to the baseline's: the verdict's contrast."""
    like_for_like: str | None
    """The method's like-for-like baseline (`ReportConfig.like_for_like`), if any."""
    auc_vs_like: Contrast | None
    """Paired difference of the headline area to the like-for-like baseline's."""
    step_size_control: str | None
    """The method's step-size control (`ReportConfig.step_size_controls`), if any."""
    auc_vs_control: Contrast | None
    """Paired difference of the headline area to the step-size control's: a gain over the baseline that is credit
    and not a larger step alone shows here too."""
    areas_vs_baseline: dict[str, dict[str, Estimate]]
    """Per metric with areas, the paired differences of its areas to the baseline's: `{"tokens": .., "updates": ..}`
    (`"steps"` in a report written before the updates were counted)."""
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
    update_norm: Estimate | None = None
    """The mean update size per rollout batch (`optim/update_norm`), to read a contrast at matched step size."""
    secondary_vs_baseline: dict[str, Contrast] = field(default_factory=dict)
    """Per secondary endpoint (`ReportConfig.secondary`), the paired difference of its area at equal rollout tokens
    (or, for `final:<metric>`, of its final value) to the baseline's: contrasts of the same Holm family as
    `auc_vs_baseline`."""
    secondary_vs_like: dict[str, Contrast] = field(default_factory=dict)
    """The same per secondary endpoint to the like-for-like baseline's, where the method has one and the study tests
    like-for-like pairs on every endpoint (`ReportConfig.like_for_like_endpoints`): in the family too."""

    def as_json(self) -> dict:
        def est(e: Estimate | None):
            return None if e is None else {"mean": e.mean, "low": e.low, "high": e.high, "n": e.n}

        return {
            "method": self.method, "seeds": self.seeds, "final": {k: est(v) for k, v in self.final.items()},
            "auc": est(self.auc), "auc_vs_baseline": self.auc_vs_baseline and self.auc_vs_baseline.as_json(),
            "like_for_like": self.like_for_like, "auc_vs_like_for_like": self.auc_vs_like and self.auc_vs_like.as_json(),
            **({"step_size_control": self.step_size_control,
                "auc_vs_step_size_control": self.auc_vs_control and self.auc_vs_control.as_json()}
               if self.step_size_control else {}),
            "areas_vs_baseline": {m: {axis: est(e) for axis, e in by_axis.items()}
                                  for m, by_axis in self.areas_vs_baseline.items()},
            "final_vs_baseline": {k: est(v) for k, v in self.final_vs_baseline.items()}, "unstable_runs": self.unstable,
            "share_of_oracle_gain": None if self.share is None else
            {"value": self.share.value, "low": self.share.low, "high": self.share.high, "seeds": self.share.seeds},
            "tokens_to_baseline_final": est(self.tokens_to_target), "reached_baseline_final": self.reached,
            "blame_precision": est(self.blame_precision), "rollout_tokens": est(self.rollout_tokens),
            "wall_s": est(self.wall_s), "update_norm": est(self.update_norm),
            "secondary_vs_baseline": {m: c.as_json() for m, c in self.secondary_vs_baseline.items()},
            **({"secondary_vs_like_for_like": {m: c.as_json() for m, c in self.secondary_vs_like.items()}}
               if self.secondary_vs_like else {}),
        }

    @classmethod
    def written(cls, data: dict, metric: str) -> MethodRow:
        """The row a report without per-seed values wrote (`as_json`, or the form before it: the headline's area
        at equal steps as `steps_auc_vs_baseline`); its contrasts come back from their intervals
        (`written_contrast`), its share keeps its value and drops its interval (Fieller's needs per-seed values)."""
        def est(e: dict | None) -> Estimate | None:
            return None if e is None else Estimate(e["mean"], e["low"], e["high"], e["n"])

        vs_baseline = est(data["auc_vs_baseline"])
        share = data["share_of_oracle_gain"]
        areas = data.get("areas_vs_baseline")
        if areas is None:
            by_axis = {"tokens": vs_baseline, "steps": est(data.get("steps_auc_vs_baseline"))}
            areas = {metric: {k: e for k, e in by_axis.items() if e is not None}} if vs_baseline else {}
        else:
            areas = {m: {axis: est(e) for axis, e in by_axis.items()} for m, by_axis in areas.items()}
        return cls(
            method=data["method"], seeds=data["seeds"], final={k: est(v) for k, v in data["final"].items()},
            auc=est(data["auc"]), auc_vs_baseline=written_contrast(vs_baseline),
            like_for_like=data.get("like_for_like"), auc_vs_like=written_contrast(est(data.get("auc_vs_like_for_like"))),
            step_size_control=data.get("step_size_control"),
            auc_vs_control=written_contrast(est(data.get("auc_vs_step_size_control"))),
            areas_vs_baseline=areas, final_vs_baseline={k: est(v) for k, v in data.get("final_vs_baseline", {}).items()},
            unstable=data.get("unstable_runs", 0),
            share=None if share is None else Share(share["value"], None, None, share["seeds"]),
            tokens_to_target=est(data["tokens_to_baseline_final"]),
            reached=data["reached_baseline_final"], blame_precision=est(data["blame_precision"]),
            rollout_tokens=est(data["rollout_tokens"]), wall_s=est(data["wall_s"]),
            update_norm=est(data.get("update_norm")),
            secondary_vs_baseline={m: written_contrast(est(c))
                                   for m, c in data.get("secondary_vs_baseline", {}).items()},
            secondary_vs_like={m: written_contrast(est(c))
                               for m, c in data.get("secondary_vs_like_for_like", {}).items()},
        )


@dataclass(frozen=True)
class Family:
    """A regime's family of verdicts and what it can detect."""

    size: int
    """m: the contrasts with a test (each method against the baseline on the primary and every secondary endpoint,
    and against its like-for-like baseline, on every endpoint where the study says so, and its step-size control),
    exploratory cells' left out."""
    seeds: int
    """The paired seeds of most of its contrasts (`family_seeds`)."""
    sd: float | None
    """The median paired sd of the family's contrasts at `seeds` (identical runs, sd 0, left out)."""
    counted: int
    """How many contrasts `sd` is the median of."""
    mde: float | None
    """The minimum detectable effect at `POWER` of a paired t-test at level `ALPHA / size` with `seeds` seeds and
    paired sd `sd` (`stats.detectable`): Bonferroni's bound, Holm's first step, so conservative."""

    @property
    def level(self) -> float:
        return ALPHA / self.size if self.size else ALPHA


@dataclass(frozen=True)
class DifficultyResult:
    difficulty: str
    metric: str
    budget: float
    """Rollout-token budget of the areas."""
    target: float
    """The baseline's mean final score (the tokens-to-target threshold)."""
    rows: list[MethodRow]
    metrics: list[str]
    """The compared metrics (`seeds.compared_metrics`), the headline first."""
    curve_metrics: list[str]
    """Those with areas (curves in every run; of a report without per-seed values, the headline alone)."""
    token_grid: TokenGrid | None
    """The token checkpoints of the areas; None: the runs had none."""
    family: Family
    per_seed: bool
    """Whether the numbers come from per-seed values (False: recovered from a report written without them)."""
    update_budget: float | None = None
    """The optimiser-update budget of the areas at equal updates (None: not computed, an older report)."""
    devices: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    """`{device: {method: [seeds]}}`: where each run trained, of the runs whose summaries recorded it."""


def analyse(values: RegimeValues, report: ReportConfig, difficulty: str) -> DifficultyResult:
    """The numbers of one regime from its per-seed values (see the module docstring)."""
    cells = values.cells
    base = cells[report.baseline]
    oracle = cells.get(report.oracle) if report.oracle else None
    finals = [v.final for by_seed in cells.values() for v in by_seed.values()]
    reported = [k for k in finals[0] if all(k in f for f in finals)]
    keys = list(dict.fromkeys(values.curve_metrics + reported))
    lacking = [e for e in report.secondary if endpoint(e)[0] not in
               (values.curve_metrics if endpoint(e)[1] == "tokens" else reported)]
    if lacking:
        raise ValueError(f"{difficulty}: report.secondary {lacking}: not measured in every run (an area needs a curve, "
                         f"a final endpoint the metric at the last evaluation); metrics with curves: "
                         f"{', '.join(values.curve_metrics)}; at the last evaluation: {', '.join(reported)}")
    rows = []
    for method, ours in cells.items():
        compared = method != report.baseline
        share = None
        if compared and oracle is not None and method != report.oracle:
            seeds = sorted(set(ours) & set(base) & set(oracle))
            if seeds:
                share = share_of_gain(*([cell[s].area[values.metric] for s in seeds] for cell in (ours, base, oracle)))
        vs = {m: differences(ours, base, m) for m in keys} if compared else {}
        like = report.like_for_like.get(method)
        vs_like = {m: differences(ours, cells[like], m) for m in {endpoint(e)[0] for e in report.secondary}} \
            if like in cells and report.like_for_like_endpoints == "all" else {}
        control = report.step_size_controls.get(method)
        crossings = [v.tokens_to_target for v in ours.values() if v.tokens_to_target is not None]
        precisions = [v.blame_precision for v in ours.values() if v.blame_precision is not None]
        updates = [v.update_norm for v in ours.values() if v.update_norm is not None]
        rows.append(MethodRow(
            method=method, seeds=len(ours),
            final={k: mean_interval([v.final[k] for v in ours.values()]) for k in next(iter(ours.values())).final
                   if all(k in v.final for v in ours.values())},
            auc=mean_interval([v.area[values.metric] for v in ours.values()]),
            auc_vs_baseline=vs.get(values.metric, {}).get("tokens"), like_for_like=like,
            auc_vs_like=differences(ours, cells[like], values.metric).get("tokens") if like in cells else None,
            step_size_control=control,
            auc_vs_control=differences(ours, cells[control], values.metric).get("tokens") if control in cells else None,
            areas_vs_baseline={m: {axis: vs[m][axis].estimate for axis in AXES if axis in vs[m]}
                               for m in values.curve_metrics if vs.get(m)},
            final_vs_baseline={k: c["final"].estimate for k, c in vs.items() if "final" in c},
            unstable=sum(v.unstable for v in ours.values()), share=share,
            tokens_to_target=mean_interval(crossings) if crossings else None, reached=len(crossings),
            blame_precision=mean_interval(precisions) if precisions else None,
            rollout_tokens=mean_interval([v.rollout_tokens for v in ours.values()]),
            wall_s=mean_interval([v.wall_s for v in ours.values()]),
            update_norm=mean_interval(updates) if len(updates) == len(ours) else None,
            secondary_vs_baseline=on_endpoints(vs, report.secondary),
            secondary_vs_like=on_endpoints(vs_like, report.secondary),
        ))
    rows, family = corrected(rows, report)
    return DifficultyResult(difficulty, values.metric, values.budget, values.target, rows,
                            compared_metrics(values.metric, reported), values.curve_metrics, values.token_grid,
                            family, per_seed=True, update_budget=values.update_budget, devices=devices_of(cells))


def on_endpoints(contrasts: dict[str, dict[str, Contrast]], endpoints: list[str]) -> dict[str, Contrast]:
    """`{endpoint: contrast}` of each secondary endpoint (`endpoint`: a metric and its measure) that `contrasts`
    (`{metric: {measure: contrast}}`, as `differences` gives them) holds."""
    return {e: contrasts[m][measure] for e in endpoints for m, measure in [endpoint(e)]
            if measure in contrasts.get(m, {})}


def devices_of(cells: dict[str, dict[int, SeedValues]]) -> dict[str, dict[str, list[int]]]:
    """Where each run trained, `{device: {method: [seeds]}}`, of the runs that recorded it."""
    out: dict[str, dict[str, list[int]]] = {}
    for method, by_seed in cells.items():
        for seed, values in sorted(by_seed.items()):
            if values.device is not None:
                out.setdefault(values.device, {}).setdefault(method, []).append(seed)
    return out


def recovered_result(saved: dict, report: ReportConfig, difficulty: str) -> DifficultyResult:
    """The numbers of one regime from a `report.json` written without per-seed values (`MethodRow.written`)."""
    metric = saved["metric"]
    rows = [MethodRow.written(m, metric) for m in saved["methods"]]
    rows, family = corrected(rows, report)
    reported = set.intersection(*(set(r.final) for r in rows))
    return DifficultyResult(difficulty, metric, saved["auc_tokens"], saved["baseline_final"], rows,
                            compared_metrics(metric, reported), [metric], None, family, per_seed=False)


def family_seeds(paired: list[int], baseline: int) -> int:
    """The family's seed count: the most common number of paired seeds of its contrasts (the larger on a tie), or the
    baseline's with no contrast. Once every run has finished it is every contrast's; mid-study (`order: seeds`) the
    baseline may lead the others by a seed, and the family is read at the seeds its contrasts share."""
    return max(set(paired), key=lambda n: (paired.count(n), n)) if paired else baseline


Slot = tuple[int, str, str | None]
"""A contrast's place in the rows: the row's index, the field (`auc_vs_baseline`, `auc_vs_like`, `auc_vs_control`,
`secondary_vs_baseline`, `secondary_vs_like`) and, for the last two, the endpoint."""


def slots(rows: list[MethodRow]) -> list[Slot]:
    """Where every contrast of the rows sits (`Slot`), in the family's order: per row its primary endpoint, its
    like-for-like contrast, its step-size control's and its secondary endpoints, against the baseline and then
    against the like-for-like baseline."""
    out: list[Slot] = []
    for i, row in enumerate(rows):
        out += [(i, name, None) for name in ("auc_vs_baseline", "auc_vs_like", "auc_vs_control")
                if getattr(row, name) is not None]
        out += [(i, "secondary_vs_baseline", m) for m in row.secondary_vs_baseline]
        out += [(i, "secondary_vs_like", m) for m in row.secondary_vs_like]
    return out


def at(rows: list[MethodRow], slot: Slot) -> Contrast:
    i, name, metric = slot
    value = getattr(rows[i], name)
    return value if metric is None else value[metric]


def put(rows: list[MethodRow], slot: Slot, contrast: Contrast) -> None:
    i, name, metric = slot
    rows[i] = replace(rows[i], **{name: contrast if metric is None else
                                  {**getattr(rows[i], name), metric: contrast}})


def corrected(rows: list[MethodRow], report: ReportConfig) -> tuple[list[MethodRow], Family]:
    """The rows with Holm-adjusted p-values over the regime's family (every contrast with a test, the primary
    endpoint's, the like-for-like ones, the step-size controls' and the secondary endpoints' (against the baseline
    and the like-for-like baseline) together, but those of
    the exploratory cells, which are marked so and keep their raw p, and those on fewer than
    `ReportConfig.min_verdict_seeds` paired seeds, made descriptive: no p, no verdict), and the family."""
    rows = list(rows)
    for slot in slots(rows):
        c = at(rows, slot)
        if c.estimate.n < report.min_verdict_seeds and not (c.estimate.low == c.estimate.high == 0.0):
            put(rows, slot, replace(c, p=None, descriptive=True))
        elif rows[slot[0]].method in report.exploratory:
            put(rows, slot, replace(c, exploratory=True))
    tested = [slot for slot in slots(rows) if at(rows, slot).p is not None and not at(rows, slot).exploratory]
    adjusted = holm([at(rows, slot).p for slot in tested])
    for slot, p in zip(tested, adjusted):
        c = at(rows, slot)
        own = detectable(c.sd, c.estimate.n, ALPHA / len(tested), POWER) if c.sd and c.estimate.n >= 2 else None
        put(rows, slot, replace(c, p_holm=p, mde=own))
    margin = report.equivalence_margin
    if margin is not None and tested:  # one Holm family of the equivalence tests too
        contrasts = [at(rows, slot) for slot in tested]
        equivalent = holm([equivalence_p(c.estimate.mean, c.sd, c.estimate.n, margin) for c in contrasts])
        for slot, p in zip(tested, equivalent):
            put(rows, slot, replace(at(rows, slot), p_equivalent=p))
    seeds = family_seeds([at(rows, slot).estimate.n for slot in tested],
                         next(r.seeds for r in rows if r.method == report.baseline))
    sds = [at(rows, slot).sd for slot in tested if at(rows, slot).estimate.n == seeds and at(rows, slot).sd > 0]
    sd = statistics.median(sds) if sds else None
    mde = detectable(sd, seeds, ALPHA / len(tested), POWER) if sd is not None and seeds >= 2 else None
    return rows, Family(len(tested), seeds, sd, len(sds), mde)


def measures(row: MethodRow, result: DifficultyResult) -> list[tuple[str, Estimate]]:
    """Every paired difference of a row to the baseline, named: per compared metric its areas (`AXES`) and its
    final."""
    out = []
    for metric in result.metrics:
        for axis, e in row.areas_vs_baseline.get(metric, {}).items():
            out.append((f"the {metric} area at {AXES[axis]}", e))
        if metric in row.final_vs_baseline:
            out.append((f"final {metric}", row.final_vs_baseline[metric]))
    return out


def disagreement(row: MethodRow, result: DifficultyResult) -> dict[int, list[str]] | None:
    """The measures (`measures`) by the side of 0 their raw 95% interval lies on (1 above, -1 below, 0 spanning it)
    when they are not all on one side; None when they agree (or fewer than two have an interval)."""
    sides: dict[int, list[str]] = {}
    for name, e in measures(row, result):
        side = direction(e)
        if side is not None:
            sides.setdefault(side, []).append(name)
    return sides if len(sides) > 1 else None
