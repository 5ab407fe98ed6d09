"""docs/results/long-study/gradient_variance.sh: the long study's four gradient-variance measurements (plan.md,
amendment 9), two at a time, each skipped once its JSON exists, a failure named in one line."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "results" / "long-study" / "gradient_variance.sh"
OUT = Path("docs/results/long-study")

FAKE_CREDO = """#!/usr/bin/env bash
# Stands in for `credo gradient-variance ... --json OUT`: logs its arguments, waits for its partner when asked
# (both of a pair must be running at once), fails when its JSON's name is in $FAIL.
out=${@: -1}
echo "$*" >> "$CALLS"
name=$(basename "$out" .json)
touch "$SCRATCH/$name.started"
if [ -n "${PARTNER:-}" ] && [ "$name" = gradient_variance_start ]; then
  for _ in $(seq 100); do [ -f "$SCRATCH/gradient_variance_trained.started" ] && break; sleep 0.05; done
  [ -f "$SCRATCH/gradient_variance_trained.started" ] || { echo "Error: ran alone"; exit 1; }
fi
case " ${FAIL:-} " in *" $name "*) echo "progress"; echo "Error: the config is broken"; exit 1;; esac
echo '{}' > "$out"
"""


@pytest.fixture
def repository(tmp_path: Path) -> tuple[Path, dict]:
    (tmp_path / OUT).mkdir(parents=True)
    shutil.copy(SCRIPT, tmp_path / OUT / "gradient_variance.sh")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "credo"
    fake.write_text(FAKE_CREDO)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(tmp_path / "calls"),
           "SCRATCH": str(tmp_path)}
    return tmp_path, env


def run(root: Path, env: dict, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(OUT / "gradient_variance.sh")], cwd=root, env={**env, **extra},
                          capture_output=True, text=True, check=False)


def test_four_measurements_two_at_a_time_with_the_like_for_like_reference_first(repository):
    root, env = repository
    done = run(root, env, PARTNER="1")
    assert done.returncode == 0, done.stderr
    calls = sorted((root / "calls").read_text().splitlines())
    assert len(calls) == 4
    off = [c for c in calls if "--after-steps 3 --draws 64" in c]
    assert len(off) == 2 and all(c.split()[1:4] == ["configs/testbed/long/grpo_4mb_ibpo_rate.yaml",
                                                     "configs/testbed/long/ibpo.yaml",
                                                     "configs/testbed/long/grpo_4mb.yaml"] for c in off)
    on = [c for c in calls if c not in off]
    assert all(c.split()[1:3] == ["configs/testbed/long/grpo.yaml", "configs/testbed/long/ibpo.yaml"] for c in on)
    trained = [c for c in calls if "model.path=docs/results/long-study/grpo_seed0_model" in c]
    assert len(trained) == 2
    for name in ("start", "trained", "start_off_policy", "trained_off_policy"):
        assert (root / OUT / f"gradient_variance_{name}.json").is_file()


def test_a_measured_json_is_skipped_and_a_failure_is_one_line_naming_it(repository):
    root, env = repository
    (root / OUT / "gradient_variance_start.json").write_text("{}")
    done = run(root, env, FAIL="gradient_variance_trained_off_policy")
    assert done.returncode == 1
    assert "gradient_variance_start.json exists, skipped" in done.stdout
    assert done.stderr.strip() == "gradient_variance.sh: trained_off_policy failed: Error: the config is broken"
    assert len((root / "calls").read_text().splitlines()) == 3
    assert not (root / OUT / "gradient_variance_trained_off_policy.json").exists()
    assert (root / OUT / "gradient_variance_start_off_policy.json").is_file()  # its partner finished
