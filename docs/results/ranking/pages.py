"""The ranking study's pages, made from its reports so that no number on them is typed by hand.

Reads the main family's report (`main/report.json` and `main/study.yaml`, written by `credo report
docs/results/ranking/records/ranking-main -o docs/results/ranking/main`) and, once the survey has run, the survey's
(`survey/`), and writes:

- `README.md` in this folder, the results page: the yardstick's gain first, each main-family method against tuned
  GRPO and against GRPO taking steps of its size (Holm), its share of per-decision blame's gain (Fieller), every
  secondary endpoint, the plan's predictions each judged by a rule stated beside it, the survey's per-seed
  differences to tuned GRPO and to GRPO at each cell's step size (descriptive), and the commands that rebuild it;
- the block between `BEGIN` and `END` in `docs/results/scope.md` (a section of its own at the page's end the first
  time): per cell, the mechanism the regime lets act and what the study found;
- the block between the same markers in the repository's `README.md`: the front page's paragraph.

    python docs/results/ranking/pages.py            # write the pages
    python docs/results/ranking/pages.py --check    # exit 1 where a page is not what the reports give
    python docs/results/ranking/pages.py --verdicts # print every verdict, for a closing note

The plan (plan.md) fixes the cells, the endpoints and the predictions judged here; its sentence "If the map finds
no regime that reaches 0.15, ... say so in the first sentence of every finding" is `HEADROOM_NEEDED`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from credo.study.analysis import Contrast, DifficultyResult, MethodRow
from credo.study.document import replace_marked, write_pages
from credo.study.predictions import Prediction, judged
from credo.study.results import written_areas
from credo.study.stats import Estimate, Share, mean_interval
from credo.study.tables import bracketed, p_text, share_text, verb, verdict_cell

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
REGIME = "k100-n8-p06"
BASELINE = "grpo@tuned"
YARDSTICK = "oracle_steps@tuned"
HEADROOM_NEEDED = 0.15
"""The yardstick's gain over tuned GRPO the ranking needs (the issue's bar, plan.md "The question")."""
BEGIN = "<!-- ranking-study: made by docs/results/ranking/pages.py from its reports; edit the script -->"
END = "<!-- /ranking-study -->"
SCOPE_HEADING = "## The ranking study: what each mechanism recovers where perfect blame has room"
ZERO_ADVANTAGE = ("credit moved along a response's tokens: testable, though the group advantage it moves is zero in "
                  "~97% of groups at the start; the length-based readings are not (every response is 53 tokens)")
CELLS = {
    "oracle_steps@tuned": ("per-decision blame (credo's yardstick)", "per-decision truth from the step checker"),
    "oracle_blame@tuned": ("first-error blame (credo)", "the step checker's first error"),
    "srpo_oracle@tuned": ("SRPO (2605.25507), exact localiser", "a reset at the first wrong thought, which comes early "
                          "(3.2 of a failure's 5.1 decisions are wrong): most decisions lie ahead of the prefix"),
    "srpo@tuned": ("SRPO (2605.25507)", "the same reset where the policy localises (right 12% of the time)"),
    "rrpo@tuned": ("RRPO (2605.25507)", "a reset at a random thought, usually after the first error"),
    "ibpo@tuned": ("IBPO (2605.16302)", "revisions against a correct sibling or the reviser: rare while successes are"),
    "spo_tree@tuned": ("SPO (2505.23564), tree", "step values from a tree of continuations: zero while successes are "
                       "rare; 4 prompts a batch instead of 16"),
    "vine_lean@tuned": ("VinePPO (2410.01679), lean", "step values from continuations of failures: zero while "
                        "successes are rare"),
    "grpo_lambda@tuned": ("GRPO-lambda (2510.00194)", ZERO_ADVANTAGE),
    "grpo_lambda_recent@tuned": ("GRPO-lambda (2510.00194), `recent`", ZERO_ADVANTAGE),
    "p_trace@tuned": ("P-trace (2605.05965)", ZERO_ADVANTAGE),
    "s_trace@tuned": ("S-trace (2605.05965)", ZERO_ADVANTAGE),
    "srpo_sampled@tuned": ("SRPO (2605.25507), sampled localiser", "the reset at a sampled localisation"),
    "ktae@tuned": ("KTAE (2505.16826)", ZERO_ADVANTAGE),
    "otb@tuned": ("OTB (2602.07078)", ZERO_ADVANTAGE),
    "gtpo@tuned": ("GTPO (2508.04349)", ZERO_ADVANTAGE),
    "dr_grpo@tuned": ("Dr. GRPO (2503.20783)", "the std removal, yes; the length correction, no (equal lengths)"),
    "dapo@tuned": ("DAPO (2503.14476)", "dynamic sampling refills all-equal groups (search, paid in tokens)"),
    "gspo@tuned": ("GSPO (2507.18071)", "a sequence ratio over 53 tokens, its clip scaled to them"),
    "spo_chain_lean@tuned": ("SPO (2505.23564), chain, lean", "step values from continuations: zero while "
                             "successes are rare"),
    "fr3e@tuned": ("FR3E (2507.07017)", "continuations from high-entropy points: zero while successes are rare"),
    "srpo@paper": ("SRPO (2605.25507), the paper's settings", "the policy-localised reset with the paper's batch "
                   "(32 x 8), 4 mini-batches, 5e-5 and sampling (T 0.7, top-p 0.95), untuned"),
}
"""Each cell's paper and what the regime lets its mechanism do (plan.md, "The regime and what its mechanisms can
use")."""
GRPO_VARIANTS = {"grpo_4mb@tuned": "GRPO with 4 optimiser steps a batch"}
"""What a GRPO cell other than the baseline changes, where its name does not say it (the controls at a learning rate
are named by it)."""


