"""GTPO-style entropy-weighted token advantages (arXiv 2508.04349, "GTPO and GRPO-S: Token and
Sequence-Level Reward Shaping with Policy Entropy").

GTPO's hypothesis: the behaviour policy's entropy `H_t` marks the tokens where a reasoning path is decided,
so those tokens should carry more of the response's credit or blame than the tokens it was sure of. credo's
reading reweights each token's group advantage by its entropy relative to its own response,

    A_t = A * w_t,    w_t = 1 + beta * (H_t / mean_{k in row} H_k - 1),    beta in [0, 1],

the mean taken over the row's trained tokens (`loss_mask`). The weights average 1 over every row, so a
response's total credit is GRPO's (the group baseline and its variance scaling are untouched) and only its
distribution over the tokens moves: `beta = 0` is GRPO; `beta = 1` makes each token's share proportional to
its entropy; in between, a `1 - beta` share stays uniform. `w_t >= 1 - beta >= 0`, so no token's credit
changes sign. A row whose trained tokens all have zero entropy keeps weight 1.

Why a "GTPO-style" reading and not the paper's exact shaping: the paper redistributes a token-level
*reward* with entropy ratios normalised across the group's responses at the same position,
`H_{i,t} / sum_k H_{k,t}`, treats correct and incorrect responses differently, and then normalises those
token rewards into advantages. Position `t` of two different responses is not the same decision, and the
group statistics then change with the entropies. credo keeps what the variants share (a response's credit
moved towards its high-entropy tokens, in proportion to their entropy) and nothing else: the group
advantage is GRPO's, the weights have mean 1 within each response, so the method differs from GRPO in one
place and its effect can be read off blame precision directly. The entropies are the behaviour policy's,
computed once per rollout batch before the mini-batches (the trainer scores them because this estimator
`reads` them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from credo.batch import RolloutBatch
from credo.checks import check_range
from credo.credit.base import Metrics
from credo.credit.groups import GroupAdvantage


def entropy_weights(entropy: Tensor, mask: Tensor, beta: float) -> Tensor:
    """(B, T) `w_t = 1 + beta (H_t / mean_row H - 1)` on `mask`, 0 off it; rows of zero mean entropy get 1.

    >>> entropy_weights(torch.tensor([[1.0, 3.0, 9.0]]), torch.tensor([[True, True, False]]), 1.0).tolist()
    [[0.5, 1.5, 0.0]]
    """
    h = torch.where(mask, entropy, 0.0)
    mean = h.sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1)  # (B, 1)
    ratio = torch.where(mean > 0, h / mean.clamp(min=torch.finfo(h.dtype).tiny), torch.ones_like(h))
    return torch.where(mask, 1.0 + beta * (ratio - 1.0), 0.0)


@dataclass(frozen=True, kw_only=True)
class EntropyWeightedAdvantage(GroupAdvantage):
    """GTPO-style estimator: GRPO's group advantage on each trained token, weighted by the token's entropy
    relative to its response's mean (`entropy_weights`; module docstring)."""

    reads: ClassVar[frozenset[str]] = frozenset({"entropy"})
    beta: float = 0.5
    """Weight of the entropy term in [0, 1]: 0 is GRPO, 1 makes each token's share proportional to its entropy."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("EntropyWeightedAdvantage", "beta", self.beta, 0.0, 1.0)

    def __call__(self, batch: RolloutBatch) -> tuple[RolloutBatch, Metrics]:
        if batch.entropy is None:
            raise ValueError("EntropyWeightedAdvantage needs RolloutBatch.entropy (the behaviour policy's), but it is None")
        credited, metrics = super().__call__(batch)
        weights = entropy_weights(batch.entropy, credited.loss_mask, self.beta)
        trained = weights[credited.loss_mask]
        metrics["credit/entropy_weight_max"] = float(trained.max()) if trained.numel() else 0.0
        metrics["credit/entropy_weight_std"] = float(trained.std()) if trained.numel() > 1 else 0.0
        return credited.replace(advantages=credited.advantages * weights), metrics
