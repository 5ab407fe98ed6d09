"""Policy losses and their aggregation: pure torch over `(B, T)` tensors.

A loss is a frozen dataclass of switches, called as `loss(logp, batch) -> LossOutput`, where `logp`
(B, T) are the current policy's token log-probs (with gradient) and `batch` is a `RolloutBatch` whose
`advantages` a credit estimator has filled. The clipped losses share one surrogate and differ only in the
importance ratio they build (`importance`):

    l_t = w_t * max(-A_t rho_t, -A_t clip(rho_t, 1 - eps_low, 1 + eps_high))   [+ beta * KL_t]

- `ClipLoss`: `rho_t = pi/pi_old` per token (GRPO, Dr. GRPO, DAPO).
- `TraceLoss`: `rho_t = H_t pi/pi_old`, the token's ratio times a history factor `H_t` from an eligibility
  trace of the earlier log-ratios (P-trace, S-trace; the token's own ratio is clipped too), or the
  uniform mean of the row's ratios (GSPO); see `credo.credit.traces`.
- `LambdaLoss`: GRPO-lambda's traced log-prob ratio, or its per-token weight `w_t`.
- `ReinforceLoss`: `l_t = -A_t logp_t`, no ratio (the SRPO loss).

Aggregation over the loss mask (`agg`): `token_mean` (DAPO), `seq_mean_token_mean` (GRPO, GSPO,
SRPO), `seq_mean_token_sum_norm` (Dr. GRPO). Peers differ in details, all switches here:

| convention                         | verl 0.9          | TRL 1.16                    | credo default |
|------------------------------------|-------------------|-----------------------------|---------------|
| rows with no loss token (`empty_rows`) | counted ("count"; its trainer's divisor) | counted in B ("count") | "skip" |
| Dr. GRPO divisor (`norm_len`)      | padded width T    | max_completion_length       | None (= T)    |
| dual clip (`dual_clip`)            | c = 3             | none                        | None          |
| log-ratio clamp before exp         | +-20 (GSPO: <= 10) | none                       | 20            |
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from credo.batch import RolloutBatch
from credo.checks import check_choice, check_range
from credo.credit.lambda_returns import APPLICATIONS, STYLES, accumulate_trace, positional_weights
from credo.credit.traces import KERNELS, trace_history
from credo.registry import Registry

AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm")
EMPTY_ROWS = ("skip", "count")
CLIP_MODES = ("both", "combined", "current")
TRACE_NORMS = ("response", "trace")


@dataclass
class Importance:
    """What a clipped loss's `importance()` returns: the ratio to clip and what else shapes the surrogate."""

    log_ratio: Tensor
    """(B, T) log rho_t, the importance ratio the surrogate clips, with its gradient path."""
    weight: Tensor | None = None
    """(B, T) token weight multiplying the clipped loss (GRPO-lambda's weight application), or None."""
    own_log_ratio: Tensor | None = None
    """(B, T) the token's own log-ratio `d_t` when `log_ratio` also carries a history: `d_t` is then clipped
    as well, so no token's own ratio leaves the clip range with a gradient (TraceLoss clip="both")."""
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class LossOutput:
    loss: Tensor
    """Scalar loss to call `.backward()` on."""
    metrics: dict[str, float] = field(default_factory=dict)
    """What a user watches: clip fractions, ratio statistics, KL, trace weights (see README glossary)."""


def aggregate(
    token_loss: Tensor,
    mask: Tensor,
    mode: str,
    *,
    norm_len: int | None = None,
    empty_rows: str = "skip",
    num_tokens: float | None = None,
    num_rows: float | None = None,
) -> Tensor:
    """Reduce a (B, T) per-token loss over `mask` to a scalar.

    - `token_mean`: `sum_{b,t} m l / sum_{b,t} m`.
    - `seq_mean_token_mean`: `mean_b (sum_t m l / sum_t m)`.
    - `seq_mean_token_sum_norm`: `mean_b (sum_t m l) / L`, `L = norm_len` or the padded width `T`.

    Rows with no masked token contribute 0; `empty_rows="skip"` leaves them out of the row count (verl),
    `"count"` divides by all `B` rows (TRL). `num_tokens` / `num_rows` override the denominators, for a
    mini-batch split into micro-batches that must be normalised by the totals of the whole mini-batch.
    """
    masked = torch.where(mask, token_loss, torch.zeros((), dtype=token_loss.dtype, device=token_loss.device))
    if mode == "token_mean":
        denominator = num_tokens if num_tokens is not None else mask.sum().clamp(min=1)
        return masked.sum() / denominator
    row_tokens = mask.sum(dim=1)  # (B,)
    if mode == "seq_mean_token_mean":
        per_row = masked.sum(dim=1) / row_tokens.clamp(min=1)  # (B,)
    else:  # seq_mean_token_sum_norm
        per_row = masked.sum(dim=1) / (norm_len if norm_len is not None else mask.shape[1])
    if num_rows is None:
        num_rows = (row_tokens > 0).sum().clamp(min=1) if empty_rows == "skip" else mask.shape[0]
    return per_row.sum() / num_rows


def kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """(B, T) the k3 estimator of KL(pi || pi_ref): `exp(ref - logp) - (ref - logp) - 1` (>= 0)."""
    diff = ref_logp - logp
    return torch.exp(diff) - diff - 1.0


def _masked_quantile(values: Tensor, mask: Tensor, q: float) -> float:
    picked = values[mask]
    if picked.numel() == 0:
        return 0.0
    return float(picked.kthvalue(int(q * (picked.numel() - 1)) + 1).values)


def _masked_mean(values: Tensor, mask: Tensor) -> float:
    return float(torch.where(mask, values, 0.0).sum() / mask.sum().clamp(min=1))


LOSSES: Registry[type] = Registry("policy loss")


@dataclass(frozen=True, kw_only=True)
class PolicyLoss:
    """Switches shared by every loss: aggregation and the KL penalty to a reference policy."""

    agg: str = "seq_mean_token_mean"
    """token_mean | seq_mean_token_mean | seq_mean_token_sum_norm."""
    norm_len: int | None = None
    """Divisor of seq_mean_token_sum_norm: None = padded width T (verl); TRL uses max_completion_length."""
    empty_rows: str = "skip"
    """Rows with no loss token: "skip" = left out of the row mean (verl) | "count" = counted (TRL)."""
    kl_beta: float = 0.0
    """Weight of the k3 KL penalty to `batch.ref_logp` (GRPO's beta); 0 disables it."""

    def __post_init__(self) -> None:
        name = type(self).__name__
        check_choice(name, "agg", self.agg, AGGREGATIONS)
        check_choice(name, "empty_rows", self.empty_rows, EMPTY_ROWS)
        if self.norm_len is not None:
            check_range(name, "norm_len", self.norm_len, 1)
        check_range(name, "kl_beta", self.kl_beta, 0.0)

    def __call__(
        self, logp: Tensor, batch: RolloutBatch, *, num_tokens: float | None = None, num_rows: float | None = None
    ) -> LossOutput:
        """Loss of the current log-probs `logp` (B, T) on a credited batch."""
        if batch.advantages is None:
            raise ValueError("the batch has no advantages: run a credit estimator on it before the loss")
        if logp.shape != batch.old_logp.shape:
            raise ValueError(f"logp has shape {tuple(logp.shape)}, the batch is {tuple(batch.old_logp.shape)}")
        token_loss, metrics = self.token_loss(logp, batch)
        mask = batch.loss_mask
        if self.kl_beta > 0:
            if batch.ref_logp is None:
                raise ValueError(f"{type(self).__name__}.kl_beta > 0 needs RolloutBatch.ref_logp, but it is None")
            kl = kl_k3(logp, batch.ref_logp)
            token_loss = token_loss + self.kl_beta * kl
            metrics["kl/ref"] = _masked_mean(kl.detach(), mask)
        loss = aggregate(
            token_loss, mask, self.agg, norm_len=self.norm_len, empty_rows=self.empty_rows,
            num_tokens=num_tokens, num_rows=num_rows,
        )
        with torch.no_grad():
            old_kl = kl_k3(logp.detach(), batch.old_logp)
        metrics["kl/old"] = _masked_mean(old_kl, mask)
        metrics["loss/policy"] = float(loss.detach())
        metrics["loss/tokens"] = float(mask.sum())
        return LossOutput(loss, metrics)

    def token_loss(self, logp: Tensor, batch: RolloutBatch) -> tuple[Tensor, dict[str, float]]:
        """(B, T) per-token policy loss (before masking and aggregation) and its metrics."""
        raise NotImplementedError

    def normalisers(self, loss_mask: Tensor) -> dict[str, float]:
        """The denominators of this loss's aggregation over a whole mini-batch, to pass to each of its
        micro-batches (`num_tokens` / `num_rows` of `__call__`) so that their losses add up exactly."""
        if self.agg == "token_mean":
            return {"num_tokens": float(loss_mask.sum().clamp(min=1))}
        if self.empty_rows == "skip":
            return {"num_rows": float((loss_mask.sum(dim=1) > 0).sum().clamp(min=1))}
        return {"num_rows": float(loss_mask.shape[0])}