@dataclass(frozen=True)
class Study:
    """One report of the ranking study: its result in the regime and its per-seed areas of the headline metric."""

    result: DifficultyResult
    areas: dict[str, dict[int, float]]
    """`{cell: {seed: sampled pass@1 area at equal rollout tokens}}`."""
    order: list[str]
    """The cells in the study file's order."""
    devices: dict[str, dict[int, str | None]]
    """`{cell: {seed: where the run trained}}` (`summary.json`'s `device`; None where the run did not record it)."""
    rates: dict[str, float] = field(default_factory=dict)
    """`{cell: the learning rate its study file sets}` (cells that set none are absent)."""

    def rows(self) -> list[MethodRow]:
        """Every cell's row but the baseline's, in the study file's order."""
        return sorted((r for r in self.result.rows if r.method != BASELINE), key=lambda r: self.order.index(r.method))

    def controls(self) -> set[str]:
        """The cells that are another's step-size control or like-for-like baseline."""
        return {c for r in self.result.rows for c in (r.step_size_control, r.like_for_like) if c}

    def row(self, cell: str) -> MethodRow | None:
        return next((r for r in self.result.rows if r.method == cell), None)

    def paired(self, cell: str, other: str, seeds: Collection[int] | None = None) -> list[float]:
        """`cell - other` in the headline area on each seed both ran (only `seeds`, where given), in seed order."""
        ours, theirs = self.areas.get(cell, {}), self.areas.get(other, {})
        return [ours[s] - theirs[s] for s in sorted(ours) if s in theirs and (seeds is None or s in seeds)]

    def difference(self, cell: str, other: str, seeds: Collection[int] | None = None) -> Estimate | None:
        """`cell - other` in the headline area, paired by seed (`paired`), with its raw 95% interval (outside the
        family)."""
        paired = self.paired(cell, other, seeds)
        return mean_interval(paired) if paired else None

    def seeds_by_device(self) -> dict[str, list[int]]:
        """Each device's seeds, those whose every run recorded that device (a seed's cells run together: plan.md,
        amendment 4), the device with the most seeds first; seeds split between devices or unrecorded are in none."""
        where: dict[int, set[str | None]] = {}
        for by_seed in self.devices.values():
            for seed, device in by_seed.items():
                where.setdefault(seed, set()).add(device)
        out: dict[str, list[int]] = {}
        for seed, devices in sorted(where.items()):
            if len(devices) == 1 and None not in devices:
                out.setdefault(next(iter(devices)), []).append(seed)
        return dict(sorted(out.items(), key=lambda item: -len(item[1])))


def load(folder: Path) -> Study | None:
    """The study whose report `credo report` wrote into `folder` (None: not written yet)."""
    written = written_areas(folder, REGIME)
    if written is None:
        return None
    study, report, areas = written
    devices = {cell: {seed: v.device for seed, v in by_seed.items()} for cell, by_seed in report.values.cells.items()}
    rates = {cell: lr for cell, entry in study["methods"].items()
             if (lr := ((entry.get("set") or {}).get("optim") or {}).get("lr")) is not None}
    return Study(report.result, areas, list(study["methods"]), devices, rates)


# ------------------------------------------------------------------------------------------ the plan's predictions

def share_within(cell: str, low: float | None, high: float | None) -> Callable[[Study], tuple[str, str]]:
    """Held when the share's Fieller interval lies inside [low, high], failed when it lies outside."""
    def judge(study: Study) -> tuple[str, str]:
        row = study.row(cell)
        if row is None or row.share is None or row.share.value is None:
            return "not measured", "not decided"
        share: Share = row.share
        measured = share_text(row, study.result)
        if share.low is None:
            return measured, "not decided"
        below, above = low if low is not None else float("-inf"), high if high is not None else float("inf")
        if below <= share.low and share.high <= above:
            return measured, "held"
        return measured, "failed" if share.high < below or share.low > above else "not decided"
    return judge


