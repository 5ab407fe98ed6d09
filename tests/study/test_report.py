"""The study report from synthetic run directories: known curves give the known table, findings and files."""

from __future__ import annotations

import json
import logging
import math
import statistics
from pathlib import Path

import pytest
import yaml

from credo.study.report import write_report
from credo.study.stats import t_quantile

# Greedy pass@1 at rollout tokens 0, 1000, 2000 (both seeds; seed 1 is shifted by `SHIFT` to give intervals).
CURVES = {"grpo": (0.2, 0.4, 0.6), "better": (0.2, 0.6, 0.8), "worse": (0.2, 0.3, 0.4), "oracle_blame": (0.2, 0.8, 1.0)}
SHIFT = {0: 0.0, 1: 0.02}


def make_run(path, method, seed, ys, tokens=(0, 1000, 2000), precision=0.8, update_norm=None):
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
               "blame_precision": precision, **({} if update_norm is None else {"update_norm": update_norm})}
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
                                                         "metric": "greedy_pass@1", "min_verdict_seeds": 2},
             "command": "credo compare synthetic.yaml"}
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


def test_a_second_report_of_the_same_runs_under_another_headline_metric(study_dir, tmp_path):
    """`headline` moves the verdicts (and the area column) to another metric, in its own folder whose study.yaml
    names it; the first report is untouched and a report into the study's own folder is refused."""
    write_report(study_dir)
    first = json.loads((study_dir / "report.json").read_text())["default"]
    text = write_report(study_dir, tmp_path / "sampled", headline="pass@1").read_text()
    second = json.loads((tmp_path / "sampled" / "report.json").read_text())["default"]
    assert (first["metric"], second["metric"]) == ("greedy_pass@1", "pass@1")
    areas = {r["method"]: r["auc"]["mean"] for r in second["methods"]}
    assert areas["better"] == pytest.approx(sum(first_area(first, "better")) / 2 / 2, abs=1e-9)
    assert "pass@1 area at equal rollout tokens" in text
    assert yaml.safe_load((tmp_path / "sampled" / "study.yaml").read_text())["report"]["metric"] == "pass@1"
    assert json.loads((study_dir / "report.json").read_text())["default"] == first
    with pytest.raises(ValueError, match="its own --output"):
        write_report(study_dir, headline="pass@1")
    with pytest.raises(ValueError, match="--from-json redraws"):
        write_report(study_dir, tmp_path / "again", from_json=True, headline="pass@1")


def first_area(report: dict, method: str) -> list[float]:
    """A method's greedy area per seed in a report."""
    return [seed["area_tokens"]["greedy_pass@1"] for seed in report["per_seed"][method].values()]


def test_report_errors(study_dir, tmp_path):
    from credo.config import ConfigError

    with pytest.raises(FileNotFoundError, match="not a study directory"):
        write_report(tmp_path)
    (tmp_path / "study.yaml").write_text("name: s\nmethods: {grpo: g.yaml}\n")
    with pytest.raises(ConfigError, match=r"study.yaml: not a study file written by `credo compare` \(no seeds, "
                                          r"difficulties\)$"):
        write_report(tmp_path)
    (tmp_path / "study.yaml").write_text((study_dir / "study.yaml").read_text())
    for text, says in (("{bad", "Expecting property name"), ('{"default": 1}', "a mapping of difficulties")):
        (tmp_path / "report.json").write_text(text)
        with pytest.raises(ValueError, match=rf"report.json: not the JSON `credo report` writes \(.*{says}"):
            write_report(tmp_path, from_json=True)
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
    from credo.study.runs import NoFinishedRuns

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
    # every cell's per-seed values, keyed by seed: areas (0.2, 0.6, 0.8) + 0.02 on seed 1 -> 0.55, 0.565
    better = saved["per_seed"]["better"]
    assert sorted(better) == ["0", "1"] and better["1"]["area_tokens"]["greedy_pass@1"] == pytest.approx(0.565)
    assert better["0"]["final"]["pass@4"] == pytest.approx(1.0) and better["0"]["tokens_to_baseline_final"] == 1050
    # at equal optimiser updates (one a batch: steps 0, 10, 20): (0.4 * 10 + 0.7 * 10) / 20
    assert better["0"]["area_updates"]["greedy_pass@1"] == pytest.approx(0.55) and saved["update_budget"] == 20
    assert saved["token_checkpoints"] is None  # these runs have none
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