@LOSSES.register("reinforce")
@dataclass(frozen=True, kw_only=True)
class ReinforceLoss(PolicyLoss):
    """REINFORCE with a group baseline (the SRPO loss): `l_t = -A_t * logp_t`, no ratio, no clip.

    With `seq_mean_token_mean` this is `-(1/B) sum_i A_i mean_{t in loss_mask_i} logp_{i,t}`
    (docs/methods.md secs. 1 and 4). Its value depends on `logp`, its gradient is the policy gradient.
    """

    def token_loss(self, logp: Tensor, batch: RolloutBatch) -> tuple[Tensor, dict[str, float]]:
        return -batch.advantages * logp, {}


@dataclass(frozen=True, kw_only=True)
class ClippedLoss(PolicyLoss):
    """The PPO clipped surrogate over an importance ratio that subclasses build.

    `l_t = w_t * max(-A_t rho_t, -A_t clip(rho_t, 1 - clip_low, 1 + clip_high))`; with `dual_clip = c`,
    tokens with `A_t < 0` take `min(l_t, -c A_t)` (Ye et al. 2019, arXiv 1912.09729; verl's default c = 3).
    """

    clip_low: float = 0.2
    """eps_low: the ratio is clipped below at 1 - clip_low."""
    clip_high: float = 0.2
    """eps_high: clipped above at 1 + clip_high (DAPO's clip-higher: 0.28)."""
    dual_clip: float | None = None
    """Dual-clip bound c > 1 for negative advantages (verl: 3.0); None disables it."""
    log_ratio_clamp: float | None = 20.0
    """Clamp the log-ratio to +-this before exp (verl: 20); None: no clamp."""

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        check_range(name, "clip_low", self.clip_low, 0.0, 1.0, high_open=True)
        check_range(name, "clip_high", self.clip_high, 0.0)
        if self.dual_clip is not None:
            check_range(name, "dual_clip", self.dual_clip, 1.0, low_open=True)
        if self.log_ratio_clamp is not None:
            check_range(name, "log_ratio_clamp", self.log_ratio_clamp, 0.0, low_open=True)

    def importance(self, logp: Tensor, batch: RolloutBatch) -> Importance:
        """The importance ratio this loss clips (with its gradient path), and what else shapes the surrogate."""
        raise NotImplementedError

    def token_loss(self, logp: Tensor, batch: RolloutBatch) -> tuple[Tensor, dict[str, float]]:
        imp = self.importance(logp, batch)
        log_rho = imp.log_ratio
        if self.log_ratio_clamp is not None:
            log_rho = log_rho.clamp(-self.log_ratio_clamp, self.log_ratio_clamp)
        ratio = torch.exp(log_rho)
        adv = batch.advantages
        low, high = 1.0 - self.clip_low, 1.0 + self.clip_high
        loss = torch.maximum(-adv * ratio, -adv * ratio.clamp(low, high))
        mask = batch.loss_mask
        metrics = imp.metrics
        with torch.no_grad():
            r = ratio.detach()
            out_low, out_high = (r < low) & (adv < 0), (r > high) & (adv > 0)
            if imp.own_log_ratio is not None:
                own = torch.exp(imp.own_log_ratio.detach())
                out_low, out_high = out_low | ((own < low) & (adv < 0)), out_high | ((own > high) & (adv > 0))
            metrics["clip/low_frac"] = _masked_mean(out_low.float(), mask)
            metrics["clip/high_frac"] = _masked_mean(out_high.float(), mask)
            metrics["ratio/mean"] = _masked_mean(r, mask)
            metrics["ratio/max"] = float(r[mask].max()) if mask.any() else 1.0
        if imp.own_log_ratio is not None:
            # PPO's per-token trust region on the token's own ratio r_t = rho_t / H_t (H_t = sg(rho_t / r_t)):
            # -A H_t clip(r_t) is constant in logp_t once r_t leaves the range in A's direction, so the
            # maximum sends no gradient there, whatever the history.
            own = imp.own_log_ratio
            history = torch.exp((log_rho - own).detach())
            loss = torch.maximum(loss, -adv * history * torch.exp(own).clamp(low, high))
        if self.dual_clip is not None:
            bound = -adv * self.dual_clip
            with torch.no_grad():
                metrics["clip/dual_frac"] = _masked_mean(((loss > bound) & (adv < 0)).float(), mask)
            loss = torch.where(adv < 0, torch.minimum(loss, bound), loss)
        if imp.weight is not None:
            loss = loss * imp.weight
        return loss, metrics


