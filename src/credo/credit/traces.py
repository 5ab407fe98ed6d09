"""S-trace's token selection (arXiv 2605.05965): the high-entropy response tokens whose log-ratios enter
the eligibility traces, chosen once per rollout batch from the behaviour policy's entropies.

This is the credit side of S-trace only: `EntropySelection` fills `RolloutBatch.trace_mask`. The trace math
(`trace_history`, P-trace, S-trace, GSPO) and the loss that uses it (`TraceLoss`) live in `credo.losses.traces`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor

from credo.batch import RolloutBatch
from credo.checks import check_choice, check_range
from credo.credit.base import Metrics
from credo.credit.groups import GroupAdvantage


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


@dataclass(frozen=True, kw_only=True)
class EntropySelection(GroupAdvantage):
    """S-trace's estimator: GRPO advantages plus the high-entropy trace mask, fixed per rollout batch.

    The entropies come from the behaviour policy, so the mask is computed once, before mini-batches.
    `mask_grad="trace"` (default) masks only the trace; `"trace_and_grad"` also gives the unselected
    tokens no gradient (loss_mask &= trace_mask).
    """

    reads: ClassVar[frozenset[str]] = frozenset({"entropy"})
    writes: ClassVar[frozenset[str]] = frozenset({"advantages", "loss_mask", "trace_mask"})
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