def test_areas_at_equal_updates_and_unstable_runs(study_dir):
    """`worse` trains 20 steps like the others: its update areas equal its token areas' difference; seed 1 of
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
    updates = rows["better"]["areas_vs_baseline"]["greedy_pass@1"]["updates"]
    assert updates["mean"] == pytest.approx(rows["better"]["auc_vs_baseline"]["mean"])
    assert (rows["better"]["unstable_runs"], rows["worse"]["unstable_runs"], rows["grpo"]["unstable_runs"]) == (1, 1, 0)
    assert "unstable runs" in (study_dir / "report.md").read_text()


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
    assert "Δ area vs like-for-like (raw 95%)" in text and "Δ final pass@4" in text
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
    rows = {r["method"]: r for r in json.loads((study_dir / "report.json").read_text())["default"]["methods"]}
    assert rows["same"]["auc_vs_baseline"]["p"] == 1.0 and rows["same"]["auc_vs_baseline"]["verdict"] == "identical"
    assert "`better` beats `grpo`" in text


def test_a_study_of_many_methods_also_draws_its_curves_family_by_family(tmp_path):
    """One figure of every method cannot be read past FAMILY_FIGURES_ABOVE methods: the report adds one per family,
    each with the baseline, the oracle and the family's like-for-like baselines."""
    from credo.study.figures import FAMILY_FIGURES_ABOVE

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
    from credo.study.figures import family_figures
    from credo.study.grid import ReportConfig

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



def test_a_cell_with_four_mini_batches_is_compared_at_equal_optimiser_updates(study_dir):
    """`better` takes 4 optimiser updates a batch (`optim.minibatches: 4`): its evaluations at batches 0, 10, 20 are
    at updates 0, 40, 80, and the areas at equal updates end at the regime's shortest run, 20 updates. Seed 0: better
    reads 0.4 at 20 updates (between 0.2 at 0 and 0.6 at 40): (0.2 + 0.4) / 2 = 0.3 against grpo's 0.4; seed 1:
    (0.2 + 0.41) / 2 = 0.305 against 0.415. The areas at equal tokens are unchanged (+0.15)."""
    for seed in SHIFT:
        config = study_dir / "default" / "better" / f"seed{seed}" / "config.yaml"
        config.write_text(yaml.safe_dump({"optim": {"minibatches": 4, "epochs": 1}}))
    text = write_report(study_dir).read_text()
    saved = json.loads((study_dir / "report.json").read_text())["default"]
    rows = {r["method"]: r for r in saved["methods"]}
    updates = rows["better"]["areas_vs_baseline"]["greedy_pass@1"]["updates"]
    assert updates["mean"] == pytest.approx(-0.105) and updates["n"] == 2 and saved["update_budget"] == 20
    assert rows["better"]["auc_vs_baseline"]["mean"] == pytest.approx(0.15)
    assert "Δ greedy_pass@1 area, equal optimiser updates" in text and "over the first 20 updates" in text


def test_a_report_written_before_updates_were_counted_draws_no_equal_update_contrast(study_dir, tmp_path):
    """Its per-seed `steps` counted rollout batches: they are not read as updates, and the report says so."""
    first = tmp_path / "first"
    write_report(study_dir, first)
    data = json.loads((first / "report.json").read_text())
    saved = data["default"]
    del saved["update_budget"]
    for by_seed in saved["per_seed"].values():
        for values in by_seed.values():
            del values["area_updates"]
            values["steps"] = {"greedy_pass@1": {"step": [0.0, 10.0, 20.0], "value": [0.2, 0.6, 0.8]}}
    (first / "report.json").write_text(json.dumps(data))
    text = write_report(first, from_json=True).read_text()
    assert "equal optimiser updates" not in text.split("### ")[1]
    assert "written before areas at equal optimiser updates" in text


