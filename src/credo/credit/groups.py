"""Group-relative advantages (GRPO, arXiv 2402.03300; Dr. GRPO, arXiv 2503.20783).

`A_i = (r_i - mean_g r) / (std_g r + eps)` over the rows of `i`'s group `g`, broadcast to the row's
trained tokens. Groups are given by `group_id` and may have any sizes.

Conventions (docs/methods.md sec. 0), all switches of `GroupAdvantage`:
- credo (default): population std (`std_ddof=0`), `eps=1e-6`.
- verl `compute_grpo_outcome_advantage`: `std_ddof=1`, `eps=1e-6`. (verl gives a group of one row
  `A = r / (1 + eps)`; credo gives it `A = 0`, as for every zero-variance group, except under the verl
  integration's `conventions="verl"`.)
- TRL `GRPOTrainer`: `std_ddof=1`, `eps=1e-4`; `scale_rewards="batch"` is `scale="batch_std"`.
- SRPO code: `std_ddof=0`, `eps=0`, `std_floor=1e-8` (advantage 0 where the std is below 1e-8).
- Dr. GRPO: `scale="none"`.
A group whose rewards are all equal gets `A = 0` exactly in every convention (no 0/eps round-off).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from credo.batch import RolloutBatch
from credo.checks import check_choice, check_range
from credo.credit.base import Metrics

SCALES = ("std", "batch_std", "none")


def group_advantages(
    rewards: Tensor,
    group_id: Tensor,
    *,
    scale: str = "std",
    std_ddof: int = 0,
    eps: float = 1e-6,
    std_floor: float = 0.0,
) -> Tensor:
    """(B,) group-normalised advantages `(r_i - mean_g) / (std + eps)`.

    Args:
        rewards: (B,) float rewards.
        group_id: (B,) int group of each row (any non-negative values, groups of any size).
        scale: "std" (per-group std), "batch_std" (std of all rewards in the batch; TRL's
            `scale_rewards="batch"`) or "none" (Dr. GRPO: only the group mean is subtracted).
        std_ddof: 0 for the population std, 1 for the sample std.
        eps: added to the std before dividing.
        std_floor: rows whose std is below `std_floor` get advantage 0.

    Rows of a group with all-equal rewards get exactly 0.
    """
    _, inverse, counts = torch.unique(group_id, return_inverse=True, return_counts=True)
    num_groups = counts.numel()
    r = rewards
    mean = torch.zeros(num_groups, dtype=r.dtype, device=r.device).index_add_(0, inverse, r) / counts
    centered = r - mean[inverse]  # (B,)
    constant = (group_spread(r, inverse, num_groups) == 0)[inverse]  # (B,)
    if scale == "none":
        advantages = centered
    else:
        if scale == "std":
            sq = torch.zeros_like(mean).index_add_(0, inverse, centered.square())
            std = (sq / (counts - std_ddof).clamp(min=1)).sqrt()[inverse]  # (B,)
        else:  # batch_std
            std = r.std(correction=std_ddof).expand_as(r) if r.numel() > std_ddof else torch.zeros_like(r)
        advantages = centered / (std + eps)
        constant = constant | (std < std_floor)
    return torch.where(constant, torch.zeros_like(advantages), advantages)


def group_spread(values: Tensor, inverse: Tensor, num_groups: int) -> Tensor:
    """(G,) max minus min of `values` (B,) within each group (`inverse`: each row's group index)."""
    high = torch.full((num_groups,), -torch.inf, dtype=values.dtype, device=values.device)
    low = torch.full((num_groups,), torch.inf, dtype=values.dtype, device=values.device)
    high.scatter_reduce_(0, inverse, values, reduce="amax")
    low.scatter_reduce_(0, inverse, values, reduce="amin")
    return high - low


@dataclass(frozen=True, kw_only=True)
class GroupAdvantage:
    """GRPO's estimator: group-normalised outcome advantage on every trained token.

    `advantages[b, t] = A_b * loss_mask[b, t]`, `A_b` from `group_advantages`; with `min_advantage`
    set, `A_b = max(A_b, min_advantage)` (GRPO-lambda's negative-advantage clamp, reported at -0.1).
    Subclasses change what is normalised (`rewards`) and which tokens train (`loss_mask`).
    """

    conventions: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "trl": {"std_ddof": 1, "eps": 1e-4},
        "verl": {"std_ddof": 1, "eps": 1e-6},
    }
    """The switches with which this estimator computes what an engine's own implementation computes, per
    convention name; subclasses add to their bases' (`credo.integrations.conventions`)."""

    reads: ClassVar[frozenset[str]] = frozenset()
    """Optional batch fields it needs (`credo.batch.FIELD_SOURCES`); subclasses add theirs."""
    writes: ClassVar[frozenset[str]] = frozenset({"advantages"})
    """Batch fields it fills; a subclass that changes the loss or trace mask adds it."""
    scale: str = "std"
    """"std" per group | "batch_std" over the batch (TRL scale_rewards="batch") | "none" (Dr. GRPO)."""
    std_ddof: int = 0
    """0: population std (credo, SRPO); 1: sample std (verl, TRL)."""
    eps: float = 1e-6
    """Added to the std (credo and verl 1e-6, TRL 1e-4, SRPO 0)."""
    std_floor: float = 0.0
    """Advantage 0 where the std is below this (SRPO: 1e-8)."""
    min_advantage: float | None = None
    """Clamp advantages from below (GRPO-lambda's `neg_adv_clamp`: -0.1); None: no clamp."""

    def __post_init__(self) -> None:
        name = type(self).__name__
        check_choice(name, "scale", self.scale, SCALES)
        check_choice(name, "std_ddof", self.std_ddof, (0, 1))
        check_range(name, "eps", self.eps, 0.0)
        check_range(name, "std_floor", self.std_floor, 0.0)
        if self.min_advantage is not None:
            check_range(name, "min_advantage", self.min_advantage, None, 0.0)

    def rewards(self, batch: RolloutBatch) -> tuple[Tensor, Metrics]:
        """(B,) the rewards to normalise."""
        return batch.rewards, {}

    def loss_mask(self, batch: RolloutBatch, trace_mask: Tensor | None, adv: Tensor) -> tuple[Tensor, Metrics]:
        """(B, T) bool: the tokens that train (`trace_mask` is what `trace_mask()` returned, `adv` (B,) the
        rows' advantages)."""
        return batch.loss_mask, {}

    def trace_mask(self, batch: RolloutBatch) -> tuple[Tensor | None, Metrics]:
        """(B, T) bool or None: the tokens whose ratios enter eligibility traces (None: all response tokens)."""
        return batch.trace_mask, {}

    def credit_mask(self, batch: RolloutBatch, loss_mask: Tensor, adv: Tensor) -> Tensor:
        """(B, T) bool: the trained tokens that receive their row's advantage `adv` (B,) (default: all of
        them). A token in the loss mask but not here still counts in the loss's normaliser, with advantage 0."""
        return loss_mask

    def __call__(self, batch: RolloutBatch) -> tuple[RolloutBatch, Metrics]:
        rewards, metrics = self.rewards(batch)
        adv = group_advantages(
            rewards, batch.group_id, scale=self.scale, std_ddof=self.std_ddof, eps=self.eps, std_floor=self.std_floor
        )
        if self.min_advantage is not None:
            adv = adv.clamp(min=self.min_advantage)
        trace_mask, trace_metrics = self.trace_mask(batch)
        loss_mask, mask_metrics = self.loss_mask(batch, trace_mask, adv)
        advantages = adv.unsqueeze(1) * self.credit_mask(batch, loss_mask, adv)  # (B, T)
        metrics.update(trace_metrics)
        metrics.update(mask_metrics)
        metrics.update(_advantage_metrics(adv, batch.group_id))
        return batch.replace(advantages=advantages, loss_mask=loss_mask, trace_mask=trace_mask), metrics


def _advantage_metrics(adv: Tensor, group_id: Tensor) -> Metrics:
    _, inverse = torch.unique(group_id, return_inverse=True)
    nonzero = torch.zeros(int(inverse.max()) + 1, device=adv.device).index_add_(0, inverse, (adv != 0).float())
    return {
        "credit/adv_abs_mean": float(adv.abs().mean()),
        "credit/zero_adv_groups": float((nonzero == 0).float().mean()),
    }


def failed_rows(batch: RolloutBatch) -> Tensor:
    """(B,) bool: rows that failed (`correct` where given, else reward < 1)."""
    return ~batch.correct if batch.correct is not None else batch.rewards < 1.0