def gain_near(cell: str, value: float) -> Callable[[Study], tuple[str, str]]:
    """Held when `value` lies in the raw 95% interval of the cell's gain over GRPO, failed otherwise."""
    def judge(study: Study) -> tuple[str, str]:
        row = study.row(cell)
        if row is None or row.auc_vs_baseline is None or row.auc_vs_baseline.estimate.low is None:
            return "not measured", "not decided"
        e = row.auc_vs_baseline.estimate
        return bracketed(e), "held" if e.low <= value <= e.high else "failed"
    return judge


def not_beyond(cell: str, other: str, margin: float, side: int) -> Callable[[Study], tuple[str, str]]:
    """The paired difference `cell - other` not above `other` (`side` +1) or not below it (`side` -1): held when,
    turned by `side`, its whole raw 95% interval lies below `margin`; failed when it lies above 0."""
    def judge(study: Study) -> tuple[str, str]:
        e = study.difference(cell, other)
        if e is None or e.low is None:
            return "not measured", "not decided"
        low, high = sorted((side * e.low, side * e.high))
        verdict = "held" if high < margin else "failed" if low > 0 else "not decided"
        return f"{bracketed(e)} vs `{other}`", verdict
    return judge


def near_baseline(cell: str, bound: float) -> Callable[[Study], tuple[str, str]]:
    """A survey cell (too few seeds for a test): held when the mean difference to GRPO is within +/-`bound`."""
    def judge(study: Study) -> tuple[str, str]:
        e = study.difference(cell, BASELINE)
        if e is None:
            return "not measured", "not decided"
        return f"{e.mean:+.3f} (mean of {e.n} seeds)", "held" if abs(e.mean) <= bound else "failed"
    return judge


MARGIN = 0.05
"""The plan's equivalence margin, also the slack of "at or below" and "if any" here."""
MAIN_PREDICTIONS: list[Prediction[Study]] = [
    Prediction("oracle_steps@tuned", "beats GRPO by about +0.45 in sampled area (the map: +0.457)",
               "+0.45 inside the gain's raw 95% interval", gain_near("oracle_steps@tuned", 0.45)),
    Prediction("oracle_blame@tuned", "recovers a part of the yardstick's gain",
               "share's interval inside [0, 1]", share_within("oracle_blame@tuned", 0.0, 1.0)),
    Prediction("srpo_oracle@tuned", "little: share below 0.2", "share's interval below 0.2",
               share_within("srpo_oracle@tuned", None, 0.2)),
    Prediction("srpo@tuned", "at or below `srpo_oracle`'s", f"difference's interval below +{MARGIN}",
               not_beyond("srpo@tuned", "srpo_oracle@tuned", MARGIN, +1)),
    Prediction("rrpo@tuned", "at or below `srpo_oracle`'s", f"difference's interval below +{MARGIN}",
               not_beyond("rrpo@tuned", "srpo_oracle@tuned", MARGIN, +1)),
    Prediction("ibpo@tuned", "some, late: share between 0 and 0.4", "share's interval inside [0, 0.4]",
               share_within("ibpo@tuned", 0.0, 0.4)),
    Prediction("ibpo@tuned", "against `grpo_4mb`, a positive difference if any",
               f"difference's interval above -{MARGIN}",
               not_beyond("ibpo@tuned", "grpo_4mb@tuned", MARGIN, -1)),
    Prediction("spo_tree@tuned", "little: share below 0.2", "share's interval below 0.2",
               share_within("spo_tree@tuned", None, 0.2)),
    Prediction("vine_lean@tuned", "little: share below 0.2", "share's interval below 0.2",
               share_within("vine_lean@tuned", None, 0.2)),
]
SURVEY_CELLS = ["grpo_lambda@tuned", "grpo_lambda_recent@tuned", "p_trace@tuned", "s_trace@tuned", "srpo_sampled@tuned",
                "ktae@tuned", "otb@tuned", "gtpo@tuned", "dr_grpo@tuned", "dapo@tuned", "gspo@tuned",
                "spo_chain_lean@tuned", "fr3e@tuned"]
PAPER_CELLS = ["srpo@paper"]
"""The survey's cells at a paper's own settings (plan.md, "Cells"): described beside the rest, no prediction."""
SURVEY_SAID = "within about +/-0.1 of GRPO in sampled area"
"""The plan's one prediction for every survey cell (plan.md, "Predictions, per mechanism")."""
SURVEY_PREDICTIONS: list[Prediction[Study]] = [
    Prediction(cell, SURVEY_SAID, "mean difference within +/-0.1", near_baseline(cell, 0.1)) for cell in SURVEY_CELLS]


