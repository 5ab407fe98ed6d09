"""Red team: run directories handed to credo (forged or unpacked from elsewhere) cannot be turned against the host.

Each test builds its payload under tmp_path and asserts that nothing outside the run directory changed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tiny import TINY

from credo.checkpoint import RunDirectory
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
    with pytest.raises(OSError, match=f"^{run / name} is a symbolic link"):
        train(load_config(None, TINY), run, resume=True, show_progress=False)
    assert not outside.exists()


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