def checkpoint_study(root: Path) -> Path:
    """Runs with token checkpoints every 1000 tokens (`train.eval_every_tokens`), each seed shifted alike:

    grpo:   step 0 (0 tokens, checkpoint 0) 0.2; step 10 (1040, 1000) 0.4; step 15 (1500, none) 0.9;
            step 20 (2100, 2000) 0.6; step 30 (3000, 3000) 0.7
    better: step 0 (0, 0) 0.2; step 8 (1200, 1000) 0.5; step 20 (3050, 3000) 0.8, which serves 2000 and 3000
    """
    evals = {"grpo": [(0, 0, 0, 0.2), (10, 1040, 1000, 0.4), (15, 1500, None, 0.9), (20, 2100, 2000, 0.6),
                      (30, 3000, 3000, 0.7)],
             "better": [(0, 0, 0, 0.2), (8, 1200, 1000, 0.5), (20, 3050, 3000, 0.8)]}
    study = {"name": "checkpoints", "seeds": [0, 1], "methods": {m: {"config": f"{m}.yaml"} for m in evals},
             "difficulties": {"default": {}}, "report": {"baseline": "grpo", "oracle": None}}
    root.mkdir()
    (root / "study.yaml").write_text(yaml.safe_dump(study))
    for method, points in evals.items():
        for seed, shift in SHIFT.items():
            path = root / "default" / method / f"seed{seed}"
            path.mkdir(parents=True)
            (path / "config.yaml").write_text(yaml.safe_dump({"train": {"eval_every_tokens": 1000}}))
            records = []
            for step, tokens, checkpoint, y in points:
                y = y + shift if y > 0.2 else y
                record = {"step": step, "rollout_tokens": tokens, "wall_s": step / 2,
                          "eval": {"greedy_pass@1": y, "by_difficulty": {}}}
                if checkpoint is not None:
                    record["token_checkpoint"] = checkpoint
                records.append(record)
            (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
            summary = {"steps": points[-1][0], "rollout_tokens": points[-1][1], "wall_s": 10.0,
                       "eval_end": records[-1]["eval"]}
            (path / "summary.json").write_text(json.dumps(summary))
    return root


def test_areas_at_token_checkpoints_read_each_curve_between_its_own_neighbours(tmp_path):
    """The areas end at the last checkpoint every run reached (3000) and read each curve between its own evaluations
    (seed 0): grpo (1040 x 0.3 + 460 x 0.65 + 600 x 0.75 + 900 x 0.65) / 3000, its evaluation at 1500 tokens
    included; better (1200 x 0.35 + 1800 x (0.5 + 0.7919) / 2) / 3000, with 0.7919 read at 3000 between 0.5 at 1200
    and 0.8 at 3050, not the 0.8 it measured 50 tokens later. Lateness: grpo 0, 0.04, 0.1, 0; better 0, 0.2, 1.05
    (checkpoint 2000 waits for 3050), 0.05: mean 0.18, largest 1.05. At equal optimiser updates (20, better's last)
    grpo (10 x 0.3 + 5 x 0.65 + 5 x 0.75) / 20 = 0.5, better (8 x 0.35 + 12 x 0.65) / 20 = 0.53."""
    root = checkpoint_study(tmp_path / "study")
    text = write_report(root).read_text()
    saved = json.loads((root / "report.json").read_text())["default"]
    grid = saved["token_checkpoints"]
    assert (grid["every"], grid["budget"], grid["largest_lateness"]) == (1000, 3000, pytest.approx(1.05))
    assert grid["mean_lateness"] == pytest.approx(0.18)
    assert saved["auc_tokens"] == 3000
    at_3000 = 0.5 + 0.3 * 1800 / 1850
    assert saved["per_seed"]["grpo"]["0"]["area_tokens"]["greedy_pass@1"] == pytest.approx(1646 / 3000)
    assert saved["per_seed"]["better"]["0"]["area_tokens"]["greedy_pass@1"] == pytest.approx(
        (420 + 1800 * (0.5 + at_3000) / 2) / 3000)
    assert saved["per_seed"]["better"]["0"]["area_updates"]["greedy_pass@1"] == pytest.approx(0.53)
    better = {r["method"]: r for r in saved["methods"]}["better"]
    assert better["areas_vs_baseline"]["greedy_pass@1"]["updates"]["mean"] == pytest.approx(0.0305)
    assert "area ≤3k tok (token checkpoints)" in text
    assert "on average 18.0% of the spacing after it, at most 105.0%" in text


def test_without_token_checkpoints_the_areas_say_they_are_interpolated(study_dir):
    text = write_report(study_dir).read_text()
    assert "area ≤2k tok (interpolated between evaluations)" in text
    assert "each curve read as linear between its own neighbouring evaluations" in text


def noisy_study(root: Path, **report) -> Path:
    """Flat curves (a run's area is its height), three seeds; grpo at 0.3 on every seed, and per seed:

    strong: 0.3 + (0.30, 0.31, 0.32)   paired t: p ~ 0.0007
    marginal: 0.3 + (0.15, 0.20, 0.30) paired t: p ~ 0.039, below 0.05 on its own
    null: 0.3 + (-0.10, 0.00, 0.10)    p = 1
    """
    heights = {"grpo": (0.3, 0.3, 0.3), "strong": (0.6, 0.61, 0.62), "marginal": (0.45, 0.5, 0.6),
               "null": (0.2, 0.3, 0.4)}
    study = {"name": "noisy", "seeds": [0, 1, 2], "methods": {m: {"config": f"{m}.yaml"} for m in heights},
             "difficulties": {"default": {}},
             "report": {"baseline": "grpo", "oracle": "strong", "min_verdict_seeds": 2, **report}}
    root.mkdir()
    (root / "study.yaml").write_text(yaml.safe_dump(study))
    for method, by_seed in heights.items():
        for seed, height in enumerate(by_seed):
            make_run(root / "default" / method / f"seed{seed}", method, seed, (height,) * 3)
    return root


def marginal_p() -> float:
    """The marginal contrast's paired t p-value by hand: df 2, P(|T| > t) = 1 - t / sqrt(2 + t^2)."""
    diffs = [0.45 - 0.3, 0.5 - 0.3, 0.6 - 0.3]
    mean = sum(diffs) / 3
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2)
    t = mean / (sd / math.sqrt(3))
    return 1 - t / math.sqrt(2 + t * t)