# ------------------------------------------------------------------------------------------ the pages

def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def contrast_cells(c: Contrast | None) -> list[str]:
    """A contrast as two cells: the raw interval and the Holm verdict."""
    return ["–", "–"] if c is None else [bracketed(c.estimate), verdict_cell(c)]


def yardstick(study: Study) -> str:
    """The first sentence of every finding: what per-decision blame is worth over tuned GRPO here."""
    row = study.row(YARDSTICK)
    c = row.auc_vs_baseline if row is not None else None
    if c is None:
        return f"Per-decision blame (`{YARDSTICK}`) has no finished run paired with tuned GRPO yet."
    said = (f"Per-decision blame (`{YARDSTICK}`) {verb(c)} tuned GRPO in sampled pass@1 area on {c.estimate.n} seeds "
            f"(difference {bracketed(c.estimate)}" + ("" if c.p_holm is None else f", Holm p {p_text(c.p_holm)}") + ")")
    if c.estimate.mean >= HEADROOM_NEEDED:
        return said + f": the headroom the ranking needs (at least {HEADROOM_NEEDED})."
    return said + (f", short of the {HEADROOM_NEEDED} the ranking needs: every finding below is read in a regime with "
                   "less headroom than planned.")


def failed_sentences(study: Study) -> str:
    """The plan's failed predictions, said next to the yardstick (plan.md: "Where a prediction fails, the findings say
    so in their first sentences, and why where the data can tell"): each with what was measured, and each failed
    cell's area at equal optimiser updates beside its area at equal rollout tokens, which tells a method that pays
    for its signal in tokens from one whose updates do no better."""
    failed = [(p, measured) for p in MAIN_PREDICTIONS for measured, outcome in [p.judge(study)] if outcome == "failed"]
    if not failed:
        return "No prediction of the plan failed."
    said = "; ".join(f"`{p.cell}`, {p.said} (measured {measured})" for p, measured in failed)
    text = f"{len(failed)} of the plan's {len(MAIN_PREDICTIONS)} predictions failed: {said}."
    readings = []
    for cell in dict.fromkeys(p.cell for p, _ in failed):
        if (areas := tokens_and_updates(study, cell)) is not None:
            readings.append(f"`{cell}` {bracketed(areas[0])} and {bracketed(areas[1])}")
    if readings:
        text += f" Against tuned GRPO at equal rollout tokens and at {equal_updates(study)}: {'; '.join(readings)}."
    return text


def tokens_and_updates(study: Study, cell: str) -> tuple[Estimate, Estimate] | None:
    """The cell's area against tuned GRPO at equal rollout tokens and at equal optimiser updates (None where the
    report has either missing)."""
    row = study.row(cell)
    updates = row.areas_vs_baseline.get(study.result.metric, {}).get("updates") if row else None
    if updates is None or row.auc_vs_baseline is None or study.result.update_budget is None:
        return None
    return row.auc_vs_baseline.estimate, updates


def equal_updates(study: Study) -> str:
    """How the page names the equal-updates reading (a study whose report has an update budget)."""
    return f"equal optimiser updates (the first {study.result.update_budget:.0f}, the shortest run's)"


def survey_failed_sentences(survey: Study) -> str:
    """The survey's failed predictions (plan.md: said in the findings' first sentences, and why where the data can
    tell), described by their means: each failed cell's mean difference to tuned GRPO at equal rollout tokens and at
    equal optimiser updates, which tells a method that pays for its signal in tokens from one whose updates do no
    better, and, for a cell that takes several optimiser steps a batch, to GRPO taking as many, which tells credit
    from more steps."""
    failed = [p.cell for p in SURVEY_PREDICTIONS if p.judge(survey)[1] == "failed"]
    seeds = f"{survey.result.family.seeds} seeds, described"
    if not failed:
        return f"Every survey cell ({seeds}) is {SURVEY_SAID}, as the plan predicted."
    means = ", ".join(f"`{cell}` {e.mean:+.3f}" for cell in failed if (e := survey.difference(cell, BASELINE)))
    text = (f"{len(failed)} of the survey's {len(SURVEY_PREDICTIONS)} predictions ({seeds}), each a cell "
            f"{SURVEY_SAID}, failed: {means} (mean differences to tuned GRPO).")
    updates = [f"`{cell}` {areas[1].mean:+.3f}" for cell in failed
               if (areas := tokens_and_updates(survey, cell)) is not None]
    if updates:
        text += f" At {equal_updates(survey)}: {', '.join(updates)}."
    steps = [f"`{cell}` {e.mean:+.3f} vs `{row.like_for_like}`" for cell in failed
             if (row := survey.row(cell)) and row.like_for_like
             and (e := survey.difference(cell, row.like_for_like)) is not None]
    if steps:
        text += f" Against GRPO taking as many optimiser steps a batch: {', '.join(steps)}."
    return text


