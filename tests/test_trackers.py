"""What a run reports as it goes: plain lines when stdout is no terminal, and the trackers of `train.report_to`
(TensorBoard, W&B, MLflow, trackio through accelerate), each a validation error naming its extra when missing.

The tracker tests run where the tracker's package is installed and are skipped, with the reason, elsewhere."""

from __future__ import annotations

import io
import json

import pytest
from tiny import TINY

import credo.trackers as trackers_module
from credo.config import ConfigError, load_config
from credo.progress import TrainProgress
from credo.trackers import Trackers, eval_scalars, flat_config
from credo.train import train

RESULT = {"greedy_pass@1": 0.5, "pass@1": 0.25, "avg@2": 0.25,
          "by_difficulty": {"steps=2": {"greedy_pass@1": 1.0, "pass@1": 0.5, "avg@2": 0.5, "problems": 2},
                            "steps=4": {"greedy_pass@1": 0.0, "pass@1": 0.0, "avg@2": 0.0, "problems": 2}}}
RECORD = {"step": 3, "reward/mean": 0.25, "reward/accuracy": 0.125, "tokens_per_s": 1234.5, "kl/old": 0.01}


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_when_stdout_is_not_a_terminal():
    out = io.StringIO()
    with TrainProgress(10, 2, stream=out) as progress:
        assert progress.plain
        progress.advance(RECORD)
        progress.evaluated(3, RESULT)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("step 3/10  reward 0.250  acc 0.125  1,234 tok/s  elapsed 0:00:0")
    assert lines[1].startswith("eval step 3/10  greedy_pass@1 0.500  pass@1 0.250  avg@2 0.250  elapsed 0:00:0")
    assert len(lines) == 2

    terminal = Terminal()
    with TrainProgress(10, 2, stream=terminal) as progress:  # a terminal gets rich's bar, not plain lines
        assert not progress.plain
        progress.advance(RECORD)
    assert "step 3/10" not in terminal.getvalue()
    quiet = io.StringIO()
    with TrainProgress(10, 2, enabled=False, stream=quiet) as progress:
        progress.advance(RECORD)
        progress.evaluated(3, RESULT)
    assert quiet.getvalue() == ""


def test_a_run_without_a_terminal_prints_a_line_per_step_and_evaluation(tmp_path, capsys):
    train(load_config(None, TINY), tmp_path / "run", show_progress=True)  # captured stdout is no terminal
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("step ", "eval step "))]
    assert [line.split("  ")[0] for line in lines] == [
        "eval step 0/3", "step 1/3", "step 2/3", "eval step 2/3", "step 3/3", "eval step 3/3"]
    assert all("elapsed" in line for line in lines) and "tok/s" in lines[1] and "greedy_pass@1" in lines[0]


def test_evaluations_and_configs_flatten_to_scalars():
    assert eval_scalars(RESULT) == {
        "eval/all/greedy_pass@1": 0.5, "eval/all/pass@1": 0.25, "eval/all/avg@2": 0.25,
        "eval/steps=2/greedy_pass@1": 1.0, "eval/steps=2/pass@1": 0.5, "eval/steps=2/avg@2": 0.5,
        "eval/steps=4/greedy_pass@1": 0.0, "eval/steps=4/pass@1": 0.0, "eval/steps=4/avg@2": 0.0,
    }
    flat = flat_config(load_config(None, ["model.lora={r: 4}"]).model_dump(mode="json"))
    assert flat["method"] == "grpo" and flat["model.lora.r"] == 4 and flat["optim.betas"] == "[0.9, 0.999]"
    assert flat["train.max_grad_norm"] == "null" and flat["train.report_to"] == "[]"
    assert all(isinstance(v, (bool, int, float, str)) for v in flat.values())


def test_no_tracker_by_default(tmp_path):
    assert load_config(None, []).train.report_to == []
    trackers = Trackers([], tmp_path, project="credo", config={})
    trackers.log(RECORD, 3)
    trackers.log_eval(RESULT, 3)
    trackers.close()
    assert list(tmp_path.iterdir()) == []


def test_a_missing_tracker_package_is_a_validation_error_naming_its_extra(monkeypatch):
    real = trackers_module.importlib.util.find_spec
    monkeypatch.setattr(trackers_module.importlib.util, "find_spec",
                        lambda name, *args: None if name == "wandb" else real(name, *args))
    with pytest.raises(ConfigError) as info:
        load_config(None, ["train.report_to=[wandb]"])
    (line,) = str(info.value).splitlines()[1:]
    assert line == ("  train.report_to: wandb needs the optional package 'wandb', which is not installed; "
                    "install it with: pip install 'credo[wandb]'")
    with pytest.raises(ConfigError, match=r"train.report_to.0: Input should be 'tensorboard', 'wandb', 'mlflow' or"):
        load_config(None, ["train.report_to=[neptune]"])
    from credo.extras import EXTRAS

    assert set(trackers_module.TRACKERS) <= set(EXTRAS)


