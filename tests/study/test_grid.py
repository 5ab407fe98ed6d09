"""The study grid: one file, validated cells with layered overrides, a resumable run of the whole grid."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from credo.config import ConfigError, dump
from credo.study import grid
from credo.study.grid import cell_status, check_unchanged, load_study, run_study

CONFIGS = Path(__file__).parents[2] / "configs" / "testbed"
TINY_SET = {
    "model": {"testbed": {"steps": 2, "batch_size": 8,
                          "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64}}},
    "train": {"steps": 3, "eval_every": 2, "checkpoint_every": 2, "log_samples": 2},
    "rollout": {"prompts_per_step": 3, "group_size": 2, "max_new_tokens": 12},
    "eval": {"max_problems": 2, "samples": 2, "ks": [1, 2]},
}
TIMING = ("time/", "tokens_per_s", "wall_s")


def write_study(tmp_path, **changes) -> Path:
    study = {"name": "tiny", "seeds": [0, 1], "set": TINY_SET,
             "methods": {"grpo": str(CONFIGS / "grpo.yaml"),
                         "oracle_blame": {"config": str(CONFIGS / "oracle_blame.yaml"), "set": {"optim": {"lr": 3.0e-4}}}},
             "output": str(tmp_path / "out")}
    study.update(changes)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    return path


def test_cells_layer_file_study_difficulty_method_and_seed(tmp_path):
    path = write_study(tmp_path, difficulties={"easy": {}, "long": {"task": {"min_steps": 5}, "optim": {"lr": 1.0e-6}}})
    cells = load_study(path).cells()
    assert [(c.difficulty, c.method, c.seed) for c in cells] == [
        (d, m, s) for d in ("easy", "long") for m in ("grpo", "oracle_blame") for s in (0, 1)]
    by = {(c.difficulty, c.method, c.seed): c.config for c in cells}
    assert by["easy", "grpo", 1].train.seed == 1 and by["easy", "grpo", 1].train.steps == 3  # study set over the file
    assert by["easy", "grpo", 0].optim.lr == 1e-4  # the method file's own
    assert by["long", "grpo", 0].optim.lr == 1e-6 and by["long", "grpo", 0].task["min_steps"] == 5  # difficulty
    assert by["long", "oracle_blame", 0].optim.lr == 3e-4  # the method's own set over the difficulty's
    assert cells[0].run_dir == tmp_path / "out" / "easy" / "grpo" / "seed0"


def test_a_method_may_run_its_own_seeds_and_runs_may_go_seed_by_seed(tmp_path):
    methods = {"grpo": str(CONFIGS / "grpo.yaml"), "oracle_blame": {"config": str(CONFIGS / "oracle_blame.yaml"),
                                                                    "seeds": [1]}}
    path = write_study(tmp_path, seeds=[0, 1, 2], methods=methods)
    assert [(c.method, c.seed) for c in load_study(path).cells()] == [
        ("grpo", 0), ("grpo", 1), ("grpo", 2), ("oracle_blame", 1)]
    path = write_study(tmp_path, seeds=[0, 1, 2], methods=methods, order="seeds")
    assert [(c.method, c.seed) for c in load_study(path).cells()] == [
        ("grpo", 0), ("grpo", 1), ("oracle_blame", 1), ("grpo", 2)]
    for bad in ([], [1, 1]):
        methods["oracle_blame"]["seeds"] = bad
        with pytest.raises(ConfigError, match="a method's seeds must be distinct and at least one"):
            load_study(write_study(tmp_path, methods=methods))


def test_a_difficulty_lays_its_base_files_under_its_overrides(tmp_path):
    regime = CONFIGS / "hard" / "regime_decisive.yaml"
    path = write_study(tmp_path, difficulties={
        "decisive": {"base": str(regime)},
        "decisive_long": {"base": [str(regime)], "task": {"max_misconception_steps": 2}},
        "bad": {"base": 3}})
    with pytest.raises(ConfigError, match="difficulty bad: base must be a file name or a list"):
        load_study(path).cells()
    path = write_study(tmp_path, difficulties={
        "decisive": {"base": str(regime)},
        "decisive_long": {"base": [str(regime)], "task": {"max_misconception_steps": 2}}})
    by = {(c.difficulty, c.method): c.config for c in load_study(path).cells()}
    assert by["decisive", "grpo"].task["invertible_steps"] is True
    assert by["decisive", "grpo"].task["max_misconception_steps"] == 1
    assert by["decisive_long", "grpo"].task["max_misconception_steps"] == 2  # the overrides over the base
    assert by["decisive", "oracle_blame"].optim.lr == 3e-4  # the method's own set still on top


@pytest.mark.parametrize("changes, message", [
    ({"seeds": []}, r"seeds: List should have at least 1 item"),
    ({"seeds": [1, 1]}, r"seeds must be distinct"),
    ({"colour": "red"}, r"colour: unknown key; allowed here: name, output, seeds, set, methods, difficulties, order, report"),
    ({"methods": {"grpo": {"config": "grpo.yaml", "seed": [1]}}}, r"methods.grpo.seed: unknown key; allowed here: config, set, seeds"),
    ({"report": {"baseline": "dapo"}}, r"report.baseline 'dapo' is not one of the methods: grpo, oracle_blame"),
    ({"report": {"oracle": "s_trace"}}, r"report.oracle 's_trace' is not one of the methods"),
])
def test_study_file_errors_name_the_key(tmp_path, changes, message):
    with pytest.raises(ConfigError, match=message):
        load_study(write_study(tmp_path, **changes))


@pytest.mark.parametrize("broken, message", [
    ({"config": str(CONFIGS / "grpo.yaml"), "set": {"optim": {"lr": -1}}},
     r"STUDY: method broken, difficulty default, seed 0:\n  optim.lr"),
    ({"config": str(CONFIGS / "grpo.yaml"), "set": {"model": {"path": "no/such/model"}}},
     r"^STUDY: method broken, difficulty default, seed 0: model.path = 'no/such/model' does not exist; give a "),
    ({"config": "missing.yaml"}, r"^STUDY: method broken: config file .*missing.yaml does not exist$"),
], ids=["bad value", "model path", "missing config"])
def test_a_bad_cell_fails_before_anything_runs(tmp_path, broken, message):
    """The bad cell comes second: nothing of the first runs either. The error names the study file (STUDY)."""
    path = write_study(tmp_path, methods={"grpo": str(CONFIGS / "grpo.yaml"), "broken": broken}, report={"oracle": None})
    with pytest.raises(ConfigError, match=message.replace("STUDY", re.escape(str(path)))):
        run_study(load_study(path), log=lambda _: None)
    assert not (tmp_path / "out" / "default").exists()


def records(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(x).items() if not k.startswith(TIMING)} for x in lines]


def test_a_half_finished_grid_resumes_and_gives_the_uninterrupted_results(tmp_path, monkeypatch):
    study = load_study(write_study(tmp_path))
    cells = run_study(study, log=lambda _: None)
    assert all(cell_status(c) == "done" for c in cells)
    finished = {c.run_dir: records(c.run_dir) for c in cells}
    # Make the grid half-finished: cell 1 killed after its step-2 checkpoint, cell 2 killed before any checkpoint.
    killed, early = cells[1].run_dir, cells[2].run_dir
    (killed / "summary.json").unlink()
    shutil.rmtree(killed / "checkpoints" / "step_000003")
    shutil.rmtree(early / "checkpoints")
    (early / "summary.json").unlink()
    assert (cell_status(cells[1]), cell_status(cells[2])) == ("resume", "restart")
    ran = []
    original = grid.run_cell
    monkeypatch.setattr(grid, "run_cell", lambda cell, **kw: ran.append(cell.run_dir) or original(cell, **kw))
    run_study(study, log=lambda _: None)
    assert ran == [killed, early]  # the finished cells were skipped
    for cell in cells:
        assert records(cell.run_dir) == finished[cell.run_dir]  # same metrics as the uninterrupted run
    summaries = [json.loads((c.run_dir / "summary.json").read_text()) for c in cells]
    assert all(set(s) == set(summaries[0]) for s in summaries)  # every run's summary has the same fields


def test_a_changed_study_does_not_mix_into_old_runs(tmp_path):
    study = load_study(write_study(tmp_path, seeds=[0]))
    cells = study.cells()
    cells[0].run_dir.mkdir(parents=True)
    (cells[0].run_dir / "config.yaml").write_text(dump(cells[0].config).replace("lr: 0.0001", "lr: 0.0002"))
    with pytest.raises(ConfigError, match=r"was run with another config than the study now gives \(default · grpo · seed 0; optim\.lr\)"):
        run_study(study, log=lambda _: None)


def test_parallel_jobs_run_every_cell(tmp_path):
    study = load_study(write_study(tmp_path))
    lines = []
    cells = run_study(study, jobs=2, log=lines.append)
    assert all(cell_status(c) == "done" for c in cells) and len(lines) == 1 + len(cells)
    for cell in cells:
        summary = json.loads((cell.run_dir / "summary.json").read_text())
        assert (summary["method"], summary["seed"], summary["steps"]) == (cell.config.method, cell.seed, 3)


def test_a_grid_split_between_machines_runs_only_its_seeds_here(tmp_path):
    """`credo compare --seeds`: a GPU takes some seeds, the CPUs the others, each into its own directory; the run
    folders of both then make one study. A seed the study does not have is refused before any run."""
    lines = []
    study = load_study(write_study(tmp_path))
    with pytest.raises(ConfigError, match=r"--seeds \[7\] are not seeds of the study \(\[0, 1\]\)"):
        run_study(study, seeds={1, 7}, log=lines.append)
    assert not lines and not (tmp_path / "out").exists()
    cells = run_study(study, seeds={1}, log=lines.append)
    assert {(c.method, c.seed) for c in cells if cell_status(c) == "done"} == {("grpo", 1), ("oracle_blame", 1)}
    assert {(c.method, c.seed) for c in cells if cell_status(c) == "new"} == {("grpo", 0), ("oracle_blame", 0)}
    assert lines[0].startswith("tiny: 4 runs, 0 done, 2 to run here (seeds 1) -> ")
    lines.clear()
    run_study(study, seeds={0, 1}, log=lines.append)
    assert lines[0].startswith("tiny: 4 runs, 2 done, 2 to run here (seeds 0, 1) -> ")
    assert sum(line.endswith(" s") for line in lines) == 2  # the two seed-0 runs, the seed-1 ones kept


def test_compare_refuses_seeds_that_are_not_integers(tmp_path):
    from typer.testing import CliRunner

    from credo.cli import app

    result = CliRunner().invoke(app, ["compare", str(write_study(tmp_path)), "--seeds", "26,x"])
    assert result.exit_code == 2 and "comma-separated integers" in " ".join(result.output.split())
    assert not (tmp_path / "out").exists()


def test_workers_die_with_a_killed_compare(tmp_path):
    # `credo compare --jobs 2` is SIGKILLed while its workers train: they must end too, not go on (and start
    # the cells queued to them).
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    long_set = {**TINY_SET, "train": {**TINY_SET["train"], "steps": 400, "eval_every": 400, "checkpoint_every": 400}}
    path = write_study(tmp_path, seeds=[0, 1, 2], set=long_set)
    parent = subprocess.Popen([sys.executable, "-m", "credo", "compare", str(path), "--jobs", "2"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: list[psutil.Process] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list((tmp_path / "out").glob("*/*/seed*/metrics.jsonl")):
        time.sleep(0.5)  # wait until the workers train
    workers = psutil.Process(parent.pid).children(recursive=True)
    assert workers, "compare started no worker"
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    gone, alive = psutil.wait_procs(workers, timeout=15)
    for process in alive:
        process.kill()
    assert not alive, f"{len(alive)} worker(s) outlived the killed compare"


def test_a_sigkilled_compare_resumes_to_the_uninterrupted_grid(tmp_path):
    # `credo compare` SIGKILLed while its second cell trains (past that cell's step-2 checkpoint): running the
    # study again finishes the grid with the same metrics, cell by cell, as a study never interrupted.
    import signal
    import subprocess
    import sys
    import time

    five_steps = {**TINY_SET, "train": {**TINY_SET["train"], "steps": 5}}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    straight = load_study(write_study(tmp_path / "a", set=five_steps))
    run_study(straight, log=lambda _: None)
    study_file = write_study(tmp_path / "b", set=five_steps)
    killed = load_study(study_file)
    second = killed.cells()[1].run_dir / "metrics.jsonl"
    process = subprocess.Popen([sys.executable, "-m", "credo", "compare", str(study_file)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 180
    while not (second.exists() and '"step": 3,' in second.read_text()):
        assert process.poll() is None, process.stderr.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert cell_status(killed.cells()[1]) == "resume"
    run_study(killed, log=lambda _: None)
    for done, reference in zip(killed.cells(), straight.cells()):
        assert records(done.run_dir) == records(reference.run_dir)


def test_a_setting_credo_gained_since_a_run_does_not_orphan_it(tmp_path):
    """A run's config.yaml written before a setting existed (here: model.tf32 missing) is the same config when the
    new setting sits at its default; the same setting changed is a change, named."""
    study = load_study(write_study(tmp_path, seeds=[0]))
    cell = study.cells()[0]
    cell.run_dir.mkdir(parents=True)
    (cell.run_dir / "config.yaml").write_text(dump(cell.config).replace("  tf32: null\n", ""))
    assert "tf32" not in (cell.run_dir / "config.yaml").read_text()
    check_unchanged(cell)
    (cell.run_dir / "config.yaml").write_text(dump(cell.config).replace("tf32: null", "tf32: true"))
    with pytest.raises(ConfigError, match=r"model\.tf32"):
        check_unchanged(cell)


def test_the_studies_guides_study_file_loads(tmp_path):
    """docs/guides/studies.md's annotated study file is a valid one (every key it shows, as it shows them)."""
    guide = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "studies.md").read_text()
    block = re.search(r"```yaml\n(name: testbed-hard\n.*?)```", guide, re.S)
    assert block, "docs/guides/studies.md: the study-file example moved"
    (tmp_path / "study.yaml").write_text(block.group(1))
    study = load_study(tmp_path / "study.yaml")
    assert list(study.config.methods) == ["grpo", "gspo", "dapo"] and study.config.report.exploratory == ["dapo"]


