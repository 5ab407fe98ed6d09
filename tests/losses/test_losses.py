"""Policy losses and aggregation against loop references and against verl's and TRL's formulas."""

from __future__ import annotations

import itertools

import pytest
import torch
from batches import moved_logp, random_batch
from references import aggregate_loop, reference_loss

from credo.credit import GroupAdvantage
from credo.losses import LambdaLoss, PPOClipLoss, ReinforceLoss, TraceLoss, aggregate

MODES = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm")


def credited(seed, dtype=torch.float64, **kwargs):
    batch = random_batch(seed, dtype=dtype, **kwargs)
    return GroupAdvantage()(batch)[0]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("mode,empty_rows,norm_len", [(m, e, n) for m in MODES for e in ("skip", "count") for n in (None, 64)])
def test_aggregate_matches_loop(seed, mode, empty_rows, norm_len):
    gen = torch.Generator().manual_seed(seed)
    loss = torch.randn(7, 11, generator=gen, dtype=torch.float64)
    mask = torch.rand(7, 11, generator=gen) < 0.6
    mask[seed % 7] = False  # an empty row
    got = aggregate(loss, mask, mode, norm_len=norm_len, empty_rows=empty_rows)
    want = aggregate_loop(loss.tolist(), mask, mode, norm_len, empty_rows)
    torch.testing.assert_close(got, torch.as_tensor(want, dtype=torch.float64))


