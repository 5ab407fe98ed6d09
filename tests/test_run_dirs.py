"""Red team: run directories handed to credo (forged or unpacked from elsewhere) cannot be turned against the host.

Each test builds its payload under tmp_path and asserts that nothing outside the run directory changed."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch
from tiny import TINY

from credo.checkpoint import CheckpointError, RunDirectory, TrainState, load_latest_checkpoint, save_checkpoint
from credo.config import load_config
from credo.io import append_jsonl
from credo.train import train

VICTIM = "precious data\n"


@pytest.fixture
def victim(tmp_path) -> Path:
    """A file outside the run directory that no credo command may change."""
    path = tmp_path / "victim.txt"
    path.write_text(VICTIM)
    return path


# ------------------------------------------------------------------------------------------ links in a run directory
@pytest.mark.parametrize("link", [os.symlink, os.link], ids=["symlink", "hardlink"])
def test_a_linked_lock_file_is_refused_and_its_target_kept(tmp_path, victim, link):
    run = tmp_path / "run"
    run.mkdir()
    link(victim, run / ".lock")
    with pytest.raises(OSError, match=f"^{run / '.lock'} is a link"):
        train(load_config(None, TINY), run, resume=True, show_progress=False)
    assert victim.read_text() == VICTIM


def test_a_fifo_lock_file_is_refused_without_blocking(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / ".lock")
    with pytest.raises(OSError, match="is a link or a special file"), RunDirectory(run).lock():
        pass


@pytest.mark.parametrize("name", ["metrics.jsonl", "checkpoints", "plots/learning_curve.png", "checkpoints/step_000002"])
def test_a_run_directory_holding_a_symbolic_link_where_credo_writes_is_refused(tmp_path, name):
    run, outside = tmp_path / "run", tmp_path / "outside"
    (run / name).parent.mkdir(parents=True)
    os.symlink(outside / "target", run / name)  # dangling: a write through it would create a file outside
    with pytest.raises(OSError, match=f"^{run / name} is a symbolic link or a special file"):
        train(load_config(None, TINY), run, resume=True, show_progress=False)
    assert not outside.exists()


def test_a_fifo_log_is_refused_before_a_resume_reads_it(tmp_path):
    """A resume from a checkpoint reads metrics.jsonl: a FIFO there would keep it waiting for a writer forever."""
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "metrics.jsonl")
    with pytest.raises(OSError, match=f"^{run / 'metrics.jsonl'} is a symbolic link or a special file"):
        train(load_config(None, TINY), run, resume=True, show_progress=False)


@pytest.mark.parametrize("link", [os.symlink, os.link], ids=["symlink", "hardlink"])
def test_an_append_never_writes_through_a_link(tmp_path, victim, link):
    link(victim, tmp_path / "metrics.jsonl")
    with pytest.raises(OSError, match="is a link or a special file"):
        append_jsonl(tmp_path / "metrics.jsonl", {"step": 1})
    assert victim.read_text() == VICTIM
    os.symlink(tmp_path / "elsewhere.jsonl", tmp_path / "samples.jsonl")  # dangling
    with pytest.raises(OSError, match="is a link or a special file"):
        append_jsonl(tmp_path / "samples.jsonl", {"step": 1})
    assert not (tmp_path / "elsewhere.jsonl").exists()


# ------------------------------------------------------------------------------------------ forged state and logs
def one_checkpoint(tmp_path, **state) -> tuple[RunDirectory, tuple]:
    """A run directory with one checkpoint (a linear model's) whose state.json holds `state` over a genuine one."""
    run = RunDirectory(tmp_path / "run")
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda update: 1.0)
    path = save_checkpoint(run, model, optimizer, scheduler, TrainState(step=2, data_position=6), keep=1)
    (path / "state.json").write_text(json.dumps({**json.loads((path / "state.json").read_text()), **state}))
    return run, (model, optimizer, scheduler)


@pytest.mark.parametrize(("state", "problem"), [
    ({"data_position": 10**15}, "data_position = 1000000000000000 is more than the 48 training problems 2 steps can take"),
    ({"step": "2"}, "step: Input should be a valid integer"),
    ({"step": True}, "step: Input should be a valid integer"),
    ({"rollout_tokens": -5}, "rollout_tokens: Input should be greater than or equal to 0"),
    ({"wall_s": "Infinity"}, "wall_s: Input should be a valid number"),
    ({"nan_streak": 1.5}, "nan_streak: Input should be a valid integer"),
    ({"admin": 1}, "admin: Extra inputs are not permitted"),
])
def test_a_forged_state_json_is_refused_naming_the_file_and_field(tmp_path, state, problem):
    run, trainer = one_checkpoint(tmp_path, **state)
    with pytest.raises(CheckpointError, match=f"step_000002: state.json: {re.escape(problem)}"):
        load_latest_checkpoint(run, *trainer, problems_per_step=24)


@pytest.mark.parametrize(("record", "problem"), [
    ({"step": "3", "rollout_tokens": 0, "wall_s": 0.0}, "step: Input should be a valid integer"),
    ({"step": 3, "rollout_tokens": 0, "wall_s": -1.0}, "wall_s: Input should be greater than or equal to 0"),
    ({"step": 3, "rollout_tokens": 0, "wall_s": 1.0, "reward/mean": "high"}, "reward/mean is a str, not a number"),
    ({"rollout_tokens": 0}, "step: Field required"),
])
def test_a_forged_metrics_record_is_refused_naming_the_file_line_and_field(tmp_path, record, problem):
    run = RunDirectory(tmp_path)
    append_jsonl(run.metrics_file, {"step": 1, "rollout_tokens": 10, "wall_s": 1.0, "reward/mean": 0.5})
    append_jsonl(run.metrics_file, record)
    with pytest.raises(ValueError, match=f"^{run.metrics_file}, line 2: {re.escape(problem)}"):
        run.records()
    with pytest.raises(ValueError, match=f"^{run.metrics_file}, line 2: {re.escape(problem)}"):
        run.truncate(1)
