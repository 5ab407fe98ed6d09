"""Micro-batches that fit a memory budget: rows grouped by length, each group trimmed to its own width.

A forward/backward pass over a padded batch costs (rows x (widest prompt + widest response)) tokens of
activations, whatever the real lengths are. `micro_batches` sorts the rows by length and fills each
micro-batch while `rows * padded width <= max_tokens` (and `rows <= max_rows`), so short responses share a
pass and a long one does not blow the budget; `credo.policy.policy_logprobs` then drops the columns that
are padding in every row of the pass. Gradients are accumulated, so the update equals the one-pass update
up to float rounding.
"""

from __future__ import annotations

import torch
from torch import Tensor


def micro_batches(prompt_mask: Tensor, response_mask: Tensor, *, max_rows: int | None,
                  max_tokens: int | None) -> list[Tensor]:
    """Row indices of each micro-batch: in order and `max_rows` at a time without a token budget, else
    length-sorted groups whose padded size `rows * (max prompt + max response length)` stays within
    `max_tokens` (a row longer than the budget alone gets a micro-batch of its own)."""
    rows = prompt_mask.shape[0]
    max_rows = max_rows or rows
    if max_tokens is None:
        return list(torch.arange(rows).split(max_rows))
    prompt_lengths = prompt_mask.sum(dim=1).tolist()
    response_lengths = response_mask.sum(dim=1).tolist()
    order = sorted(range(rows), key=lambda r: (prompt_lengths[r] + response_lengths[r], r))
    groups: list[list[int]] = []
    widest_prompt = widest_response = 0
    for row in order:
        prompt, response = max(widest_prompt, prompt_lengths[row]), max(widest_response, response_lengths[row])
        current = groups[-1] if groups else None
        if current is not None and len(current) < max_rows and (len(current) + 1) * (prompt + response) <= max_tokens:
            current.append(row)
            widest_prompt, widest_response = prompt, response
        else:
            groups.append([row])
            widest_prompt, widest_response = prompt_lengths[row], response_lengths[row]
    return [torch.tensor(sorted(group)) for group in groups]