def test_aggregate_hand_values():
    # rows: [1, 2, pad], [3, pad, pad], [pad, pad, pad]
    loss = torch.tensor([[1.0, 2.0, 9.0], [3.0, 9.0, 9.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=torch.bool)
    assert aggregate(loss, mask, "token_mean").item() == pytest.approx(6 / 3)
    assert aggregate(loss, mask, "seq_mean_token_mean").item() == pytest.approx((1.5 + 3) / 2)  # verl: 2 rows
    assert aggregate(loss, mask, "seq_mean_token_mean", empty_rows="count").item() == pytest.approx((1.5 + 3) / 3)
    assert aggregate(loss, mask, "seq_mean_token_sum_norm").item() == pytest.approx((3 / 3 + 3 / 3) / 2)
    assert aggregate(loss, mask, "seq_mean_token_sum_norm", norm_len=10, empty_rows="count").item() == pytest.approx(6 / 30)
    # micro-batch denominators from the whole mini-batch
    assert aggregate(loss, mask, "token_mean", num_tokens=12).item() == pytest.approx(6 / 12)
    assert aggregate(loss, mask, "seq_mean_token_mean", num_rows=9).item() == pytest.approx(4.5 / 9)


def test_aggregate_never_propagates_nan_from_padding():
    loss = torch.tensor([[1.0, float("nan")]])
    mask = torch.tensor([[True, False]])
    for mode in MODES:
        assert torch.isfinite(aggregate(loss, mask, mode))


LOSS_CASES = [
    ("clip", PPOClipLoss()),
    ("clip", PPOClipLoss(clip_high=0.28, agg="token_mean")),
    ("clip", PPOClipLoss(agg="seq_mean_token_sum_norm", norm_len=50, empty_rows="count")),
    ("clip", PPOClipLoss(dual_clip=3.0, kl_beta=0.04)),
    ("clip", PPOClipLoss(log_ratio_clamp=0.1)),
    ("reinforce", ReinforceLoss()),
    ("reinforce", ReinforceLoss(agg="token_mean", kl_beta=0.1)),
    ("gspo", TraceLoss(kernel="uniform", clip="combined", clip_low=3e-4, clip_high=4e-4)),
    ("gspo", TraceLoss(kernel="uniform", clip="combined", clip_low=0.05, clip_high=0.1, agg="token_mean")),
]


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("kind,loss", LOSS_CASES, ids=lambda x: repr(x)[:60])
def test_loss_value_and_gradient_match_loop_reference(seed, kind, loss):
    batch = credited(seed)
    logp = moved_logp(batch, seed)
    out = loss(logp, batch)
    (grad,) = torch.autograd.grad(out.loss, logp)
    logp_ref = logp.detach().clone().requires_grad_()
    want = reference_loss(kind, logp_ref, batch, loss)
    (grad_ref,) = torch.autograd.grad(want, logp_ref, allow_unused=True) if want.requires_grad else (torch.zeros_like(logp),)
    torch.testing.assert_close(out.loss, want.to(out.loss.dtype), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(grad, grad_ref if grad_ref is not None else torch.zeros_like(grad), rtol=1e-10, atol=1e-12)


def verl_vanilla(old_log_prob, log_prob, advantages, mask, clip_low, clip_high, clip_ratio_c):
    """verl 0.9.1 compute_policy_loss_vanilla with loss_agg_mode="token-mean", transcribed."""
    negative_approx_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_losses3 = -advantages * clip_ratio_c
    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    pg_losses = torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1)
    return (pg_losses * mask).sum() / mask.sum()


def trl_grpo(old, logp, advantages, mask, eps_low, eps_high, beta, ref, loss_type, max_len):
    """TRL 1.16 GRPOTrainer._compute_loss for token-level ratios, transcribed."""
    coef_1 = torch.exp(logp - old)
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages)
    if beta:
        per_token_loss = per_token_loss + beta * (torch.exp(ref - logp) - (ref - logp) - 1)
    m = mask.to(logp.dtype)
    if loss_type == "grpo":
        return ((per_token_loss * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return (per_token_loss * m).sum() / m.sum().clamp(min=1.0)
    return (per_token_loss * m).sum() / (per_token_loss.size(0) * max_len)  # dr_grpo


@pytest.mark.parametrize("seed", range(6))
def test_verl_dual_clip_token_mean_reproduced(seed):
    batch = credited(seed, group_sizes=(4, 4, 4))
    logp = moved_logp(batch, seed, drift=1.0)  # large moves, so the dual clip binds
    ours = PPOClipLoss(clip_low=0.2, clip_high=0.28, dual_clip=3.0, agg="token_mean")(logp, batch)
    theirs = verl_vanilla(batch.old_logp, logp, batch.advantages, batch.loss_mask, 0.2, 0.28, 3.0)
    torch.testing.assert_close(ours.loss, theirs, rtol=1e-12, atol=1e-12)
    assert ours.metrics["clip/dual_frac"] > 0  # the case exercises the dual clip


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    "loss_type,ours",
    [
        ("grpo", PPOClipLoss(log_ratio_clamp=None, empty_rows="count", kl_beta=0.04)),
        ("bnpo", PPOClipLoss(log_ratio_clamp=None, agg="token_mean", kl_beta=0.04)),
        ("dr_grpo", PPOClipLoss(log_ratio_clamp=None, agg="seq_mean_token_sum_norm", norm_len=64, empty_rows="count", kl_beta=0.04)),
    ],
)
def test_trl_loss_types_reproduced(seed, loss_type, ours):
    batch = credited(seed)
    logp = moved_logp(batch, seed)
    theirs = trl_grpo(batch.old_logp, logp, batch.advantages, batch.loss_mask, 0.2, 0.2, 0.04, batch.ref_logp, loss_type, 64)
    torch.testing.assert_close(ours(logp, batch).loss, theirs, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_clip_metrics_match_loop(seed):
    batch = credited(seed)
    logp = moved_logp(batch, seed, drift=0.5)
    metrics = PPOClipLoss(clip_low=0.2, clip_high=0.28)(logp, batch).metrics
    low = high = n = 0
    ratios = []
    for b, t in itertools.product(range(batch.size), range(batch.width)):
        if batch.loss_mask[b, t]:
            r = float(torch.exp(logp.detach()[b, t] - batch.old_logp[b, t]))
            a = float(batch.advantages[b, t])
            low += r < 0.8 and a < 0
            high += r > 1.28 and a > 0
            n += 1
            ratios.append(r)
    assert metrics["clip/low_frac"] == pytest.approx(low / n)
    assert metrics["clip/high_frac"] == pytest.approx(high / n)
    assert metrics["ratio/mean"] == pytest.approx(sum(ratios) / n)
    assert metrics["ratio/max"] == pytest.approx(max(ratios))
    assert metrics["loss/tokens"] == n


def test_k3_clamp_is_verls_low_var_kl_clamp():
    from credo.losses.base import kl_k3

    logp = torch.tensor([[-1.0, -1.0, -30.0, -1.0]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-1.0, -1.5, -1.0, -9.0]], dtype=torch.float64)
    free, clamped = kl_k3(logp, ref), kl_k3(logp, ref, clamp=10.0)
    diff = ref - logp.detach()
    torch.testing.assert_close(free.detach(), torch.exp(diff) - diff - 1)
    torch.testing.assert_close(clamped.detach(), free.detach().clamp(max=10.0))  # e^29 - 30: clamped at 10
    assert free[0, 0] == 0 and 0 < free[0, 1] < 10 and free[0, 3] < 10  # exp(-8) + 7: under the clamp
    (grad,) = torch.autograd.grad(clamped.sum(), logp)
    assert grad[0, 2] == 0 and grad[0, 1] != 0  # no gradient where the clamp binds
    with pytest.raises(ValueError, match="kl_clamp"):
        PPOClipLoss(kl_clamp=0.0)


def test_loss_errors_say_what_is_missing():
    batch = random_batch(0)
    logp = batch.old_logp.clone().requires_grad_()
    with pytest.raises(ValueError, match="credit estimator"):
        PPOClipLoss()(logp, batch)
    credited_batch = GroupAdvantage()(batch.replace(ref_logp=None))[0]
    with pytest.raises(ValueError, match="ref_logp"):
        PPOClipLoss(kl_beta=0.1)(logp, credited_batch)
    with pytest.raises(ValueError, match="shape"):
        PPOClipLoss()(logp[:, :-1], credited_batch)
    with pytest.raises(ValueError, match="agg"):
        PPOClipLoss(agg="token-mean")
    with pytest.raises(ValueError, match="dual_clip"):
        PPOClipLoss(dual_clip=1.0)
    with pytest.raises(ValueError, match="uniform"):
        TraceLoss(kernel="uniform", normalize=False)
    with pytest.raises(ValueError, match="style"):
        LambdaLoss(style="late")
