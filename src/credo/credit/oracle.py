"""Oracle credit: perfect blame from a step checker, the yardstick for critic-free credit methods.

On a task whose checker knows each failed response's first wrong step (the testbed), GRPO's advantages
are kept and a failed response is blamed only from that step onward:

    credit_mask[b, t] = response_mask[b, t] and t >= blame_start[b]      for a failed row b

A correct row with a wrong step inside (a lucky success) gets credit on all its tokens (`lucky="all"`)
or only before its wrong step (`lucky="before"`, nothing on and after the step). Failed rows without a
located step (`blame_start = -1`) are blamed whole. `norm="response"` keeps the unblamed tokens in the
loss mask with advantage 0 (each blamed token weighs what it would under GRPO); `norm="trained"` drops
them from the loss mask, so a per-sequence mean spreads the row's advantage over the blamed tokens only.
docs/testbed.md sec. 3 reports this in a hard regime: greedy 89.8 against 76.9 for GRPO at equal tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from credo.batch import RolloutBatch
from credo.checks import check_choice
from credo.credit.base import Metrics
from credo.credit.groups import GroupAdvantage, failed_rows

LUCKY = ("all", "before")
NORMS = ("response", "trained")


def blame_mask(response_mask: Tensor, blame_start: Tensor, failed: Tensor, lucky: str = "all") -> Tensor:
    """(B, T) bool: the response tokens that receive their row's advantage under oracle blame."""
    check_choice("blame_mask", "lucky", lucky, LUCKY)
    positions = torch.arange(response_mask.shape[1], device=response_mask.device).unsqueeze(0)  # (1, T)
    located = (blame_start >= 0).unsqueeze(1)
    after = located & (positions >= blame_start.unsqueeze(1))  # on and after the first wrong step
    blamed = torch.where(located, after, True)  # a failure without a located step: all of it
    kept = ~after if lucky == "before" else torch.ones_like(after)
    return response_mask & torch.where(failed.unsqueeze(1), blamed, kept)


@dataclass(frozen=True, kw_only=True)
class OracleBlameAdvantage(GroupAdvantage):
    """GRPO's advantages, given to a failed response only from its first wrong step onward."""

    reads: ClassVar[frozenset[str]] = frozenset({"blame_start"})
    writes: ClassVar[frozenset[str]] = frozenset({"advantages", "loss_mask"})

    lucky: str = "all"
    """A correct response with a wrong step: credit on "all" its tokens, or only "before" the step."""
    norm: str = "response"
    """"response": unblamed tokens stay in the loss normaliser with advantage 0 | "trained": they leave it."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("OracleBlameAdvantage", "lucky", self.lucky, LUCKY)
        check_choice("OracleBlameAdvantage", "norm", self.norm, NORMS)

    def loss_mask(self, batch: RolloutBatch, trace_mask: Tensor | None, adv: Tensor) -> tuple[Tensor, Metrics]:
        blamed = self._blamed(batch)
        failed = failed_rows(batch)
        share = blamed[failed].sum() / batch.response_mask[failed].sum().clamp(min=1)
        metrics = {"credit/blamed_token_frac": float(share)}
        return (blamed if self.norm == "trained" else batch.loss_mask), metrics

    def credit_mask(self, batch: RolloutBatch, loss_mask: Tensor, adv: Tensor) -> Tensor:
        return loss_mask if self.norm == "trained" else self._blamed(batch)

    def _blamed(self, batch: RolloutBatch) -> Tensor:
        if batch.blame_start is None:
            raise ValueError("oracle_blame needs RolloutBatch.blame_start (a task with a step checker), but it is None")
        return batch.loss_mask & blame_mask(batch.response_mask, batch.blame_start, failed_rows(batch), self.lucky)
