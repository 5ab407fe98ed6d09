"""The spread of a policy-gradient estimate (`credo.gradient_variance`, `credo gradient-variance`): the statistics
against loop references and known distributions, and the draws on the tiny testbed model: reproducible, each a
fresh batch of the same prompts, and independent of how the method cuts a batch into mini-batches."""

from __future__ import annotations

import json
import math

import pytest
import torch
from tiny import TINY

from credo.config import load_config
from credo.gradient_variance import gradient_draws, gram_matrix, paired_ratio, spread


def test_spread_matches_loop_references():
    generator = torch.Generator().manual_seed(0)
    grads = torch.randn(6, 40, generator=generator, dtype=torch.float64) + 0.5
    out = spread(gram_matrix(grads))
    mean = [sum(g[d] for g in grads) / 6 for d in range(40)]
    variance = sum(sum((g[d] - mean[d]) ** 2 for d in range(40)) for g in grads) / 5
    cosines = [float(grads[r] @ grads[s] / (grads[r].norm() * grads[s].norm())) for r in range(6) for s in range(6) if r != s]
    assert out["total_variance"] == pytest.approx(float(variance))
    assert out["signal"] == pytest.approx(sum(m * m for m in mean) - variance / 6)
    assert out["relative_variance"] == pytest.approx(out["total_variance"] / out["signal"])
    assert out["mean_cosine"] == pytest.approx(sum(cosines) / len(cosines))
    ratios = [spread(gram_matrix(torch.cat([grads[:i], grads[i + 1:]])))["relative_variance"] for i in range(6)]
    jackknife = math.sqrt(5 / 6 * sum((r - sum(ratios) / 6) ** 2 for r in ratios))
    assert out["relative_variance_se"] == pytest.approx(jackknife)


def test_relative_variance_estimates_the_noise_to_signal_ratio():
    """g = mu + sigma * noise in D dimensions: V = D sigma^2, S = ||mu||^2, so V / S = D sigma^2 / ||mu||^2; the
    signal is unbiased (a zero-mean estimate has S about 0, where ||mean||^2 alone would be V / R)."""
    generator = torch.Generator().manual_seed(1)
    mu = torch.full((200,), 0.1, dtype=torch.float64)  # ||mu||^2 = 2
    ratios, signals = [], []
    for _ in range(200):
        noise = torch.randn(8, 200, generator=generator, dtype=torch.float64)
        ratios.append(spread(gram_matrix(mu + 0.1 * noise))["relative_variance"])
        signals.append(spread(gram_matrix(0.1 * noise))["signal"])
    assert sum(ratios) / len(ratios) == pytest.approx(200 * 0.01 / 2, rel=0.1)
    # the jackknife's error matches the estimate's spread over repeats
    standard_errors = [spread(gram_matrix(mu + 0.1 * torch.randn(8, 200, generator=generator, dtype=torch.float64)))[
                           "relative_variance_se"] for _ in range(200)]
    spread_of_ratios = math.sqrt(sum((r - sum(ratios) / 200) ** 2 for r in ratios) / 199)
    assert sum(standard_errors) / 200 == pytest.approx(spread_of_ratios, rel=0.35)
    assert abs(sum(signals) / len(signals)) < 0.01 < 200 * 0.01 / 8  # unbiased, unlike ||mean||^2 (V/R = 0.25)
    assert spread(gram_matrix(torch.zeros(3, 5) + torch.tensor([1.0, 0, 0, 0, 0])))["mean_cosine"] == pytest.approx(1.0)


def test_a_single_draw_has_no_spread():
    with pytest.raises(ValueError, match="at least 2 draws"):
        spread(gram_matrix(torch.ones(1, 3)))


