"""Token-budget micro-batches and the padding-trimmed log-prob pass."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from credo.logprobs import STATISTICS
from credo.microbatch import micro_batches
from credo.policy import policy_logprobs


def masks_from_lengths(lengths: list[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt masks and right-padded response masks of (prompt, response) lengths."""
    P, T = max(p for p, _ in lengths), max(max(r for _, r in lengths), 1)
    prompt = torch.tensor([[i >= P - p for i in range(P)] for p, _ in lengths])
    response = torch.tensor([[i < r for i in range(T)] for _, r in lengths])
    return prompt, response


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.tuples(st.integers(1, 12), st.integers(0, 20)), min_size=1, max_size=24),
    budget=st.integers(1, 200),
    max_rows=st.one_of(st.none(), st.integers(1, 8)),
)
def test_every_row_once_within_the_budget(lengths, budget, max_rows):
    prompt_mask, response_mask = masks_from_lengths(lengths)
    groups = micro_batches(prompt_mask, response_mask, max_rows=max_rows, max_tokens=budget)
    assert sorted(torch.cat(groups).tolist()) == list(range(len(lengths)))
    for group in groups:
        rows = group.tolist()
        width = max(lengths[r][0] for r in rows) + max(lengths[r][1] for r in rows)
        assert len(rows) == 1 or len(rows) * width <= budget
        assert max_rows is None or len(rows) <= max_rows


def test_short_rows_share_a_pass_and_a_long_one_goes_alone():
    lengths = [(4, 2), (4, 30), (4, 3), (4, 1)]
    prompt_mask, response_mask = masks_from_lengths(lengths)
    groups = micro_batches(prompt_mask, response_mask, max_rows=None, max_tokens=24)
    assert [g.tolist() for g in groups] == [[0, 2, 3], [1]]  # 3 x (4 + 3) = 21 <= 24; 34 alone
    assert [g.tolist() for g in micro_batches(prompt_mask, response_mask, max_rows=3, max_tokens=None)] == [[0, 1, 2], [3]]


def test_trimmed_pass_equals_the_padded_one():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, attn_implementation="eager"))
    prompt_mask, response_mask = masks_from_lengths([(3, 4), (5, 2), (2, 6)])
    prompt_mask = torch.cat([torch.zeros(3, 4, dtype=torch.bool), prompt_mask], dim=1)  # 4 columns all padding
    response_mask = torch.cat([response_mask, torch.zeros(3, 5, dtype=torch.bool)], dim=1)  # 5 more
    prompt_ids = torch.randint(1, 50, prompt_mask.shape) * prompt_mask
    response_ids = torch.randint(1, 50, response_mask.shape) * response_mask
    logp, stats = policy_logprobs(model, prompt_ids, prompt_mask, response_ids, response_mask, temperature=1.0,
                                  chunk_tokens=7, statistics=STATISTICS)
    assert logp.shape == response_ids.shape and all(v.shape == response_ids.shape for v in stats.values())
    for row, (p, r) in enumerate([(3, 4), (5, 2), (2, 6)]):  # each row alone, no padding at all
        alone, alone_stats = policy_logprobs(
            model, prompt_ids[row : row + 1, -p:], prompt_mask[row : row + 1, -p:], response_ids[row : row + 1, :r],
            response_mask[row : row + 1, :r], temperature=1.0, chunk_tokens=7, statistics=STATISTICS)
        assert torch.allclose(logp[row, :r], alone[0], atol=1e-5)
        for name in STATISTICS:
            assert torch.allclose(stats[name][row, :r], alone_stats[name][0], atol=1e-5), name
    assert torch.equal(logp[:, 6:], torch.zeros(3, 5))  # the all-padding columns were not computed


@pytest.mark.parametrize("budget", [None, 10])
def test_no_budget_keeps_rows_in_order(budget):
    prompt_mask, response_mask = masks_from_lengths([(2, 3)] * 5)
    groups = micro_batches(prompt_mask, response_mask, max_rows=2, max_tokens=budget)
    assert [g.tolist() for g in groups] == [[0, 1], [2, 3], [4]]
