"""The testbed models that ship with credo: verified by hash, copied into the cache, and what a rebuild gives."""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

import credo.testbed as testbed
from credo.config import EvalConfig, ModelConfig, deep_merge, load_config, read_config_file
from credo.evaluate import eval_subset, evaluate_policy
from credo.models import load_model, make_backend
from credo.tasks import build_task
from credo.testbed import SHIPPED, TestbedConfig, build_testbed, shipped_testbed

DEFAULT = TestbedConfig()
HARD = TestbedConfig(**load_config("configs/testbed/hard/grpo.yaml").model.testbed)
NO_CANCEL = TestbedConfig(**yaml.safe_load(open("configs/testbed/hard/regime_nocancel.yaml"))["model"]["testbed"])
LONG = TestbedConfig(**load_config("configs/testbed/long/grpo.yaml").model.testbed)
LONG_FIRST = LONG.model_copy(update={"model": LONG.model.model_copy(update={"num_layers": 3})})
"""The long-horizon regime's first shipped design (3 layers), which its first headroom pilot ran on."""
HEADROOM = TestbedConfig(**functools.reduce(deep_merge, (read_config_file(Path(f"configs/testbed/headroom/{layer}.yaml"))
                                                         for layer in ("regime", "k100", "n8", "p06")))["model"]["testbed"])
"""The headroom study's regime, k100-n8-p06 (docs/results/headroom/plan.md, amendment 2)."""
AGENT = TestbedConfig(**load_config("configs/testbed/agent/grpo.yaml").model.testbed)
"""The agent testbed's model: the calculator's episodes (configs/testbed/agent/regime.yaml)."""


def test_the_default_hard_no_cancel_long_headroom_and_agent_models_ship_with_every_file_hashed():
    manifest = json.loads((SHIPPED / "manifest.json").read_text())
    assert set(manifest) == {DEFAULT.digest(), HARD.digest(), NO_CANCEL.digest(), LONG.digest(), LONG_FIRST.digest(),
                             HEADROOM.digest(), AGENT.digest()}
    for digest, files in manifest.items():
        assert {p.name for p in (SHIPPED / digest).iterdir()} == set(files)
        assert "model.safetensors" in files and "tokenizer.json" in files


def test_the_shipped_names_stay_when_the_task_gains_options():
    """Options added to the SFT's config later (`credo.testbed.ADDED_LATER`) leave the names of models built
    before them alone at their defaults, and make a new name when set."""
    assert (DEFAULT.digest(), HARD.digest(), NO_CANCEL.digest()) == ("340791c1ad37", "d8739cffcc0b", "7ed0bed4d3e4")
    for option, value in (("invertible_steps", True), ("max_misconception_steps", 2), ("worked", True)):
        changed = HARD.model_copy(update={"task": HARD.task.model_copy(update={option: value})})
        assert changed.digest() != HARD.digest()
    sdpa = HARD.model_copy(update={"model": HARD.model.model_copy(update={"attn_implementation": "sdpa"})})
    assert sdpa.digest() != HARD.digest()
    assert (LONG.digest(), LONG_FIRST.digest(), HEADROOM.digest()) == ("f8e08f26144d", "e31d693ea585", "acbe2fd04ad0")
    assert AGENT.digest() == "7b0602f5d370"


def test_a_first_use_copies_the_verified_shipped_model_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CREDO_CACHE", str(tmp_path))
    path = build_testbed(DEFAULT, log=lambda _: None)
    assert path == tmp_path / "testbed" / DEFAULT.digest()
    for name in json.loads((SHIPPED / "manifest.json").read_text())[DEFAULT.digest()]:
        assert (path / name).read_bytes() == (SHIPPED / DEFAULT.digest() / name).read_bytes()
    assert build_testbed(DEFAULT, log=lambda _: pytest.fail("a cached model is not copied again")) == path


def test_a_damaged_shipped_file_is_a_clear_error(tmp_path, monkeypatch):
    shipped = tmp_path / "shipped"
    shutil.copytree(SHIPPED, shipped)
    weights = shipped / DEFAULT.digest() / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    monkeypatch.setattr(testbed, "SHIPPED", shipped)
    with pytest.raises(ValueError, match=r"model\.safetensors fails its SHA-256 check.*credo testbed build"):
        shipped_testbed(DEFAULT)
    assert shipped_testbed(TestbedConfig(steps=10)) is None  # no shipped model for another config


def greedy_accuracy(model_dir) -> float:
    config = load_config("configs/testbed/grpo.yaml")
    model, tokenizer = load_model(ModelConfig(path=str(model_dir)), torch.device("cpu"))
    task = build_task(config.task)
    problems = eval_subset(task.eval_problems(), 100)
    backend = make_backend(config.rollout, model, tokenizer, ModelConfig(path=str(model_dir)))
    with torch.no_grad():
        result = evaluate_policy(backend, task, problems, EvalConfig(samples=0), max_new_tokens=48, seed=1)
    return result["greedy_pass@1"]


@pytest.mark.slow
def test_a_rebuild_from_scratch_lands_in_the_shipped_models_accuracy_band(tmp_path, monkeypatch):
    # SFT on another machine gives other weights (CPU float kernels differ), but the same model: its greedy
    # pass@1 on 300 held-out chains of 2, 4 and 6 steps stays within 0.08 of the shipped model's (0.47).
    monkeypatch.setenv("CREDO_CACHE", str(tmp_path))
    rebuilt = build_testbed(DEFAULT, shipped=False, log=lambda _: None)
    assert hashlib.sha256((rebuilt / "model.safetensors").read_bytes()).hexdigest()  # trained, not copied
    shipped, fresh = greedy_accuracy(SHIPPED / DEFAULT.digest()), greedy_accuracy(rebuilt)
    assert 0.40 <= shipped <= 0.55, shipped
    assert abs(fresh - shipped) <= 0.08, (fresh, shipped)


def test_processes_that_need_the_same_model_at_once_build_it_once(tmp_path, monkeypatch):
    """A study's parallel runs start together on a model nobody has built: the first holds the lock and trains, the
    second waits and finds it built (before the lock, both trained it, each for the whole SFT)."""
    import multiprocessing

    monkeypatch.setenv("CREDO_CACHE", str(tmp_path))
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        logs = pool.map(_build_tiny_logged, [str(tmp_path)] * 2)
    assert sorted(sum(line.startswith("building the testbed model") for line in log) for log in logs) == [0, 1]
    assert len({tuple(p.name for p in sorted((tmp_path / "testbed").iterdir()))}) == 1


def _build_tiny_logged(cache: str) -> list[str]:
    import os

    import yaml

    from credo.testbed import TestbedConfig
    from tiny import TINY_TESTBED

    os.environ["CREDO_CACHE"] = cache
    lines: list[str] = []
    config = TestbedConfig(**{**yaml.safe_load(TINY_TESTBED), "steps": 40})
    build_testbed(config, shipped=False, log=lines.append)
    return lines
