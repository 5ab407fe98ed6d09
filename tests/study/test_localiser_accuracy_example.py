"""examples/localiser_accuracy.py: measured localiser accuracy against the share of the oracle's gain."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from example_scripts import load_example


def write_study(root: Path, report_dir: Path | None = None) -> None:
    report_dir = report_dir or root
    def entry(name, share=None, delta=None):
        return {"method": name, "seeds": 2, "share_of_oracle_gain": share, "auc_vs_baseline": delta,
                "blame_precision": {"mean": 0.8, "low": 0.7, "high": 0.9, "n": 2}}

    methods = [entry("grpo"),
               entry("srpo", {"value": -0.2, "low": -0.6, "high": 0.2, "seeds": 2},
                     {"mean": -0.012, "low": -0.03, "high": 0.006, "n": 2}),
               entry("srpo_oracle", {"value": 0.5, "low": 0.1, "high": 0.9, "seeds": 2},
                     {"mean": 0.031, "low": 0.004, "high": 0.058, "n": 2})]
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "report.json").write_text(json.dumps({"default": {"methods": methods}}))
    exact = {"srpo": [0.2, 0.3], "srpo_oracle": [1.0, 1.0], "grpo": []}
    for method, values in exact.items():
        for seed in (0, 1):
            run = root / "default" / method / f"seed{seed}"
            run.mkdir(parents=True)
            records = [{"step": i + 1, "resets/localiser_exact": v} for i, v in enumerate(values)] or [{"step": 1}]
            (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_rows_table_and_plot(tmp_path, capsys):
    example = load_example("localiser_accuracy")
    write_study(tmp_path)
    rows = example.localiser_rows(tmp_path)
    assert [r["method"] for r in rows] == ["srpo", "srpo_oracle"]  # grpo logs no localiser accuracy
    assert rows[0]["accuracy"] == pytest.approx(0.25) and rows[1]["share"] == 0.5
    example.main([str(tmp_path)])
    out = capsys.readouterr().out
    assert "| srpo | 0.25 | -0.012 (-0.030 to +0.006) | -0.20 (-0.60 to +0.20) | 0.800 |" in out
    assert (tmp_path / "plots" / "default_localiser_accuracy.png").stat().st_size > 10_000


def test_the_report_may_live_apart_from_the_runs(tmp_path, capsys):
    """`credo report --output docs/...` writes report.json away from the runs: `--report` reads it and draws there."""
    example = load_example("localiser_accuracy")
    write_study(tmp_path / "runs", tmp_path / "docs")
    example.main([str(tmp_path / "runs"), "default", "--report", str(tmp_path / "docs")])
    assert "| srpo_oracle | 1.00 | +0.031 (+0.004 to +0.058) | +0.50 (+0.10 to +0.90) | 0.800 |" in capsys.readouterr().out
    assert (tmp_path / "docs" / "plots" / "default_localiser_accuracy.png").stat().st_size > 10_000
    assert not (tmp_path / "runs" / "plots").exists()


def test_a_study_without_resets_is_a_clear_error(tmp_path):
    example = load_example("localiser_accuracy")
    write_study(tmp_path)
    for path in tmp_path.glob("default/srpo*/seed*/metrics.jsonl"):
        path.write_text('{"step": 1}\n')
    with pytest.raises(SystemExit, match="no run logged resets/localiser_exact"):
        example.main([str(tmp_path)])
