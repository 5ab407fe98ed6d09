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
runs) give a column each, named by their headline metric, as does each secondary endpoint of a regime
(`report.secondary`: its verdicts are in the regime's one Holm family, so the family's size and detectable effect are
given once); a last column `study · difficulty: verdicts agree` says per row whether the Holm verdicts of one regime's
metrics are the same word (yes / no).
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from credo.study.analysis import Contrast, DifficultyResult, MethodRow
from credo.study.results import results_from_json
from credo.study.tables import bracketed, difference_cell, verdict_cell


def columns(folders: list[Path]) -> dict[str, tuple[DifficultyResult, str | None]]:
    """`{"study · difficulty": (result, None)}` for every difficulty of every report folder that has results, and
    `{"study · difficulty · endpoint": (result, endpoint)}` for each of its secondary endpoints (`report.secondary`,
    verdicts in the same Holm family); where a regime has secondary endpoints, or two folders report the same study
    (`credo report --metric` on the same runs), every column also names its metric: `"study · difficulty · metric"`."""
    found: list[tuple[str, DifficultyResult, str | None]] = []
    for folder in folders:
        for name in ("study.yaml", "report.json"):
            if not (folder / name).is_file():
                sys.exit(f"study_verdicts.py: {folder}: no {name}; give report folders written by `credo report`")
        study = yaml.safe_load((folder / "study.yaml").read_text())
        for difficulty, report in results_from_json(folder, study).items():
            if report is None:
                continue
            head = f"{study['name']} · {difficulty}"
            endpoints = list(dict.fromkeys(e for r in report.result.rows for e in r.secondary_vs_baseline))
            found.append((f"{head} · {report.result.metric}" if endpoints else head, report.result, None))
            found += [(f"{head} · {e}", report.result, e) for e in endpoints]
    names = [name for name, _, _ in found]
    if len(set(names)) < len(names):
        names = [name if endpoint or name.count(" · ") > 1 else f"{name} · {result.metric}"
                 for name, result, endpoint in found]
    if len(set(names)) < len(names):
        sys.exit(f"study_verdicts.py: two report folders give the same study, difficulty and metric: {names}")
    return {name: (result, endpoint) for name, (_, result, endpoint) in zip(names, found)}


def contrast_of(row: MethodRow | None, endpoint: str | None) -> Contrast | None:
    """A method's contrast to the baseline on the column's metric: the headline's, or a secondary endpoint's."""
    if row is None:
        return None
    return row.auc_vs_baseline if endpoint is None else row.secondary_vs_baseline.get(endpoint)


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


def same_runs(names: list[str]) -> dict[str, list[str]]:
    """The columns that report the same study and difficulty on different metrics (named `study · difficulty ·
    metric` by `columns`), grouped by `study · difficulty`: groups of two or more only."""
    groups: dict[str, list[str]] = {}
    for name in names:
        if name.count(" · ") > 1:
            groups.setdefault(name.rsplit(" · ", 1)[0], []).append(name)
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
    groups = same_runs(names)
    methods = list(dict.fromkeys(r.method for result, _ in found.values() for r in result.rows))
    by_column = {name: {r.method: r for r in result.rows} for name, (result, _) in found.items()}
    heads = names + [f"{head}: verdicts agree" for head in groups]
    lines = ["| method | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads)]

    def row(label: str, contrasts: dict[str, Contrast | None]) -> None:
        cells = [cell(contrasts[n]) for n in names]
        if common and "–" in cells:
            return
        agree = [agreement([contrasts[n] for n in group]) for group in groups.values()]
        lines.append(f"| {label} | " + " | ".join(cells + agree) + " |")

    for method in methods:
        contrasts = {n: contrast_of(by_column[n].get(method), found[n][1]) for n in names}
        if any(c is not None for c in contrasts.values()):
            row(f"`{method}`", contrasts)
    pairs = dict.fromkeys((r.method, r.like_for_like) for result, _ in found.values() for r in result.rows
                          if r.like_for_like)
    for method, like in pairs:  # like-for-like contrasts are the headline metric's
        row(f"`{method}` vs `{like}`", {n: by_column[n][method].auc_vs_like if found[n][1] is None and
                                        method in by_column[n] and by_column[n][method].like_for_like == like
                                        else None for n in names})
    # a regime's secondary endpoints share its one family: its numbers once, under its headline's column
    families = {n: result.family if endpoint is None else None for n, (result, endpoint) in found.items()}
    blank = [""] * len(groups)
    lines.append("| contrasts in the Holm family (m) | " + " | ".join(
        ["(same family)" if f is None else str(f.size) for f in families.values()] + blank) + " |")
    lines.append("| MDE at 80% power after Holm (level 0.05 / m) | " + " | ".join(
        ["(same family)" if f is None else "–" if f.mde is None else f"{f.mde:.3f} ({f.seeds} seeds)"
         for f in families.values()] + blank) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    arguments = sys.argv[1:]
    common = "--common" in arguments
    folders = [Path(a) for a in arguments if a != "--common"]
    if not folders or any(a.startswith("-") and a != "--common" for a in arguments):
        sys.exit("usage: python examples/study_verdicts.py [--common] REPORT_DIR [REPORT_DIR...]")
    print(table(folders, common))
