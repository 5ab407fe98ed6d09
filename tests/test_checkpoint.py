"""Run files under faults: untrusted and corrupt checkpoints, a full disk, torn logs, kills, two processes."""

from __future__ import annotations

import errno
import json
import logging
import os
import pickle
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from tiny import TINY, TINY_TESTBED
from typer.testing import CliRunner

from credo import io
from credo.checkpoint import (
    CheckpointError,
    RunDirectory,
    RunLockedError,
    TrainState,
    load_latest_checkpoint,
    save_checkpoint,
)
from credo.cli import app
from credo.config import dump, load_config
from credo.train import train

TIMING = ("time/", "tokens_per_s", "wall_s")


# ------------------------------------------------------------------------------------------ checkpoints
def tiny_trainer(seed: int = 0):
    """A model, optimiser and scheduler after one update (the optimiser has state)."""
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda update: 1.0 / (update + 1))
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    scheduler.step()
    return model, optimizer, scheduler


def checkpointed(tmp_path, steps=(2, 4)) -> tuple[RunDirectory, dict[int, dict[str, torch.Tensor]]]:
    """A run directory with a checkpoint at each of `steps`, and the weights each holds."""
    run = RunDirectory(tmp_path / "run")
    model, optimizer, scheduler = tiny_trainer()
    weights = {}
    for step in steps:
        with torch.no_grad():
            model.weight.add_(1.0)
        save_checkpoint(run, model, optimizer, scheduler, TrainState(step=step), keep=len(steps))
        weights[step] = {n: p.detach().clone() for n, p in model.named_parameters()}
    return run, weights


def test_checkpoint_loads_with_weights_only_and_restores_every_state_exactly(tmp_path, monkeypatch):
    loads = []
    original = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **kw: loads.append(kw.get("weights_only")) or original(*a, **kw))
    run = RunDirectory(tmp_path / "run")
    model, optimizer, scheduler = tiny_trainer()
    random.seed(7)
    save_checkpoint(run, model, optimizer, scheduler, TrainState(step=3, data_position=9), keep=2)
    expected = (torch.rand(4), random.random(), {n: p.detach().clone() for n, p in model.named_parameters()},
                optimizer.state_dict(), scheduler.state_dict())
    fresh, fresh_optimizer, fresh_scheduler = tiny_trainer(seed=1)
    random.seed(8)
    state = load_latest_checkpoint(run, fresh, fresh_optimizer, fresh_scheduler)
    assert loads == [True]
    assert (state.step, state.data_position) == (3, 9)
    assert torch.equal(torch.rand(4), expected[0]) and random.random() == expected[1]
    assert all(torch.equal(p, expected[2][n]) for n, p in fresh.named_parameters())
    moments = fresh_optimizer.state_dict()["state"][0]
    assert all(torch.equal(moments[k], expected[3]["state"][0][k]) for k in ("step", "exp_avg", "exp_avg_sq"))
    assert fresh_scheduler.state_dict() == expected[4]


class Payload:
    """Unpickling it runs a shell command."""

    def __init__(self, sentinel: Path) -> None:
        self.sentinel = sentinel

    def __reduce__(self):
        return os.system, (f"touch {self.sentinel}",)


@pytest.mark.parametrize("writer", ["torch.save", "pickle.dump"])
def test_forged_trainer_pt_is_refused_and_never_runs(tmp_path, writer):
    run, _ = checkpointed(tmp_path)
    sentinel = tmp_path / "pwned"
    forged = run.checkpoints / "step_000004" / "trainer.pt"
    if writer == "torch.save":
        torch.save({"optimizer": Payload(sentinel)}, forged)
    else:
        forged.write_bytes(pickle.dumps(Payload(sentinel), protocol=2))
    with pytest.raises(CheckpointError, match=r"refusing to load .*step_000004/trainer\.pt: it holds objects other "
                                              r"than tensors and plain types") as caught:
        load_latest_checkpoint(run, *tiny_trainer())
    assert "\n" not in str(caught.value) and "unsupported GLOBAL posix.system" in str(caught.value)
    assert not sentinel.exists()  # and no fallback to step 2: a forged checkpoint is an error, not an accident


