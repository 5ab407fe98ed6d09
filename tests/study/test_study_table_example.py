"""examples/study_table.py: the powered study's per-method table of one written study report
(docs/results/powered-study.md)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from example_scripts import load_example
from test_study_verdicts_example import written_report

from credo.study.analysis import Contrast
from credo.study.stats import Estimate, Share


def test_a_row_per_method_with_the_reports_numbers(tmp_path):
    """Areas (test_report): grpo 0.40, better 0.55, worse 0.30, oracle 0.70, each seed shifted alike, so every paired
    difference is exact; `better`'s like-for-like baseline is `worse`."""
    table = load_example("study_table")
    report = written_report(tmp_path / "a", "first", like_for_like={"better": "worse"})
    lines = table.tables(report).splitlines()
    assert lines[0] == "### first · default"
    assert lines[2].startswith("| method | seeds | final greedy | area | Δ area vs grpo (raw 95%) | verdict (Holm p) |")
    rows = {line.split(" | ")[0].removeprefix("| "): line.split(" | ") for line in lines[4:]}
    assert set(rows) == {"`grpo`", "`better`", "`worse`", "`oracle_blame`"}
    better = rows["`better`"]
    assert better[1] == "2"
    assert better[4] == "+0.150 [+0.150, +0.150]"  # the area's paired difference to grpo
    assert better[5] == "beats (<0.001)"  # an exact difference on both seeds: p 0
    assert better[6] == "+0.250 [+0.250, +0.250] vs `worse`" and better[7] == "beats (<0.001)"
    assert better[8] == "+0.150 [+0.150, +0.150]"  # at equal steps (this written report's rollout batches)
    assert better[9] == "0.50 [0.50 to 0.50]"  # 0.15 of the oracle's 0.30 on both seeds (Fieller)
    assert better[10] == "+0.100 [+0.100, +0.100]"  # final pass@1 = y / 2: 0.4 - 0.3
    assert better[12] == "0.80 |"  # blame precision, the last column without a runs folder
    assert rows["`grpo`"][5] == "–"


def test_the_steps_column_reads_the_runs_summaries(tmp_path):
    table = load_example("study_table")
    report = written_report(tmp_path / "a", "first")
    runs = tmp_path / "a"
    summary = runs / "default" / "better" / "seed1" / "summary.json"
    summary.write_text(json.dumps(json.loads(summary.read_text()) | {"steps": 30}))
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in table.tables(report, runs).splitlines()[4:]}
    assert rows["`better`"].endswith("| 25 |")  # seeds at 20 and 30 steps
    assert rows["`grpo`"].endswith("| 20 |")
    assert table.mean_steps(runs, "default", "absent") == "–"


def test_cells_say_what_was_not_measured():
    table = load_example("study_table")
    assert table.interval(None) == "–"
    assert table.interval(Estimate(0.02, None, None, 1)) == "+0.020 (one seed)"
    assert table.verdict(None) == "–"
    assert table.verdict(Contrast(Estimate(0.02, None, None, 1), None, None)) == "one seed"
    assert table.verdict(Contrast(Estimate(0.02, 0.01, 0.03, 6), 0.01, 0.004, 0.09)) == "not distinguishable (0.090)"


def test_a_report_without_per_seed_values_keeps_the_share_without_an_interval(tmp_path):
    table = load_example("study_table")
    report = written_report(tmp_path / "a", "first")
    path = report / "report.json"
    data = json.loads(path.read_text())
    del data["default"]["per_seed"]
    path.write_text(json.dumps(data))
    rows = {line.split(" | ")[0].removeprefix("| "): line.split(" | ") for line in table.tables(report).splitlines()[4:]}
    assert rows["`better`"][9] == "0.50 [interval needs per-seed values (runs not committed)]"
    assert rows["`better`"][5] == "beats (<0.001)"
    assert table.share_cell(SimpleNamespace(share=Share(0.4, None, None, 2)), SimpleNamespace(per_seed=True)) == \
        "0.40 [unbounded]"
