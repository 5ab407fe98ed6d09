"""One table of verdicts across study reports: each method against the baseline, per study and difficulty.

    python examples/study_verdicts.py [--common] docs/results/credit-decisive docs/results/credit-nocancel \
        docs/results/credit-hard

reads each report folder's `report.json` and `study.yaml` (written by `credo report`; the runs are not needed;
`credo.study.results.results_from_json`, so each regime is corrected as its report is) and prints a Markdown table
with a row per method and a column per study and difficulty: the paired difference of the area to the baseline's
with its raw 95% interval, and the report's verdict under Holm's correction within the regime with its adjusted p
(`credo.study.tables.verdict_cell`: beats, falls behind, not distinguishable). Rows `method vs like` follow for the
like-for-like pairs the studies name (`report.like_for_like`). The last rows give each column's family size m and
its minimum detectable effect after the correction (`credo.study.analysis.Family`: 80% power at level 0.05 / m, with
the median paired sd of the contrasts at the baseline's seed count). With `--common` the table keeps only the rows
every column has a number for (the methods and pairs all studies ran); the family and its detectable effect still
count every contrast of each column. Two folders that report the same study (`credo report --metric` on the same
runs, as the long study's `main` and `main-greedy`) give a column each, named by their headline metric, and a last
column `study · difficulty: verdicts agree` says per row whether their Holm verdicts are the same word (yes / no).
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from credo.study.analysis import Contrast, DifficultyResult
from credo.study.results import results_from_json
from credo.study.tables import bracketed, difference_cell, verdict_cell


def columns(folders: list[Path]) -> dict[str, DifficultyResult]:
    """`{"study · difficulty": result}` for every difficulty of every report folder that has results; where two
    folders report the same study (`credo report --metric` on the same runs), every column also names its headline
    metric: `"study · difficulty · metric"`."""
    found = []
    for folder in folders:
        for name in ("study.yaml", "report.json"):
            if not (folder / name).is_file():
                sys.exit(f"study_verdicts.py: {folder}: no {name}; give report folders written by `credo report`")
        study = yaml.safe_load((folder / "study.yaml").read_text())
        for difficulty, report in results_from_json(folder, study).items():
            if report is not None:
                found.append((f"{study['name']} · {difficulty}", report.result))
    names = [name for name, _ in found]
    if len(set(names)) < len(names):
        names = [f"{name} · {result.metric}" for name, result in found]
    if len(set(names)) < len(names):
        sys.exit(f"study_verdicts.py: two report folders give the same study, difficulty and metric: {names}")
    return dict(zip(names, (result for _, result in found)))


def cell(contrast: Contrast | None) -> str:
    """`+0.026 [+0.018, +0.034] beats (0.001)`: the raw interval and the Holm verdict with its adjusted p; a survey's
    contrast (too few seeds for a test) its mean and per-seed values: `+0.020 (per seed +0.010, +0.030), descriptive`."""
    if contrast is None:
        return "–"
    if contrast.descriptive:
        return f"{difference_cell(contrast)}, descriptive"
    if contrast.p is None:
        return f"{contrast.estimate.mean:+.3f} (one seed)"
    return f"{bracketed(contrast.estimate)} {verdict_cell(contrast)}"


def same_runs(names: list[str], found: dict[str, DifficultyResult]) -> dict[str, list[str]]:
    """The columns that report the same study and difficulty on different headline metrics (named
    `study · difficulty · metric` by `columns`), grouped by `study · difficulty`: groups of two or more only."""
    groups: dict[str, list[str]] = {}
    for name in names:
        head, _, metric = name.rpartition(" · ")
        if head and metric == found[name].metric:
            groups.setdefault(head, []).append(name)
    return {head: group for head, group in groups.items() if len(group) > 1}


def agreement(contrasts: list[Contrast | None]) -> str:
    """`yes` when the verdicts of one contrast on several metrics are the same word (beats, falls behind, not
    distinguishable), `no` when they differ, `–` with fewer than two verdicts."""
    verdicts = {c.verdict for c in contrasts if c is not None and c.p is not None}
    if sum(c is not None and c.p is not None for c in contrasts) < 2:
        return "–"
    return "yes" if len(verdicts) == 1 else "no"


def table(folders: list[Path], common: bool = False) -> str:
    found = columns(folders)
    names = list(found)
    groups = same_runs(names, found)
    methods = list(dict.fromkeys(r.method for result in found.values() for r in result.rows))
    by_column = {name: {r.method: r for r in result.rows} for name, result in found.items()}
    heads = names + [f"{head}: verdicts agree" for head in groups]
    lines = ["| method | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads)]

    def row(label: str, contrasts: dict[str, Contrast | None]) -> None:
        cells = [cell(contrasts[n]) for n in names]
        if common and "–" in cells:
            return
        agree = [agreement([contrasts[n] for n in group]) for group in groups.values()]
        lines.append(f"| {label} | " + " | ".join(cells + agree) + " |")

    for method in methods:
        if all(by_column[n].get(method) is None or by_column[n][method].auc_vs_baseline is None for n in names):
            continue
        row(f"`{method}`", {n: by_column[n][method].auc_vs_baseline if method in by_column[n] else None for n in names})
    pairs = dict.fromkeys((r.method, r.like_for_like) for result in found.values() for r in result.rows
                          if r.like_for_like)
    for method, like in pairs:
        row(f"`{method}` vs `{like}`", {n: by_column[n][method].auc_vs_like if method in by_column[n] and
                                        by_column[n][method].like_for_like == like else None for n in names})
    families = [found[n].family for n in names]
    blank = [""] * len(groups)
    lines.append("| contrasts in the Holm family (m) | " + " | ".join([str(f.size) for f in families] + blank) + " |")
    lines.append("| MDE at 80% power after Holm (level 0.05 / m) | " + " | ".join(
        ["–" if f.mde is None else f"{f.mde:.3f} ({f.seeds} seeds)" for f in families] + blank) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    arguments = sys.argv[1:]
    common = "--common" in arguments
    folders = [Path(a) for a in arguments if a != "--common"]
    if not folders or any(a.startswith("-") and a != "--common" for a in arguments):
        sys.exit("usage: python examples/study_verdicts.py [--common] REPORT_DIR [REPORT_DIR...]")
    print(table(folders, common))