@LOSSES.register("clip")
@dataclass(frozen=True, kw_only=True)
class ClipLoss(ClippedLoss):
    """GRPO (arXiv 2402.03300), Dr. GRPO (2503.20783), DAPO (2503.14476): per-token ratio `pi/pi_old`."""

    def importance(self, logp: Tensor, batch: RolloutBatch) -> Importance:
        return Importance(logp - batch.old_logp)


@LOSSES.register("trace")
@dataclass(frozen=True, kw_only=True)
class TraceLoss(ClippedLoss):
    """P-trace / S-trace (arXiv 2605.05965) and GSPO (arXiv 2507.18071): ratios with a trace of history.

    With `d_t = logp_t - old_logp_t` and the trace `Z_t` of `credo.credit.traces.trace_history` over the
    batch's `trace_mask` (None: the response), the history term is `h_t = Z_t - d_t` (no gradient) and
    the ratio `rho_t = exp(h_t) * pi/pi_old`. What is clipped (`clip`):

    - "both" (default, P-/S-trace): the history factor is bounded, `H_t = clamp(exp(h_t), 1/history_cap,
      history_cap)`, `rho_t = H_t r_t`, and both the combined ratio `rho_t` and the token's own ratio `r_t`
      are clipped: `l_t = max(-A rho_t, -A clip(rho_t), -A H_t clip(r_t))`. No token's own ratio leaves
      PPO's range with a gradient (the paper's *partial trust-region preservation*); the trace reweights
      each token by at most `history_cap` and extends the trust region over its decayed history.
    - "combined": only `rho_t = exp(Z_t)` is clipped, unbounded history (the earlier reading). With a
      normalised trace the token's own ratio weighs `1 / (1 + decayed count)` in `Z_t`, so it can move
      8-50x before the clip binds: no per-token trust region. GSPO is this mode with `kernel="uniform"`.
    - "current": only `r_t` is clipped and the loss is weighted by `H_t` (the combined ratio is free).

    `trace_norm` (with `normalize`): "response" divides the trace by the decayed count of all response
    tokens, so S-trace's unselected tokens count as zeros: its trace is P-trace's with the low-entropy
    terms removed, and its variance can only fall ("to further mitigate variance"). "trace" divides by the
    decayed count of the selected tokens only (the earlier reading: an average of fewer terms, which made
    S-trace's combined ratio 2.8x more variable than P-trace's on 16 x 40 toy batches). The two agree for P-trace.
    """

    lam: float = 0.95
    """Trace decay in [0, 1] (decay kernel): 0 is GRPO; try 0.9, 0.95, 0.99."""
    normalize: bool = True
    """Normalise the trace by its decayed token count (weighted geometric mean of the ratios)."""
    trace_norm: str = "response"
    """The count that normalises the trace: "response" (all response tokens) | "trace" (the trace mask's)."""
    kernel: str = "decay"
    """"decay": causal lam^(t-k) (P-/S-trace) | "uniform": non-causal mean over the row (GSPO)."""
    clip: str = "both"
    """"both": clip the combined and the token's own ratio, history bounded | "combined": the traced ratio
    only | "current": the token's own ratio only, weighted by the bounded history."""
    history_cap: float = 2.0
    """The history factor exp(h_t) is kept in [1/history_cap, history_cap] ("both", "current"); >= 1."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("TraceLoss", "lam", self.lam, 0.0, 1.0)
        check_choice("TraceLoss", "trace_norm", self.trace_norm, TRACE_NORMS)
        check_choice("TraceLoss", "kernel", self.kernel, KERNELS)
        check_choice("TraceLoss", "clip", self.clip, CLIP_MODES)
        check_range("TraceLoss", "history_cap", self.history_cap, 1.0)
        if self.kernel == "uniform" and not self.normalize:
            raise ValueError("TraceLoss.kernel = 'uniform' needs normalize = True (a uniform sum is unbounded)")

    def importance(self, logp: Tensor, batch: RolloutBatch) -> Importance:
        d = torch.where(batch.response_mask, logp - batch.old_logp, 0.0)
        trace_mask = batch.trace_mask if batch.trace_mask is not None else batch.response_mask
        count_mask = batch.response_mask if self.trace_norm == "response" else trace_mask
        history = trace_history(
            d, trace_mask, lam=self.lam, normalize=self.normalize, kernel=self.kernel, count_mask=count_mask
        )
        if self.clip != "combined":
            bound = math.log(self.history_cap)
            history = history.clamp(-bound, bound)
        history_weight = torch.exp(history)
        metrics = {
            "trace/weight_mean": _masked_mean(history_weight, batch.loss_mask),
            "trace/weight_p99": _masked_quantile(history_weight, batch.loss_mask, 0.99),
        }
        if self.clip == "current":
            return Importance(d, weight=history_weight, metrics=metrics)
        own = d if self.clip == "both" else None
        return Importance(history + d, own_log_ratio=own, metrics=metrics)


@LOSSES.register("grpo_lambda")
@dataclass(frozen=True, kw_only=True)
class LambdaLoss(ClippedLoss):
    """GRPO-lambda (arXiv 2510.00194): eligibility traces over token log-probs; see
    `credo.credit.lambda_returns`. The trace runs over the trained tokens (`loss_mask`), so no gradient
    reaches a token outside it.

    - `apply="trace"`: `log rho_t = d_t + sum_{k<t} w_k d_k` (`d = logp - old_logp`), clipped.
    - `apply="weight"`: GRPO's clipped loss times `e_t = u_t + sum_{k<t} w_k u_k`,
      `u_k = 1 + sigmoid(logp_k - 1)`, detached unless `detach_weight=False`.
    """

    lam: float = 0.99
    gamma: float = 1.0
    lam_length: int | None = None
    """None: one decay `gamma * lam` for every row. L: the decay is rescaled to each row's length,
    `(gamma * lam) ** (L / n)`, so that `lam` is the decay over L tokens (see `row_decay`)."""
    style: str = "both"
    """Positional weights: "recent" d^(n-1-k) | "early" d^k | "both" max(d^(n-k), d^k); d = gamma*lam."""
    apply: str = "trace"
    """"trace": traced log-prob ratio | "weight": per-token weight on GRPO's loss."""
    weight_floor: float = 1e-7
    detach_weight: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("LambdaLoss", "lam", self.lam, 0.0, 1.0)
        check_range("LambdaLoss", "gamma", self.gamma, 0.0, 1.0)
        check_choice("LambdaLoss", "style", self.style, STYLES)
        check_choice("LambdaLoss", "apply", self.apply, APPLICATIONS)
        check_range("LambdaLoss", "weight_floor", self.weight_floor, 0.0)
        if self.lam_length is not None:
            check_range("LambdaLoss", "lam_length", self.lam_length, 1)

    def importance(self, logp: Tensor, batch: RolloutBatch) -> Importance:
        mask = batch.loss_mask
        weights = positional_weights(
            batch.lengths, batch.width, decay=self.gamma * self.lam, style=self.style,
            floor=self.weight_floor, per_length=self.lam_length, dtype=logp.dtype,
        ) * mask  # (B, T)
        d = torch.where(mask, logp - batch.old_logp, 0.0)
        if self.apply == "trace":
            log_rho = accumulate_trace(d, weights)
            trace_weight = torch.exp(log_rho.detach() - d.detach())
            token_weight = None
        else:
            u = torch.where(mask, 1.0 + torch.sigmoid(logp - 1.0), 0.0)
            token_weight = accumulate_trace(u, weights)
            if self.detach_weight:
                token_weight = token_weight.detach()
            log_rho, trace_weight = d, token_weight.detach()
        metrics = {
            "trace/weight_mean": _masked_mean(trace_weight, mask),
            "trace/weight_p99": _masked_quantile(trace_weight, mask, 0.99),
        }
        return Importance(log_rho, weight=token_weight, metrics=metrics)
