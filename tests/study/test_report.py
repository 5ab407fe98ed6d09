"""The study report from synthetic run directories: known curves give the known table, findings and files."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml

from credo.study.report import write_report

# Greedy pass@1 at rollout tokens 0, 1000, 2000 (both seeds; seed 1 is shifted by `SHIFT` to give intervals).
CURVES = {"grpo": (0.2, 0.4, 0.6), "better": (0.2, 0.6, 0.8), "worse": (0.2, 0.3, 0.4), "oracle_blame": (0.2, 0.8, 1.0)}
SHIFT = {0: 0.0, 1: 0.02}


def make_run(path, method, seed, ys, tokens=(0, 1000, 2000), precision=0.8):
    path.mkdir(parents=True)
    records = []
    for step, (x, y) in enumerate(zip(tokens, ys)):
        result = {"greedy_pass@1": y, "pass@1": y / 2, "pass@4": min(1.0, y * 1.5), "by_difficulty": {}}
        records.append({"step": step * 10, "rollout_tokens": x, "wall_s": step * 5.0, "eval": result})
        if step:
            records.append({"step": step * 10, "rollout_tokens": x, "reward/mean": y})
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    evals = [r["eval"] for r in records if "eval" in r]
    summary = {"method": method, "task": "arith", "seed": seed, "steps": 20, "rollout_tokens": tokens[-1],
               "wall_s": 10.0, "skipped_steps": 0, "eval_start": evals[0], "eval_end": evals[-1],
               "blame_precision": precision}
    (path / "summary.json").write_text(json.dumps(summary))
    sample = {"step": 1, "prompt": "07+5?", "response": "+5=13", "reward": 0.0, "correct": False,
              "first_wrong_step": 0, "blame_start": 1, "tokens": ["+", "5", "=", "1", "3"],
              "advantage": [-1.0] * 5, "loss_mask": [True] * 5, "credit": [-0.1, -0.2, -0.3, -0.4, 0.0]}
    (path / "samples.jsonl").write_text(json.dumps(sample) + "\n")


@pytest.fixture
def study_dir(tmp_path):
    root = tmp_path / "study"
    study = {"name": "synthetic", "seeds": [0, 1], "methods": {m: {"config": f"{m}.yaml"} for m in CURVES},
             "difficulties": {"default": {}}, "report": {"baseline": "grpo", "oracle": "oracle_blame",
                                                         "metric": "greedy_pass@1"}, "command": "credo compare synthetic.yaml"}
    root.mkdir()
    (root / "study.yaml").write_text(yaml.safe_dump(study))
    for method, ys in CURVES.items():
        for seed, shift in SHIFT.items():
            make_run(root / "default" / method / f"seed{seed}", method, seed, [y + shift if y > 0.2 else y for y in ys])
    return root


def test_known_curves_give_the_known_table(study_dir):
    write_report(study_dir)
    numbers = json.loads((study_dir / "report.json").read_text())["default"]
    rows = {r["method"]: r for r in numbers["methods"]}
    assert numbers["auc_tokens"] == 2000
    assert numbers["baseline_final"] == pytest.approx(0.61)  # (0.6 + 0.62) / 2
    # areas over [0, 2000] of (0.2, a, b): (0.2 + a) / 4 + (a + b) / 4; seed 1 adds 0.02 * 3/4 = 0.015
    for method, (_, a, b) in CURVES.items():
        expected = (0.2 + a) / 4 + (a + b) / 4
        assert rows[method]["auc"]["mean"] == pytest.approx(expected + 0.0075)
    assert rows["better"]["auc_vs_baseline"]["mean"] == pytest.approx(0.15)
    assert rows["better"]["share_of_oracle_gain"]["value"] == pytest.approx(0.5)  # 0.15 / 0.30
    assert rows["worse"]["share_of_oracle_gain"]["value"] == pytest.approx(-0.10 / 0.30)  # areas 0.30 vs 0.40
    assert rows["grpo"]["share_of_oracle_gain"] is None and rows["oracle_blame"]["share_of_oracle_gain"] is None
    # tokens to the baseline's final 0.61: better crosses at 1000 + 1000 * (0.61 - 0.6) / 0.2 = 1050 (seed 0)
    # and 1000 + 1000 * (0.61 - 0.62) ... = 995 (seed 1: 0.62 at 1000 already above: 1000 * 0.41 / 0.42)
    better = rows["better"]["tokens_to_baseline_final"]
    assert better["mean"] == pytest.approx((1050 + 1000 * 0.41 / 0.42) / 2)
    assert rows["worse"]["tokens_to_baseline_final"] is None and rows["worse"]["reached_baseline_final"] == 0
    assert rows["grpo"]["reached_baseline_final"] == 1  # seed 0 ends at 0.60 < 0.61: only seed 1 reaches the mean
    assert rows["grpo"]["final"]["greedy_pass@1"]["mean"] == pytest.approx(0.61)
    assert rows["better"]["blame_precision"]["mean"] == pytest.approx(0.8)


def test_findings_say_better_worse_and_the_share(study_dir):
    text = write_report(study_dir, html=True).read_text()
    assert "`better` beats `grpo`" in text
    assert "`worse` falls behind `grpo`" in text and "never reached the baseline's final greedy_pass@1" in text
    assert "The yardstick `oracle_blame` beats `grpo`" in text
    assert "share of the oracle's gain 0.50 [0.50 to 0.50]" in text
    assert "credo compare synthetic.yaml" in text
    for name in ("default_greedy_pass_at_1.png", "default_pass_at_1.png", "default_pass_at_4.png", "default_area_vs_grpo.png"):
        assert (study_dir / "plots" / name).stat().st_size > 5000
    page = (study_dir / "credit_default.html").read_text()
    assert page.count("<h2>") == len(CURVES) and page.count('class="gn10 rn10 b"') == len(CURVES)
    assert "credit -0.4 advantage -1" in page and "blame precision 0.90" in page  # 0.9 of 1.0 on or after token 1
    assert "<table>" in (study_dir / "report.html").read_text()


def test_report_to_another_directory_and_unfinished_runs(study_dir, tmp_path):
    (study_dir / "default" / "worse" / "seed1" / "summary.json").unlink()  # still running
    out = tmp_path / "docs"
    text = write_report(study_dir, out).read_text()
    assert "Unfinished (finished seeds / all): worse (1/2)." in text
    assert (out / "study.yaml").exists() and (out / "plots" / "default_greedy_pass_at_1.png").exists()
    assert not (study_dir / "report.md").exists()


def test_report_errors(study_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="not a study directory"):
        write_report(tmp_path)
    for seed in (0, 1):
        (study_dir / "default" / "grpo" / f"seed{seed}" / "summary.json").unlink()
    with pytest.raises(ValueError, match="the baseline 'grpo' has no finished run"):
        write_report(study_dir)


def whole_file_reads_forbidden(monkeypatch, suffix: str = ".jsonl") -> None:
    """Make reading a whole `suffix` file at once fail: such files must be streamed line by line."""
    for name in ("read_text", "read_bytes"):
        whole = getattr(Path, name)

        def guarded(self, *args, _whole=whole, **kwargs):
            assert self.suffix != suffix, f"{self} was read whole"
            return _whole(self, *args, **kwargs)

        monkeypatch.setattr(Path, name, guarded)


def test_report_streams_the_logs_and_skips_torn_last_lines(study_dir, monkeypatch, caplog):
    run = study_dir / "default" / "grpo" / "seed0"
    expected = json.loads(json.dumps(write_and_read(study_dir)))
    for name in ("metrics.jsonl", "samples.jsonl"):
        with (run / name).open("a") as handle:
            handle.write('{"step":13,"reward/me')  # the append a kill or a full disk cut short
    whole_file_reads_forbidden(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="credo.io"):
        assert write_and_read(study_dir) == expected
    torn = sorted(r.getMessage().split(":")[0] for r in caplog.records if "torn last line" in r.getMessage())
    assert torn == [str(run / "metrics.jsonl"), str(run / "samples.jsonl")]


def write_and_read(study_dir) -> dict:
    write_report(study_dir)
    return {"json": json.loads((study_dir / "report.json").read_text()),
            "heatmap": (study_dir / "credit_default.html").read_text()}


def test_a_malformed_log_line_is_an_error_naming_file_and_line(study_dir):
    metrics = study_dir / "default" / "grpo" / "seed1" / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    metrics.write_text(lines[0] + '{"step":13,"reward/me\n' + "".join(lines[1:]))
    with pytest.raises(ValueError, match=rf"^{metrics}, line 2: not a JSON record \(Invalid control character at column 22\)$"):
        write_report(study_dir)


def report_files(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(directory.rglob("*"))
            if p.is_file() and p.name != "study.yaml" and "seed" not in str(p.relative_to(directory))}


def test_no_finished_run_is_an_error_that_keeps_the_report(study_dir):
    from typer.testing import CliRunner

    from credo.cli import app
    from credo.study.report import NoFinishedRuns

    write_report(study_dir, html=True)
    before = report_files(study_dir)
    assert {"report.md", "report.json", "report.html", "credit_default.html"} <= set(before)
    for summary in study_dir.glob("default/*/seed*/summary.json"):
        summary.unlink()  # every run still going
    with pytest.raises(NoFinishedRuns, match=rf"^{study_dir}: no finished run yet \(none of its 8 run folders"):
        write_report(study_dir, html=True)
    result = CliRunner().invoke(app, ["report", str(study_dir), "--html"])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"error: {study_dir}: no finished run yet") and result.stderr.count("\n") == 1
    assert "left as it was" in result.stderr and "Traceback" not in result.stderr
    assert report_files(study_dir) == before  # not one byte or timestamp changed


def test_a_written_report_is_drawn_again_from_its_json_alone(study_dir, tmp_path):
    from typer.testing import CliRunner

    from credo.cli import app

    first = tmp_path / "first"
    write_report(study_dir, first, html=True)
    saved = json.loads((first / "report.json").read_text())["default"]
    assert set(saved["curves"]) == {"greedy_pass@1", "pass@1", "pass@4"}
    grpo = saved["curves"]["greedy_pass@1"]["grpo"]["rollout_tokens"]
    assert grpo["x"][0] == 0 and grpo["x"][-1] == 2000 and grpo["mean"][-1] == pytest.approx(0.61) and grpo["seeds"] == 2
    assert '"x": [0.0, ' in (first / "report.json").read_text()  # a curve's numbers on one line
    again = tmp_path / "again"  # no runs beside it: only the report folder
    result = CliRunner().invoke(app, ["report", str(first), "--from-json", "--html", "--output", str(again)])
    assert result.exit_code == 0, result.output
    for name in ("report.md", "report.json", "report.html", "credit_default.html", "credit_default.jsonl"):
        assert (again / name).read_text() == (first / name).read_text(), name
    assert sorted(p.name for p in (again / "plots").iterdir()) == sorted(p.name for p in (first / "plots").iterdir())
    # A report.json from before the curves were kept: its figures cannot be drawn again, the ones there stay.
    old = json.loads((first / "report.json").read_text())
    del old["default"]["curves"]
    (first / "report.json").write_text(json.dumps(old))
    (first / "credit_default.jsonl").unlink()
    kept = (first / "plots" / "default_pass_at_1.png").read_bytes()
    text = write_report(first, from_json=True).read_text()
    assert "holds no curve data to draw them again" in text and "](plots/default_pass_at_1.png)" in text
    assert (first / "plots" / "default_pass_at_1.png").read_bytes() == kept and "credit_default.html" in text
    (first / "report.json").unlink()
    with pytest.raises(FileNotFoundError, match="no report.json to draw the report from"):
        write_report(first, from_json=True)


def test_metrics_sampled_only_at_the_end_are_reported_but_not_drawn(study_dir):
    """`eval.final_samples`: pass@k only in the last evaluation gives a final column and no one-point curve."""
    for path in study_dir.glob("default/*/seed*"):
        records = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
        evals = [r for r in records if "eval" in r]
        for record in evals[:-1]:
            record["eval"] = {k: v for k, v in record["eval"].items() if not k.startswith("pass@")}
        (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    write_report(study_dir)
    numbers = json.loads((study_dir / "report.json").read_text())["default"]
    assert list(numbers["curves"]) == ["greedy_pass@1"]
    assert {"pass@1", "pass@4"} <= set(numbers["methods"][0]["final"])
    assert not list((study_dir / "plots").glob("*pass_at_4*")) and "final pass@4" in (study_dir / "report.md").read_text()


def test_a_greedy_only_study_has_no_sampled_columns(study_dir):
    for path in study_dir.glob("default/*/seed*"):
        records = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
        for record in records:
            if "eval" in record:
                record["eval"] = {"greedy_pass@1": record["eval"]["greedy_pass@1"], "by_difficulty": {}}
        (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        summary = json.loads((path / "summary.json").read_text())
        summary["eval_end"] = records[-2]["eval"] if "eval" in records[-2] else records[-1]["eval"]
        (path / "summary.json").write_text(json.dumps(summary))
    write_report(study_dir)
    assert "final pass@1" not in (study_dir / "report.md").read_text()
    assert list(json.loads((study_dir / "report.json").read_text())["default"]["curves"]) == ["greedy_pass@1"]


def test_a_method_with_fewer_seeds_is_paired_on_them_and_not_called_unfinished(study_dir):
    study = yaml.safe_load((study_dir / "study.yaml").read_text())
    study["seeds"] = [0, 1, 2]
    study["methods"]["better"]["seeds"] = [0, 1]
    (study_dir / "study.yaml").write_text(yaml.safe_dump(study))
    for method in CURVES:
        if method != "better":
            make_run(study_dir / "default" / method / "seed2", method, 2, CURVES[method])
    write_report(study_dir)
    numbers = json.loads((study_dir / "report.json").read_text())["default"]
    rows = {r["method"]: r for r in numbers["methods"]}
    assert rows["better"]["seeds"] == 2 and rows["grpo"]["seeds"] == 3
    assert rows["better"]["auc_vs_baseline"]["n"] == 2  # paired over the seeds both ran
    assert "unfinished" not in numbers


def test_areas_at_equal_steps_and_unstable_runs(study_dir):
    """`worse` trains 20 steps like the others: its step areas equal its token areas' difference (-0.10); seed 1 of
    `better` gets a gradient-norm spike (> 10x its median) and seed 0 of `worse` a curve that ends below its start."""
    def rewrite(path, change):
        records = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
        change(records)
        (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    def spike(records):  # norms 50, 1, 1, 1, 1: the median is 1
        steps = [r for r in records if "eval" not in r]
        for i, record in enumerate(steps):
            record["grad_norm"] = 50.0 if i == 0 else 1.0
        records += [{"step": 20, "rollout_tokens": 2000, "grad_norm": 1.0}] * 3

    def collapse(records):
        [r for r in records if "eval" in r][-1]["eval"]["greedy_pass@1"] = 0.1

    rewrite(study_dir / "default" / "better" / "seed1", spike)
    rewrite(study_dir / "default" / "worse" / "seed0", collapse)
    for path in (study_dir / "default" / "grpo").glob("seed*"):
        rewrite(path, lambda records: [r.update(grad_norm=2.0) for r in records if "eval" not in r])
    write_report(study_dir)
    rows = {r["method"]: r for r in json.loads((study_dir / "report.json").read_text())["default"]["methods"]}
    assert rows["better"]["steps_auc_vs_baseline"]["mean"] == pytest.approx(rows["better"]["auc_vs_baseline"]["mean"])
    assert (rows["better"]["unstable_runs"], rows["worse"]["unstable_runs"], rows["grpo"]["unstable_runs"]) == (1, 1, 0)
    assert "unstable runs" in (study_dir / "report.md").read_text()


def test_the_step_area_pairs_runs_over_the_steps_both_trained(tmp_path):
    from credo.study.report import Run, steps_area_difference

    def run(steps, ys):
        evals = [{"step": s, "rollout_tokens": 100 * s, "wall_s": 0.0, "eval": {"greedy_pass@1": y}} for s, y in zip(steps, ys)]
        return Run("m", 0, tmp_path, evals, {})

    long, short = run((0, 10, 20), (0.2, 0.4, 0.9)), run((0, 5), (0.2, 0.2))  # a costly method trained 5 steps
    # over [0, 5]: the long run rises 0.2 -> 0.3 (mean 0.25), the short one stays at 0.2
    assert steps_area_difference(long, short, "greedy_pass@1") == pytest.approx(0.05)
    assert steps_area_difference(short, long, "greedy_pass@1") == pytest.approx(-0.05)


def test_like_for_like_baselines_and_paired_final_differences(study_dir):
    """`report.like_for_like` pairs a method with a second baseline; every method's final metrics are also paired
    with the baseline's, seed by seed."""
    study = yaml.safe_load((study_dir / "study.yaml").read_text())
    study["report"]["like_for_like"] = {"better": "worse"}
    (study_dir / "study.yaml").write_text(yaml.safe_dump(study))
    text = write_report(study_dir).read_text()
    rows = {r["method"]: r for r in json.loads((study_dir / "report.json").read_text())["default"]["methods"]}
    # areas (0.2, a, b) -> (0.2 + a) / 4 + (a + b) / 4: better 0.55, worse 0.30, equal shifts per seed
    assert rows["better"]["like_for_like"] == "worse"
    assert rows["better"]["auc_vs_like_for_like"]["mean"] == pytest.approx(0.25)
    assert rows["better"]["auc_vs_like_for_like"]["low"] == pytest.approx(0.25)  # the same difference on both seeds
    assert rows["worse"]["auc_vs_like_for_like"] is None and rows["worse"]["like_for_like"] is None
    # final pass@4 = min(1, 1.5 y): better 1.0 / 1.0 (y 0.8, 0.82), grpo 0.9 / 0.93 (y 0.6, 0.62)
    assert rows["better"]["final_vs_baseline"]["pass@4"]["mean"] == pytest.approx((0.1 + 0.07) / 2)
    assert rows["better"]["final_vs_baseline"]["greedy_pass@1"]["mean"] == pytest.approx(0.2)
    assert rows["grpo"]["final_vs_baseline"] == {}
    assert "it beats its like-for-like `worse` (+0.250" in text
    assert "Δ area vs like-for-like" in text and "Δ final pass@4 vs grpo" in text
    assert "final pass@4 +0.085" in text


