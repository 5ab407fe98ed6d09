"""Chunked token log-probs and next-token statistics (entropies, sums of squared probabilities) against the
naive full-vocabulary softmax."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from credo.logprobs import STATISTICS, token_logprobs

F64 = torch.float64
TIGHT = dict(rtol=1e-10, atol=1e-10)


def naive_token_logprobs(hidden, weight, targets, *, temperature=1.0, bias=None):
    """The reference: full (..., V) logits, log_softmax, gather; the statistics via softmax."""
    logits = hidden @ weight.T
    if bias is not None:
        logits = logits + bias
    logp_all = torch.log_softmax(logits / temperature, dim=-1)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    stats = {"entropy": -(probs * logp_all).sum(-1), "sum_pi_squared": probs.square().sum(-1)}
    return logp, {name: value.detach() for name, value in stats.items()}


def assert_statistics_close(stats, ref, **tolerances):
    assert set(stats) == set(STATISTICS)
    for name in STATISTICS:
        torch.testing.assert_close(stats[name], ref[name], **tolerances)


def make_inputs(lead, hidden_size=6, vocab=13, *, seed=0, dtype=F64, bias=False, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    h = (torch.randn(*lead, hidden_size, generator=gen, dtype=F64) * scale).to(dtype).requires_grad_()
    w = (torch.randn(vocab, hidden_size, generator=gen, dtype=F64) * 0.7).to(dtype).requires_grad_()
    b = (torch.randn(vocab, generator=gen, dtype=F64) * 0.3).to(dtype).requires_grad_() if bias else None
    y = torch.randint(0, vocab, lead, generator=gen)
    g = torch.randn(*lead, generator=gen, dtype=F64)  # upstream gradient of logp, not all ones
    return h, w, b, y, g


def grads(logp, g, inputs):
    return torch.autograd.grad((logp.double() * g).sum(), inputs)


SHAPES = [(1,), (10,), (17,), (2, 5), (3, 7)]
TEMPERATURES = [1.0, 0.7, 1.3]


def chunk_sizes(n):
    return sorted({1, 3, 7, n, n + 5})


@pytest.mark.parametrize("temperature", TEMPERATURES)
@pytest.mark.parametrize("lead", SHAPES, ids=str)
def test_matches_naive_float64(lead, temperature):
    h, w, _, y, g = make_inputs(lead, seed=len(lead) * 100 + lead[-1])
    ref_logp, ref_stats = naive_token_logprobs(h, w, y, temperature=temperature)
    ref_gh, ref_gw = grads(ref_logp, g, (h, w))
    n = y.numel()
    for chunk in chunk_sizes(n):
        logp, stats = token_logprobs(h, w, y, temperature=temperature, chunk_tokens=chunk, statistics=STATISTICS)
        assert logp.shape == y.shape and all(v.shape == y.shape for v in stats.values())
        assert logp.dtype == F64 and all(v.dtype == F64 for v in stats.values())
        torch.testing.assert_close(logp, ref_logp, **TIGHT)
        assert_statistics_close(stats, ref_stats, **TIGHT)
        assert not any(v.requires_grad for v in stats.values())
        gh, gw = grads(logp, g, (h, w))
        torch.testing.assert_close(gh, ref_gh, **TIGHT)
        torch.testing.assert_close(gw, ref_gw, **TIGHT)
        for name in STATISTICS:  # each alone: the same value (the others' in-place steps are skipped)
            alone = token_logprobs(h, w, y, temperature=temperature, chunk_tokens=chunk, statistics=[name])[1]
            assert list(alone) == [name]
            torch.testing.assert_close(alone[name], ref_stats[name], **TIGHT)
        # without statistics: the same log-probs and gradients (the other forward branch)
        logp2, none = token_logprobs(h, w, y, temperature=temperature, chunk_tokens=chunk)
        assert none == {}
        torch.testing.assert_close(logp2, ref_logp, **TIGHT)
        gh2, gw2 = grads(logp2, g, (h, w))
        torch.testing.assert_close(gh2, ref_gh, **TIGHT)
        torch.testing.assert_close(gw2, ref_gw, **TIGHT)


@pytest.mark.parametrize("temperature", TEMPERATURES)
@pytest.mark.parametrize("chunk", [1, 4, 50])
def test_bias_matches_naive(chunk, temperature):
    h, w, b, y, g = make_inputs((3, 4), bias=True, seed=7)
    ref_logp, ref_stats = naive_token_logprobs(h, w, y, temperature=temperature, bias=b)
    logp, stats = token_logprobs(h, w, y, temperature=temperature, chunk_tokens=chunk, statistics=STATISTICS, bias=b)
    torch.testing.assert_close(logp, ref_logp, **TIGHT)
    assert_statistics_close(stats, ref_stats, **TIGHT)
    for got, ref in zip(grads(logp, g, (h, w, b)), grads(ref_logp, g, (h, w, b))):
        torch.testing.assert_close(got, ref, **TIGHT)


@settings(max_examples=25, deadline=None)
@given(
    lead=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    hidden_size=st.integers(1, 9),
    vocab=st.integers(1, 40),
    chunk=st.integers(1, 20),
    temperature=st.floats(0.3, 3.0),
    seed=st.integers(0, 2**16),
)
def test_random_shapes_match_naive(lead, hidden_size, vocab, chunk, temperature, seed):
    h, w, _, y, g = make_inputs(tuple(lead), hidden_size, vocab, seed=seed)
    ref_logp, ref_stats = naive_token_logprobs(h, w, y, temperature=temperature)
    logp, stats = token_logprobs(h, w, y, temperature=temperature, chunk_tokens=chunk, statistics=STATISTICS)
    torch.testing.assert_close(logp, ref_logp, **TIGHT)
    assert_statistics_close(stats, ref_stats, **TIGHT)
    for got, ref in zip(grads(logp, g, (h, w)), grads(ref_logp, g, (h, w))):
        torch.testing.assert_close(got, ref, **TIGHT)


@pytest.mark.parametrize("with_bias", [False, True])
def test_gradcheck(with_bias):
    h, w, b, y, _ = make_inputs((2, 3), hidden_size=4, vocab=7, bias=with_bias, seed=3)
    inputs = (h, w) + ((b,) if with_bias else ())

    def fn(*args):
        bias = args[2] if with_bias else None
        return token_logprobs(args[0], args[1], y, temperature=0.7, chunk_tokens=4, bias=bias)[0]

    assert torch.autograd.gradcheck(fn, inputs)


def test_bfloat16_inputs():
    h, w, _, y, g = make_inputs((4, 9), hidden_size=32, vocab=300, seed=11, dtype=torch.bfloat16)
    logp, stats = token_logprobs(h, w, y, temperature=0.8, chunk_tokens=5, statistics=STATISTICS)
    assert logp.dtype == torch.float32 and all(v.dtype == torch.float32 for v in stats.values())
    # the same bf16 values in float32, naively: only float32 summation order differs
    h32, w32 = h.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    ref_logp, ref_stats = naive_token_logprobs(h32, w32, y, temperature=0.8)
    torch.testing.assert_close(logp, ref_logp, rtol=1e-4, atol=1e-4)
    assert_statistics_close(stats, ref_stats, rtol=1e-4, atol=1e-4)
    gh, gw = grads(logp, g, (h, w))
    assert gh.dtype == torch.bfloat16 and gw.dtype == torch.bfloat16
    ref_gh, ref_gw = grads(ref_logp, g, (h32, w32))
    # gradients accumulated in float32, rounded once to bf16 (8 mantissa bits: relative error <= 2^-8)
    torch.testing.assert_close(gh.float(), ref_gh.float(), rtol=8e-3, atol=1e-3)
    torch.testing.assert_close(gw.float(), ref_gw.float(), rtol=8e-3, atol=1e-3)


def test_autocast_keeps_float32_logits():
    h, w, _, y, _ = make_inputs((20,), hidden_size=16, vocab=100, seed=5, dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logp, _ = token_logprobs(h, w, y, chunk_tokens=6)
    ref, _ = naive_token_logprobs(h.double(), w.double(), y)
    assert logp.dtype == torch.float32
    torch.testing.assert_close(logp.double(), ref, rtol=1e-5, atol=1e-5)  # bf16 logits would be off by ~1e-2


def test_large_logits_are_stable():
    h, w, _, y, g = make_inputs((12,), seed=9, scale=300.0)  # logits in the hundreds
    ref_logp, ref_stats = naive_token_logprobs(h, w, y, temperature=0.5)
    logp, stats = token_logprobs(h, w, y, temperature=0.5, chunk_tokens=5, statistics=STATISTICS)
    assert torch.isfinite(logp).all() and all(torch.isfinite(v).all() for v in stats.values())
    torch.testing.assert_close(logp, ref_logp, **TIGHT)
    assert_statistics_close(stats, ref_stats, **TIGHT)
    for got, ref in zip(grads(logp, g, (h, w)), grads(ref_logp, g, (h, w))):
        torch.testing.assert_close(got, ref, **TIGHT)


def test_frozen_head_and_no_grad():
    h, w, _, y, g = make_inputs((2, 6), seed=2)
    w = w.detach()  # frozen LM head: only hidden gets a gradient
    logp, _ = token_logprobs(h, w, y, chunk_tokens=4)
    (gh,) = grads(logp, g, (h,))
    ref_logp, _ = naive_token_logprobs(h, w, y)
    torch.testing.assert_close(gh, grads(ref_logp, g, (h,))[0], **TIGHT)
    with torch.no_grad():
        logp, stats = token_logprobs(h, w, y, statistics=STATISTICS)
    assert not logp.requires_grad and not any(v.requires_grad for v in stats.values())


def test_tied_embedding_gradient_accumulates():
    """A tied head: weight is also the input embedding; its gradient sums both uses."""
    gen = torch.Generator().manual_seed(4)
    w = torch.randn(11, 5, generator=gen, dtype=F64, requires_grad=True)
    mix = torch.randn(5, 5, generator=gen, dtype=F64)
    ids = torch.randint(0, 11, (2, 6), generator=gen)

    def run(fn):
        hidden = torch.tanh(w[ids[:, :-1]] @ mix)
        logp = fn(hidden, w, ids[:, 1:])[0]
        return torch.autograd.grad(logp.sum(), w)[0]

    got = run(lambda h, w_, y: token_logprobs(h, w_, y, chunk_tokens=3))
    torch.testing.assert_close(got, run(naive_token_logprobs), **TIGHT)


def test_empty_batch():
    h, w, _, _, _ = make_inputs((3,), seed=1)
    h0 = h.detach()[:0].requires_grad_()
    y0 = torch.zeros(0, dtype=torch.long)
    logp, stats = token_logprobs(h0, w, y0, statistics=STATISTICS)
    assert logp.shape == (0,) and all(v.shape == (0,) for v in stats.values())
    gh, gw = torch.autograd.grad(logp.sum(), (h0, w))
    assert gh.shape == (0, 6) and torch.equal(gw, torch.zeros_like(w))


def test_never_materialises_all_logits():
    """No op, forward or backward, outputs more than one chunk of logits (N * V would be 8x larger)."""
    dispatch = pytest.importorskip("torch.utils._python_dispatch")

    class LargestOutput(dispatch.TorchDispatchMode):
        largest = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    LargestOutput.largest = max(LargestOutput.largest, t.numel())
            return out

    n, chunk, vocab = 64, 8, 200
    h, w, _, y, g = make_inputs((n,), hidden_size=4, vocab=vocab, seed=0, dtype=torch.float32)
    with LargestOutput():
        logp, _ = token_logprobs(h, w, y, chunk_tokens=chunk, statistics=STATISTICS)
        (logp * g.float()).sum().backward()
    assert h.grad is not None and w.grad is not None
    assert LargestOutput.largest == chunk * vocab  # one chunk of logits: the largest tensor made


@pytest.mark.parametrize(
    "kwargs,error",
    [
        (dict(chunk_tokens=0), ValueError),
        (dict(chunk_tokens=2.0), ValueError),
        (dict(temperature=0.0), ValueError),
        (dict(temperature=float("nan")), ValueError),
        (dict(bias=torch.zeros(5, dtype=F64)), ValueError),
        (dict(statistics=("variance",)), ValueError),
        (dict(statistics="entropy"), ValueError),
    ],
)
def test_rejects_bad_arguments(kwargs, error):
    h, w, _, y, _ = make_inputs((2, 3), seed=0)
    with pytest.raises(error):
        token_logprobs(h, w, y, **kwargs)


def test_rejects_bad_shapes():
    h, w, _, y, _ = make_inputs((2, 3), seed=0)
    with pytest.raises(ValueError):
        token_logprobs(h, w[:, :4], y)  # hidden size mismatch
    with pytest.raises(ValueError):
        token_logprobs(h, w, y[:, :2])  # targets not hidden's leading shape
    with pytest.raises(TypeError):
        token_logprobs(h, w, y.double())  # float targets