def test_a_paired_ratio_cancels_the_shared_noise():
    """Two estimators that share their draws' noise, one with 1.1x the noise: the ratio of their relative variances
    is near 1.21 on every subset of draws, so its paired jackknife error is small; unpaired draws keep theirs."""
    generator = torch.Generator().manual_seed(2)
    mu = torch.full((300,), 0.1, dtype=torch.float64)
    noise = torch.randn(10, 300, generator=generator, dtype=torch.float64)
    ours, reference = gram_matrix(mu + 0.11 * noise), gram_matrix(mu + 0.1 * noise)
    ratio, se = paired_ratio(ours, reference)
    own = spread(ours)
    expected = own["relative_variance"] / spread(reference)["relative_variance"]
    assert ratio == pytest.approx(expected) and ratio == pytest.approx(1.21, abs=0.02)
    def relative_variance_without(i, grads):
        return spread(gram_matrix(torch.cat([grads[:i], grads[i + 1:]])))["relative_variance"]

    leave_one_out = [relative_variance_without(i, mu + 0.11 * noise) / relative_variance_without(i, mu + 0.1 * noise)
                     for i in range(10)]
    mean = sum(leave_one_out) / 10
    assert se == pytest.approx(math.sqrt(9 / 10 * sum((r - mean) ** 2 for r in leave_one_out)), abs=1e-12)
    independent = gram_matrix(mu + 0.11 * torch.randn(10, 300, generator=generator, dtype=torch.float64))
    assert paired_ratio(independent, reference)[1] > 5 * se  # unpaired draws keep their noise
    with pytest.raises(ValueError, match="as many draws each"):
        paired_ratio(ours[:5, :5], reference)


@pytest.fixture
def odd_length_reward(monkeypatch):
    """The tiny model never answers right: reward odd-length responses so that the groups carry signal."""
    from credo.tasks import Verdict
    from credo.tasks.arith import ArithTask

    monkeypatch.setattr(ArithTask, "verify", lambda self, p, r: Verdict(float(len(r) % 2), bool(len(r) % 2)))


def test_draws_are_reproducible_fresh_and_blind_to_mini_batches(odd_length_reward):
    config = load_config(None, TINY + ["rollout.group_size=4"])
    grads, extra = gradient_draws(config, 3)
    again, _ = gradient_draws(config, 3)
    assert grads.shape[0] == 3 and torch.equal(grads, again)
    assert not torch.allclose(grads[0], grads[1]) and float(grads.norm(dim=1).min()) > 0
    assert extra["tokens_per_draw"] > 0
    # four mini-batches of an off-policy trainer: the same batches, the whole batch's gradient at ratio 1
    split, _ = gradient_draws(load_config(None, TINY + ["rollout.group_size=4", "optim.minibatches=4"]), 3)
    assert torch.allclose(split, grads, atol=1e-6, rtol=1e-4)


def test_the_command_compares_methods(tmp_path, odd_length_reward):
    from typer.testing import CliRunner

    from credo.cli import app

    grpo, dr_grpo = tmp_path / "grpo.yaml", tmp_path / "dr_grpo.yaml"
    grpo.write_text("method: grpo\n")
    dr_grpo.write_text("method: dr_grpo\n")
    out = tmp_path / "spread.json"
    settings = [item for key in TINY + ["rollout.group_size=4"] for item in ("--set", key)]
    result = CliRunner().invoke(app, ["gradient-variance", str(grpo), str(dr_grpo), "--draws", "3", *settings,
                                      "--json", str(out)])
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())
    assert [row["method"] for row in rows.values()] == ["grpo", "dr_grpo"]
    assert all(row["draws"] == 3 and math.isfinite(row["total_variance"]) for row in rows.values())
    assert "relative variance" in result.output


