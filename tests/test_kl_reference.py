"""`loss.kl_beta > 0` in `credo train`: the trainer's frozen reference policy fills `ref_logp`.

A full-weight policy gets a frozen copy of its starting weights; a LoRA policy none (its adapters are disabled
instead). `kl/ref` is 0 while the policy is the reference and grows once it moves; a resumed run rebuilds the
reference from `model.path` and trains on as if never stopped, and refuses a `model.path` that changed.
"""

from __future__ import annotations

import json

import pytest
import torch
from tiny import TINY

from credo.checkpoint import RunDirectory, TrainState
from credo.config import ModelConfig, load_config
from credo.models import load_model
from credo.policy import policy_logprobs
from credo.run_setup import REFERENCE_FILE, build_trainer
from credo.train import behaviour_batch, sample_rollout, train, update

KL = ["loss.kl_beta=0.1", "optim.lr=1e-2", "rollout.group_size=4"]
TIMING = ("time/", "tokens_per_s", "wall_s")


@pytest.fixture(autouse=True)
def odd_lengths_win(monkeypatch):
    """The tiny model never answers right; reward odd-length responses so that the groups carry signal."""
    from credo.tasks import Verdict
    from credo.tasks.arith import ArithTask

    monkeypatch.setattr(ArithTask, "verify", lambda self, p, r: Verdict(float(len(r) % 2), bool(len(r) % 2)))


def steps_of(run_dir) -> list[dict]:
    return [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "eval" not in r]


def test_a_kl_penalty_trains_against_a_frozen_copy_of_the_starting_policy(tmp_path):
    config = load_config(None, TINY + KL)
    trainer = build_trainer(config, RunDirectory(tmp_path / "probe"))
    assert trainer.on_policy and trainer.reference is not None  # the on-policy shortcut keeps the reference pass
    reference = trainer.reference.model
    assert reference is not trainer.model and not reference.training
    assert not any(p.requires_grad for p in reference.parameters())
    assert {(p.dtype, p.device) for p in reference.parameters()} == {(p.dtype, p.device) for p in trainer.model.parameters()}

    train(config, tmp_path / "run", show_progress=False)
    kl = [r["kl/ref"] for r in steps_of(tmp_path / "run")]
    assert len(kl) == 3 and kl[0] == pytest.approx(0.0, abs=1e-7)  # the first update starts at pi = pi_ref
    assert kl[1] > 1e-4 and kl[2] > 1e-4, kl
    assert json.loads((tmp_path / "run" / REFERENCE_FILE).read_text())["tensors"] == len(list(reference.parameters()))


def test_reference_log_probs_do_not_depend_on_the_micro_batches(tmp_path):
    whole = build_trainer(load_config(None, TINY + KL), RunDirectory(tmp_path / "a"))
    micro = build_trainer(load_config(None, TINY + KL + ["optim.micro_batch_size=1"]), RunDirectory(tmp_path / "b"))
    from credo.rollout.groups import ProblemStream

    rollout = sample_rollout(whole, ProblemStream(whole.task, seed=0))
    a, b = behaviour_batch(whole, rollout)[0], behaviour_batch(micro, rollout)[0]
    assert a.ref_logp is not None and (a.ref_logp[a.response_mask] < 0).all()
    assert (a.ref_logp[~a.response_mask] == 0).all()
    torch.testing.assert_close(a.ref_logp, b.ref_logp, rtol=1e-5, atol=1e-6)


def test_lora_reference_is_the_policy_with_its_adapters_disabled_not_a_copy(tmp_path):
    config = load_config(None, TINY + KL + ["model.lora={r: 4, alpha: 8}"])
    trainer = build_trainer(config, RunDirectory(tmp_path / "lora"))
    assert trainer.reference.model is trainer.model  # no copy: no second set of weights in memory
    base, _ = load_model(ModelConfig(**{**config.model.model_dump(), "lora": None}), torch.device("cpu"))
    frozen = trainer.reference.frozen_weights()
    assert len(frozen) == len(list(base.parameters()))  # the base weights only, no adapter
    from credo.rollout.groups import ProblemStream

    stream, kl = ProblemStream(trainer.task, seed=0), []
    for _ in range(3):
        batch, _ = trainer.method.credit(behaviour_batch(trainer, sample_rollout(trainer, stream))[0])
        kl.append(update(trainer, batch, TrainState())[0]["kl/ref"])
    assert kl[0] == pytest.approx(0.0, abs=1e-7) and kl[2] > 1e-5, kl  # the adapters moved the policy away

    inputs = (batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask)
    scoring = {"temperature": config.rollout.temperature, "chunk_tokens": config.train.logprob_chunk}
    ref = trainer.reference.logprobs(*inputs, **scoring)
    with torch.no_grad():
        want, _ = policy_logprobs(base, *inputs, **scoring)  # the starting model, loaded without LoRA
        policy, _ = policy_logprobs(trainer.model, *inputs, **scoring)  # adapters on again after the block
    mask = batch.response_mask
    torch.testing.assert_close(ref[mask], want[mask], rtol=1e-5, atol=1e-6)
    assert (policy[mask] - want[mask]).abs().max() > 1e-4


def test_a_resumed_kl_run_rebuilds_its_reference_and_trains_on_as_if_never_stopped(tmp_path):
    settings = TINY + KL + ["train.steps=4", "train.checkpoint_every=2", "eval.greedy=false", "eval.samples=0",
                            "eval.ks=[1]"]
    train(load_config(None, settings), tmp_path / "straight", show_progress=False)
    stopped = tmp_path / "stopped"
    train(load_config(None, settings + ["train.steps=2"]), stopped, show_progress=False)
    train(load_config(stopped / "config.yaml", ["train.steps=4"]), stopped, resume=True, show_progress=False)
    a, b = ([{k: v for k, v in r.items() if not k.startswith(TIMING)} for r in steps_of(d)]
            for d in (tmp_path / "straight", stopped))
    assert a == b and a[-1]["kl/ref"] > 1e-4

    fingerprint = json.loads((stopped / REFERENCE_FILE).read_text())
    (stopped / REFERENCE_FILE).write_text(json.dumps(fingerprint | {"sum": fingerprint["sum"] + 1.0}))
    with pytest.raises(ValueError, match=r"model.path = 'testbed' no longer holds the weights this run started from"):
        train(load_config(stopped / "config.yaml", ["train.steps=5"]), stopped, resume=True, show_progress=False)