def beats(c: Contrast | None) -> bool:
    """Whether a contrast's Holm verdict is "beats" (False where it was not measured)."""
    return c is not None and c.verdict == "beats"


def methods(study: Study) -> list[MethodRow]:
    """The credit methods: every cell but the baseline, the step-size controls and the like-for-like baselines."""
    return [r for r in study.rows() if r.method not in study.controls()]


def share_cell(r: MethodRow, study: Study) -> str:
    """A method's share of the yardstick's gain (none for the yardstick itself and for the controls)."""
    if r.share is None or r.method == YARDSTICK or r.method in study.controls():
        return "–"
    return share_text(r, study.result)


def main_table(study: Study) -> str:
    """A row per cell: its contrast to the baseline, its share, its contrast to its step-size control."""
    rows = []
    for r in study.rows():
        role = " (control)" if r.method in study.controls() else ""
        control = [f"`{r.step_size_control}`", *contrast_cells(r.auc_vs_control)] if r.step_size_control else \
            ["–", "–", "–"] if role else [f"`{BASELINE}`", "(the contrast to the baseline)", "–"]
        size = "–" if r.update_norm is None else f"{r.update_norm.mean:.4f}"
        rows.append([f"`{r.method}`{role}", *contrast_cells(r.auc_vs_baseline), share_cell(r, study), *control, size])
    return table(["cell", f"Δ area vs `{BASELINE}` (raw 95%)", "verdict (Holm p)", "share of the yardstick's gain",
                  "step-size control", "Δ area vs control (raw 95%)", "verdict (Holm p)", "update size"], rows)


def verdict_lines(study: Study) -> list[str]:
    """Each method's verdicts, one line each, as a closing note lists them: its primary contrast to tuned GRPO with
    its raw interval and whether it survives Holm, and the same against its step-size control."""
    lines = []
    for r in methods(study):
        if r.auc_vs_baseline is None:
            continue
        line = f"- `{r.method}` vs `{BASELINE}`: {' '.join(contrast_cells(r.auc_vs_baseline))}"
        if r.auc_vs_control is not None:
            line += f"; vs its step-size control `{r.step_size_control}`: {' '.join(contrast_cells(r.auc_vs_control))}"
        elif not r.step_size_control:
            line += "; its step-size control is the baseline"
        lines.append(line)
    return lines


def like_for_like_lines(study: Study) -> list[str]:
    """Each like-for-like contrast, on the primary endpoint and then on each secondary one (all in the family)."""
    return [f"`{r.method}` against its like-for-like `{r.like_for_like}`: {' '.join(contrast_cells(r.auc_vs_like))}"
            + "".join(f"; {e}: {' '.join(contrast_cells(c))}" for e, c in r.secondary_vs_like.items()) + "."
            for r in study.rows() if r.like_for_like]


FIGURE = Path("main") / "plots" / f"{REGIME}_area_vs_{BASELINE}.png"
"""The main report's figure of every cell's paired difference to the baseline, relative to this folder."""


def figure_lines() -> list[str]:
    """The main report's figure of the primary contrasts, where `credo report` drew it."""
    if not (HERE / FIGURE).exists():
        return []
    return [f"![Each cell's paired difference to `{BASELINE}` in sampled pass@1 area, raw 95% intervals, coloured by "
            f"its Holm verdict]({FIGURE.as_posix()})", ""]


def device_lines(study: Study) -> list[str]:
    """Where the runs trained, and, where seeds trained on more than one device, each method's primary contrasts on
    every seed beside the same on the seeds of the device that ran most of them (raw 95%, outside the family)."""
    groups = study.seeds_by_device()
    if len(groups) < 2:
        return []
    home, kept = next(iter(groups.items()))
    where = "; ".join(f"seeds {', '.join(map(str, seeds))} on {device}" for device, seeds in groups.items())
    rows = []
    for r in methods(study):
        control = r.step_size_control or BASELINE
        pairs = [(BASELINE, None), (BASELINE, kept)] + ([(control, None), (control, kept)] if r.step_size_control
                                                        else [])
        cells = [bracketed(e) if (e := study.difference(r.method, other, seeds)) else "–" for other, seeds in pairs]
        rows.append([f"`{r.method}`", *cells, *(["–", "–"] if not r.step_size_control else []),
                     f"`{control}`" if r.step_size_control else "(the baseline)"])
    return ["## Where the runs trained", "",
            f"Every seed's cells trained together on one device ({where}; plan.md, amendment 4), so every paired "
            f"difference compares runs of one device. The primary contrasts on every seed and on the "
            f"{len(kept)} seeds of {home} alone (raw 95% intervals, outside the Holm family): a verdict that rests on "
            "the other device's seeds shows here as a difference that moves.", "",
            table(["cell", f"Δ vs `{BASELINE}`, every seed", f"Δ vs `{BASELINE}`, {home} seeds",
                   "Δ vs control, every seed", f"Δ vs control, {home} seeds", "control"], rows), ""]