def test_a_method_that_reduces_to_the_baseline_is_called_identical(study_dir):
    """REINFORCE on policy is GRPO to the last digit: equal runs are "identical", not "not distinguishable"."""
    study = yaml.safe_load((study_dir / "study.yaml").read_text())
    study["methods"]["same"] = {"config": "same.yaml"}
    (study_dir / "study.yaml").write_text(yaml.safe_dump(study))
    for seed, shift in SHIFT.items():
        make_run(study_dir / "default" / "same" / f"seed{seed}", "same", seed,
                 [y + shift if y > 0.2 else y for y in CURVES["grpo"]])
    text = write_report(study_dir).read_text()
    assert "`same` is identical on every seed to `grpo` (area 0.407, paired difference +0.000, interval +0.000" in text
    assert "`better` beats `grpo`" in text


def test_a_study_of_many_methods_also_draws_its_curves_family_by_family(tmp_path):
    """One figure of every method cannot be read past FAMILY_FIGURES_ABOVE methods: the report adds one per family,
    each with the baseline, the oracle and the family's like-for-like baselines."""
    from credo.study.report import FAMILY_FIGURES_ABOVE

    methods = ["grpo", "grpo_4mb", "dapo", "s_trace", "p_trace", "grpo_lambda", "gtpo", "srpo", "rrpo", "ibpo", "vine",
               "oracle_blame"]
    assert len(methods) > FAMILY_FIGURES_ABOVE
    root = tmp_path / "study"
    root.mkdir()
    study = {"name": "many", "seeds": [0, 1], "methods": {m: {"config": f"{m}.yaml"} for m in methods},
             "difficulties": {"default": {}},
             "report": {"baseline": "grpo", "oracle": "oracle_blame", "like_for_like": {"s_trace": "grpo_4mb"}}}
    (root / "study.yaml").write_text(yaml.safe_dump(study))
    for i, method in enumerate(methods):
        for seed, shift in SHIFT.items():
            make_run(root / "default" / method / f"seed{seed}", method, seed, [0.2, 0.3 + 0.01 * i + shift, 0.5 + shift])
    text = write_report(root).read_text()
    families = ("baseline", "trace", "token", "reset", "revision", "value")
    for family in families:
        assert (root / "plots" / f"default_greedy_pass_at_1_{family}.png").stat().st_size > 5000
        assert f"(plots/default_greedy_pass_at_1_{family}.png)" in text
    assert not list((root / "plots").glob("*_oracle.png")) and not list((root / "plots").glob("*_other.png"))
    assert not list((root / "plots").glob("default_pass_at_1_*.png"))  # only the headline metric, family by family
    assert "greedy_pass@1 of the trace methods beside `grpo` and `oracle_blame`" in text


