"""The NaN / explosion guard: a non-finite log-prob, loss or gradient, or a gradient norm over
`train.max_grad_norm`, skips the update; `train.max_nan_steps` bad steps in a row stop the run with a one-line
message naming the step and the last checkpoint, which stays intact. On every method, on-policy or not; the methods
that need a task's environment (turn-level credit) on the calculator's episodes."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from safetensors.torch import load_file
from tiny import TINY

import credo.train as trainer_module
from credo.config import load_config
from credo.losses import LossOutput
from credo.methods import ENVIRONMENT_FIELDS, METHODS, Method
from credo.models import load_model
from credo.tasks import Verdict
from credo.tasks.arith import ArithTask
from credo.tasks.calculator import CalculatorEnvironment
from credo.train import TrainingDiverged, train

QUICK = TINY + ["eval.greedy=false", "eval.samples=0", "eval.ks=[1]", "train.checkpoint_every=1",
                "train.keep_checkpoints=3", "optim.lr=1e-2", "rollout.resets.max_draws=4",
                "rollout.resets.localiser_max_tokens=8"]
"""Tiny runs without evaluations, a checkpoint after every step (reset methods: fewer draws, short localiser)."""

EPISODES = ["task.name=calculator", "task.min_steps=2", "task.max_steps=3", "task.eval_steps=[2]", "task.max_turns=3",
            "rollout.max_new_tokens=40"]
"""The calculator's multi-turn episodes, for a method that needs a task's environment (its turns, turn rewards and
anchor states, or a sampler that branches at turns; arith has none, and such a method is refused there)."""


def task_of(name: str) -> list[str]:
    method = METHODS.get(name)
    return EPISODES if method.needs & ENVIRONMENT_FIELDS or method.sampler.needs_environment else []


RUNS = [(name, task_of(name)) for name in METHODS.names()] + [("gspo", ["optim.minibatches=3"]),
                                                              ("grpo", ["optim.epochs=2"])]
"""Every registered method with its defaults (on-policy unless its credit reads entropies), each on a task that
gives what it reads, and runs with several optimiser steps per rollout batch (a bad step used to count once per
mini-batch)."""


def step_records(run_dir) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if '"eval"' not in x]


def weights(run_dir, step: int) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "checkpoints" / f"step_{step:06d}" / "trainable.safetensors")


@pytest.fixture
def signal(monkeypatch):
    """Odd-length responses score 1: the tiny model never answers right, and groups need mixed rewards. On the
    calculator, whose episodes the tiny model never wins, an odd-length turn earns a turn reward of 1."""
    monkeypatch.setattr(ArithTask, "verify", lambda self, p, r: Verdict(float(len(r) % 2), bool(len(r) % 2)))
    step_batch = CalculatorEnvironment.step_batch

    def rewarded(self, states, turns):
        outcomes = step_batch(self, states, turns)
        return [dataclasses.replace(o, turn_reward=float(len(t) % 2)) for o, t in zip(outcomes, turns, strict=True)]

    monkeypatch.setattr(CalculatorEnvironment, "step_batch", rewarded)


def nan_logprobs_at(monkeypatch, bad_steps: set[int]) -> None:
    """Every policy log-prob (behaviour and update passes) is NaN during the given training steps."""
    step = {"now": 0}
    sample, logprobs = trainer_module.sample_rollout, trainer_module.policy_logprobs

    def counting_sample(*args, **kwargs):
        step["now"] += 1
        return sample(*args, **kwargs)

    def poisoned(*args, **kwargs):
        logp, entropy = logprobs(*args, **kwargs)
        if step["now"] in bad_steps:
            logp = logp * float("nan")
        return logp, entropy

    monkeypatch.setattr(trainer_module, "sample_rollout", counting_sample)
    monkeypatch.setattr(trainer_module, "policy_logprobs", poisoned)


@pytest.mark.parametrize(("method", "extra"), RUNS, ids=lambda x: x if isinstance(x, str) else "-".join(x) or "default")
def test_nan_log_probs_skip_the_update_then_stop_after_max_nan_steps(tmp_path, monkeypatch, signal, method, extra):
    nan_logprobs_at(monkeypatch, {1, 3, 4})
    config = load_config(None, QUICK + [f"method={method}", "train.steps=5", "train.max_nan_steps=2"] + extra)
    run_dir = tmp_path / "run"
    with pytest.raises(TrainingDiverged) as info:
        train(config, run_dir, show_progress=False)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("step 4: the update was skipped 2 steps in a row (train.max_nan_steps)")
    assert f"The last checkpoint, {run_dir / 'checkpoints' / 'step_000003'}, is intact" in message
    records = step_records(run_dir)
    assert [r["step"] for r in records] == [1, 2, 3]  # step 1 skipped, step 2 trained, steps 3 and 4 skipped: stop
    assert [r["optim/skipped"] for r in records] == [1.0, 0.0, 1.0]
    per_step = records[0]["optim/skipped_total"]  # optimiser steps per rollout batch
    assert [r["optim/skipped_total"] for r in records] == [per_step, per_step, 2 * per_step]
    assert all(torch.isfinite(torch.tensor(r["loss/policy"])) for r in records if "loss/policy" in r)
    start, _ = load_model(config.model, torch.device("cpu"))
    initial = dict(start.named_parameters())
    first, second, third = (weights(run_dir, step) for step in (1, 2, 3))
    assert all(torch.equal(first[n], initial[n]) for n in first)  # a skipped update changes no weight
    assert records[1]["grad_norm"] == 0 or any(not torch.equal(second[n], first[n]) for n in first)  # step 2 trained
    assert all(torch.equal(third[n], second[n]) and torch.isfinite(third[n]).all() for n in third)


def test_non_finite_loss_skips_steps_then_stops(tmp_path, monkeypatch):
    def nan_loss(self, logp, batch, **denominators):
        return LossOutput(logp.sum() * float("nan"), {})

    monkeypatch.setattr(Method, "policy_loss", nan_loss)
    run_dir = tmp_path / "run"
    with pytest.raises(TrainingDiverged, match=r"^step 2: the update was skipped 2 steps in a row"):
        train(load_config(None, QUICK + ["train.max_nan_steps=2", "train.steps=5"]), run_dir, show_progress=False)
    assert [r["optim/skipped"] for r in step_records(run_dir)] == [1.0]  # step 2's skip stopped the run
    assert (run_dir / "checkpoints" / "step_000001").exists()


def test_gradient_norm_over_the_bound_skips_the_update(tmp_path, signal):
    config = load_config(None, QUICK + ["train.steps=3", "train.max_nan_steps=2", "train.max_grad_norm=1e-6"])
    with pytest.raises(TrainingDiverged, match=r"^step 2: .*a gradient norm above train.max_grad_norm"):
        train(config, tmp_path / "run", show_progress=False)
    [record] = step_records(tmp_path / "run")
    assert record["optim/skipped"] == 1.0 and record["grad_norm"] > 1e-6


def test_one_bad_step_among_good_ones_does_not_stop_the_run(tmp_path, monkeypatch):
    nan_logprobs_at(monkeypatch, {2})
    config = load_config(None, QUICK + ["method=gspo", "optim.minibatches=3", "train.steps=3", "train.max_nan_steps=2"])
    summary = train(config, tmp_path / "run", show_progress=False)
    assert summary["steps"] == 3 and summary["skipped_steps"] == 3  # step 2's three optimiser steps
    assert [r["optim/skipped"] for r in step_records(tmp_path / "run")] == [0.0, 1.0, 0.0]
