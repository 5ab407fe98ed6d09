"""VinePPO's step advantages: loop reference, the telescoping identity, whitening, and the intent on exact values."""

from __future__ import annotations

import pytest
import torch
from batches import random_batch
from hypothesis import given, settings
from hypothesis import strategies as st
from references import loop_step_advantages

from credo.batch import RolloutBatch
from credo.credit.groups import failed_rows
from credo.credit.vine import VineAdvantage, step_advantages, whiten
from credo.methods import get_method


def loop_whiten(values, mask, eps=1e-8):
    """The official `masked_whiten(values, mask, shift_mean=True, unbiased_variance=True)`, written out."""
    picked = [float(v) for v, m in zip(values.flatten(), mask.flatten()) if m]
    mean = sum(picked) / len(picked)
    var = sum((v - mean) ** 2 for v in picked) / (len(picked) - 1)
    return torch.where(mask, (values - mean) / (var + eps) ** 0.5, 0.0)


@pytest.mark.parametrize("seed", range(25))
def test_step_advantages_match_the_loop_reference(seed):
    batch = random_batch(seed, dtype=torch.float64)
    torch.testing.assert_close(step_advantages(batch.step_values, batch.segment_ids, batch.rewards, batch.response_mask),
                               loop_step_advantages(batch), rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", range(25))
def test_whitening_is_the_papers_masked_whiten(seed):
    batch = random_batch(seed, dtype=torch.float64)
    if int(batch.loss_mask.sum()) < 2:
        pytest.skip("whitening needs two trained tokens")
    credited, _ = get_method("vine").credit(batch)
    raw = step_advantages(batch.step_values, batch.segment_ids, batch.rewards, batch.response_mask)
    torch.testing.assert_close(credited.advantages, loop_whiten(raw, batch.loss_mask), rtol=1e-10, atol=1e-10)
    trained = credited.advantages[batch.loss_mask]
    assert float(trained.mean()) == pytest.approx(0.0, abs=1e-9)
    if float(raw[batch.loss_mask].std()) > 1e-3:
        assert float(trained.std()) == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize("seed", range(25))
def test_a_responses_steps_sum_to_its_outcome_against_the_prompts_value(seed):
    """Telescoping: summed over its steps (one term per step), a row's advantages are R - V(prompt)."""
    batch = random_batch(seed, dtype=torch.float64)
    raw = step_advantages(batch.step_values, batch.segment_ids, batch.rewards, batch.response_mask)
    for b in range(batch.size):
        n = int(batch.response_mask[b].sum())
        if n == 0:
            continue
        firsts = [t for t in range(n) if t == 0 or batch.segment_ids[b, t] != batch.segment_ids[b, t - 1]]
        total = sum(float(raw[b, t]) for t in firsts)
        assert total == pytest.approx(float(batch.rewards[b] - batch.step_values[b, 0]), abs=1e-12)


def test_whiten_leaves_fewer_than_two_tokens_alone():
    values, mask = torch.tensor([[0.3, 5.0]]), torch.tensor([[True, False]])
    assert whiten(values, mask).tolist() == [[pytest.approx(0.3), 0.0]]


def test_without_step_values_it_says_what_is_missing():
    batch = random_batch(0).replace(step_values=None)
    with pytest.raises(ValueError, match="step_values and segment_ids"):
        VineAdvantage()(batch)


def exact_chain_batch(data) -> tuple:
    """Rows of arithmetic-like chains whose steps each go wrong with their own probability; the step values are
    exact (the chance that every remaining step is right, 0 once a step is wrong). Returns the batch and, per
    row, the first token of its first wrong step (-1: none)."""
    rows = data.draw(st.integers(1, 8))
    steps, width = [], 0
    for _ in range(rows):
        count = data.draw(st.integers(1, 6))
        sizes = data.draw(st.lists(st.integers(1, 4), min_size=count, max_size=count))
        p_wrong = data.draw(st.lists(st.floats(0.05, 0.9), min_size=count, max_size=count))
        wrong = data.draw(st.one_of(st.none(), st.integers(0, count - 1)))
        steps.append((sizes, p_wrong, wrong))
        width = max(width, sum(sizes))
    segment = torch.full((rows, width), -1)
    values = torch.zeros(rows, width, dtype=torch.float64)
    rewards = torch.zeros(rows, dtype=torch.float64)
    blame = []
    for b, (sizes, p_wrong, wrong) in enumerate(steps):
        t = 0
        for i, size in enumerate(sizes):
            alive = wrong is None or i <= wrong
            value = torch.tensor([1 - p for p in p_wrong[i:]]).prod().item() if alive else 0.0
            segment[b, t : t + size], values[b, t : t + size] = i, value
            t += size
        rewards[b] = 1.0 if wrong is None else 0.0
        blame.append(-1 if wrong is None else sum(sizes[:wrong]))
    mask = segment >= 0
    batch = RolloutBatch(response_ids=torch.zeros(rows, width, dtype=torch.long), response_mask=mask,
                         group_id=torch.zeros(rows, dtype=torch.long), rewards=rewards,
                         old_logp=torch.zeros(rows, width, dtype=torch.float64), correct=rewards >= 1,
                         segment_ids=segment, step_values=values)
    return batch, torch.tensor(blame)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_intent_with_exact_values_a_failure_is_blamed_on_its_first_wrong_step_only(data):
    """Vine's purpose: with exact step values, a failed response loses credit on the step that went wrong and
    nowhere else; its earlier (right) steps never lose credit, and a correct response's steps never do."""
    batch, blame = exact_chain_batch(data)
    credited, _ = get_method("vine", estimator={"whiten": False}).credit(batch)
    adv = credited.advantages
    positions = torch.arange(batch.width).unsqueeze(0)
    failed = failed_rows(batch).unsqueeze(1)
    wrong_step = batch.segment_ids == torch.where(blame >= 0, batch.segment_ids.gather(1, blame.clamp(min=0).unsqueeze(1)).squeeze(1), -2).unsqueeze(1)
    assert (adv[batch.response_mask & ~(failed & wrong_step)] >= -1e-12).all(), "a right step lost credit"
    assert (adv[batch.response_mask & failed & wrong_step] < 0).all(), "a wrong step kept its credit"
    assert (adv[batch.response_mask & failed & (positions > blame.unsqueeze(1)) & ~wrong_step].abs() <= 1e-12).all()


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_intent_whitening_keeps_the_order_of_credit(data):
    """Whitening shifts and scales but never reorders: a token credited more than another before it stays so."""
    batch, _ = exact_chain_batch(data)
    raw, _ = get_method("vine", estimator={"whiten": False}).credit(batch)
    white, _ = get_method("vine").credit(batch)
    a, w = raw.advantages[batch.response_mask], white.advantages[batch.response_mask]
    order = a.unsqueeze(0) < a.unsqueeze(1) - 1e-9
    assert (w.unsqueeze(0) <= w.unsqueeze(1) + 1e-9)[order].all()
