"""Red team: config files, reports and checkpoints from elsewhere load as data; user code runs only when asked."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from credo.cli import app

runner = CliRunner()


# ------------------------------------------------------------------------------------------ reward modules
def run_naming_a_reward(tmp_path) -> tuple[Path, Path]:
    """A run directory whose config names a reward module that creates a sentinel file when imported."""
    sentinel = tmp_path / "imported"
    module = tmp_path / "evil_rewards.py"
    module.write_text(f"open({str(sentinel)!r}, 'w').close()\n\ndef accuracy(completions, **columns):\n"
                      "    return [0.0] * len(completions)\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"task": {"name": "arith", "reward": f"{module}:accuracy"}}))
    return run, sentinel


def test_credo_config_imports_no_reward_module_unless_asked(tmp_path):
    run, sentinel = run_naming_a_reward(tmp_path)
    result = runner.invoke(app, ["config", str(run)])
    assert result.exit_code == 0, result.output
    assert "evil_rewards.py:accuracy" in result.output
    assert not sentinel.exists()
    result = runner.invoke(app, ["config", str(run), "task.reward=no_colon"])
    assert result.exit_code == 2 and "must look like 'package.module:function'" in result.output
    assert runner.invoke(app, ["config", str(run), "--load-rewards"]).exit_code == 0
    assert sentinel.exists()


def test_credo_eval_imports_no_reward_module_unless_asked(tmp_path):
    run, sentinel = run_naming_a_reward(tmp_path)
    result = runner.invoke(app, ["eval", str(run)])
    assert not sentinel.exists()
    assert result.exit_code == 2 and "only with --load-rewards" in result.output