def test_holm_removes_a_significance_the_raw_interval_shows(tmp_path):
    """Three contrasts: Holm multiplies the second smallest p (marginal's, 0.039) by 2, past 0.05; the raw interval
    still excludes 0, and the table shows it beside the adjusted p."""
    root = noisy_study(tmp_path / "study")
    text = write_report(root).read_text()
    rows = {r["method"]: r for r in json.loads((root / "report.json").read_text())["default"]["methods"]}
    marginal = rows["marginal"]["auc_vs_baseline"]
    assert marginal["p"] == pytest.approx(marginal_p(), rel=1e-9) and marginal["p"] < 0.05 and marginal["low"] > 0
    assert marginal["p_holm"] == pytest.approx(2 * marginal_p(), rel=1e-9)
    assert marginal["verdict"] == "not distinguishable"
    assert rows["strong"]["auc_vs_baseline"]["verdict"] == "beats"
    assert rows["strong"]["auc_vs_baseline"]["p_holm"] == pytest.approx(3 * rows["strong"]["auc_vs_baseline"]["p"])
    assert rows["null"]["auc_vs_baseline"]["p_holm"] == pytest.approx(1.0)
    assert "`marginal` is not distinguishable from `grpo` (area 0.517, paired difference +0.217, interval " in text
    assert f"| not distinguishable ({2 * marginal_p():.3f}) |" in text
    assert "Holm's correction over this regime's 3 contrasts" in text


def test_an_exploratory_cell_is_read_at_its_raw_p_outside_the_family(tmp_path):
    """`marginal` listed under `report.exploratory`: the family shrinks to 2 contrasts (strong's Holm p is 2 p, not
    3 p), and marginal keeps its raw p (0.039), so it is called ahead at that p, labelled exploratory everywhere."""
    root = noisy_study(tmp_path / "study", exploratory=["marginal"])
    text = write_report(root).read_text()
    result = json.loads((root / "report.json").read_text())["default"]
    rows = {r["method"]: r for r in result["methods"]}
    marginal, strong = rows["marginal"]["auc_vs_baseline"], rows["strong"]["auc_vs_baseline"]
    assert marginal["exploratory"] is True and marginal["p_holm"] is None
    assert marginal["p"] == pytest.approx(marginal_p(), rel=1e-9) and marginal["verdict"] == "beats"
    assert strong["p_holm"] == pytest.approx(2 * strong["p"]) and "exploratory" not in strong
    assert result["family"]["contrasts"] == 2
    assert f"| beats, exploratory (raw p {marginal_p():.3f}) |" in text
    assert f"raw p {marginal_p():.3f}, exploratory: outside the Holm family" in text
    assert "Holm's correction over this regime's 2 contrasts" in text
    assert "Exploratory, outside the family (added after results were seen; verdicts at the raw p): `marginal`." in text


def test_an_exploratory_cell_must_be_a_compared_method(tmp_path):
    from credo.config import ConfigError
    from credo.study.grid import load_study

    path = tmp_path / "study.yaml"
    for name in ("grpo", "missing"):
        path.write_text(yaml.safe_dump({"name": "s", "seeds": [0], "methods": {"grpo": "g.yaml", "s_trace": "s.yaml"},
                                        "report": {"oracle": None, "exploratory": [name]}}))
        with pytest.raises(ConfigError, match=f"report.exploratory: '{name}' is not one of the compared methods: s_trace"):
            load_study(path)


def test_the_detectable_effect_after_the_correction(tmp_path):
    from credo.study.stats import detectable

    root = noisy_study(tmp_path / "study")
    text = write_report(root).read_text()
    family = json.loads((root / "report.json").read_text())["default"]["family"]
    sds = sorted([0.01, statistics.stdev([0.15, 0.2, 0.3]), 0.1])  # strong, marginal, null
    assert family["contrasts"] == 3 and family["seeds"] == 3 and family["median_sd"] == pytest.approx(sds[1])
    mde = detectable(sds[1], 3, 0.05 / 3)
    assert family["mde"] == pytest.approx(mde)
    assert f"Minimum detectable effect after the correction: {mde:.3f} in area at 80% power with 3 paired seeds" in text
    assert "level 0.05/3 = 0.017, Bonferroni's bound, which is Holm's first step" in text


def test_the_detectable_effect_mid_study_is_read_at_the_seeds_the_contrasts_share(tmp_path):
    """`order: seeds` runs the baseline's next seed first: with grpo at 4 seeds and the rest at 3, every contrast
    pairs 3 seeds, and the family's detectable effect is the finished 3-seed study's."""
    from credo.study.stats import detectable

    root = noisy_study(tmp_path / "study")
    study = yaml.safe_load((root / "study.yaml").read_text())
    (root / "study.yaml").write_text(yaml.safe_dump({**study, "seeds": [0, 1, 2, 3]}))
    make_run(root / "default" / "grpo" / "seed3", "grpo", 3, (0.3,) * 3)
    write_report(root)
    family = json.loads((root / "report.json").read_text())["default"]["family"]
    assert family["seeds"] == 3 and family["mde"] == pytest.approx(detectable(statistics.stdev([0.15, 0.2, 0.3]), 3,
                                                                             0.05 / 3))


