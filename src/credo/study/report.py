"""The report of a study: learning curves at equal cost, tables with intervals over seeds, Holm verdicts, findings.

For each difficulty of the grid (a regime), from the finished runs (`credo.study.runs`; gathered by
`credo.study.results`):
- each run's per-seed values (`credo.study.seeds`: finals, areas at equal rollout tokens, measured points
  against optimiser steps, tokens to the baseline's final score, ...);
- the regime's statistics from them (`credo.study.analysis`): paired differences to the baseline of every
  compared metric, verdicts by paired t-tests under Holm's correction within the regime, the minimum detectable
  effect after it, the share of the oracle's gain with Fieller's interval;
- its tables, notes and plain-word findings (`credo.study.tables`) and figures (`credo.study.figures`: curves
  against steps, rollout tokens and wall time; a forest plot of the verdicts);
- a credit heatmap page (`credit_<difficulty>.html`, `credo.study.heatmap`; its records beside it in
  `credit_<difficulty>.jsonl`).
Written as `report.md` (and `report.html` on request) with `report.json` holding the numbers, the mean curves
the figures draw and every run's per-seed values (`per_seed`), so that `write_report(..., from_json=True)` makes
the whole report again from a report folder alone (a committed report, whose runs are gone), and any two cells
compare from it (`examples/contrast.py`). A `report.json` written before it kept per-seed values is drawn again
with the verdicts' p-values recovered from its intervals (`analysis.recovered_result`) and a paragraph on what
could not be recomputed. A study directory with no finished run is an error that leaves an existing report as it
was.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from credo.config import ConfigError, read_yaml_mapping
from credo.io import check_regular_file, path_inside, write_text_atomic
from credo.study.document import Block, Bullets, Code, Heading, Image, Paragraph, to_html, to_markdown
from credo.study.figures import family_curves, plot_curves, plot_differences
from credo.study.grid import STUDY_FILE, ReportConfig, dump_study, endpoint_label
from credo.study.heatmap import write_heatmap
from credo.study.results import report_json, results_from_json, results_from_runs
from credo.study.runs import seeds_of
from credo.study.tables import (
    findings,
    glossary,
    metrics_table,
    regime_notes,
    secondary_table,
    table,
    tuning_blocks,
    unrecomputed,
)
from credo.study.tuning import tuned_cells


def write_report(directory: str | Path, output: str | Path | None = None, *, html: bool = False,
                 from_json: bool = False, headline: str | None = None) -> Path:
    """Write `report.md` (and `report.html`), `report.json`, plots and credit heatmaps; returns the Markdown path.

    `output` (default: the study directory) receives the report; the runs stay where they are. With
    `from_json`, `directory` is a report folder (its `study.yaml`, `report.json` and heatmap records; no runs
    needed): the figures are drawn and the report written again from what it saved. `headline` replaces the study's
    headline metric (`report.metric`: the one whose area gets the Holm-corrected verdicts), for a second report of
    the same runs in another `output`, whose `study.yaml` then names it. Everything is read and computed before the
    first file is written; a directory without any finished run is `NoFinishedRuns`.
    """
    directory = Path(directory)
    out = Path(output) if output is not None else directory
    study_file = directory / STUDY_FILE
    if not study_file.exists():
        raise FileNotFoundError(f"{directory} is not a study directory (no {STUDY_FILE}); run `credo compare` first")
    study = read_yaml_mapping(check_regular_file(study_file), "a resolved study")
    missing = [key for key in ("name", "seeds", "methods", "difficulties") if key not in study]
    if missing:
        raise ConfigError(f"{study_file}: not a study file written by `credo compare` (no {', '.join(missing)})")
    if headline is not None:
        if from_json:
            raise ValueError("--metric recomputes the verdicts from the runs; --from-json redraws a written report")
        if out.resolve() == directory.resolve():
            raise ValueError("--metric writes a second report of the study: give it its own --output folder")
        study["report"] = {**study.get("report", {}), "metric": headline}
    report = ReportConfig(**study.get("report", {}))
    results = results_from_json(directory, study) if from_json else results_from_runs(directory, report)

    blocks: list[Block] = [Heading(f"Study: {study['name']}", 1)]
    tuned: dict[str, str] = {}  # a tuning study's cells for the study after it, by file name
    if study.get("exploratory"):
        used = set().union(*(seeds_of(study, method) for method in study["methods"]))
        reused = sorted(used & set(study.get("tuning_seeds", []) + study.get("pilot_seeds", [])))
        blocks.append(Paragraph("**Exploratory**: outside the protocol" + (
            f" (its seeds {reused} also tuned or piloted it)" if reused else "") + "; its verdicts confirm nothing."))
    if study.get("command"):
        blocks += [Paragraph("Made by:"), Code(study["command"])]
    methods = ", ".join(f"`{m}`" for m in study["methods"])
    blocks.append(Paragraph(f"Methods {methods}; seeds {study['seeds']}; the seeds pair runs across methods (same "
                            "starting model, same prompt stream per seed). Intervals are raw 95% Student-t intervals "
                            "over seeds; verdicts follow paired t-tests under Holm's correction within each regime; "
                            "`share` intervals are Fieller's."))
    out.mkdir(parents=True, exist_ok=True)
    for difficulty, saved in results.items():
        if saved is None:
            blocks += [Heading(f"{difficulty}"), Paragraph("No finished runs yet.")]
            continue
        result = saved.result
        blocks.append(Heading(f"{difficulty}" if len(results) > 1 else "Results"))
        if saved.unfinished:
            blocks.append(Paragraph(f"Unfinished (finished seeds / all): {', '.join(saved.unfinished)}."))
        blocks += [*regime_notes(result, report), table(result, report)]
        secondary = secondary_table(result, report)
        if secondary is not None:
            blocks += [Heading("Secondary endpoints", 3), Paragraph(
                "Verdicts in the same Holm family as the table above's (one family over every metric that yields a "
                "verdict)."), secondary]
        every_metric = metrics_table(result, report)
        if every_metric is not None:
            blocks += [Heading("Every metric", 3), Paragraph(
                f"Paired differences to `{report.baseline}` of every compared metric, with raw 95% intervals; the "
                f"verdicts above are the headline's ({result.metric} area at equal rollout tokens)"
                + (f" and the secondary endpoints' ({', '.join(map(endpoint_label, report.secondary))})"
                   if report.secondary else "")
                + "."), every_metric]
        if saved.tuning:
            blocks += tuning_blocks(saved.tuning, study, result.metric)
            tuned[f"tuned_{difficulty}.yaml"] = TUNED_HEADER + dump_study(tuned_cells(saved.tuning, study))
            blocks.append(Paragraph(f"The cells a study runs after this tuning, each method at its choice and each "
                                    f"step-size control, as a study file writes them: [tuned_{difficulty}.yaml]"
                                    f"(tuned_{difficulty}.yaml)."))
        blocks += [Heading("Findings", 3), Bullets(tuple(findings(result, report)))]
        names = {metric: f"plots/{difficulty}_{metric.replace('@', '_at_')}.png" for metric in saved.metrics()}
        if saved.curves is None:  # figures an earlier version drew, where they are
            names = {metric: name for metric, name in names.items() if path_inside(directory, name).exists()}
        if not result.per_seed:
            blocks += [Heading("What this report could not recompute", 3), unrecomputed(result, list(names))]
        forest = f"plots/{difficulty}_area_vs_{report.baseline}.png"
        if plot_differences(result, report.baseline, path_inside(out, forest), f"{study['name']} · {difficulty}"):
            blocks.append(Image(forest, f"paired difference of the area to {report.baseline}'s"))
        kept = []
        for metric, name in names.items():
            if saved.curves is not None:
                plot_curves(saved.curves[metric], metric, path_inside(out, name), f"{study['name']} · {difficulty}",
                            budget=result.budget)
            else:
                _keep(directory, out, name)
                kept.append(name)
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
            write_heatmap(saved.samples, path_inside(out, page), scale=report.heatmap_scale,
                          title=f"{study['name']} · {difficulty}: credit per token at step {report.heatmap_step}")
        elif not _keep(directory, out, page):
            continue
        blocks.append(Paragraph(f"Credit heatmaps of sample responses: [{page}]({page})."))
    blocks += glossary(report)
    if headline is not None:
        write_text_atomic(out / STUDY_FILE, dump_study(study))
    elif out.resolve() != directory.resolve():
        shutil.copyfile(study_file, out / STUDY_FILE)
    write_text_atomic(out / "report.json", report_json(results))
    for name, text in tuned.items():
        write_text_atomic(path_inside(out, name), text)
    write_text_atomic(out / "report.md", to_markdown(blocks))
    if html:
        write_text_atomic(out / "report.html", to_html(blocks, f"credo study {study['name']}"))
    return out / "report.md"


TUNED_HEADER = ("# Written by `credo report` from a tuning study: each tuned method at the value the rule chose\n"
                "# (`<method>@tuned`) and each step-size control; copy `methods` and `report` into the study file.\n")


def _keep(directory: Path, out: Path, name: str) -> bool:
    """Whether a file the report cannot make again is there (copied into `out` when it writes elsewhere)."""
    source = path_inside(directory, name)
    if not source.exists():
        return False
    if out.resolve() != directory.resolve():
        target = path_inside(out, name)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    return True