def test_a_study_setting_a_difficulty_overrides_is_a_clear_error(tmp_path):
    """The study's `set` lies under each difficulty's overrides and base files; where a difficulty gives one of its
    keys another value, the study's setting would not apply to that difficulty's runs: an error naming both."""
    regime = CONFIGS / "hard" / "regime_decisive.yaml"  # sets task.invertible_steps: true
    tiny = {**TINY_SET, "task": {"invertible_steps": False}}
    path = write_study(tmp_path, set=tiny, difficulties={"decisive": {"base": str(regime)}})
    with pytest.raises(ConfigError, match=r"difficulty decisive: its overrides and base files set "
                                          r"task\.invertible_steps = False \(the difficulty's: True\)"):
        load_study(path).cells()
    path = write_study(tmp_path, set=tiny, difficulties={"plain": {"optim": {"lr": 1.0e-5}}})
    assert {c.config.task["invertible_steps"] for c in load_study(path).cells()} == {False}
    same = {**TINY_SET, "task": {"invertible_steps": True}}  # the same value: nothing is lost
    assert load_study(write_study(tmp_path, set=same, difficulties={"decisive": {"base": str(regime)}})).cells()


def test_a_difficultys_missing_base_names_the_study_file_and_the_difficulty(tmp_path):
    path = write_study(tmp_path, difficulties={"hard": {"base": "nosuch_regime.yaml"}})
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: difficulty hard: base nosuch_regime\.yaml: "
                                          r"config file .*nosuch_regime\.yaml does not exist$"):
        load_study(path).cells()