def test_a_finding_whose_metrics_disagree_says_so_first(study_dir):
    """`better` is ahead on every greedy measure and on final pass@1, but its final pass@4 (min(1, 1.5 y): 1.0 and
    1.0 against 0.9 and 0.93) has an interval spanning 0 over two seeds."""
    text = write_report(study_dir).read_text()
    finding = next(line for line in text.splitlines() if line.startswith("- `better`"))
    assert finding.startswith("- `better`'s metrics disagree (raw 95% intervals): ahead of `grpo` on the greedy_pass@1 "
                              "area at equal rollout tokens, ")
    assert "; not distinguishable on final pass@4. `better` beats `grpo` (area 0.557" in finding
    worse = next(line for line in text.splitlines() if line.startswith("- `worse`"))
    assert worse.startswith("- `worse` falls behind `grpo`")  # every measure exactly behind: they agree
    assert "| metrics agree |" in text


def test_a_report_written_without_per_seed_values_is_corrected_from_its_intervals(tmp_path):
    """A report.json of the form before per-seed values: each contrast's p comes back from its interval (drawn with
    the three-decimal table), Holm applies, the share keeps its value without an interval, and the report says what
    it could not recompute."""
    root = noisy_study(tmp_path / "study")
    write_report(root, tmp_path / "written")
    path = tmp_path / "written" / "report.json"
    data = json.loads(path.read_text())
    saved = data["default"]
    for key in ("per_seed", "token_checkpoints", "family"):
        del saved[key]
    for row in saved["methods"]:  # the old row: the headline's steps area apart, no per-metric areas, no p
        areas = row.pop("areas_vs_baseline")
        row["steps_auc_vs_baseline"] = areas.get("greedy_pass@1", {}).get("updates")
        for key in ("auc_vs_baseline", "auc_vs_like_for_like"):
            if row[key]:
                e = row[key]
                half = (e["high"] - e["low"]) / 2 * {2: 4.303}[e["n"] - 1] / t_quantile(e["n"] - 1)
                row[key] = {"mean": e["mean"], "low": e["mean"] - half, "high": e["mean"] + half, "n": e["n"]}
    path.write_text(json.dumps(data))
    text = write_report(tmp_path / "written", from_json=True).read_text()
    rows = {r["method"]: r for r in json.loads(path.read_text())["default"]["methods"]}
    assert rows["marginal"]["auc_vs_baseline"]["p"] == pytest.approx(marginal_p(), rel=1e-9)
    assert rows["marginal"]["auc_vs_baseline"]["verdict"] == "not distinguishable"
    assert rows["marginal"]["share_of_oracle_gain"]["low"] is None
    assert "### What this report could not recompute" in text and "p-values recovered exactly" in text
    assert "interval needs per-seed values (runs not committed)" in text
    assert "Δ greedy_pass@1 area, equal steps (rollout batches)" in text
    again = write_report(tmp_path / "written", from_json=True).read_text()
    assert again == text  # drawn again from what it wrote: the same


def test_the_update_size_column_appears_when_the_runs_logged_it(study_dir):
    # Runs logged before update sizes (no `update_norm` in summary.json): no column, as the committed reports were.
    write_report(study_dir)
    assert "update size" not in (study_dir / "report.md").read_text()
    for method in CURVES:
        for seed in SHIFT:
            path = study_dir / "default" / method / f"seed{seed}" / "summary.json"
            summary = json.loads(path.read_text())
            path.write_text(json.dumps({**summary, "update_norm": 0.02 if method == "better" else 0.01 + 0.002 * seed}))
    write_report(study_dir)
    rows = {r["method"]: r for r in json.loads((study_dir / "report.json").read_text())["default"]["methods"]}
    assert rows["better"]["update_norm"]["mean"] == pytest.approx(0.02)
    assert rows["grpo"]["update_norm"]["mean"] == pytest.approx(0.011)
    header = next(line for line in (study_dir / "report.md").read_text().splitlines() if "wall s" in line)
    assert header.rstrip().endswith("update size |")


