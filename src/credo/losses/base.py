"""What every policy loss shares: the `PolicyLoss` base (aggregation switches, the KL penalty to a
reference policy), `aggregate` over the loss mask, the k3 KL estimator, the `LossOutput` / `Importance`
records, and the masked statistics the losses report as metrics.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor

from credo.batch import RolloutBatch
from credo.checks import check_choice, check_range

AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm")
EMPTY_ROWS = ("skip", "count")


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
    """What a user watches: clip fractions, ratio statistics, KL, trace weights (see docs/glossary.md)."""


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


def kl_k3(logp: Tensor, ref_logp: Tensor, clamp: float | None = None) -> Tensor:
    """(B, T) the k3 estimator of KL(pi || pi_ref): `exp(ref - logp) - (ref - logp) - 1` (>= 0).

    `clamp` (verl's `low_var_kl`): the log-ratio `ref - logp` is clamped to [-20, 20] before `exp` and the
    estimate to [-clamp, clamp] (no gradient where either bites); None: neither (TRL's `GRPOTrainer`)."""
    diff = ref_logp - logp
    if clamp is None:
        return torch.exp(diff) - diff - 1.0
    diff = diff.clamp(min=-20.0, max=20.0)
    return (torch.exp(diff) - diff - 1.0).clamp(min=-clamp, max=clamp)


def masked_quantile(values: Tensor, mask: Tensor, q: float) -> float:
    picked = values[mask]
    if picked.numel() == 0:
        return 0.0
    return float(picked.kthvalue(int(q * (picked.numel() - 1)) + 1).values)


def masked_mean(values: Tensor, mask: Tensor) -> float:
    return float(torch.where(mask, values, 0.0).sum() / mask.sum().clamp(min=1))


@dataclass(frozen=True, kw_only=True)
class PolicyLoss:
    """Switches shared by every loss: aggregation and the KL penalty to a reference policy."""

    conventions: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "trl": {"empty_rows": "count"},
        "verl": {"empty_rows": "count", "norm_len": None, "kl_clamp": 10.0},
    }
    """The switches with which this class computes what an engine's own implementation computes, per
    convention name ("trl", "verl"); subclasses add to their bases' (`credo.integrations.conventions`)."""
    agg: str = "seq_mean_token_mean"
    """token_mean | seq_mean_token_mean | seq_mean_token_sum_norm."""
    norm_len: int | None = None
    """Divisor of seq_mean_token_sum_norm: None = padded width T (verl); TRL uses max_completion_length."""
    empty_rows: str = "skip"
    """Rows with no loss token: "skip" = left out of the row mean (verl) | "count" = counted (TRL)."""
    kl_beta: float = 0.0
    """Weight of the k3 KL penalty to `batch.ref_logp` (GRPO's beta); 0 disables it.

    `kl_beta * k3_t` is added to each token's loss before aggregation, as TRL's `GRPOTrainer` adds
    `beta * per_token_kl` and as verl adds `kl_loss_coef` times the same aggregation of its `kl_loss_type` k3."""
    kl_clamp: float | None = None
    """Clamp of the k3 KL estimate (verl's `low_var_kl`: 10, its log-ratio at +-20 first); None: unclamped (TRL)."""
    on_policy_inert: ClassVar[str] = ""
    """What of this loss cannot act when it trains on policy, as a phrase after "its <loss class>" ("" when
    nothing): see `on_policy`; the study grid's refusals quote it."""

    def __post_init__(self) -> None:
        name = type(self).__name__
        check_choice(name, "agg", self.agg, AGGREGATIONS)
        check_choice(name, "empty_rows", self.empty_rows, EMPTY_ROWS)
        if self.norm_len is not None:
            check_range(name, "norm_len", self.norm_len, 1)
        check_range(name, "kl_beta", self.kl_beta, 0.0)
        if self.kl_clamp is not None:
            check_range(name, "kl_clamp", self.kl_clamp, 0.0, low_open=True)

    @property
    def reads(self) -> frozenset[str]:
        """The optional `RolloutBatch` fields this loss needs filled (see `credo.batch.FIELD_SOURCES`):
        `ref_logp` when `kl_beta > 0`, none otherwise."""
        return frozenset({"ref_logp"}) if self.kl_beta > 0 else frozenset()

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
            kl = kl_k3(logp, batch.ref_logp, self.kl_clamp)
            token_loss = token_loss + self.kl_beta * kl
            metrics["kl/ref"] = masked_mean(kl.detach(), mask)
        loss = aggregate(
            token_loss, mask, self.agg, norm_len=self.norm_len, empty_rows=self.empty_rows,
            num_tokens=num_tokens, num_rows=num_rows,
        )
        with torch.no_grad():
            old_kl = kl_k3(logp.detach(), batch.old_logp)
        metrics["kl/old"] = masked_mean(old_kl, mask)
        metrics["loss/policy"] = float(loss.detach())
        metrics["loss/tokens"] = float(mask.sum())
        return LossOutput(loss, metrics)

    def token_loss(self, logp: Tensor, batch: RolloutBatch) -> tuple[Tensor, dict[str, float]]:
        """(B, T) per-token policy loss (before masking and aggregation) and its metrics."""
        raise NotImplementedError

    def on_policy(self) -> PolicyLoss:
        """The loss whose gradient this one's equals on policy, where `old_logp` is the current policy's
        (one update per rollout batch: `optim.minibatches = epochs = 1`) and so every ratio is 1: itself unless
        a subclass declares what cannot act there (`on_policy_inert`). The study grid compares cells by it."""
        return self

    def shared_switches(self) -> dict[str, Any]:
        """The switches every loss has (aggregation, KL penalty) with this loss's values."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(PolicyLoss)}

    def normalisers(self, loss_mask: Tensor) -> dict[str, float]:
        """The denominators of this loss's aggregation over a whole mini-batch, to pass to each of its
        micro-batches (`num_tokens` / `num_rows` of `__call__`) so that their losses add up exactly."""
        if self.agg == "token_mean":
            return {"num_tokens": float(loss_mask.sum().clamp(min=1))}
        if self.empty_rows == "skip":
            return {"num_rows": float((loss_mask.sum(dim=1) > 0).sum().clamp(min=1))}
        return {"num_rows": float(loss_mask.shape[0])}
