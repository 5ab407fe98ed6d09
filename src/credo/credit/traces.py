"""Selective eligibility traces: P-trace and S-trace (arXiv 2605.05965), with GSPO (arXiv 2507.18071)
as the uniform-credit special case.

Only the paper's abstract is public; this is credo's reading (README, "Readings we chose"):

Each token's importance ratio carries a decayed memory of the earlier tokens' log-ratios, an approximate
*history* correction that PPO drops and that a full prefix product would make high-variance. With
`d_t = log pi(y_t) - log pi_old(y_t)`, a trace mask `m` (P-trace: the response; S-trace: the
high-entropy response tokens) and a count mask `c` (the response tokens, or `m`), the trace of token `t`
includes the token itself with weight 1:

    Z_t = (d_t + sum_{k<t} lam^(t-k) m_k d_k) / (1 + sum_{k<t} lam^(t-k) c_k)    (normalize=True)
    Z_t =  d_t + sum_{k<t} lam^(t-k) m_k d_k                                      (normalize=False)

With `c` the response mask (credo's default, `TraceLoss.trace_norm="response"`) the sparse S-trace is
P-trace's trace with the low-entropy terms set to zero: as a linear map of the log-ratios its weights are a
subset of P-trace's, so under independent log-ratio noise its variance is never larger (the abstract's
"sparse ... to further mitigate variance"). With `c = m` the trace is a weighted mean over the selected
tokens only, an average of fewer terms, which raises the variance.

The history term `h_t = Z_t - d_t` enters the loss without gradient; `credo.losses.TraceLoss` bounds it and
clips the token's own ratio as well as the combined one (a partial trust region). Identities this reading
keeps (docs/methods.md sec. 3; tests/test_traces.py): `lam = 0` gives GRPO's per-token ratio; with all ratios
1 (first on-policy mini-batch) it is GRPO; a uniform, non-causal, normalised kernel over all response
tokens, `Z_t = mean_k d_k`, clipped as one ratio, is GSPO's token form. (The exponent `t-1-k` with no
current-token term breaks both the `lam = 0` and the GSPO identity, so the current token enters as the
`k = t` term here.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor

from credo.batch import RolloutBatch
from credo.checks import check_choice, check_range
from credo.credit.base import ESTIMATORS, Metrics
from credo.credit.groups import GroupAdvantage
from credo.credit.scan import decayed_cumsum, shift_right

KERNELS = ("decay", "uniform")


def trace_history(
    log_ratio: Tensor,
    trace_mask: Tensor,
    *,
    lam: float,
    normalize: bool,
    kernel: str = "decay",
    count_mask: Tensor | None = None,
) -> Tensor:
    """(B, T) history term `h_t = Z_t - d_t` of the trace (no gradient), so that `log rt = h + d`.

    Args:
        log_ratio: (B, T) `d = logp - old_logp` (detached inside).
        trace_mask: (B, T) bool, the tokens whose ratios enter other tokens' traces.
        lam: decay in [0, 1] of the `decay` kernel.
        normalize: divide by the decayed token count (weighted geometric mean) instead of summing.
        kernel: "decay" (causal, `lam^(t-k)`, P-/S-trace) or "uniform" (non-causal mean over the
            trace mask, GSPO: `Z_t = mean_k d_k`; needs `normalize`, ignores `lam` and `count_mask`).
        count_mask: (B, T) bool, the tokens counted by the normaliser (default: `trace_mask`); the
            response mask makes unselected tokens count as zeros.
    """
    d = log_ratio.detach()
    m = trace_mask.to(d.dtype)
    if kernel == "uniform":
        z = (d * m).sum(dim=1, keepdim=True) / m.sum(dim=1, keepdim=True).clamp(min=1.0)  # (B, 1)
        return (z - d) * (m.sum(dim=1, keepdim=True) > 0)
    past = lam * shift_right(decayed_cumsum(d * m, lam))  # (B, T): sum_{k<t} lam^(t-k) m_k d_k
    if not normalize:
        return past
    c = m if count_mask is None else count_mask.to(d.dtype)
    count = lam * shift_right(decayed_cumsum(c, lam))  # (B, T): sum_{k<t} lam^(t-k) c_k
    return (d + past) / (1.0 + count) - d


def entropy_selection(entropy: Tensor, response_mask: Tensor, keep_frac: float) -> tuple[Tensor, Tensor]:
    """S-trace's token selection: `response_mask & (entropy >= q)`, `q` the `1 - keep_frac` quantile.

    The quantile is taken over all response tokens of the rollout batch (the "80/20" prior of
    arXiv 2506.01939 keeps `keep_frac = 0.2`), with the "lower" rule, so at least `keep_frac` of the
    tokens are kept and ties at the threshold are all kept. Returns the (B, T) bool mask and `q`.
    """
    values = entropy[response_mask]
    if values.numel() == 0:
        return response_mask.clone(), entropy.new_zeros(())
    rank = int((1.0 - keep_frac) * (values.numel() - 1)) + 1  # 1-based rank of the lower quantile
    threshold = values.kthvalue(rank).values
    return response_mask & (entropy >= threshold), threshold


MASK_GRAD = ("trace", "trace_and_grad")


@ESTIMATORS.register("entropy_select")
@dataclass(frozen=True, kw_only=True)
class EntropySelection(GroupAdvantage):
    """S-trace's estimator: GRPO advantages plus the high-entropy trace mask, fixed per rollout batch.

    The entropies come from the behaviour policy, so the mask is computed once, before mini-batches.
    `mask_grad="trace"` (default) masks only the trace; `"trace_and_grad"` also gives the unselected
    tokens no gradient (loss_mask &= trace_mask).
    """

    reads_entropy: ClassVar[bool] = True
    keep_frac: float = 0.2
    """Share of response tokens (highest entropy) whose ratios enter the traces."""
    mask_grad: str = "trace"
    """"trace": mask the trace only | "trace_and_grad": also drop unselected tokens from the loss."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("EntropySelection", "keep_frac", self.keep_frac, 0.0, 1.0, low_open=True)
        check_choice("EntropySelection", "mask_grad", self.mask_grad, MASK_GRAD)

    def trace_mask(self, batch: RolloutBatch) -> tuple[Tensor, Metrics]:
        if batch.entropy is None:
            raise ValueError("S-trace needs RolloutBatch.entropy (behaviour-policy entropies), but it is None")
        mask, threshold = entropy_selection(batch.entropy, batch.response_mask, self.keep_frac)
        share = float(mask.sum() / batch.response_mask.sum().clamp(min=1))
        return mask, {"credit/trace_token_share": share, "credit/entropy_threshold": float(threshold)}

    def loss_mask(self, batch: RolloutBatch, trace_mask: Tensor | None, adv: Tensor) -> tuple[Tensor, Metrics]:
        if self.mask_grad == "trace_and_grad":
            return batch.loss_mask & trace_mask, {}
        return batch.loss_mask, {}
