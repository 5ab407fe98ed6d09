"""P-trace, S-trace and GSPO: the scan, the trace, the selection, and the identities of docs/methods.md sec. 3."""

from __future__ import annotations

import pytest
import torch
from batches import moved_logp, random_batch
from hypothesis import given, settings
from hypothesis import strategies as st
from references import decayed_sum_loop, lower_quantile, reference_loss

from credo.credit import EntropySelection, GroupAdvantage, entropy_selection
from credo.losses import PPOClipLoss, TraceLoss, trace_history
from credo.methods import get_method
from credo.scan import decayed_cumsum


@settings(max_examples=60, deadline=None)
@given(
    lam=st.one_of(st.sampled_from([0.0, 1.0, 0.5]), st.floats(0.0, 1.0)),
    rows=st.integers(1, 3),
    width=st.integers(1, 300),
    seed=st.integers(0, 2**16),
)
def test_decayed_cumsum_matches_recurrence(lam, rows, width, seed):
    x = torch.randn(rows, width, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    torch.testing.assert_close(decayed_cumsum(x, lam, chunk=8), decayed_sum_loop(x, lam), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("width", [4095, 4096, 4097, 9000])
def test_decayed_cumsum_three_levels_no_overflow(width):
    # 64-token chunks: 4097+ tokens need a third level. lam^-k cumsums would overflow here.
    x = torch.randn(2, width, dtype=torch.float64, generator=torch.Generator().manual_seed(width))
    got = decayed_cumsum(x, 0.99)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, decayed_sum_loop(x, 0.99), rtol=1e-9, atol=1e-9)


def trace_history_loop(d, m, lam, normalize):
    """Z_t = (d_t + sum_{k<t} lam^(t-k) m_k d_k) / (1 + sum_{k<t} lam^(t-k) m_k); history = Z_t - d_t."""
    B, T = d.shape
    out = torch.zeros_like(d)
    for b in range(B):
        for t in range(T):
            num, den = float(d[b, t]), 1.0
            for k in range(t):
                if m[b, k]:
                    num += lam ** (t - k) * float(d[b, k])
                    den += lam ** (t - k)
            out[b, t] = (num / den if normalize else num) - float(d[b, t])
    return out


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("lam", [0.0, 0.5, 0.95, 1.0])
@pytest.mark.parametrize("normalize", [True, False])
def test_trace_history_matches_loop(seed, lam, normalize):
    gen = torch.Generator().manual_seed(seed)
    d = torch.randn(4, 70, dtype=torch.float64, generator=gen)  # 70 > one 64-token chunk
    m = torch.rand(4, 70, generator=gen) < 0.3
    got = trace_history(d, m, decay=lam, normalize=normalize)
    torch.testing.assert_close(got, trace_history_loop(d, m, lam, normalize), rtol=1e-9, atol=1e-9)


TRACE_CASES = [
    TraceLoss(decay=0.95),
    TraceLoss(decay=0.95, clip="combined", trace_norm="trace"),
    TraceLoss(decay=0.9, normalize=False, clip_high=0.28),
    TraceLoss(decay=0.99, clip="current"),
    TraceLoss(decay=0.99, clip="combined", history_cap=1.5),
    TraceLoss(decay=0.8, history_cap=1.2, trace_norm="trace"),
    TraceLoss(decay=0.5, agg="token_mean", dual_clip=3.0),
]


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("loss", TRACE_CASES, ids=repr)
@pytest.mark.parametrize("selective", [False, True])
def test_trace_loss_matches_loop_reference(seed, loss, selective):
    batch = random_batch(seed, dtype=torch.float64)
    estimator = EntropySelection(keep_frac=0.3) if selective else GroupAdvantage()
    batch, _ = estimator(batch)
    logp = moved_logp(batch, seed)
    out = loss(logp, batch)
    (grad,) = torch.autograd.grad(out.loss, logp)
    logp_ref = logp.detach().clone().requires_grad_()
    want = reference_loss("trace", logp_ref, batch, loss, trace_mask=batch.trace_mask)
    (grad_ref,) = torch.autograd.grad(want, logp_ref)
    torch.testing.assert_close(out.loss, want, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad, grad_ref, rtol=1e-9, atol=1e-12)


def loss_and_grad(loss, logp, batch):
    logp = logp.detach().clone().requires_grad_()
    out = loss(logp, batch)
    return out.loss, torch.autograd.grad(out.loss, logp)[0]


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("method", ["p_trace", "s_trace"])
def test_lambda_zero_is_grpo(seed, normalize, method):
    m = get_method(method, loss={"decay": 0.0, "normalize": normalize})
    batch, _ = m.credit(random_batch(seed, dtype=torch.float64))
    logp = moved_logp(batch, seed)
    grpo = PPOClipLoss(clip_low=m.loss.clip_low, clip_high=m.loss.clip_high)
    value, grad = loss_and_grad(m.loss, logp, batch)
    value_ref, grad_ref = loss_and_grad(grpo, logp, batch)
    torch.testing.assert_close(value, value_ref, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(grad, grad_ref, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("method", ["p_trace", "s_trace", "gspo"])
@pytest.mark.parametrize("lam", [0.5, 0.95, 1.0])
def test_on_policy_minibatch_is_grpo(seed, method, lam):
    # With pi == pi_old every ratio is 1: value -A averaged, gradient -A/n per token, as for GRPO.
    m = get_method(method) if method == "gspo" else get_method(method, loss={"decay": lam})
    batch, _ = m.credit(random_batch(seed, dtype=torch.float64))
    value, grad = loss_and_grad(m.loss, batch.old_logp, batch)
    value_ref, grad_ref = loss_and_grad(PPOClipLoss(), batch.old_logp, batch)
    torch.testing.assert_close(value, value_ref, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(grad, grad_ref, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("seed", range(10))
def test_uniform_noncausal_normalised_kernel_is_gspo(seed):
    # GSPO (arXiv 2507.18071): s_i = exp(mean_t d_{i,t}); token form sg(s_i) * pi_t / sg(pi_t), clip 3e-4/4e-4.
    batch, _ = GroupAdvantage()(random_batch(seed, dtype=torch.float64, group_sizes=(6, 5, 7)))
    logp = moved_logp(batch, seed, drift=1e-3)  # small moves: some tokens inside the narrow clip range
    gspo = get_method("gspo").loss
    assert gspo.kernel == "uniform" and gspo.normalize
    value, grad = loss_and_grad(gspo, logp, batch)
    logp_ref = logp.detach().clone().requires_grad_()
    want = reference_loss("gspo", logp_ref, batch, gspo)
    torch.testing.assert_close(value, want, rtol=1e-10, atol=1e-14)
    torch.testing.assert_close(grad, torch.autograd.grad(want, logp_ref)[0], rtol=1e-10, atol=1e-14)
    assert grad.abs().sum() > 0


def test_traces_differ_from_grpo_off_policy():
    # The identities above must not hold trivially: off-policy, P-trace moves away from GRPO.
    batch, _ = GroupAdvantage()(random_batch(1, dtype=torch.float64, group_sizes=(8, 8)))
    logp = moved_logp(batch, 1)
    _, g_trace = loss_and_grad(TraceLoss(decay=0.95), logp, batch)
    _, g_grpo = loss_and_grad(PPOClipLoss(), logp, batch)
    assert (g_trace - g_grpo).abs().max() > 1e-3


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("keep_frac", [0.05, 0.2, 0.5, 1.0])
def test_entropy_selection_matches_lower_quantile(seed, keep_frac):
    batch = random_batch(seed)
    mask, threshold = entropy_selection(batch.entropy, batch.response_mask, keep_frac)
    values = [float(v) for v in batch.entropy[batch.response_mask]]
    q = lower_quantile(values, 1 - keep_frac)
    assert float(threshold) == q
    want = batch.response_mask & (batch.entropy >= q)
    assert torch.equal(mask, want)
    assert mask.sum() >= keep_frac * len(values) - 1e-9  # at least keep_frac of the tokens are kept


def test_s_trace_mask_grad_switch():
    batch = random_batch(4)
    traced, metrics = EntropySelection(keep_frac=0.2)(batch)
    assert torch.equal(traced.loss_mask, batch.loss_mask)  # default: the trace only
    assert 0.2 <= metrics["credit/trace_token_share"] <= 0.3
    both, _ = EntropySelection(keep_frac=0.2, mask_grad="trace_and_grad")(batch)
    assert torch.equal(both.loss_mask, batch.loss_mask & both.trace_mask)
    assert both.loss_mask.sum() < batch.loss_mask.sum()


def test_s_trace_needs_entropy():
    with pytest.raises(ValueError, match="entropy"):
        EntropySelection()(random_batch(0).replace(entropy=None))


def test_hand_computed_trace():
    # d = (0.2, -0.4, 0.1), lam = 0.5, all in the trace.
    # t=1: Z = (-0.4 + 0.5*0.2) / (1 + 0.5) = -0.2; history = -0.2 - (-0.4) = 0.2
    # t=2: Z = (0.1 + 0.5*(-0.4) + 0.25*0.2) / (1 + 0.5 + 0.25) = -0.05/1.75; history = Z - 0.1
    d = torch.tensor([[0.2, -0.4, 0.1]], dtype=torch.float64)
    got = trace_history(d, torch.ones(1, 3, dtype=torch.bool), decay=0.5, normalize=True)
    torch.testing.assert_close(got, torch.tensor([[0.0, 0.2, -0.05 / 1.75 - 0.1]], dtype=torch.float64))


@pytest.mark.slow
def test_long_rows_three_scan_levels_match_definition():
    # 4200 tokens: beyond 64 * 64, so the chunked scan recurses twice; the definition is O(T^2) Python.
    gen = torch.Generator().manual_seed(7)
    d = torch.randn(1, 4200, dtype=torch.float64, generator=gen) * 0.1
    m = torch.rand(1, 4200, generator=gen) < 0.2
    got = trace_history(d, m, decay=0.99, normalize=True)
    torch.testing.assert_close(got, trace_history_loop(d, m, 0.99, True), rtol=1e-8, atol=1e-10)
