"""Per-token log-probs, and statistics of the next-token distribution, from a causal LM's final hidden states,
one chunk of tokens at a time.

`token_logprobs(hidden, weight, targets)` returns, for every position,

    logp_i = log softmax(z_i)[y_i],        z_i = (h_i @ W.T + b) / tau         (tau: the sampling temperature)

and, on request (`statistics`, names from `STATISTICS`), statistics of that tempered distribution
`p_i = softmax(z_i)`: its entropy `H_i = lse(z_i) - sum_v p_iv z_iv` and its sum of squares
`sum_v p_iv^2 = sum_v e^{2 z_iv} / (sum_v e^{z_iv})^2` (OTB's logit-gradient energy, arXiv 2602.07078). It
serves credo's trainer twice per step: the old log-probs and the statistics a method reads of a rollout batch
(no grad), and the current log-probs, with grad, in the policy update.

Why chunked: the logits of a whole batch are huge. B*T*V*4 bytes in float32: 64 rows * 1024 tokens * a
49,152-word vocabulary are 12.9 GB, and the naive `log_softmax(hidden @ W.T)` keeps two or three such
tensors alive (logits, log-softmax, and in backward its gradient). Here the flattened N tokens are cut into
chunks of `chunk_tokens`; only one chunk's float32 logits, (chunk_tokens, V), exist at a time (two while
statistics are computed, whichever and however many), in forward and in backward.

Forward, per chunk: the logits in float32 (hidden and weight upcast when they are bf16/fp16; float64 stays
float64), shifted by their row max in place; the target logit is gathered; `exp` and its row sum give the
log-normaliser. Saved for backward: the inputs `hidden`, `weight`, `bias`, `targets` (already held by the
autograd graph) and the per-token logsumexp `lse` (N,) in the compute dtype: no logits.

Backward recomputes each chunk's logits from the saved inputs, turns them into the softmax with the saved
`lse` (`p = exp(z - lse)`), and with `g` the incoming gradient of `logp`:

    dlogp_i/dh_i = (onehot(y_i) - p_i) @ W / tau,      dlogp_i/dW = (onehot(y_i) - p_i)^T h_i / tau,
    grad_logits  = g[:, None] * (onehot(y) - p) / tau                              (chunk, V)
    grad_hidden[chunk] = grad_logits @ W          grad_W += grad_logits.T @ hidden[chunk]
    grad_b += grad_logits.sum(0)

`grad_hidden` is written chunk by chunk; `grad_W` and `grad_b` are accumulated in the compute dtype (float32
for bf16 inputs) and cast to the input dtypes at the end. The cost is one extra logits matmul per step (the
recomputation), the price of never storing (N, V). The function is differentiable once (no double
backward); the statistics carry no gradient.

Autocast is switched off inside (so a surrounding `torch.autocast` cannot turn the float32 logits back into
bf16). Memory held besides one chunk: a float32 copy of `weight` when it is not float32 (V*H*4 bytes, 113 MB
for 49,152 x 576) and, in backward, the float32 `grad_W` accumulator of the same size.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Collection

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

__all__ = ["STATISTICS", "token_logprobs"]

STATISTICS = ("entropy", "sum_pi_squared")
"""The per-token statistics of the tempered next-token distribution `token_logprobs` computes on request, by
the names of the `RolloutBatch` fields they fill: the entropy (>= 0) and the sum of squared probabilities (in
[0, 1]), each clamped to its range against round-off."""


def _compute_dtype(*tensors: Tensor | None) -> torch.dtype:
    """float32, or float64 where an input is float64."""
    dtype = torch.float32
    for t in tensors:
        if t is not None:
            dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def _no_autocast(device: torch.device):
    if device.type in ("cpu", "cuda"):
        return torch.autocast(device_type=device.type, enabled=False)
    return contextlib.nullcontext()


def _chunk_logits(h: Tensor, w: Tensor, b: Tensor | None, temperature: float) -> Tensor:
    """(c, V) tempered logits of one chunk, in the dtype of `h` and `w` (the compute dtype)."""
    logits = torch.addmm(b, h, w.T) if b is not None else h @ w.T
    if temperature != 1.0:
        logits.div_(temperature)
    return logits


class _ChunkedTokenLogprob(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk_tokens, statistics):
        cdtype = _compute_dtype(hidden, weight, bias)
        H = hidden.shape[-1]
        h2 = hidden.reshape(-1, H)
        y = targets.reshape(-1).long()
        n = y.numel()
        logp = torch.empty(n, dtype=cdtype, device=hidden.device)
        lse = torch.empty(n, dtype=cdtype, device=hidden.device)
        stats = {name: torch.empty(n, dtype=cdtype, device=hidden.device) for name in statistics}
        with _no_autocast(hidden.device):
            w = weight.to(cdtype)
            b = bias.to(cdtype) if bias is not None else None
            for s in range(0, n, chunk_tokens):
                e = min(s + chunk_tokens, n)
                z = _chunk_logits(h2[s:e].to(cdtype), w, b, temperature)
                m = z.amax(dim=-1, keepdim=True)
                z.sub_(m)  # z' = z - max: every exp below is <= 1
                z_target = z.gather(1, y[s:e, None]).squeeze(1)
                if stats:
                    p = torch.exp(z)  # unnormalised softmax e^{z'}, a second (c, V) buffer
                    total = p.sum(dim=-1)  # S = sum_v e^{z'_v} >= 1
                    log_total = total.log()
                    if "entropy" in stats:
                        # H = -sum p log p with p = e^{z'} / S, log p = z' - log S: H = log S - sum e^{z'} z' / S
                        stats["entropy"][s:e] = (log_total - z.mul_(p).sum(dim=-1) / total).clamp_(min=0)
                    if "sum_pi_squared" in stats:
                        stats["sum_pi_squared"][s:e] = (p.square_().sum(dim=-1) / total.square()).clamp_(0, 1)
                    del p
                else:
                    log_total = z.exp_().sum(dim=-1).log()
                del z
                lse[s:e] = log_total + m.squeeze(1)
                logp[s:e] = z_target - log_total
        ctx.save_for_backward(hidden, weight, bias, targets, lse)
        ctx.temperature = temperature
        ctx.chunk_tokens = chunk_tokens
        values = tuple(stats[name].view(targets.shape) for name in statistics)
        ctx.mark_non_differentiable(*values)
        return (logp.view(targets.shape), *values)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_logp, *_grad_statistics):
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        if not (need_h or need_w or need_b):
            return None, None, None, None, None, None, None
        temperature, chunk_tokens = ctx.temperature, ctx.chunk_tokens
        cdtype = lse.dtype
        H = hidden.shape[-1]
        h2 = hidden.reshape(-1, H)
        y = targets.reshape(-1).long()
        n = y.numel()
        g = grad_logp.reshape(-1).to(cdtype) / temperature
        grad_h = torch.empty(h2.shape, dtype=hidden.dtype, device=hidden.device) if need_h else None
        with _no_autocast(hidden.device):
            w = weight.to(cdtype)
            b = bias.to(cdtype) if bias is not None else None
            grad_w = torch.zeros(weight.shape, dtype=cdtype, device=weight.device) if need_w else None
            grad_b = torch.zeros(bias.shape, dtype=cdtype, device=bias.device) if need_b else None
            for s in range(0, n, chunk_tokens):
                e = min(s + chunk_tokens, n)
                h = h2[s:e].to(cdtype)
                z = _chunk_logits(h, w, b, temperature)
                z.sub_(lse[s:e, None]).exp_()  # softmax p
                z.mul_(-g[s:e, None]).scatter_add_(1, y[s:e, None], g[s:e, None])  # g (onehot - p) / tau
                if need_h:
                    grad_h[s:e] = z @ w
                if need_w:
                    grad_w.addmm_(z.T, h)
                if need_b:
                    grad_b += z.sum(dim=0)
                del z
        if grad_h is not None:
            grad_h = grad_h.view(hidden.shape)
        if grad_w is not None:
            grad_w = grad_w.to(weight.dtype)
        if grad_b is not None:
            grad_b = grad_b.to(bias.dtype)
        return grad_h, grad_w, grad_b, None, None, None, None


def token_logprobs(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    *,
    temperature: float = 1.0,
    chunk_tokens: int = 1024,
    statistics: Collection[str] = (),
    bias: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """hidden (..., H) final hidden states at the positions that predict `targets` (...) ; weight (V, H) the
    LM head (tied or not); returns logp (...) = log softmax(hidden @ weight.T / temperature)[target] and a dict
    of the requested `statistics` (names from `STATISTICS`), each (...), of that tempered distribution (no grad).

    `bias` (V,), optional, is added to the logits before the temperature (with gradient). The outputs are
    float32 (float64 when an input is float64), whatever the input dtypes; gradients come back in the
    dtypes of `hidden`, `weight` and `bias`. At most `chunk_tokens` tokens' logits exist at once (two such
    buffers while statistics are computed), in forward and in backward. Targets must lie in [0, V): pad
    positions need a valid id (e.g. the pad token's) and a zero weight in the loss.
    """
    if not (hidden.is_floating_point() and weight.is_floating_point()):
        raise TypeError(f"hidden and weight must be floating point, got {hidden.dtype} and {weight.dtype}")
    if weight.dim() != 2:
        raise ValueError(f"weight must be (V, H), got shape {tuple(weight.shape)}")
    if hidden.dim() < 1 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(f"hidden (..., H) {tuple(hidden.shape)} does not match weight (V, H) {tuple(weight.shape)}")
    if targets.shape != hidden.shape[:-1]:
        raise ValueError(f"targets {tuple(targets.shape)} must have hidden's leading shape {tuple(hidden.shape[:-1])}")
    if targets.is_floating_point() or targets.is_complex() or targets.dtype == torch.bool:
        raise TypeError(f"targets must be integer token ids, got {targets.dtype}")
    if bias is not None and (bias.shape != weight.shape[:1] or not bias.is_floating_point()):
        raise ValueError(f"bias must be a floating ({weight.shape[0]},) tensor, got {bias.dtype} {tuple(bias.shape)}")
    temperature = float(temperature)
    if not (temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature = {temperature!r} must be a positive finite number")
    if isinstance(chunk_tokens, bool) or not isinstance(chunk_tokens, int) or chunk_tokens < 1:
        raise ValueError(f"chunk_tokens = {chunk_tokens!r} must be a positive int")
    if isinstance(statistics, str) or not set(statistics) <= set(STATISTICS):
        raise ValueError(f"statistics = {statistics!r} must be a collection of names from {STATISTICS}")
    names = tuple(name for name in STATISTICS if name in statistics)
    logp, *values = _ChunkedTokenLogprob.apply(hidden, weight, bias, targets, temperature, chunk_tokens, names)
    return logp, dict(zip(names, values))