def test_family_figures_hold_the_family_its_like_for_like_baselines_and_the_anchors():
    from credo.study.grid import ReportConfig
    from credo.study.report import family_figures

    few = ["grpo", "s_trace", "oracle_blame"]
    assert family_figures(few, ReportConfig()) == {}
    many = ["grpo", "grpo_4mb", "s_trace", "s_trace@tuned", "grpo_4mb@tuned", "srpo", "srpo_oracle_0.5", "ibpo",
            "better", "worse", "oracle_blame"]
    figures = family_figures(many, ReportConfig(like_for_like={"s_trace": "grpo_4mb", "s_trace@tuned": "grpo_4mb@tuned"}))
    assert list(figures) == ["baseline", "trace", "reset", "revision", "other"]
    assert figures["trace"] == ["grpo", "grpo_4mb", "s_trace", "s_trace@tuned", "grpo_4mb@tuned", "oracle_blame"]
    assert figures["reset"] == ["grpo", "srpo", "srpo_oracle_0.5", "oracle_blame"]
    assert figures["other"] == ["grpo", "better", "worse", "oracle_blame"]
    assert figures["baseline"] == ["grpo", "grpo_4mb", "grpo_4mb@tuned", "oracle_blame"]
    assert family_figures(many, ReportConfig(oracle=None))["reset"] == ["grpo", "srpo", "srpo_oracle_0.5"]


def test_a_like_for_like_baseline_must_be_a_method(tmp_path):
    from credo.config import ConfigError
    from credo.study.grid import load_study

    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "seeds": [0], "methods": {"grpo": "g.yaml", "s_trace": "s.yaml"},
                                    "report": {"oracle": None, "like_for_like": {"s_trace": "grpo_4mb"}}}))
    with pytest.raises(ConfigError, match="like_for_like s_trace: grpo_4mb: 'grpo_4mb' is not one of the methods"):
        load_study(path)

