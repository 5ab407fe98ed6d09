"""The credit-estimator protocol and its registry.

A credit estimator runs once per rollout batch, before it is split into mini-batches, and needs no model:
it turns rewards (and whatever the sampler recorded) into per-token advantages, the loss mask and, for
the selective traces, the trace mask. It returns the batch with those fields filled, and the metrics a
user watches.
"""

from __future__ import annotations

from typing import Protocol

from credo.batch import RolloutBatch
from credo.registry import Registry

Metrics = dict[str, float]


class CreditEstimator(Protocol):
    """Computes credit once per rollout batch. An estimator that reads the behaviour policy's entropies
    declares `reads_entropy = True` (the trainer then scores them before credit; others may get them later)."""

    def __call__(self, batch: RolloutBatch) -> tuple[RolloutBatch, Metrics]:
        """Return `batch` with `advantages` (and `loss_mask`, `trace_mask` where the method sets them)."""
        ...


ESTIMATORS: Registry[type[CreditEstimator]] = Registry("credit estimator")
