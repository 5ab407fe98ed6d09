"""examples/study_verdicts.py: one table of verdicts across written study reports, read from their report.json."""

from __future__ import annotations

import pytest
import yaml
from example_scripts import load_example
from test_report import CURVES, SHIFT, make_run

from credo.study.report import write_report


def written_report(root, name, like_for_like=None, skip=()):
    study = {"name": name, "seeds": [0, 1], "methods": {m: {"config": f"{m}.yaml"} for m in CURVES},
             "difficulties": {"default": {}}, "report": {"baseline": "grpo", "oracle": "oracle_blame",
                                                         "like_for_like": like_for_like or {}}}
    root.mkdir()
    (root / "study.yaml").write_text(yaml.safe_dump(study))
    for method, ys in CURVES.items():
        if method in skip:
            continue
        for seed, shift in SHIFT.items():
            make_run(root / "default" / method / f"seed{seed}", method, seed, [y + shift if y > 0.2 else y for y in ys])
    write_report(root, root / "report")
    return root / "report"


def test_a_table_of_verdicts_across_reports(tmp_path):
    """Areas (test_report): grpo 0.40, better 0.55, worse 0.30, oracle 0.70, each seed shifted alike, so every
    paired difference is exact (a zero-width interval excludes 0 unless the difference is 0)."""
    verdicts = load_example("study_verdicts")
    first = written_report(tmp_path / "a", "first", like_for_like={"better": "worse"})
    second = written_report(tmp_path / "b", "second", skip=("worse",))
    text = verdicts.table([first, second])
    lines = text.splitlines()
    assert lines[0] == "| method | first · default | second · default |"
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in lines[2:]}
    assert "`grpo`" not in rows  # the baseline has no difference to itself
    assert rows["`better`"] == "| `better` | +0.150 ± 0.000 beats | +0.150 ± 0.000 beats |"
    assert rows["`worse`"] == "| `worse` | -0.100 ± 0.000 falls behind | – |"
    assert rows["`oracle_blame`"].count("+0.300 ± 0.000 beats") == 2
    assert rows["`better` vs `worse`"] == "| `better` vs `worse` | +0.250 ± 0.000 beats | – |"
    assert lines[-1] == "| achieved MDE (median half-width) | 0.000 | 0.000 |"


def test_cells_say_when_a_difference_cannot_be_judged():
    from credo.study.curves import Estimate

    verdicts = load_example("study_verdicts")
    assert verdicts.cell(None) == "–"
    assert verdicts.cell(Estimate(0.02, None, None, 1)) == "+0.020 (one seed)"
    assert verdicts.cell(Estimate(0.01, -0.01, 0.03, 6)) == "+0.010 ± 0.020 not distinguishable"
    assert verdicts.cell(Estimate(-0.05, -0.08, -0.02, 6)) == "-0.050 ± 0.030 falls behind"
    assert verdicts.cell(Estimate(0.0, 0.0, 0.0, 6)) == "+0.000 ± 0.000 identical"  # the same runs (REINFORCE, GRPO)
    assert verdicts.cell(Estimate(0.001, 0.001, 0.001, 6)) == "+0.001 ± 0.000 beats"  # exact but not zero


def test_the_achieved_mde_is_the_median_half_width_at_the_baselines_seeds():
    from types import SimpleNamespace

    from credo.study.curves import Estimate

    verdicts = load_example("study_verdicts")

    def row(method, seeds, half=None):
        return SimpleNamespace(method=method, seeds=seeds,
                               auc_vs_baseline=None if half is None else Estimate(0.0, -half, half, seeds))

    rows = [row("grpo", 12), row("a", 12, 0.02), row("b", 12, 0.04), row("c", 12, 0.03), row("d", 6, 0.5)]
    assert verdicts.achieved_mde("grpo", rows) == pytest.approx(0.03)  # d, on fewer seeds, is left out
    assert verdicts.achieved_mde("grpo", rows[:1]) is None


def test_common_keeps_the_rows_every_report_has(tmp_path):
    """`worse` and the pair `better` vs `worse` are only in the first report: `--common` drops their rows, not the
    methods both ran, and the MDE row stays."""
    verdicts = load_example("study_verdicts")
    first = written_report(tmp_path / "a", "first", like_for_like={"better": "worse"})
    second = written_report(tmp_path / "b", "second", skip=("worse",))
    text = verdicts.table([first, second], common=True)
    rows = [line.split(" | ")[0].removeprefix("| ") for line in text.splitlines()[2:]]
    assert rows == ["`better`", "`oracle_blame`", "achieved MDE (median half-width)"]
    assert len(verdicts.table([first, second]).splitlines()) == len(rows) + 4  # without it: `worse` and the pair
