"""Reset groups of RRPO and SRPO (arXiv 2605.25507; github.com/Ankur-Samanta/SRPO): the model-free part.

A reset group keeps a failed seed's thoughts before its first wrong thought as a prefix and samples
continuations from `prompt + prefix`. The sampler gives the base group and each suffix group their own
`group_id`, so the two are normalised separately, and records `prefix_len`, the number of leading
response tokens of each row that are the kept prefix (0 for base rows). Suffix rows train only on the
tokens after their prefix:

    loss_mask[b, t] = response_mask[b, t] and t >= prefix_len[b]

Advantages follow the SRPO code: population std, no eps, `A = 0` where the std is below 1e-8. The loss
is REINFORCE (`credo.losses.ReinforceLoss`) or, as the paper's ablation, PPO clip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from credo.batch import RolloutBatch
from credo.credit.base import Metrics
from credo.credit.groups import GroupAdvantage


def suffix_mask(response_mask: Tensor, prefix_len: Tensor) -> Tensor:
    """(B, T) bool: response tokens at positions `>= prefix_len[b]`."""
    positions = torch.arange(response_mask.shape[1], device=response_mask.device).unsqueeze(0)  # (1, T)
    return response_mask & (positions >= prefix_len.unsqueeze(1))


@dataclass(frozen=True, kw_only=True)
class ResetAdvantage(GroupAdvantage):
    """RRPO/SRPO estimator: separate group normalisation (by `group_id`) and suffix-only loss masks."""

    reads: ClassVar[frozenset[str]] = frozenset({"prefix_len"})
    writes: ClassVar[frozenset[str]] = frozenset({"advantages", "loss_mask"})

    std_ddof: int = 0
    eps: float = 0.0
    std_floor: float = 1e-8
    train_prefix: bool = False
    """The `nomask` variant: suffix rows also train on their prefix tokens."""

    def loss_mask(self, batch: RolloutBatch, trace_mask: Tensor | None, adv: Tensor) -> tuple[Tensor, Metrics]:
        if batch.prefix_len is None:
            raise ValueError("reset credit needs RolloutBatch.prefix_len (0 for base rows), but it is None")
        suffix_rows = float((batch.prefix_len > 0).float().mean())
        metrics = {"credit/suffix_row_share": suffix_rows}
        if self.train_prefix:
            return batch.loss_mask, metrics
        return batch.loss_mask & suffix_mask(batch.response_mask, batch.prefix_len), metrics