@pytest.mark.parametrize("damaged, garbage", [
    ("trainer.pt", False), ("trainable.safetensors", False), ("state.json", False),  # a disk that lost the tail
    ("trainer.pt", True),  # bytes that are no pickle torch reads
])
def test_corrupt_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, caplog, damaged, garbage):
    run, weights = checkpointed(tmp_path)
    path = run.checkpoints / "step_000004" / damaged
    path.write_bytes(b"garbage\n" if garbage else path.read_bytes()[: path.stat().st_size // 2])
    model, optimizer, scheduler = tiny_trainer()
    with caplog.at_level(logging.WARNING, logger="credo.checkpoint"):
        state = load_latest_checkpoint(run, model, optimizer, scheduler)
    assert state.step == 2
    assert all(torch.equal(p, weights[2][n]) for n, p in model.named_parameters())
    [warning] = [r.getMessage() for r in caplog.records]
    assert f"checkpoint {run.checkpoints / 'step_000004'} is unreadable" in warning
    assert f"resuming from {run.checkpoints / 'step_000002'} instead" in warning


def test_no_readable_checkpoint_is_an_error_naming_each(tmp_path):
    run, _ = checkpointed(tmp_path)
    for step in (2, 4):
        (run.checkpoints / f"step_{step:06d}" / "trainer.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"no readable checkpoint in .*checkpoints: step_000004: .*; step_000002: "):
        load_latest_checkpoint(run, *tiny_trainer())


@pytest.mark.parametrize("error", [
    OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
    RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 2048 vs 1995"),
], ids=["ENOSPC", "torch-zip-writer"])
def test_full_disk_during_a_checkpoint_is_reported_and_leaves_nothing(tmp_path, monkeypatch, error):
    run, _ = checkpointed(tmp_path, steps=(2,))

    def full(*args, **kwargs):
        raise error

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(OSError, match=r"^disk full while writing checkpoint .*checkpoints/step_000004$"):
        save_checkpoint(run, *tiny_trainer(), TrainState(step=4), keep=2)
    assert sorted(p.name for p in run.checkpoints.iterdir()) == ["step_000002"]


def test_checkpoint_files_and_folders_are_fsynced_before_the_rename(tmp_path, monkeypatch):
    events = []
    sync, replace = io.fsync_path, os.replace
    monkeypatch.setattr(io, "fsync_path", lambda path: events.append(("fsync", Path(path))) or sync(path))
    monkeypatch.setattr(os, "replace", lambda a, b: events.append(("rename", Path(a), Path(b))) or replace(a, b))
    run = RunDirectory(tmp_path / "run")
    target = save_checkpoint(run, *tiny_trainer(), TrainState(step=1), keep=2)
    rename = next(i for i, e in enumerate(events) if e[0] == "rename" and e[2] == target)
    tmp = events[rename][1]
    synced_before = {e[1] for e in events[:rename] if e[0] == "fsync"}
    assert {tmp / name for name in ("trainable.safetensors", "trainer.pt", "state.json")} | {tmp} <= synced_before
    assert ("fsync", run.checkpoints) in events[rename:]


def test_stale_checkpoint_temporaries_are_removed_and_a_half_swapped_one_restored(tmp_path):
    run, _ = checkpointed(tmp_path, steps=(2, 4))
    stale = run.checkpoints / ".step_000006.k2j4x"  # killed while writing step 6
    stale.mkdir()
    (stale / "trainer.pt").write_bytes(b"half")
    (run.checkpoints / "step_000004").rename(run.checkpoints / ".step_000004.old")  # killed mid-swap
    run.remove_stale_temporaries()
    assert sorted(p.name for p in run.checkpoints.iterdir()) == ["step_000002", "step_000004"]
    assert load_latest_checkpoint(run, *tiny_trainer()).step == 4


# ------------------------------------------------------------------------------------------ logs
def test_an_append_is_one_write_of_a_whole_line(tmp_path, monkeypatch):
    writes = []
    write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: writes.append(bytes(data)) or write(fd, data))
    path = tmp_path / "metrics.jsonl"
    RunDirectory(tmp_path).append(path, {"step": 1, "text": "a\nb"})
    assert writes == [b'{"step": 1, "text": "a\\nb"}\n']


def test_an_append_cut_short_by_a_full_disk_is_undone(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n')
    write = os.write
    calls = []

    def full_disk(fd, data):
        calls.append(data)
        if len(calls) == 1:
            return write(fd, data[:5])  # the kernel wrote what fitted
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(OSError, match=f"No space left on device: '{path}'"):
        RunDirectory(tmp_path).append(path, {"step": 2})
    assert path.read_text() == '{"step": 1}\n'


def test_reader_skips_a_torn_last_line_with_a_warning(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n\n{"step": 2}\n{"step":13,"reward/me')
    with caplog.at_level(logging.WARNING, logger="credo.io"):
        assert io.read_jsonl(path) == [{"step": 1}, {"step": 2}]
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: skipped 1 torn last line (21 bytes without a newline, from a write that was cut short)"]


@pytest.mark.parametrize("text, reason", [
    ('{"step": 1}\n{"step": 2,}\n{"step": 3}\n', r"Expecting property name enclosed in double quotes at column 12"),
    ('{"step": 1}\n{"step":13,"reward/me\n', r"Invalid control character at column 22"),  # has its newline: not torn
])
def test_a_malformed_line_is_an_error_naming_file_and_line(tmp_path, text, reason):
    path = tmp_path / "samples.jsonl"
    path.write_text(text)
    with pytest.raises(ValueError, match=rf"^{path}, line 2: not a JSON record \({reason}\)$"):
        io.read_jsonl(path)


# ------------------------------------------------------------------------------------------ kills and resumes
def untimed(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(x).items() if not k.startswith(TIMING)} for x in lines]


def kill_training(run_dir: Path, settings: list[str], logged: str) -> None:
    """Run `credo train` in a subprocess and SIGKILL it once metrics.jsonl holds `logged`."""
    command = [sys.executable, "-m", "credo", "train", "--output", str(run_dir)]
    for item in settings:
        command += ["--set", item]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    metrics = run_dir / "metrics.jsonl"
    while not (metrics.exists() and logged in metrics.read_text()):
        assert process.poll() is None, process.stderr.read().decode()
        assert time.time() < deadline
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (run_dir / "summary.json").exists()


def test_resume_after_a_kill_and_a_torn_line_matches_the_uninterrupted_run(tmp_path, caplog):
    settings = TINY + ["train.steps=4"]
    train(load_config(None, settings), tmp_path / "straight", show_progress=False)
    killed = tmp_path / "killed"
    kill_training(killed, settings, '"step": 3,')  # past the step-2 checkpoint
    for name in ("metrics.jsonl", "samples.jsonl"):
        with (killed / name).open("a") as handle:
            handle.write('{"step":13,"reward/me')
    with caplog.at_level(logging.WARNING):
        train(load_config(killed / "config.yaml"), killed, resume=True, show_progress=False)
    assert untimed(killed) == untimed(tmp_path / "straight")
    torn = [r.getMessage() for r in caplog.records if "torn last line" in r.getMessage()]
    assert [message.split(":")[0] for message in torn] == [str(killed / "metrics.jsonl"), str(killed / "samples.jsonl")]


def test_a_run_killed_before_its_first_checkpoint_restarts_with_resume(tmp_path, caplog):
    settings = TINY + ["train.checkpoint_every=100"]  # the only checkpoint is the last step's
    train(load_config(None, settings), tmp_path / "straight", show_progress=False)
    killed = tmp_path / "killed"
    kill_training(killed, settings, '"step": 1,')
    assert not (killed / "checkpoints").exists()
    (killed / "checkpoints" / ".step_000003.x7q").mkdir(parents=True)  # as if killed while writing a checkpoint
    with pytest.raises(FileExistsError, match="already holds a run"):
        train(load_config(killed / "config.yaml"), killed, show_progress=False)
    with caplog.at_level(logging.WARNING, logger="credo.run_setup"):
        summary = train(load_config(killed / "config.yaml"), killed, resume=True, show_progress=False)
    assert [r.getMessage() for r in caplog.records] == [
        f"{killed} has no checkpoint (it stopped before its first): starting it again from step 0"]
    assert summary["steps"] == 3 and untimed(killed) == untimed(tmp_path / "straight")
    assert sorted(p.name for p in (killed / "checkpoints").iterdir()) == ["step_000003"]


KILLER = """
import os, signal, sys
import credo.train as train_module
from credo.config import load_config

point, run_dir, settings = sys.argv[1], sys.argv[2], sys.argv[3:]
calls = {}


def die():
    os.kill(os.getpid(), signal.SIGKILL)


def kill_in(name, call, after):
    original = getattr(train_module, name)

    def wrapped(*args, **kwargs):
        calls[name] = calls.get(name, 0) + 1
        if calls[name] == call and not after:
            die()
        result = original(*args, **kwargs)
        if calls[name] == call:
            die()
        return result

    setattr(train_module, name, wrapped)


KILL_POINTS = {
    "first_step": ("sample_rollout", 1, False),       # before the first step's rollouts
    "after_checkpoint": ("save_checkpoint", 1, True),  # the step-2 checkpoint written, nothing after it
    "mid_evaluation": ("evaluate_policy", 2, True),    # the step-2 evaluation computed, not yet logged
    "mid_export": ("export_model", 1, True),           # the final model written to its temporary folder only
}
kill_in(*KILL_POINTS[point])
train_module.train(load_config(None, settings), run_dir, show_progress=False)
"""


@pytest.mark.parametrize("point", ["first_step", "after_checkpoint", "mid_evaluation", "mid_export"])
def test_a_sigkill_at_each_kill_point_resumes_to_the_uninterrupted_run(tmp_path, point):
    # The soak of the resume guarantee: a SIGKILL at a deterministic point of a run (the process kills itself
    # inside the named call), then `train(resume=True)`: the same steps, rewards and evaluations, and a model.
    # (Killing `credo compare` is tested in study/test_grid.py.)
    settings = TINY + ["train.steps=3"]
    straight = train(load_config(None, settings), tmp_path / "straight", show_progress=False)
    killed = tmp_path / "killed"
    process = subprocess.run([sys.executable, "-c", KILLER, point, str(killed), *settings],
                             capture_output=True, text=True, timeout=300, check=False)
    assert process.returncode == -signal.SIGKILL, process.stderr
    assert not (killed / "summary.json").exists()
    summary = train(load_config(killed / "config.yaml"), killed, resume=True, show_progress=False)
    assert untimed(killed) == untimed(tmp_path / "straight")
    assert (summary["steps"], summary["eval_start"], summary["eval_end"]) == (
        straight["steps"], straight["eval_start"], straight["eval_end"])
    assert (killed / "model" / "config.json").exists()
    assert not [p for p in killed.iterdir() if p.name.startswith(".model.")]  # no export temporaries left


# ------------------------------------------------------------------------------------------ the lock
def test_a_run_directory_is_locked_while_a_process_trains_in_it(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(dump(load_config(None, TINY)))
    holder = subprocess.Popen(
        [sys.executable, "-c", ("import sys, time; from credo.checkpoint import RunDirectory\n"
                                "with RunDirectory(sys.argv[1]).lock():\n    print('locked', flush=True); time.sleep(120)"),
         str(run_dir)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "locked\n"
        result = CliRunner().invoke(app, ["train", "--resume", str(run_dir)])
        assert result.exit_code == 2
        error = [line for line in result.output.splitlines() if line.startswith("error:")]
        message = f"{run_dir} is in use: process {holder.pid} is training in it (wait for it to end, or stop it first)"
        assert error == [f"error: {message}"]
        assert not (run_dir / "metrics.jsonl").exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with RunDirectory(run_dir).lock():  # the kernel released the killed holder's lock
        pass


def test_a_study_cell_in_a_locked_directory_is_refused(tmp_path):
    from credo.study.grid import load_study, run_cell

    configs = Path(__file__).parents[1] / "configs" / "testbed"
    study_file = tmp_path / "study.yaml"
    study_file.write_text(yaml.safe_dump({
        "name": "locked", "seeds": [0], "methods": {"grpo": str(configs / "grpo.yaml")}, "report": {"oracle": None},
        "set": {"model": {"testbed": yaml.safe_load(TINY_TESTBED)}}, "output": str(tmp_path / "out")}))
    [cell] = load_study(study_file).cells()
    with RunDirectory(cell.run_dir).lock(), pytest.raises(RunLockedError, match=f"^{cell.run_dir} is in use"):
        run_cell(cell, show_progress=False)


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_written_files_and_folders_follow_the_umask(tmp_path, umask):
    # tempfile makes owner-only files and folders; what credo renames into place must have the mode a plain
    # open or mkdir gives, so that a run can be shared with a group.
    from credo.plots import learning_curve

    old = os.umask(umask)
    try:
        io.write_text_atomic(tmp_path / "config.yaml", "a: 1\n")
        with io.atomic_directory(tmp_path / "checkpoints" / "step_1") as folder:
            (folder / "state.json").write_text("{}")
        learning_curve([{"step": 1, "reward/mean": 0.5}], tmp_path / "plots" / "curve.png", title="t")
    finally:
        os.umask(old)
    assert (tmp_path / "config.yaml").stat().st_mode & 0o777 == 0o666 & ~umask
    assert (tmp_path / "checkpoints" / "step_1").stat().st_mode & 0o777 == 0o777 & ~umask
    assert (tmp_path / "plots" / "curve.png").stat().st_mode & 0o777 == 0o666 & ~umask
    assert io.current_umask() == old


def test_a_run_that_fails_before_writing_anything_leaves_no_directory(tmp_path, monkeypatch):
    """A missing dataset stops `credo train` before anything is written: the run directory the lock made is gone,
    so the next run takes the same default name; a directory that existed before stays, as does one with files."""
    monkeypatch.chdir(tmp_path)
    missing = [arg for setting in [*TINY, "task.name=dataset", "task.path=missing.parquet"] for arg in ("--set", setting)]
    for _ in range(2):
        result = CliRunner().invoke(app, ["train", *missing])
        assert result.exit_code == 2 and "missing.parquet does not exist" in result.output
        assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    kept = tmp_path / "kept"
    kept.mkdir()
    assert CliRunner().invoke(app, ["train", *missing, "-o", str(kept)]).exit_code == 2
    assert kept.is_dir() and [p.name for p in kept.iterdir()] == [".lock"]
    with RunDirectory(tmp_path / "fresh").lock():
        (tmp_path / "fresh" / "note.txt").write_text("written")
    assert (tmp_path / "fresh" / "note.txt").is_file()
