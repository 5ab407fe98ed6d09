"""Blame precision: the share of failed responses' negative credit on or after their first wrong step."""

from __future__ import annotations

import pytest
import torch

from credo.diagnostics import blame_precision


def precision_reference(credit, mask, start, failed):
    """Loop reference of `blame_precision`."""
    on = total = 0.0
    for b in range(credit.shape[0]):
        if not failed[b] or start[b] < 0:
            continue
        for t in range(credit.shape[1]):
            if mask[b, t] and credit[b, t] < 0:
                total += -float(credit[b, t])
                on += -float(credit[b, t]) if t >= start[b] else 0.0
    return None if total == 0 else on / total


@pytest.mark.parametrize("seed", range(20))
def test_blame_precision_matches_a_loop_reference(seed):
    g = torch.Generator().manual_seed(seed)
    B, T = 1 + seed % 7, 1 + (seed * 3) % 11
    credit = torch.randn(B, T, generator=g)
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
    start = torch.randint(-1, T + 1, (B,), generator=g)
    failed = torch.rand(B, generator=g) < 0.7
    expected = precision_reference(credit, mask, start, failed)
    got = blame_precision(credit, mask, start, failed)
    assert (got is None) == (expected is None)
    if expected is not None:
        assert got == pytest.approx(expected, abs=1e-6)


def test_uniform_blame_is_the_share_of_tokens_after_the_wrong_step():
    # GRPO's seq-mean credit: every token of a failure gets A/n. Rows of 8 and 4 tokens, wrong from 2 and 3:
    # precision = (6 * 1/8 + 1 * 1/4) / (8 * 1/8 + 4 * 1/4) = (0.75 + 0.25) / 2 = 0.5
    credit = torch.tensor([[-1 / 8] * 8, [-1 / 4] * 4 + [0.0] * 4])
    mask = credit != 0
    assert blame_precision(credit, mask, torch.tensor([2, 3]), torch.tensor([True, True])) == pytest.approx(0.5)


def test_positive_credit_and_correct_rows_do_not_count():
    credit = torch.tensor([[0.5, -1.0, -1.0], [-3.0, -3.0, -3.0]])
    mask = torch.ones(2, 3, dtype=torch.bool)
    # row 0: negative credit 2, all of it from position 1 on; row 1 is correct (no blame to place)
    assert blame_precision(credit, mask, torch.tensor([1, 0]), torch.tensor([True, False])) == 1.0
    assert blame_precision(credit.clamp(min=0), mask, torch.tensor([1, 0]), torch.tensor([True, True])) is None
