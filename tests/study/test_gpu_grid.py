"""docs/results/ranking/gpu_grid.sh, a lent GPU's share of a study's grid, run here on the CPU (no `.whl` to
install) on a two-seed study: only the chosen seed's cells run, and their records, without weights, come back in one
archive, ready to join the CPU grid's directory as finished runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml
from test_grid import TINY_SET, write_study

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "results" / "ranking" / "gpu_grid.sh"


def test_gpu_grid_runs_the_chosen_seeds_and_packs_their_records(tmp_path: Path) -> None:
    (tmp_path / "docs" / "results" / "ranking").mkdir(parents=True)
    shutil.copy(SCRIPT, tmp_path / "docs" / "results" / "ranking" / "gpu_grid.sh")
    (tmp_path / "src").symlink_to(ROOT / "src")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python3").symlink_to(sys.executable)  # the script's python3: this interpreter
    study = write_study(tmp_path, set=dict(TINY_SET, train=dict(TINY_SET["train"], steps=2)))
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}", OUT=str(tmp_path / "back"), SEEDS="1",
               JOBS="2", LIMIT="500", STUDY=str(study))
    done = subprocess.run(["bash", "docs/results/ranking/gpu_grid.sh"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, check=False, timeout=600)
    assert "compare rc=0 " in done.stdout and "finished runs: 2" in done.stdout, done.stdout + done.stderr
    with tarfile.open(tmp_path / "back" / "gpu-runs.tgz") as archive:
        names = set(archive.getnames())
    runs = {f"runs/gpu/default/{method}/seed1" for method in ("grpo", "oracle_blame")}
    assert {f"{run}/{file}" for run in runs for file in ("config.yaml", "metrics.jsonl", "summary.json")} <= names
    assert "runs/gpu/study.yaml" in names
    assert not any("seed0" in name for name in names)  # the other seed is the CPU grid's
    assert not any(name.endswith(".safetensors") or "/checkpoints/" in name for name in names)  # weights stay here
    assert yaml.safe_load((tmp_path / "runs" / "gpu" / "study.yaml").read_text())["name"] == "tiny"