def test_off_policy_draws_measure_a_later_mini_batch_at_the_moved_policy(odd_length_reward):
    """At ratio 1 S-trace's gradient is GRPO's; after an optimiser step on the first mini-batch its selection acts on
    the second, so the two part. With a vanishing learning rate nothing moves and they agree again: the difference
    is the moved policy's, and each draw starts from the restored weights (the draws are reproducible)."""
    settings = TINY + ["rollout.group_size=4", "optim.minibatches=4"]
    grpo, extra = gradient_draws(load_config(None, settings + ["method=grpo"]), 3, after_steps=1)
    s_trace, _ = gradient_draws(load_config(None, settings + ["method=s_trace"]), 3, after_steps=1)
    config = load_config(None, settings)
    trainable = sum(p.numel() for p in _policy_parameters(config))
    # AdamW's first step moves each weight by at most lr: every draw starts from the restored weights and moments
    assert extra["after_steps"] == 1 and 0 < extra["weights_moved"] <= config.optim.lr * math.sqrt(trainable)
    assert torch.equal(grpo, gradient_draws(load_config(None, settings + ["method=grpo"]), 3, after_steps=1)[0])
    assert not torch.allclose(s_trace, grpo, atol=1e-6, rtol=1e-4)
    whole, _ = gradient_draws(load_config(None, settings + ["method=grpo"]), 3)
    frozen = settings + ["optim.lr=1e-30"]  # below float32 resolution: nothing moves
    grpo_frozen, still = gradient_draws(load_config(None, frozen + ["method=grpo"]), 3, after_steps=1)
    s_trace_frozen, _ = gradient_draws(load_config(None, frozen + ["method=s_trace"]), 3, after_steps=1)
    assert still["weights_moved"] == 0
    assert not torch.allclose(grpo_frozen, whole, atol=1e-6, rtol=1e-4)  # the measured mini-batch, not the batch
    assert torch.allclose(s_trace_frozen, grpo_frozen, atol=1e-7, rtol=1e-5)


def test_restore_undoes_the_optimiser_steps(odd_length_reward, tmp_path):
    from credo.checkpoint import RunDirectory, TrainState
    from credo.gradient_variance import _restore, _training_state
    from credo.rollout.groups import ProblemStream
    from credo.train import behaviour_batch, optimiser_step, sample_rollout
    from credo.run_setup import build_trainer

    trainer = build_trainer(load_config(None, TINY + ["rollout.group_size=4", "optim.minibatches=2"]),
                            RunDirectory(tmp_path))
    batch, _ = behaviour_batch(trainer, sample_rollout(trainer, ProblemStream(trainer.task, 0)))
    batch, _ = trainer.method.credit(batch)
    start = _training_state(trainer)
    optimiser_step(trainer, batch, TrainState())
    after_one = [p.detach().clone() for p in trainer.model.parameters() if p.requires_grad]
    optimiser_step(trainer, batch, TrainState())
    _restore(trainer, start)
    trainable = [p for p in trainer.model.parameters() if p.requires_grad]
    assert all(torch.equal(p, p0) for p, p0 in zip(trainable, start["params"]))
    assert trainer.scheduler.last_epoch == start["scheduler"]["last_epoch"]
    optimiser_step(trainer, batch, TrainState())  # the optimiser's moments restored too: the same first step again
    assert all(torch.equal(p, p1) for p, p1 in zip(trainable, after_one))


def test_after_steps_needs_a_mini_batch_left(tmp_path):
    from typer.testing import CliRunner

    from credo.cli import app

    with pytest.raises(ValueError, match="optim.minibatches"):
        gradient_draws(load_config(None, TINY), 2, after_steps=1)
    config = tmp_path / "grpo.yaml"
    config.write_text("method: grpo\noptim: {minibatches: 2}\n")
    result = CliRunner().invoke(app, ["gradient-variance", str(config), "--after-steps", "2"])
    assert result.exit_code != 0 and "needs 0 < K < optim.minibatches (2)" in result.output


def _policy_parameters(config):
    from tempfile import TemporaryDirectory

    from credo.checkpoint import RunDirectory
    from credo.run_setup import build_trainer

    with TemporaryDirectory() as scratch:
        return [p for p in build_trainer(config, RunDirectory(scratch)).model.parameters() if p.requires_grad]
