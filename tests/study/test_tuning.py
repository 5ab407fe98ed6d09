"""A tuning study: its grid expands every method alike, refuses what would let noise or the test set choose, and its
report applies one rule (the mean area over the tuning seeds, no tie-break) with each choice's margin."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from test_report import make_run

from credo.config import ConfigError
from credo.study import grid
from credo.study.grid import StudyConfig, load_study
from credo.study.report import write_report
from credo.study.tuning import choose, run_tuning

GRID = [5e-5, 1e-4, 2e-4]


def test_the_grid_gives_every_method_every_value_and_is_expanded_once():
    config = StudyConfig(name="t", seeds=[1, 2, 3], tune={"key": "optim.lr", "values": [2e-4, 5e-5, 1e-4]},
                         methods={"grpo": "a.yaml", "oracle": {"config": "b.yaml", "set": {"optim": {"epochs": 2}}}})
    assert list(config.methods) == ["grpo@lr=5e-05", "grpo@lr=1e-04", "grpo@lr=2e-04",
                                    "oracle@lr=5e-05", "oracle@lr=1e-04", "oracle@lr=2e-04"]
    assert config.methods["oracle@lr=2e-04"].set == {"optim": {"epochs": 2, "lr": 2e-4}}
    assert config.tune.methods == ["grpo", "oracle"]
    again = StudyConfig(**config.model_dump(mode="json"))  # a resolved study is already expanded
    assert list(again.methods) == list(config.methods)


@pytest.mark.parametrize("change, message", [
    ({"seeds": [100]}, "at least 3 seeds"),
    ({"methods": {"grpo": {"config": "a.yaml", "set": {"optim": {"lr": 1e-3}}}}}, "sets optim.lr itself"),
    ({"methods": {"grpo": {"config": "a.yaml", "seeds": [1, 2]}}}, "at least 3 seeds"),
    ({"tune": {"key": "optim.lr", "values": [1e-4, 1e-4]}}, "distinct"),
    ({"tune": {"key": "optim.lr", "values": GRID, "extend": {"grpo": [7e-5]}}}, "beyond the grid's edges"),
    ({"tune": {"key": "optim.lr", "values": GRID, "extend": {"grpo": [4e-4, 4e-4]}}}, "distinct"),
    ({"tune": {"key": "optim.lr", "values": GRID, "extend": {"dapo": [4e-4]}}}, "not methods of the study"),
    ({"tune": {"key": "loss.lam", "values": [0.0, 0.5, 1.0], "auto_extend": 1}}, "must be positive"),
])
def test_a_tuning_grid_refuses_what_lets_noise_or_one_method_choose(change, message):
    data = {"name": "t", "seeds": [1, 2, 3], "tune": {"key": "optim.lr", "values": GRID}, "methods": {"grpo": "a.yaml"},
            **change}
    with pytest.raises(ValueError, match=message):
        StudyConfig(**data)
    if message == "at least 3 seeds":  # outside the protocol, said so first in its report
        assert StudyConfig(**{**data, "exploratory": True}).exploratory


def test_an_extension_adds_its_values_to_one_method_only():
    config = StudyConfig(name="t", seeds=[1, 2, 3], methods={"grpo": "a.yaml", "oracle": "b.yaml"},
                         tune={"key": "optim.lr", "values": GRID, "extend": {"grpo": [2.5e-5, 1.25e-5]}})
    assert [m for m in config.methods if m.startswith("grpo")] == [
        "grpo@lr=1.25e-05", "grpo@lr=2.5e-05", "grpo@lr=5e-05", "grpo@lr=1e-04", "grpo@lr=2e-04"]
    assert [m for m in config.methods if m.startswith("oracle")] == ["oracle@lr=5e-05", "oracle@lr=1e-04",
                                                                     "oracle@lr=2e-04"]
    assert config.tune.extend == {"grpo": [1.25e-5, 2.5e-5]}
    assert list(StudyConfig(**config.model_dump(mode="json")).methods) == list(config.methods)


def tuning_file(tmp_path, split: str | None, exploratory: bool = False):
    path = tmp_path / "tuning.yaml"
    task = {"task": {"eval_split": split}} if split else {}
    path.write_text(yaml.safe_dump({
        "name": "tuning", "seeds": [100, 101, 102], "tune": {"key": "optim.lr", "values": GRID},
        "set": task, "exploratory": exploratory,
        "methods": {"grpo": str(Path("configs/testbed/grpo.yaml").resolve())},
        "report": {"baseline": "grpo@lr=1e-04", "oracle": None}}))
    return path


def test_a_tuning_study_evaluates_on_the_validation_problems(tmp_path):
    with pytest.raises(ConfigError, match="task.eval_split: validation"):
        load_study(tuning_file(tmp_path, None)).cells()
    assert len(load_study(tuning_file(tmp_path, "validation")).cells()) == 9
    assert len(load_study(tuning_file(tmp_path, None, exploratory=True)).cells()) == 9


def test_the_rule_takes_the_best_mean_without_a_tie_break_and_states_its_margin():
    # 1e-4 wins on the mean though 2e-4 wins two of three seeds: the mean decides, nothing else
    areas = {5e-5: {1: 0.30, 2: 0.30, 3: 0.30}, 1e-4: {1: 0.70, 2: 0.50, 3: 0.50}, 2e-4: {1: 0.40, 2: 0.52, 3: 0.52}}
    c = choose(areas, GRID, [1, 2, 3])
    assert (c.chosen, c.runner_up, c.where) == (1e-4, 2e-4, "bracketed")
    assert c.margin == pytest.approx(0.5667 - 0.48, abs=1e-4)
    differences = [0.30, -0.02, -0.02]
    sd = (sum((d - sum(differences) / 3) ** 2 for d in differences) / 2) ** 0.5
    assert c.margin_sd == pytest.approx(c.margin / sd)
    assert choose({**areas, 5e-5: {1: 0.9, 2: 0.9, 3: 0.9}}, GRID, [1, 2, 3]).where == "extend lower"
    assert choose({**areas, 2e-4: {1: 0.9, 2: 0.9, 3: 0.9}}, GRID, [1, 2, 3]).where == "extend higher"
    # a value unfinished at a tuning seed is never chosen, however good its seeds so far
    partial = choose({**areas, 2e-4: {1: 0.99, 2: 0.99}}, GRID, [1, 2, 3])
    assert partial.chosen == 1e-4 and partial.missing == [2e-4]


def test_the_report_of_a_tuning_study_says_each_choice_and_its_margin(tmp_path):
    root = tmp_path / "study"
    study = StudyConfig(name="tuning", seeds=[100, 101, 102], tune={"key": "optim.lr", "values": GRID},
                        methods={"grpo": "grpo.yaml", "oracle": "oracle.yaml"},
                        report={"baseline": "grpo@lr=1e-04", "oracle": None, "metric": "greedy_pass@1"})
    root.mkdir()
    (root / "study.yaml").write_text(yaml.safe_dump(study.model_dump(mode="json")))
    finals = {"grpo": {5e-5: 0.4, 1e-4: 0.6, 2e-4: 0.5}, "oracle": {5e-5: 0.3, 1e-4: 0.5, 2e-4: 0.8}}
    noise = {100: 0.0, 101: 0.03, 102: -0.02}
    for label in study.methods:
        method, rate = label.split("@lr=")
        for seed, shift in noise.items():
            top = finals[method][float(rate)] + (shift if float(rate) != 1e-4 else 0)
            make_run(root / "default" / label / f"seed{seed}", label, seed, (0.2, top, top))
    write_report(root)
    tuning = {c["method"]: c for c in json.loads((root / "report.json").read_text())["default"]["tuning"]}
    assert tuning["grpo"]["chosen"] == 1e-4 and tuning["grpo"]["where"] == "bracketed"
    assert tuning["oracle"]["chosen"] == 2e-4 and tuning["oracle"]["where"] == "extend higher"
    # areas of (0.2, top, top) over [0, 2000]: (0.2 + top) / 4 + top / 2, so a final difference d is 0.75 d
    assert tuning["grpo"]["margin"] == pytest.approx(0.75 * (0.6 - 0.5 - 0.01 / 3))
    text = (root / "report.md").read_text()
    assert "### Tuning" in text and "| `oracle` |" in text and "extend higher" in text


def test_the_rule_chooses_over_a_method_s_extension_and_brackets_it_there(tmp_path):
    root = tmp_path / "study"
    study = StudyConfig(name="tuning", seeds=[100, 101, 102], methods={"grpo": "grpo.yaml", "oracle": "oracle.yaml"},
                        tune={"key": "optim.lr", "values": GRID, "extend": {"oracle": [4e-4, 8e-4]}},
                        report={"baseline": "grpo@lr=1e-04", "oracle": None, "metric": "greedy_pass@1"})
    root.mkdir()
    (root / "study.yaml").write_text(yaml.safe_dump(study.model_dump(mode="json")))
    finals = {"grpo": {5e-5: 0.4, 1e-4: 0.6, 2e-4: 0.5}, "oracle": {5e-5: 0.3, 1e-4: 0.5, 2e-4: 0.8, 4e-4: 0.9}}
    for method, by_rate in finals.items():  # oracle's 8e-4 has not run
        for rate, top in by_rate.items():
            for seed, shift in {100: 0.0, 101: 0.03, 102: -0.02}.items():
                label = f"{method}@lr={rate:.0e}".replace("e-0", "e-0")
                make_run(root / "default" / label / f"seed{seed}", label, seed, (0.2, top + shift, top + shift))
    write_report(root)
    tuning = {c["method"]: c for c in json.loads((root / "report.json").read_text())["default"]["tuning"]}
    assert (tuning["oracle"]["chosen"], tuning["oracle"]["runner_up"]) == (4e-4, 2e-4)
    assert tuning["oracle"]["where"] == "bracketed" and tuning["oracle"]["missing"] == [8e-4]
    assert tuning["grpo"]["where"] == "bracketed" and tuning["grpo"]["missing"] == []
    row = next(line for line in (root / "report.md").read_text().splitlines() if line.startswith("| `grpo` |"))
    assert [cell.strip() for cell in row.split("|")[5:7]] == ["–", "–"]  # grpo's grid holds neither extension
    assert "(" not in row  # per-seed differences without spread have no sd (not 1e15 sd from rounding)


def test_each_method_gets_the_baseline_value_that_moves_as_far_per_batch_as_its_step_size_control(tmp_path):
    root = tmp_path / "study"
    study = StudyConfig(name="tuning", seeds=[100, 101, 102], methods={"grpo": "grpo.yaml", "oracle": "oracle.yaml",
                                                                      "resets": "resets.yaml"},
                        tune={"key": "optim.lr", "values": GRID},
                        report={"baseline": "grpo@lr=1e-04", "oracle": None, "metric": "greedy_pass@1"})
    root.mkdir()
    (root / "study.yaml").write_text(yaml.safe_dump(study.model_dump(mode="json")))
    tops = {"grpo": {5e-5: 0.6, 1e-4: 0.5, 2e-4: 0.4}, "oracle": {5e-5: 0.3, 1e-4: 0.5, 2e-4: 0.8},
            "resets": {5e-5: 0.7, 1e-4: 0.5, 2e-4: 0.4}}
    # update size: grpo 0.4 x the rate x 1000; the oracle's 2e-4 moves like grpo's 1e-4; resets' 5e-5 like its own
    sizes = {"grpo": 400.0, "oracle": 200.0, "resets": 420.0}
    for method, by_rate in tops.items():
        for rate, top in by_rate.items():
            for seed, shift in {100: 0.0, 101: 0.03, 102: -0.01}.items():
                label = f"{method}@lr={rate:.0e}"
                make_run(root / "default" / label / f"seed{seed}", label, seed, (0.2, top + shift, top + shift),
                         update_norm=sizes[method] * rate * (1 + shift))
    write_report(root)
    tuning = {c["method"]: c for c in json.loads((root / "report.json").read_text())["default"]["tuning"]}
    assert tuning["oracle"]["mean_update_size"]["0.0002"] == pytest.approx(200 * 2e-4 * (1 + 0.02 / 3))
    text = (root / "report.md").read_text()
    assert "Step-size controls" in text
    assert "`oracle` -> optim.lr 0.0001" in text and "`resets` -> its tuned value" in text
    # the cells of the study after it: each method at its choice, grpo at the oracle's update size as its control
    tuned = yaml.safe_load((root / "tuned_default.yaml").read_text())
    assert tuned["methods"] == {"grpo@tuned": {"config": "grpo.yaml", "set": {"optim": {"lr": 5e-5}}},
                                "oracle@tuned": {"config": "oracle.yaml", "set": {"optim": {"lr": 2e-4}}},
                                "resets@tuned": {"config": "resets.yaml", "set": {"optim": {"lr": 5e-5}}},
                                "grpo@lr=1e-04": {"config": "grpo.yaml", "set": {"optim": {"lr": 1e-4}}}}
    assert tuned["report"] == {"baseline": "grpo@tuned", "step_size_controls": {"oracle@tuned": "grpo@lr=1e-04"}}
    assert "[tuned_default.yaml](tuned_default.yaml)" in text


BEST_RATE = {"grpo": 1.25e-5, "oracle_steps": 1e-3, "oracle_blame": 5e-5}
"""Fake tuning runs: each method's final score falls 0.1 per factor of 2 away from its own best rate."""


