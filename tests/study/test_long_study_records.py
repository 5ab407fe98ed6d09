"""docs/results/long-study/records.sh: the long study's finished runs committed and put back, so that a study spans
sittings on machines that keep only the repository; an unfinished run is neither saved nor restored."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "results" / "long-study" / "records.sh"
RUN_FILES = ("config.yaml", "metrics.jsonl", "summary.json")


def records(root: Path, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "docs/results/long-study/records.sh", *arguments], cwd=root, capture_output=True,
                          text=True, check=False)


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """A repository root holding the script and study `s`: `grpo` seed 0 finished (samples at steps 1 and 2),
    seed 1 finished without samples, seed 2 still running (no `summary.json`)."""
    (tmp_path / "docs" / "results" / "long-study").mkdir(parents=True)
    shutil.copy(SCRIPT, tmp_path / "docs" / "results" / "long-study" / "records.sh")
    study = tmp_path / "runs" / "studies" / "s"
    study.mkdir(parents=True)
    (study / "study.yaml").write_text("name: s\n")
    for seed in (0, 1, 2):
        run = study / "default" / "grpo" / f"seed{seed}"
        run.mkdir(parents=True)
        (run / "config.yaml").write_text(f"seed: {seed}\n")
        (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 0.5}) + "\n")
        (run / "model.safetensors").write_bytes(b"weights")
        if seed < 2:
            (run / "summary.json").write_text(json.dumps({"seed": seed}))
    samples = [{"step": 1, "text": "a"}, {"step": 2, "text": "b"}, {"step": 1, "text": "c"}]
    (study / "default" / "grpo" / "seed0" / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    return tmp_path


def test_save_keeps_the_finished_runs_logs_and_seed_zeros_first_step_samples(repository: Path) -> None:
    done = records(repository, "save", "s")
    assert done.returncode == 0 and "save s: 2 finished runs" in done.stdout
    saved = repository / "docs" / "results" / "long-study" / "records" / "s"
    assert (saved / "study.yaml").read_text() == "name: s\n"
    for seed in (0, 1):
        run = saved / "default" / "grpo" / f"seed{seed}"
        assert sorted(p.name for p in run.iterdir()) == sorted(RUN_FILES + (("samples.jsonl",) if seed == 0 else ()))
    kept = [json.loads(line)["text"] for line in (saved / "default/grpo/seed0/samples.jsonl").read_text().splitlines()]
    assert kept == ["a", "c"]
    assert not (saved / "default" / "grpo" / "seed2").exists()  # still running: not a record


def test_restore_puts_back_what_was_saved_once(repository: Path) -> None:
    assert records(repository, "save", "s").returncode == 0
    shutil.rmtree(repository / "runs")
    restored = records(repository, "restore", "s")
    assert restored.returncode == 0 and "restore s: 2 finished runs" in restored.stdout
    run = repository / "runs" / "studies" / "s" / "default" / "grpo" / "seed0"
    assert json.loads((run / "summary.json").read_text()) == {"seed": 0}
    assert (run / "samples.jsonl").exists() and not (run / "model.safetensors").exists()
    again = records(repository, "restore", "s")
    assert "restore s: 0 finished runs" in again.stdout  # a run already there is left as it is


def test_bad_arguments_are_one_line_errors(repository: Path) -> None:
    wrong = records(repository, "load", "s")
    assert wrong.returncode == 2 and wrong.stderr.strip() == "records.sh: unknown action 'load' (save or restore)"
    missing = records(repository, "restore", "s")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "records.sh: docs/results/long-study/records/s holds no study.yaml; nothing to restore"


def test_records_may_live_under_another_root(repository: Path) -> None:
    # The headroom map keeps its records beside its own reports: the optional third argument.
    done = records(repository, "save", "s", "docs/results/headroom/records")
    assert done.returncode == 0 and "save s: 2 finished runs" in done.stdout
    assert (repository / "docs/results/headroom/records/s/default/grpo/seed1/summary.json").exists()
    assert not (repository / "docs/results/long-study/records/s").exists()