def test_tensorboard_gets_the_step_and_evaluation_scalars(tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (pip install 'credo[tensorboard]')")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert load_config(None, ["train.report_to=tensorboard"]).train.report_to == ["tensorboard"]
    train(load_config(None, TINY + ["train.report_to=[tensorboard]"]), tmp_path / "run", show_progress=False)
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    assert {"reward/mean", "kl/old", "loss/policy", "eval/all/greedy_pass@1", "eval/steps=2/pass@2"} <= scalars
    assert "step" not in scalars
    assert [e.step for e in events.Scalars("reward/mean")] == [1, 2, 3]
    assert [e.step for e in events.Scalars("eval/all/greedy_pass@1")] == [0, 2, 3]
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [e.value for e in events.Scalars("reward/mean")] == pytest.approx(
        [r["reward/mean"] for r in metrics if "eval" not in r])


    # a run killed after logging step 3 but before its checkpoint resumes from step 2: step 3 is logged once
    import shutil

    shutil.rmtree(tmp_path / "run" / "checkpoints" / "step_000003")
    train(load_config(tmp_path / "run" / "config.yaml", ["train.steps=4"]), tmp_path / "run", resume=True,
          show_progress=False)
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("reward/mean")] == [1, 2, 3, 4]
    assert [e.step for e in events.Scalars("eval/all/greedy_pass@1")] == [0, 2, 4]  # 3 was the old last step

    train(load_config(None, TINY + ["train.steps=1"]), tmp_path / "plain", show_progress=False)
    assert not (tmp_path / "plain" / "tensorboard").exists()  # installed is not asked for

def test_trls_report_to_spellings():
    """`none` is no tracker and `all` every installed one, as `report_to` means in transformers and TRL."""
    from credo.trackers import installed_trackers

    assert load_config(None, ["train.report_to=none"]).train.report_to == []
    assert load_config(None, ["train.report_to=[none]"]).train.report_to == []
    everything = load_config(None, ["train.report_to=all"]).train.report_to
    assert everything == installed_trackers() and "tensorboard" in everything  # the test extra installs it
    with pytest.raises(ConfigError, match="Input should be"):
        load_config(None, ["train.report_to=[none, tensorboard]"])



def test_mlflow_writes_a_file_store_under_the_run_directory(tmp_path, monkeypatch):
    pytest.importorskip("mlflow", reason="mlflow is not installed (pip install 'credo[mlflow]')")
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = load_config(None, ["train.report_to=[mlflow]"])
    trackers = Trackers(["mlflow"], tmp_path, project="credo", config=config.model_dump(mode="json"))
    trackers.log(RECORD, 3)
    trackers.log_eval(RESULT, 3)
    trackers.close()
    run_id = json.loads((tmp_path / "trackers.json").read_text())["mlflow"]
    client = MlflowClient((tmp_path / "mlruns").resolve().as_uri())
    run = client.get_run(run_id)
    assert run.data.metrics["reward/mean"] == 0.25 and run.data.metrics["eval/steps_2/greedy_pass_at_1"] == 1.0
    assert run.data.params["optim.lr"] == "2e-05" and run.info.run_name == tmp_path.name
    resumed = Trackers(["mlflow"], tmp_path, project="credo", config={}, resumed_step=3)  # the same MLflow run
    resumed.log({"step": 4, "reward/mean": 0.5}, 4)
    resumed.close()
    assert [m.step for m in client.get_metric_history(run_id, "reward/mean")] == [3, 4]


def test_wandb_offline_writes_under_the_run_directory(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="wandb is not installed (pip install 'credo[wandb]')")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    trackers = Trackers(["wandb"], tmp_path, project="credo", config={"optim.lr": 2e-5})
    trackers.log(RECORD, 3)
    trackers.log_eval(RESULT, 3)
    trackers.close()
    run_id = json.loads((tmp_path / "trackers.json").read_text())["wandb"]
    (offline,) = (tmp_path / "wandb").glob(f"offline-run-*-{run_id}")
    assert (offline / f"run-{run_id}.wandb").stat().st_size > 0
