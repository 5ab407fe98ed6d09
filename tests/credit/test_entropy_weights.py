"""GTPO-style entropy-weighted token advantages (`gtpo`, `credo.credit.entropy_weights`).

Loop reference, identities (beta = 0 is GRPO; every row keeps GRPO's total credit) and intent (within a
response, credit and blame move towards its high-entropy tokens and never change sign)."""

from __future__ import annotations

import statistics

import pytest
import torch
from batches import random_batch
from hypothesis import given, settings
from hypothesis import strategies as st

from credo.credit.entropy_weights import EntropyWeightedAdvantage
from credo.methods import get_method


def gtpo_loop(batch, beta):
    """The reading written out token by token: A_t = A (1 + beta (H_t / mean_row H - 1)) on the loss mask; with
    every trained token's weight `1 + beta (H_t / mean_row H - 1)`."""
    grpo, _ = get_method("grpo").credit(batch)
    out = torch.zeros_like(grpo.advantages)
    weights = []
    for b in range(batch.size):
        tokens = [t for t in range(batch.width) if grpo.loss_mask[b, t]]
        if not tokens:
            continue
        row_adv = float(grpo.advantages[b, tokens[0]])
        mean = sum(float(batch.entropy[b, t]) for t in tokens) / len(tokens)
        for t in tokens:
            weight = 1.0 + beta * (float(batch.entropy[b, t]) / mean - 1.0) if mean > 0 else 1.0
            out[b, t] = row_adv * weight
            weights.append(weight)
    return out, weights


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("beta", [0.0, 0.3, 0.5, 1.0])
def test_matches_the_loop_reference(seed, beta):
    batch = random_batch(seed, dtype=torch.float64)
    credited, metrics = get_method("gtpo", estimator={"beta": beta}).credit(batch)
    advantages, weights = gtpo_loop(batch, beta)
    torch.testing.assert_close(credited.advantages, advantages, rtol=1e-10, atol=1e-12)
    assert metrics["credit/entropy_weight_max"] == pytest.approx(max(weights), rel=1e-10)
    assert metrics["credit/entropy_weight_std"] == pytest.approx(statistics.stdev(weights), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("seed", range(20))
def test_beta_zero_is_grpo_and_rows_keep_grpos_total_credit(seed):
    batch = random_batch(seed, dtype=torch.float64)
    grpo, _ = get_method("grpo").credit(batch)
    flat, _ = get_method("gtpo", estimator={"beta": 0.0}).credit(batch)
    torch.testing.assert_close(flat.advantages, grpo.advantages)
    weighted, _ = get_method("gtpo").credit(batch)
    torch.testing.assert_close(weighted.advantages.sum(dim=1), grpo.advantages.sum(dim=1), rtol=1e-9, atol=1e-9)


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**16), beta=st.floats(0.0, 1.0))
def test_credit_moves_towards_high_entropy_tokens_and_never_changes_sign(seed, beta):
    batch = random_batch(seed, dtype=torch.float64)
    grpo, _ = get_method("grpo").credit(batch)
    credited, _ = get_method("gtpo", estimator={"beta": beta}).credit(batch)
    adv, base, mask = credited.advantages, grpo.advantages, credited.loss_mask
    assert (adv * base >= 0).all(), "a token's credit changed sign"
    for b in range(batch.size):
        h, a = batch.entropy[b][mask[b]], adv[b][mask[b]].abs()
        if a.numel() < 2 or float(base[b][mask[b]].abs().max()) == 0:
            continue
        order = torch.argsort(h)
        assert (a[order].diff() >= -1e-12).all(), "a higher-entropy token got less credit or blame than a lower one"


def test_the_estimator_needs_entropies_and_a_beta_in_range():
    batch = random_batch(0).replace(entropy=None)
    with pytest.raises(ValueError, match="needs RolloutBatch.entropy"):
        EntropyWeightedAdvantage()(batch)
    with pytest.raises(ValueError, match="beta"):
        get_method("gtpo", estimator={"beta": 1.5})
    assert get_method("gtpo").behaviour_statistics == {"entropy"}
