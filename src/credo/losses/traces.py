"""Selective eligibility traces: P-trace and S-trace (arXiv 2605.05965), with GSPO (arXiv 2507.18071)
as the uniform-credit special case.

Only the paper's abstract is public; this is credo's reading (docs/methods.md sec. 3, "Readings we chose"):

Each token's importance ratio carries a decayed memory of the earlier tokens' log-ratios, an approximate
*history* correction that PPO drops and that a full prefix product would make high-variance. With
`d_t = log pi(y_t) - log pi_old(y_t)`, a trace mask `m` (P-trace: the response; S-trace: the
high-entropy response tokens) and a count mask `c` (the response tokens, or `m`), the trace of token `t`
includes the token itself with weight 1:

    Z_t = (d_t + sum_{k<t} decay^(t-k) m_k d_k) / (1 + sum_{k<t} decay^(t-k) c_k)    (normalize=True)
    Z_t =  d_t + sum_{k<t} decay^(t-k) m_k d_k                                      (normalize=False)

With `c` the response mask (credo's default, `TraceLoss.trace_norm="response"`) the sparse S-trace is
P-trace's trace with the low-entropy terms set to zero: as a linear map of the log-ratios its weights are a
subset of P-trace's, so under independent log-ratio noise its variance is never larger (the abstract's
"sparse ... to further mitigate variance"). With `c = m` the trace is a weighted mean over the selected
tokens only, an average of fewer terms, which raises the variance.

The history term `h_t = Z_t - d_t` enters the loss without gradient; `TraceLoss` (below) bounds it and
clips the token's own ratio as well as the combined one (a partial trust region). Identities this reading
keeps (docs/methods.md sec. 3; tests/losses/test_traces.py): `decay = 0` gives GRPO's per-token ratio; with all ratios
1 (first on-policy mini-batch) it is GRPO; a uniform, non-causal, normalised kernel over all response
tokens, `Z_t = mean_k d_k`, clipped as one ratio, is GSPO's token form. (The exponent `t-1-k` with no
current-token term breaks both the `decay = 0` and the GSPO identity, so the current token enters as the
`k = t` term here.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from credo.batch import RolloutBatch
from credo.checks import check_choice, check_range
from credo.losses.base import Importance, PolicyLoss, masked_mean, masked_quantile
from credo.losses.clipped import ClippedSurrogate
from credo.losses.reinforce import ReinforceLoss
from credo.scan import decayed_cumsum, shift_right

KERNELS = ("decay", "uniform")
CLIP_MODES = ("both", "combined", "current")
TRACE_NORMS = ("response", "trace")


def trace_history(
    log_ratio: Tensor,
    trace_mask: Tensor,
    *,
    decay: float,
    normalize: bool,
    kernel: str = "decay",
    count_mask: Tensor | None = None,
) -> Tensor:
    """(B, T) history term `h_t = Z_t - d_t` of the trace (no gradient), so that `log rt = h + d`.

    Args:
        log_ratio: (B, T) `d = logp - old_logp` (detached inside).
        trace_mask: (B, T) bool, the tokens whose ratios enter other tokens' traces.
        decay: lambda in [0, 1] of the `decay` kernel.
        normalize: divide by the decayed token count (weighted geometric mean) instead of summing.
        kernel: "decay" (causal, `decay^(t-k)`, P-/S-trace) or "uniform" (non-causal mean over the
            trace mask, GSPO: `Z_t = mean_k d_k`; needs `normalize`, ignores `decay` and `count_mask`).
        count_mask: (B, T) bool, the tokens counted by the normaliser (default: `trace_mask`); the
            response mask makes unselected tokens count as zeros.
    """
    d = log_ratio.detach()
    m = trace_mask.to(d.dtype)
    if kernel == "uniform":
        z = (d * m).sum(dim=1, keepdim=True) / m.sum(dim=1, keepdim=True).clamp(min=1.0)  # (B, 1)
        return (z - d) * (m.sum(dim=1, keepdim=True) > 0)
    past = decay * shift_right(decayed_cumsum(d * m, decay))  # (B, T): sum_{k<t} decay^(t-k) m_k d_k
    if not normalize:
        return past
    c = m if count_mask is None else count_mask.to(d.dtype)
    count = decay * shift_right(decayed_cumsum(c, decay))  # (B, T): sum_{k<t} decay^(t-k) c_k
    return (d + past) / (1.0 + count) - d


@dataclass(frozen=True, kw_only=True)
class TraceLoss(ClippedSurrogate):
    """P-trace / S-trace (arXiv 2605.05965) and GSPO (arXiv 2507.18071): ratios with a trace of history.

    With `d_t = logp_t - old_logp_t` and the trace `Z_t` of `trace_history` (above) over the
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

    decay: float = 0.95
    """Trace decay lambda in [0, 1] (decay kernel): 0 is GRPO; try 0.9, 0.95, 0.99."""
    normalize: bool = True
    """Normalise the trace by its decayed token count (weighted geometric mean of the ratios)."""
    trace_norm: str = "response"
    """The count that normalises the trace: "response" (all response tokens) | "trace" (the trace mask's)."""
    kernel: str = "decay"
    """"decay": causal decay^(t-k) (P-/S-trace) | "uniform": non-causal mean over the row (GSPO)."""
    clip: str = "both"
    """"both": clip the combined and the token's own ratio, history bounded | "combined": the traced ratio
    only | "current": the token's own ratio only, weighted by the bounded history."""
    history_cap: float = 2.0
    """The history factor exp(h_t) is kept in [1/history_cap, history_cap] ("both", "current"); >= 1."""
    on_policy_inert: ClassVar[str] = "has a traced ratio of 1, whose trace and clip never act (REINFORCE's gradient)"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("TraceLoss", "decay", self.decay, 0.0, 1.0)
        check_choice("TraceLoss", "trace_norm", self.trace_norm, TRACE_NORMS)
        check_choice("TraceLoss", "kernel", self.kernel, KERNELS)
        check_choice("TraceLoss", "clip", self.clip, CLIP_MODES)
        check_range("TraceLoss", "history_cap", self.history_cap, 1.0)
        if self.kernel == "uniform" and not self.normalize:
            raise ValueError("TraceLoss.kernel = 'uniform' needs normalize = True (a uniform sum is unbounded)")

    def on_policy(self) -> PolicyLoss:
        """On policy every log-ratio `d_k` is 0, so the history `h_t` is 0 (whatever the kernel, decay or mask) and
        the ratio is PPO's, whose gradient is REINFORCE's: `ReinforceLoss` with the same aggregation and KL
        penalty (docs/methods.md sec. 3: "with all ratios 1 it is GRPO")."""
        return ReinforceLoss(**self.shared_switches())

    def importance(self, logp: Tensor, batch: RolloutBatch) -> Importance:
        d = torch.where(batch.response_mask, logp - batch.old_logp, 0.0)
        trace_mask = batch.trace_mask if batch.trace_mask is not None else batch.response_mask
        count_mask = batch.response_mask if self.trace_norm == "response" else trace_mask
        history = trace_history(
            d, trace_mask, decay=self.decay, normalize=self.normalize, kernel=self.kernel, count_mask=count_mask
        )
        if self.clip != "combined":
            bound = math.log(self.history_cap)
            history = history.clamp(-bound, bound)
        history_weight = torch.exp(history)
        metrics = {
            "trace/weight_mean": masked_mean(history_weight, batch.loss_mask),
            "trace/weight_p99": masked_quantile(history_weight, batch.loss_mask, 0.99),
        }
        if self.clip == "current":
            return Importance(d, weight=history_weight, metrics=metrics)
        own = d if self.clip == "both" else None
        return Importance(history + d, own_log_ratio=own, metrics=metrics)