def fake_run(cell, *, show_progress, threads=None):
    top = 0.9 - 0.1 * abs(math.log2(cell.config.optim.lr / BEST_RATE[cell.method.split("@")[0]]))
    make_run(cell.run_dir, cell.method, cell.seed, (0.1, top, top + 0.01 * (cell.seed - 100)))
    return json.loads((cell.run_dir / "summary.json").read_text())


def auto_extended_tuning(tmp_path) -> Path:
    path = tmp_path / "tuning.yaml"
    path.write_text(yaml.safe_dump({
        "name": "tuning", "seeds": [100, 101, 102], "set": {"task": {"eval_split": "validation"}},
        "tune": {"key": "optim.lr", "values": [2.5e-5, 5e-5, 1e-4], "auto_extend": 2},
        "methods": {m: str(Path(f"configs/testbed/{m}.yaml").resolve()) for m in BEST_RATE},
        "report": {"baseline": "grpo@lr=5e-05", "oracle": None, "metric": "greedy_pass@1"}}))
    return path


def test_compare_extends_each_grid_past_the_edge_its_best_sits_at_until_bracketed_or_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(grid, "run_cell", fake_run)
    path = auto_extended_tuning(tmp_path)
    lines: list[str] = []
    study = run_tuning(path, tmp_path / "out", log=lines.append)

    ran = {p.parent.name for p in (tmp_path / "out").glob("default/*/seed100")}
    assert ran - {f"{m}@lr={v}" for m in BEST_RATE for v in ("2.5e-05", "5e-05", "1e-04")} == {
        "grpo@lr=1.25e-05", "grpo@lr=6.25e-06", "oracle_steps@lr=2e-04", "oracle_steps@lr=4e-04"}
    # grpo: past 1.25e-5 and bracketed there; oracle_steps: stopped by the limit, still at its edge; oracle_blame: none
    resolved = yaml.safe_load((tmp_path / "out" / "study.yaml").read_text())
    assert resolved["tune"]["extend"] == {"grpo": [6.25e-6, 1.25e-5], "oracle_steps": [2e-4, 4e-4]}
    assert study.config.tune.extend == resolved["tune"]["extend"]
    assert [line for line in lines if "auto_extend" in line] == [
        "grpo: its best sits at its grid's edge; tune.auto_extend runs 1.25e-05 next",
        "oracle_steps: its best sits at its grid's edge; tune.auto_extend runs 0.0002 next",
        "grpo: its best sits at its grid's edge; tune.auto_extend runs 6.25e-06 next",
        "oracle_steps: its best sits at its grid's edge; tune.auto_extend runs 0.0004 next"]
    write_report(tmp_path / "out")
    tuning = {c["method"]: c for c in json.loads((tmp_path / "out" / "report.json").read_text())["default"]["tuning"]}
    assert (tuning["grpo"]["chosen"], tuning["grpo"]["where"]) == (1.25e-5, "bracketed")
    assert (tuning["oracle_steps"]["chosen"], tuning["oracle_steps"]["where"]) == (4e-4, "extend higher")
    assert (tuning["oracle_blame"]["chosen"], tuning["oracle_blame"]["where"]) == (5e-5, "bracketed")
    # run again (a study resumed): the same extensions, step by step from the finished runs, and nothing runs
    again: list[str] = []
    run_tuning(path, tmp_path / "out", log=again.append)
    assert [line for line in again if "auto_extend" in line] == [line for line in lines if "auto_extend" in line]
    rounds = [line for line in again if " to run " in line]
    assert len(rounds) == 3 and all(line.endswith(f"0 to run -> {tmp_path / 'out'}") for line in rounds)


def test_the_command_line_extends_a_whole_grid_and_not_a_part_of_it(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from credo.cli import app

    monkeypatch.setattr(grid, "run_cell", fake_run)
    path = auto_extended_tuning(tmp_path)
    part = CliRunner().invoke(app, ["compare", str(path), "-o", str(tmp_path / "part"), "--seeds", "100"],
                              env={"COLUMNS": "200"})
    assert part.exit_code == 0, part.output
    assert "no extension with --seeds" in part.output and "runs 1.25e-05 next" not in part.output
    whole = CliRunner().invoke(app, ["compare", str(path), "-o", str(tmp_path / "whole")], env={"COLUMNS": "200"})
    assert whole.exit_code == 0, whole.output
    assert "grpo: its best sits at its grid's edge; tune.auto_extend runs 6.25e-06 next" in whole.output
    assert (tmp_path / "whole" / "default" / "oracle_steps@lr=4e-04" / "seed102" / "summary.json").exists()

