"""GRPO-lambda: positional weights, both applications against loops, and the identities of docs/methods.md sec. 2."""

from __future__ import annotations

import pytest
import torch
from batches import moved_logp, random_batch
from references import lambda_weights_loop, reference_loss

from credo.credit import GroupAdvantage
from credo.losses import LambdaLoss, PPOClipLoss, positional_weights


@pytest.mark.parametrize("style", ["recent", "early", "both"])
@pytest.mark.parametrize("decay", [0.0, 0.5, 0.9, 0.99, 1.0])
def test_positional_weights_match_loop(style, decay):
    lengths = torch.tensor([0, 1, 2, 7, 30, 30])
    got = positional_weights(lengths, 30, decay=decay, style=style, dtype=torch.float64)
    for b, n in enumerate(lengths.tolist()):
        want = lambda_weights_loop(n, decay, style, 1e-7) + [0.0] * (30 - n)
        torch.testing.assert_close(got[b], torch.tensor(want, dtype=torch.float64), rtol=1e-12, atol=0)


def test_weights_depend_on_own_length_only():
    # The fork used the padded width; ours must not let other rows (or padding) change a row's weights.
    narrow = positional_weights(torch.tensor([5]), 5, decay=0.9, style="recent")
    wide = positional_weights(torch.tensor([5, 40]), 40, decay=0.9, style="recent")
    assert torch.equal(narrow[0], wide[0, :5])


LAMBDA_CASES = [
    LambdaLoss(),
    LambdaLoss(style="recent", lam=0.9),
    LambdaLoss(style="recent", lam=0.9, lam_length=16),
    LambdaLoss(style="both", lam=0.8, lam_length=5, apply="weight"),
    LambdaLoss(style="early", lam=0.95, agg="token_mean"),
    LambdaLoss(apply="weight"),
    LambdaLoss(apply="weight", detach_weight=False, style="recent"),
    LambdaLoss(gamma=0.9, lam=0.9, dual_clip=3.0, log_ratio_clamp=5.0),
]


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("loss", LAMBDA_CASES, ids=repr)
@pytest.mark.parametrize("suffix_only", [False, True])
def test_lambda_loss_matches_loop_reference(seed, loss, suffix_only):
    batch = random_batch(seed, dtype=torch.float64)
    if suffix_only:  # a loss mask strictly inside the response: the trace runs over trained tokens only
        batch = batch.replace(loss_mask=batch.response_mask & (torch.arange(batch.width) >= 2))
    batch, _ = GroupAdvantage()(batch)
    logp = moved_logp(batch, seed, drift=0.05)
    out = loss(logp, batch)
    (grad,) = torch.autograd.grad(out.loss, logp)
    logp_ref = logp.detach().clone().requires_grad_()
    want = reference_loss("lambda", logp_ref, batch, loss)
    (grad_ref,) = torch.autograd.grad(want, logp_ref)
    torch.testing.assert_close(out.loss, want, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad, grad_ref, rtol=1e-9, atol=1e-12)
    assert not grad[~batch.loss_mask].any()  # no gradient leaves the loss mask


@pytest.mark.parametrize("seed", range(8))
def test_lambda_zero_recent_is_grpo_up_to_the_floor(seed):
    batch, _ = GroupAdvantage()(random_batch(seed, dtype=torch.float64))
    logp = moved_logp(batch, seed)
    lam_loss = LambdaLoss(lam=0.0, style="recent")
    got = lam_loss(logp, batch).loss
    grpo = PPOClipLoss()(logp, batch).loss
    torch.testing.assert_close(got, grpo, rtol=0, atol=1e-5)  # each earlier token weighs 1e-7
    exact = LambdaLoss(lam=0.0, style="recent", weight_floor=0.0)(logp, batch).loss
    torch.testing.assert_close(exact, grpo, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("style", ["recent", "early", "both"])
def test_on_policy_gradient_is_grpo_times_multiplier(seed, style):
    # With pi == pi_old, d/dlogp_k of mean_t exp(z_t - z_old_t) * A = A/n * (1 + (n-1-k) w_k).
    batch, _ = GroupAdvantage()(random_batch(seed, dtype=torch.float64))
    loss = LambdaLoss(lam=0.9, style=style)
    logp = batch.old_logp.clone().requires_grad_()
    (grad,) = torch.autograd.grad(loss(logp, batch).loss, logp)
    logp_grpo = batch.old_logp.clone().requires_grad_()
    (grad_grpo,) = torch.autograd.grad(PPOClipLoss()(logp_grpo, batch).loss, logp_grpo)
    for b, n in enumerate(batch.lengths.tolist()):
        w = lambda_weights_loop(n, 0.9, style, 1e-7)
        multiplier = torch.tensor([1 + (n - 1 - k) * w[k] for k in range(n)], dtype=torch.float64)
        torch.testing.assert_close(grad[b, :n], grad_grpo[b, :n] * multiplier, rtol=1e-12, atol=1e-14)


def test_negative_advantage_clamp():
    batch, _ = GroupAdvantage(min_advantage=-0.1)(random_batch(2, group_sizes=(8,)))
    assert batch.advantages.min() == pytest.approx(-0.1)
    assert batch.advantages.max() > 0.5