def test_the_report_says_which_runs_trained_where(study_dir):
    """Runs that recorded no device (before summaries did): no sentence. One device: one sentence. Two (a GPU grid
    beside the CPU's): each device with its runs, and the per-seed values keep it through report.json."""
    write_report(study_dir)
    assert "trained on" not in (study_dir / "report.md").read_text()

    def record(device_of) -> str:
        for method in CURVES:
            for seed in SHIFT:
                path = study_dir / "default" / method / f"seed{seed}" / "summary.json"
                path.write_text(json.dumps({**json.loads(path.read_text()), "device": device_of(method, seed)}))
        write_report(study_dir)
        return (study_dir / "report.md").read_text()

    one_device = record(lambda m, s: "cpu (1 thread)")
    assert "Every run whose summary records its device (8) trained on cpu (1 thread)." in one_device
    text = record(lambda m, s: "cuda: NVIDIA H200" if (m, s) in {("grpo", 1), ("better", 0), ("better", 1)}
                  else "cpu (1 thread)")
    gpu = "cuda: NVIDIA H200 (3): `better` seeds 0, 1, `grpo` seed 1"  # devices as the cells meet them, in order
    assert (f"The runs trained on 2 devices, so wall times compare only within one: {gpu}; cpu (1 thread) (5): "
            "`grpo` seed 0, `oracle_blame` seeds 0, 1, `worse` seeds 0, 1.") in " ".join(text.split())
    again = write_report(study_dir, study_dir / "again")  # from the runs again, into another folder
    drawn = write_report(study_dir / "again", from_json=True).read_text()
    assert gpu in " ".join(drawn.split()) and again.exists()


def test_a_gain_from_larger_steps_is_flagged_until_a_matched_step_control_reads_it(study_dir):
    """A cell that beats the baseline with updates 1.82x the baseline's size gets a finding that says so (a larger
    step alone shows up as an early gain); at the baseline's own update size it gets none."""
    def log_update_sizes(better: float) -> str:
        for method in CURVES:
            for seed in SHIFT:
                path = study_dir / "default" / method / f"seed{seed}" / "summary.json"
                summary = json.loads(path.read_text())
                size = better if method == "better" else 0.01 + 0.002 * seed
                path.write_text(json.dumps({**summary, "update_norm": size}))
        write_report(study_dir)
        return (study_dir / "report.md").read_text()

    finding = next(line for line in log_update_sizes(0.02).splitlines() if line.startswith("- `better`"))
    assert "beats `grpo`" in finding and "its updates are 1.82x the baseline's in size" in finding
    assert "the baseline's in size" not in log_update_sizes(0.011)


def test_an_exploratory_study_says_so_first(study_dir):
    study = yaml.safe_load((study_dir / "study.yaml").read_text())
    (study_dir / "study.yaml").write_text(yaml.safe_dump({**study, "exploratory": True, "pilot_seeds": [1, 9]}))
    write_report(study_dir)
    text = (study_dir / "report.md").read_text()
    assert "**Exploratory**: outside the protocol (its seeds [1] also tuned or piloted it)" in text
    # a method's own seeds count as the study's, as `credo compare`'s refusal counts them
    study["methods"]["worse"]["seeds"] = [0, 1]
    (study_dir / "study.yaml").write_text(yaml.safe_dump({**study, "seeds": [0], "exploratory": True,
                                                          "tuning_seeds": [1]}))
    write_report(study_dir)
    assert "(its seeds [1] also tuned or piloted it)" in (study_dir / "report.md").read_text()
    assert text.index("Exploratory") < text.index("Made by")


def test_equivalent_only_from_tost_at_the_plans_margin(tmp_path):
    # Three seeds of flat curves (a run's area is its height). `close` differs from grpo by (+0.01, 0.00, -0.01):
    # TOST at margin 0.1 gives t = (0.1 -/+ 0) / (0.01 / sqrt 3) = 17.3 on 2 df both ways, p = 0.0017 (x 3 under
    # Holm over the family's 3 contrasts = 0.005): "equivalent". Without a margin it is only "not distinguishable";
    # `null`, whose differences are (-0.1, 0, 0.1), is never equivalent at 0.1; `strong` beats grpo either way.
    def study(root, **report):
        heights = {"grpo": (0.3, 0.3, 0.3), "strong": (0.6, 0.61, 0.62), "close": (0.31, 0.3, 0.29),
                   "null": (0.2, 0.3, 0.4)}
        spec = {"name": "tost", "seeds": [0, 1, 2], "methods": {m: {"config": f"{m}.yaml"} for m in heights},
                "difficulties": {"default": {}}, "report": {"baseline": "grpo", "oracle": None, "min_verdict_seeds": 2,
                                                            **report}}
        root.mkdir()
        (root / "study.yaml").write_text(yaml.safe_dump(spec))
        for method, by_seed in heights.items():
            for seed, height in enumerate(by_seed):
                make_run(root / "default" / method / f"seed{seed}", method, seed, (height,) * 3)
        write_report(root)
        return {r["method"]: r["auc_vs_baseline"] for r in json.loads((root / "report.json").read_text())["default"]["methods"]
                if r["auc_vs_baseline"]}

    plain = study(tmp_path / "plain")
    assert {m: c["verdict"] for m, c in plain.items()} == {"strong": "beats", "close": "not distinguishable",
                                                           "null": "not distinguishable"}
    tost = study(tmp_path / "tost", equivalence_margin=0.1)
    assert {m: c["verdict"] for m, c in tost.items()} == {"strong": "beats", "close": "equivalent",
                                                          "null": "not distinguishable"}
    t = 0.1 / (0.01 / math.sqrt(3))
    one_sided = 0.5 * (1 - t / math.sqrt(2 + t * t))  # P(T_2 > t)
    assert tost["close"]["p_equivalent"] == pytest.approx(3 * one_sided, rel=1e-6)  # Holm's first step, m = 3
    assert "is equivalent (TOST at the plan's margin) to" in (tmp_path / "tost" / "report.md").read_text()


