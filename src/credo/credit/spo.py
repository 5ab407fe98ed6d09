"""SPO's segment advantages (arXiv 2505.23564; github.com/AIFrameResearch/SPO; docs/methods.md sec. 11).

Segment Policy Optimization gives each segment of a response the change in Monte-Carlo value across it,

    A_t = V(s_{c_{i+1}}) - V(s_{c_i})        for a token t of segment i = [c_i, c_{i+1}),    V(s_T) = R,

where `s_c` is the prompt followed by the response's first `c` tokens (`c_0 = 0`: the prompt) and `R` the
response's reward: VinePPO's step advantages over segments instead of thoughts (`credo.credit.vine.step_advantages`).
A response's advantages sum over its segments to `R - V(s_0)`, its outcome against the prompt's value; a single
segment is GRPO's direction.

The samplers record what this reads: each token's segment (`segment_ids`), the value its segment starts from
(`step_values`) and whether it was sampled below the probability threshold (`cutpoint_mask`); SPO-tree's also the
tokens of the tree edges a row carries (`edge_mask`). SPO-chain's sampler (`credo.rollout.samplers.spo_chain`)
cuts at low-probability tokens and values each boundary by `K` continuations; SPO-tree's
(`credo.rollout.samplers.spo_tree`) grows a tree whose node values are the means of their children.

- `SegmentAdvantage` (SPO-chain): the *probability mask* trains only the cutpoints (a token with `p_t >= 0.9`
  gets no advantage and leaves the loss and the whitening statistics); the advantages are whitened over the
  trained tokens as the official trainer does (`masked_whiten`: token-weighted mean, unbiased variance, eps
  1e-8), once over the step's batch before it is split (the code whitens each mini-batch).
- `TreeEdgeAdvantage` (SPO-tree): the same on the tokens of the edges each row carries (`edge_mask`) only, so
  that every carried token gets its edge's `V(c) - V(p)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from credo.batch import RolloutBatch
from credo.credit.base import Metrics
from credo.credit.vine import step_advantages, whiten


@dataclass(frozen=True, kw_only=True)
class SegmentAdvantage:
    """SPO's estimator: each segment's tokens get the change in Monte-Carlo value across the segment, only the
    tokens below the probability threshold are trained (the probability mask), whitened over them (module
    docstring)."""

    reads: ClassVar[frozenset[str]] = frozenset({"segment_ids", "step_values", "cutpoint_mask"})
    writes: ClassVar[frozenset[str]] = frozenset({"advantages", "loss_mask"})

    prob_mask: bool = True
    """Train only the cutpoints (the paper's probability mask); False: every token of a segment."""
    whiten: bool = True
    """Whiten the advantages over the trained tokens, as the paper's trainer does; False: raw value changes."""

    def __call__(self, batch: RolloutBatch) -> tuple[RolloutBatch, Metrics]:
        if batch.step_values is None or batch.segment_ids is None or batch.cutpoint_mask is None:
            raise ValueError("SegmentAdvantage needs RolloutBatch.step_values, segment_ids and cutpoint_mask (the "
                             "spo_chain sampler's), but they are None")
        raw = step_advantages(batch.step_values, batch.segment_ids, batch.rewards, batch.response_mask)
        mask = batch.loss_mask & batch.cutpoint_mask if self.prob_mask else batch.loss_mask
        advantages = whiten(raw, mask) if self.whiten else torch.where(mask, raw, 0.0)
        trained = raw[mask]
        metrics = {
            "credit/adv_abs_mean": float(advantages[mask].abs().mean()) if trained.numel() else 0.0,
            "credit/segment_adv_mean": float(trained.mean()) if trained.numel() else 0.0,
            "credit/trained_token_share": float(mask.sum()) / max(1, int(batch.loss_mask.sum())),
            "credit/negative_token_share": float((trained < 0).float().mean()) if trained.numel() else 0.0,
        }
        return batch.replace(advantages=advantages, loss_mask=mask), metrics



@dataclass(frozen=True, kw_only=True)
class TreeEdgeAdvantage(SegmentAdvantage):
    """SPO-tree's estimator: SPO's segment advantages (`SegmentAdvantage`: each segment's change in value, the
    probability mask, whitening) on the tokens of the edges each row carries (`edge_mask`) only."""

    reads: ClassVar[frozenset[str]] = SegmentAdvantage.reads | {"edge_mask"}

    def __call__(self, batch: RolloutBatch) -> tuple[RolloutBatch, Metrics]:
        if batch.edge_mask is None:
            raise ValueError("TreeEdgeAdvantage needs RolloutBatch.edge_mask (the spo_tree sampler's), but it is None")
        return super().__call__(batch.replace(loss_mask=batch.loss_mask & batch.edge_mask))