def against_strongest_grpo(study: Study) -> tuple[str, Estimate, list[tuple[str, Estimate]]] | None:
    """The strongest GRPO of the study (of the step-size controls and like-for-like baselines that beat tuned GRPO
    after Holm, the one with the largest mean gain), its gain, and each method that beats tuned GRPO against it, paired
    by seed with raw 95% intervals. Not in the plan: read after the report, outside the Holm family (None: no GRPO
    beats the baseline, or no method does)."""
    gains = {c: e for c in study.controls() if (row := study.row(c)) is not None and beats(row.auc_vs_baseline)
             and (e := study.difference(c, BASELINE)) is not None}
    winners = [r.method for r in methods(study) if beats(r.auc_vs_baseline)]
    if not gains or not winners:
        return None
    strongest = max(gains, key=lambda c: gains[c].mean)
    return strongest, gains[strongest], [(m, study.difference(m, strongest)) for m in winners]


def strongest_grpo_lines(study: Study) -> list[str]:
    """The results page's reading of `against_strongest_grpo`."""
    found = against_strongest_grpo(study)
    if found is None:
        return []
    strongest, gain, against = found
    said = "; ".join(f"`{m}` {bracketed(e)}" for m, e in against)
    return ["## Against the strongest GRPO", "",
            f"Read after the report, not planned, outside the Holm family: the strongest GRPO of the study is "
            f"`{strongest}` ({bracketed(gain)} over tuned GRPO), so a gain over tuned GRPO is not a gain over every "
            f"GRPO. Each method that beats tuned GRPO, against `{strongest}` (paired by seed, raw 95%): {said}.", ""]


def secondary_table(study: Study) -> str:
    endpoints = list(next((r.secondary_vs_baseline for r in study.rows() if r.secondary_vs_baseline), {}))
    rows = [[f"`{r.method}`", *(" ".join(contrast_cells(r.secondary_vs_baseline.get(e))) for e in endpoints)]
            for r in study.rows()]
    return table(["cell", *(f"Δ {e} vs `{BASELINE}` (Holm)" for e in endpoints)], rows)


def like_for_like_cell(r: MethodRow, study: Study) -> str:
    """A cell's like-for-like baseline, and both learning rates where they differ (STUDY.md: alike but for the
    credit, "the same tuned learning rate, or say so")."""
    if not r.like_for_like:
        return "–"
    ours, theirs = study.rates.get(r.method), study.rates.get(r.like_for_like)
    differs = ours is not None and theirs is not None and ours != theirs
    return f"`{r.like_for_like}`" + (f" (at lr {theirs:g}; the cell at {ours:g})" if differs else "")


def survey_table(study: Study) -> str:
    """A row per survey cell (too few seeds for a test): its difference to tuned GRPO on each seed and their mean, its
    share of the yardstick's gain, its mean difference to GRPO taking steps of its size and, for a cell that takes
    several optimiser steps a batch, to GRPO taking as many (its like-for-like)."""
    def mean_to(cell: str, other: str | None) -> str:
        e = study.difference(cell, other) if other else None
        return "–" if e is None else f"{e.mean:+.3f}"

    rows = []
    for r in methods(study):
        if r.method == YARDSTICK:
            continue
        per_seed = ", ".join(f"{d:+.3f}" for d in study.paired(r.method, BASELINE)) or "–"
        rows.append([f"`{r.method}`", per_seed, mean_to(r.method, BASELINE), share_cell(r, study),
                     f"`{r.step_size_control}`" if r.step_size_control else "(the baseline)",
                     mean_to(r.method, r.step_size_control),
                     like_for_like_cell(r, study), mean_to(r.method, r.like_for_like),
                     "–" if r.update_norm is None else f"{r.update_norm.mean:.4f}"])
    seeds = ", ".join(map(str, sorted(study.areas.get(BASELINE, {}))))
    return table(["cell", f"Δ area vs `{BASELINE}`, seeds {seeds}", "mean", "share of the yardstick's gain",
                  "step-size control", "Δ area vs control, mean", "like-for-like", "Δ area vs like-for-like, mean",
                  "update size"], rows)


