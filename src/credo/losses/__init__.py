"""Policy losses and their aggregation: pure torch over `(B, T)` tensors.

A loss is a frozen dataclass of switches, called as `loss(logp, batch) -> LossOutput`, where `logp`
(B, T) are the current policy's token log-probs (with gradient) and `batch` is a `RolloutBatch` whose
`advantages` a credit estimator has filled. The clipped losses share one surrogate and differ only in the
importance ratio they build (`importance`):

    l_t = w_t * max(-A_t rho_t, -A_t clip(rho_t, 1 - eps_low, 1 + eps_high))   [+ beta * KL_t]

- `PPOClipLoss`: `rho_t = pi/pi_old` per token (GRPO, Dr. GRPO, DAPO).
- `TraceLoss`: `rho_t = H_t pi/pi_old`, the token's ratio times a history factor `H_t` from an eligibility
  trace of the earlier log-ratios (P-trace, S-trace; the token's own ratio is clipped too), or the
  uniform mean of the row's ratios (GSPO); see `credo.losses.traces`.
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

Modules, one job each: `base` (`PolicyLoss`, `aggregate`, `kl_k3`, `LossOutput`, `Importance`),
`reinforce` (`ReinforceLoss`), `clipped` (`ClippedSurrogate`, `PPOClipLoss`), `traces` (the P-/S-trace
and GSPO history `trace_history`, `TraceLoss`), `lambda_returns` (GRPO-lambda's positional weights and
trace, `LambdaLoss`). Their scans come from `credo.scan`; nothing here reads `credo.credit`.
"""

from credo.losses.base import AGGREGATIONS, EMPTY_ROWS, Importance, LossOutput, PolicyLoss, aggregate, kl_k3
from credo.losses.clipped import ClippedSurrogate, PPOClipLoss
from credo.losses.lambda_returns import LambdaLoss, accumulate_trace, positional_weights, row_decay
from credo.losses.reinforce import ReinforceLoss
from credo.losses.traces import KERNELS, TraceLoss, trace_history

__all__ = [
    "AGGREGATIONS",
    "EMPTY_ROWS",
    "KERNELS",
    "ClippedSurrogate",
    "Importance",
    "LambdaLoss",
    "LossOutput",
    "PPOClipLoss",
    "PolicyLoss",
    "ReinforceLoss",
    "TraceLoss",
    "accumulate_trace",
    "aggregate",
    "kl_k3",
    "positional_weights",
    "row_decay",
    "trace_history",
]