def test_each_contrast_has_its_own_detectable_effect_and_the_exact_test_floor_is_said(tmp_path):
    # noisy_study: 3 seeds, 3 contrasts. A contrast's own MDE uses its own paired sd (strong: sd 0.01; marginal:
    # sd 0.076), at the family's level 0.05 / 3; with 3 seeds an exact sign-flip test cannot go below 2 / 8 = 0.25.
    from credo.study.stats import detectable

    root = noisy_study(tmp_path / "s")
    write_report(root)
    rows = {r["method"]: r["auc_vs_baseline"] for r in json.loads((root / "report.json").read_text())["default"]["methods"]
            if r["auc_vs_baseline"]}
    assert rows["strong"]["mde"] == pytest.approx(detectable(rows["strong"]["sd"], 3, 0.05 / 3))
    assert rows["marginal"]["mde"] > 5 * rows["strong"]["mde"]
    text = (root / "report.md").read_text()
    assert "With 3 seeds an exact sign-flip test cannot give a p below 0.25, above Holm's first threshold 0.017" in text


def test_secondary_endpoints_join_the_primary_endpoints_holm_family(tmp_path):
    """Sampled pass@1 (half the greedy heights: the same paired t p-values) as a secondary endpoint: 6 contrasts in
    one family, so the marginal contrast's p is multiplied by 4 on each metric (Holm's steps 3 and 4), not by 2 as in
    a family per metric."""
    root = noisy_study(tmp_path / "study", metric="greedy_pass@1", secondary=["pass@1"])
    text = write_report(root).read_text()
    saved = json.loads((root / "report.json").read_text())["default"]
    rows = {r["method"]: r for r in saved["methods"]}
    assert saved["family"]["contrasts"] == 6
    for c in (rows["marginal"]["auc_vs_baseline"], rows["marginal"]["secondary_vs_baseline"]["pass@1"]):
        assert c["p"] == pytest.approx(marginal_p(), rel=1e-9)
        assert c["p_holm"] == pytest.approx(4 * marginal_p(), rel=1e-9)
    secondary = rows["strong"]["secondary_vs_baseline"]["pass@1"]
    assert secondary["mean"] == pytest.approx(0.155) and secondary["verdict"] == "beats"
    assert rows["grpo"]["secondary_vs_baseline"] == {}
    assert "### Secondary endpoints" in text and "| pass@1 area verdict (Holm p) |" in text
    assert "Holm's correction over this regime's 6 contrasts" in text
    assert "on the pass@1 area (a secondary endpoint) it beats it" in text


def test_a_final_value_is_an_endpoint_in_the_same_family(tmp_path):
    """`final:pass@4` (the final pass@4, 1.5x the greedy height, capped at 1: strong 0.9, 0.915, 0.93 against 0.45)
    is a contrast of final values in the one family: 6 contrasts."""
    root = noisy_study(tmp_path / "study", metric="greedy_pass@1", secondary=["final:pass@4"])
    text = write_report(root).read_text()
    saved = json.loads((root / "report.json").read_text())["default"]
    rows = {r["method"]: r for r in saved["methods"]}
    assert saved["family"]["contrasts"] == 6
    final = rows["strong"]["secondary_vs_baseline"]["final:pass@4"]
    assert final["mean"] == pytest.approx(0.465) and final["verdict"] == "beats"
    assert final["p_holm"] >= final["p"] > 0
    assert "| Δ final pass@4 vs grpo (raw 95%) |" in text and "on the final pass@4 (a secondary endpoint)" in text


def test_a_secondary_endpoint_needs_its_measure_and_may_not_repeat_the_primary(tmp_path):
    root = noisy_study(tmp_path / "study", metric="greedy_pass@1", secondary=["pass@16"])
    with pytest.raises(ValueError, match=r"report.secondary \['pass@16'\]: not measured in every run"):
        write_report(root)
    root = noisy_study(tmp_path / "finals", metric="greedy_pass@1", secondary=["final:avg@16"])
    with pytest.raises(ValueError, match=r"report.secondary \['final:avg@16'\]: not measured"):
        write_report(root)
    from credo.study.grid import ReportConfig
    with pytest.raises(ValueError, match="an endpoint is a metric"):
        ReportConfig(secondary=["last:pass@1"])
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "seeds": [0], "methods": {"grpo": "configs/testbed/grpo.yaml"},
                                    "report": {"metric": "pass@1", "secondary": ["pass@1"], "oracle": None}}))
    from credo.config import ConfigError
    from credo.study.grid import load_study
    with pytest.raises(ConfigError, match="repeats a metric or the primary endpoint"):
        load_study(path)


