"""REINFORCE with a group baseline, no ratio and no clip (the SRPO loss)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from credo.batch import RolloutBatch
from credo.losses.base import PolicyLoss


@dataclass(frozen=True, kw_only=True)
class ReinforceLoss(PolicyLoss):
    """REINFORCE with a group baseline (the SRPO loss): `l_t = -A_t * logp_t`, no ratio, no clip.

    With `seq_mean_token_mean` this is `-(1/B) sum_i A_i mean_{t in loss_mask_i} logp_{i,t}`
    (docs/methods.md secs. 1 and 4). Its value depends on `logp`, its gradient is the policy gradient.
    """

    def token_loss(self, logp: Tensor, batch: RolloutBatch) -> tuple[Tensor, dict[str, float]]:
        return -batch.advantages * logp, {}
