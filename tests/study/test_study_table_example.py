"""examples/study_table.py: the README's per-method table of one written study report."""

from __future__ import annotations

import json

from example_scripts import load_example
from test_study_verdicts_example import written_report

from credo.study.curves import Estimate, Share


def test_a_row_per_method_with_the_reports_numbers(tmp_path):
    """Areas (test_report): grpo 0.40, better 0.55, worse 0.30, oracle 0.70, each seed shifted alike, so every paired
    difference is exact; `better`'s like-for-like baseline is `worse`."""
    table = load_example("study_table")
    report = written_report(tmp_path / "a", "first", like_for_like={"better": "worse"})
    lines = table.tables(report).splitlines()
    assert lines[0] == "### first · default"
    assert lines[2].startswith("| method | seeds | final greedy | area | Δ area vs grpo |")
    rows = {line.split(" | ")[0].removeprefix("| "): line.split(" | ") for line in lines[4:]}
    assert set(rows) == {"`grpo`", "`better`", "`worse`", "`oracle_blame`"}
    better = rows["`better`"]
    assert better[1] == "2"
    assert better[4] == "+0.150 [+0.150, +0.150]"  # the area's paired difference to grpo
    assert better[5] == "+0.250 [+0.250, +0.250] vs `worse`"
    assert better[7] == "0.50 [0.50, 0.50]"  # 0.15 of the oracle's 0.30
    assert better[9] == "0.80 |"  # blame precision, the last column without a runs folder
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
    assert table.share_cell(None) == "–"
    assert table.share_cell(Share(None, None, None, 2)) == "–"
    assert table.share_cell(Share(0.4, None, None, 2)) == "0.40 (unbounded)"