def test_a_study_that_names_no_threshold_tests_nothing_under_four_seeds(tmp_path):
    """STUDY.md's habit as the default: a study file that does not set `min_verdict_seeds` describes a 3-seed
    contrast, however small its p (`strong`: p ~ 0.0007)."""
    root = noisy_study(tmp_path / "study")
    study = yaml.safe_load((root / "study.yaml").read_text())
    del study["report"]["min_verdict_seeds"]
    (root / "study.yaml").write_text(yaml.safe_dump(study))
    write_report(root)
    saved = json.loads((root / "report.json").read_text())["default"]
    assert {r["method"]: r for r in saved["methods"]}["strong"]["auc_vs_baseline"]["verdict"] == "descriptive"


def test_a_survey_under_four_seeds_is_descriptive_with_its_per_seed_values(tmp_path):
    """At `min_verdict_seeds: 4` (a plan's) a 3-seed study gets no test: `strong`'s +0.31 (p ~ 0.0007) is described by
    its per-seed differences, with no p, no verdict, no family (and so no detectable effect)."""
    root = noisy_study(tmp_path / "study", min_verdict_seeds=4)
    text = write_report(root).read_text()
    saved = json.loads((root / "report.json").read_text())["default"]
    strong = {r["method"]: r for r in saved["methods"]}["strong"]["auc_vs_baseline"]
    assert strong["verdict"] == "descriptive" and strong["p"] is None and strong["p_holm"] is None
    assert strong["per_seed"] == pytest.approx([0.30, 0.31, 0.32])
    assert saved["family"]["contrasts"] == 0 and saved["family"]["mde"] is None
    assert "| +0.310 (per seed +0.300, +0.310, +0.320) | descriptive (3 seeds, no test) |" in text
    assert "fewer than 4 paired seeds: a survey" in text and "beats" not in text.split("### How to read")[0]


def test_a_like_for_like_pair_joins_the_family_on_every_endpoint_where_the_plan_says_so(tmp_path):
    """`marginal` paired with `null` as its like-for-like and sampled pass@1 (half the greedy heights) as a secondary
    endpoint. By default the pair is tested on the primary endpoint alone (7 contrasts); with
    `like_for_like_endpoints: all` its contrast on the secondary endpoint joins the family too (6 contrasts against
    grpo and 2 against the like-for-like: 8), with the paired differences of the two cells; a report read back from
    its report.json keeps them in the family."""
    from credo.study.analysis import recovered_result
    from credo.study.grid import ReportConfig

    primary_only = noisy_study(tmp_path / "primary", metric="greedy_pass@1", secondary=["pass@1"],
                               like_for_like={"marginal": "null"})
    write_report(primary_only)  # a study planned before the setting: the pair on the primary endpoint alone
    assert json.loads((primary_only / "report.json").read_text())["default"]["family"]["contrasts"] == 7
    root = noisy_study(tmp_path / "study", metric="greedy_pass@1", secondary=["pass@1"],
                       like_for_like={"marginal": "null"}, like_for_like_endpoints="all")
    text = write_report(root).read_text()
    saved = json.loads((root / "report.json").read_text())["default"]
    rows = {r["method"]: r for r in saved["methods"]}
    assert saved["family"]["contrasts"] == 8
    primary = rows["marginal"]["auc_vs_like_for_like"]
    secondary = rows["marginal"]["secondary_vs_like_for_like"]["pass@1"]
    assert primary["mean"] == pytest.approx((0.25 + 0.2 + 0.2) / 3)  # (0.45, 0.5, 0.6) - (0.2, 0.3, 0.4)
    assert secondary["mean"] == pytest.approx(primary["mean"] / 2) and secondary["p"] == pytest.approx(primary["p"])
    assert secondary["p_holm"] >= secondary["p"] and secondary["verdict"] in ("beats", "not distinguishable")
    assert "secondary_vs_like_for_like" not in rows["strong"]
    assert "on the pass@1 area it " in text and "`null` (" in text
    recovered = recovered_result(saved, ReportConfig(**yaml.safe_load((root / "study.yaml").read_text())["report"]),
                                 "default")
    assert recovered.family.size == 8
    assert next(r for r in recovered.rows if r.method == "marginal").secondary_vs_like["pass@1"].p_holm == \
        pytest.approx(secondary["p_holm"], rel=1e-3)  # p recovered from the written (rounded) interval