def results_page(main: Study, survey: Study | None) -> str:
    family = main.result.family
    rows, counted = judged(MAIN_PREDICTIONS, main)
    parts = [
        "# The ranking study: what it found", "", BEGIN, "",
        f"{yardstick(main)} {failed_sentences(main)} "
        + (f"{survey_failed_sentences(survey)} " if survey else "")
        + "The study of [the plan](plan.md) ranks credo's methods in "
        "the regime the headroom map "
        f"chose (`{REGIME}`), each at the learning rate one tuning rule chose for it ([tuning](tuning/report.md)), "
        "against GRPO at its own tuned rate and against GRPO taking steps of the method's size. Reports: "
        "[the main family](main/report.md)" + (", [the survey](survey/report.md)" if survey else "") + ".",
        "",
        "## Each method against GRPO and against a step of its size", "",
        "Primary endpoint: sampled pass@1 area at equal rollout tokens, paired by seed. One Holm family of "
        f"{family.size} tests over {family.seeds} paired seeds (minimum detectable effect at 80% power after Holm: "
        f"{'–' if family.mde is None else f'{family.mde:.3f}'}); \"equivalent\" is TOST at the plan's margin, "
        "\"not distinguishable\" neither beats, falls behind nor is equivalent. The share is the gain over GRPO as a "
        "fraction of the yardstick's, with Fieller's 95% interval; the update size is the mean `optim/update_norm`.",
        "", *figure_lines(), main_table(main), "", *like_for_like_lines(main), "", *strongest_grpo_lines(main),
        *device_lines(main),
        "## The plan's predictions", "",
        f"Written before the runs (plan.md, \"Predictions, per mechanism\"), each judged by the rule beside it: "
        f"{counted}.", "",
        table(["cell", "predicted", "judged by", "measured", "outcome"], rows), "",
        "## Every endpoint", "",
        "The secondary endpoints, in the primary's Holm family: greedy pass@1 area and the final avg@16 on the 200 "
        "test problems at temperature 1.0 and 0.6.", "",
        secondary_table(main), "",
    ]
    if survey is not None:
        srows, scounted = judged(SURVEY_PREDICTIONS, survey)
        parts += ["## The survey", "",
                  f"Descriptive ({survey.result.family.seeds} paired seeds, no test): each cell's difference to tuned "
                  "GRPO in sampled pass@1 area, seed by seed, to GRPO at the grid rate whose update size is nearest "
                  "its own (the tuning's rule) and, for a cell that takes several optimiser steps a batch, to GRPO "
                  "taking as many (the main family's runs of those seeds).", "",
                  survey_table(survey), "",
                  f"Each cell's mean difference against the plan's prediction: {scounted}.", "",
                  table(["cell", "predicted", "judged by", "measured", "outcome"], srows), ""]
    return "\n".join(parts + rebuild_lines() + [END, ""])


PARTS = [("tuning", "ranking-tuning"), ("main", "ranking-main"), ("survey", "ranking-survey")]
"""The study's parts in the order they run: each one's study file `configs/studies/ranking_<part>.yaml`, its records'
name and its report's folder here (`<part>/`)."""


def rebuild_lines() -> list[str]:
    """How to run the study again and rebuild its pages (plan.md, "Order and cost"): each part whose study file
    exists."""
    commands = []
    for part, records in PARTS:
        if (ROOT / "configs/studies" / f"ranking_{part}.yaml").exists():
            commands += [f"bash docs/results/long-study/records.sh restore {records} docs/results/ranking/records",
                         f"credo compare configs/studies/ranking_{part}.yaml --jobs 2",
                         f"bash docs/results/long-study/records.sh save {records} docs/results/ranking/records",
                         f"credo report docs/results/ranking/records/{records} -o docs/results/ranking/{part}"]
    return ["## Rebuild", "",
            "Every run's records are committed (`records/`); each part resumes from them, so the study spans sittings, "
            "and each report and this page are recomputed from the runs' own logs:", "",
            "```bash", *commands,
            "python docs/results/ranking/pages.py  # this page, the scope table's block, the front page's paragraph",
            "```", "",
            "On a lent GPU, a seed's cells at once: `SEEDS=29 OUT=$OUT bash docs/results/ranking/gpu_grid.sh` (its "
            "header says how its records join the CPU's).", ""]


