"""`--resume` with overrides: the keys in `credo.config.RESUMABLE` are applied and recorded in config.yaml,
any other change is refused before anything loads, naming each key and why."""

from __future__ import annotations

import json

import pytest
import yaml
from tiny import TINY
from typer.testing import CliRunner

from credo import run_setup
from credo.cli import app
from credo.config import ConfigError, load_config
from credo.train import train

QUICK = TINY + ["eval.greedy=false", "eval.samples=0", "eval.ks=[1]", "train.steps=2", "train.checkpoint_every=2"]


@pytest.fixture
def finished(tmp_path):
    """A tiny run of two steps with its final checkpoint."""
    run_dir = tmp_path / "run"
    train(load_config(None, QUICK), run_dir, show_progress=False)
    return run_dir


def recorded(run_dir) -> dict:
    return yaml.safe_load((run_dir / "config.yaml").read_text())


def test_allowed_overrides_are_applied_and_recorded(finished):
    config = load_config(finished / "config.yaml", ["train.steps=3", "train.eval_every=1", "train.max_nan_steps=5"])
    summary = train(config, finished, resume=True, show_progress=False)
    assert summary["steps"] == 3
    train_section = recorded(finished)["train"]
    assert train_section | {"steps": 3, "eval_every": 1, "max_nan_steps": 5} == train_section
    records = [json.loads(x) for x in (finished / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "eval" not in r] == [1, 2, 3]
    assert train(load_config(finished / "config.yaml"), finished, resume=True, show_progress=False)["steps"] == 3


def test_an_lr_override_is_refused_before_anything_loads(finished, monkeypatch):
    """`--resume RUN --set optim.lr=5e-4` used to train on with the checkpoint's lr, recording neither."""
    before = {name: (finished / name).read_text() for name in ("config.yaml", "metrics.jsonl")}
    monkeypatch.setattr(run_setup, "load_model", lambda *args: pytest.fail("the model was loaded"))
    config = load_config(finished / "config.yaml", ["optim.lr=5e-4", "train.steps=4"])
    with pytest.raises(ConfigError) as info:
        train(config, finished, resume=True, show_progress=False)
    assert str(info.value).startswith("--resume cannot change optim.lr (2e-05 -> 0.0005: the checkpoint's optimiser "
                                      "and schedule state were built with it); start a new run for other settings")
    assert {name: (finished / name).read_text() for name in before} == before


def test_the_cli_refuses_in_one_line(finished):
    result = CliRunner().invoke(app, ["train", "--resume", str(finished), "--set", "optim.lr=5e-4",
                                      "--set", "method=dapo"], env={"COLUMNS": "300"})
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "cannot change method ('grpo' -> 'dapo'" in lines[0] and "optim.lr (2e-05" in lines[0]


def test_fewer_steps_than_trained_are_refused(finished):
    with pytest.raises(ConfigError, match=r"^--resume: train.steps = 1 is below the 2 steps .* has already trained$"):
        train(load_config(finished / "config.yaml", ["train.steps=1"]), finished, resume=True, show_progress=False)
    assert recorded(finished)["train"]["steps"] == 2
