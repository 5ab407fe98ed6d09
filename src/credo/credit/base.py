"""The credit-estimator protocol.

A credit estimator runs once per rollout batch, before it is split into mini-batches, and needs no model:
it turns rewards (and whatever the sampler recorded) into per-token advantages, the loss mask and, for
the selective traces, the trace mask. It returns the batch with those fields filled, and the metrics a
user watches.
"""

from __future__ import annotations

from typing import Protocol

from credo.batch import RolloutBatch

Metrics = dict[str, float]


class CreditEstimator(Protocol):
    """Computes credit once per rollout batch.

    It declares the optional `RolloutBatch` fields it needs filled (`reads`, e.g. the behaviour policy's
    `entropy`: the trainer then scores them before credit) and those it fills (`writes`), by the names of
    `credo.batch.FIELD_SOURCES`; `credo.methods.Method` derives what a method needs from them. One that reads the
    sampled tokens themselves (`response_ids`, which every runner fills except verl's advantage-estimator
    interface) also sets `reads_token_ids = True`; without it, it reads none.
    """

    reads: frozenset[str]
    writes: frozenset[str]

    def __call__(self, batch: RolloutBatch) -> tuple[RolloutBatch, Metrics]:
        """Return `batch` with `advantages` (and `loss_mask`, `trace_mask` where the method sets them)."""
        ...