def scope_block(main: Study, survey: Study | None) -> str:
    """Per cell, its paper, what the regime lets its mechanism do and what the study found (the survey described)."""
    def row(r: MethodRow, study: Study, found: list[str]) -> list[str]:
        paper, room = CELLS.get(r.method, ("–", "–"))
        return [f"`{r.method}`", paper, room, *found, share_cell(r, study)]

    rows = [row(r, main, [" ".join(contrast_cells(r.auc_vs_baseline)),
                          " ".join(contrast_cells(r.auc_vs_control)) if r.step_size_control
                          else "(its control is the baseline)"]) for r in methods(main)]
    if survey is not None:
        rows += [row(r, survey, [f"{c.estimate.mean:+.3f} (survey, {c.estimate.n} seeds, described)", "–"])
                 for r in methods(survey) if r.method != YARDSTICK and (c := r.auc_vs_baseline) is not None]
    return "\n".join([BEGIN, "", yardstick(main), "",
                      table(["cell", "paper", "what the regime lets its mechanism do", "vs tuned GRPO (Holm)",
                             "vs GRPO at its step size (Holm)", "share of the yardstick's gain"], rows), "", END])


def survey_sentence(survey: Study) -> str:
    """The survey in one sentence for the front page: its cell with the largest mean gain over tuned GRPO and, where
    it takes several optimiser steps a batch, its mean difference to GRPO taking as many."""
    means = {r.method: e.mean for r in methods(survey)
             if r.method != YARDSTICK and (e := survey.difference(r.method, BASELINE)) is not None}
    if not means:
        return ""
    best = max(means, key=means.__getitem__)
    like_for_like = survey.row(best).like_for_like
    against = survey.difference(best, like_for_like) if like_for_like else None
    text = (f"The survey ({len(means)} more cells, {survey.result.family.seeds} seeds each, described): the largest "
            f"mean gain over tuned GRPO is `{best.removesuffix('@tuned')}`'s, {means[best]:+.3f}")
    if against is not None:
        text += f", {against.mean:+.3f} against GRPO taking as many optimiser steps a batch"
    return text + "."


def front_paragraph(main: Study, survey: Study | None = None) -> str:
    others = [r for r in methods(main) if r.method != YARDSTICK]
    winners = [r for r in others if beats(r.auc_vs_baseline)]
    survives = [r for r in winners if beats(r.auc_vs_control)]
    shares = ", ".join(f"`{r.method.removesuffix('@tuned')}` ({share_cell(r, main)})" for r in winners)
    names = ", ".join(f"`{r.method.removesuffix('@tuned')}`" for r in survives) or "none"
    found = (f"{len(winners)} of the other {len(others)} credit methods beat tuned GRPO after Holm, recovering these "
             f"shares of its gain: {shares}; of them, {len(survives)} also beat GRPO taking steps of their size: "
             f"{names}." if winners else f"None of the other {len(others)} credit methods beats tuned GRPO after Holm.")
    if (strongest := against_strongest_grpo(main)) is not None:
        grpo, gain, against = strongest
        ahead = ", ".join(f"`{m.removesuffix('@tuned')}`" for m, e in against if e.low is not None and e.low > 0)
        variant = GRPO_VARIANTS.get(grpo, "GRPO")
        found += (f" Read after the report: {variant} (`{grpo.removesuffix('@tuned')}`) gains {gain.mean:+.3f} "
                  f"itself, and only {ahead or 'no method'} is ahead of it (raw 95%).")
    return "\n".join([
        BEGIN,
        "The ranking study ([findings](docs/results/ranking/README.md)) asks how much of perfect blame each credit "
        f"method recovers, and whether it is credit or step size. {yardstick(main)} {found} "
        + (f"{survey_sentence(survey)} " if survey else "") + "Every study, "
        "[the headroom map](docs/results/headroom/README.md) and [the long-horizon study]"
        "(docs/results/long-study/README.md) among them: [docs/results/](docs/results/README.md).",
        END])


def replaced(text: str, block: str, where: Path, heading: str | None = None) -> str:
    """`text` with its ranking-study block replaced by `block` (`credo.study.document.replace_marked`)."""
    return replace_marked(text, block, (BEGIN, END), str(where), heading)


def pages(main: Study, survey: Study | None) -> dict[Path, str]:
    """Every page's new text, by path."""
    scope, front = ROOT / "docs/results/scope.md", ROOT / "README.md"
    return {HERE / "README.md": results_page(main, survey),
            scope: replaced(scope.read_text(), scope_block(main, survey), scope, SCOPE_HEADING),
            front: replaced(front.read_text(), front_paragraph(main, survey), front)}


def main(argv: list[str]) -> int:
    study = load(HERE / "main")
    if study is None:
        print(f"{HERE / 'main'}: no report yet (credo report docs/results/ranking/records/ranking-main -o "
              "docs/results/ranking/main); the pages are left as they are")
        return 0
    if "--verdicts" in argv:  # for a closing note: every verdict, its interval, Holm, its step-size control
        print("\n".join([yardstick(study), *verdict_lines(study)]))
        return 0
    return write_pages(pages(study, load(HERE / "survey")), check="--check" in argv, root=ROOT,
                       script="docs/results/ranking/pages.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
