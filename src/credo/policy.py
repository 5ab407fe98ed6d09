"""The policy's token log-probs and entropies for a batch of prompts and responses (chunked over tokens)."""

from __future__ import annotations

import torch
from torch import Tensor

from credo.logprobs import token_logprobs


def sequence_inputs(prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor, response_mask: Tensor):
    """Concatenated ids, attention mask and position ids of left-padded prompts + right-padded responses."""
    input_ids = torch.cat([prompt_ids, response_ids], dim=1)  # (B, P + T)
    attention = torch.cat([prompt_mask, response_mask], dim=1).long()  # (B, P + T)
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)  # (B, P + T)
    return input_ids, attention, positions


def policy_logprobs(
    model,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    *,
    temperature: float,
    chunk_tokens: int,
    with_entropy: bool = False,
    autocast: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """(B, T) log-probs of the response tokens under `model` at `temperature` (and entropies).

    The decoder runs once over prompt + response; the LM head is applied in chunks of `chunk_tokens`
    (`credo.logprobs.token_logprobs`), so the (B, T, V) logits never exist in full. Columns that are padding
    in every row (left of the longest prompt, right of the longest response) are left out of the pass.
    Values at padding are finite (those of the pad token, or 0 in the left-out columns) and must be masked
    by the caller.
    """
    first = int(prompt_mask.any(dim=0).int().argmax())  # the first prompt column any row uses
    width = int(response_mask.any(dim=0).nonzero().max()) + 1 if bool(response_mask.any()) else 1
    T = response_ids.shape[1]
    if first > 0 or width < T:
        logp, entropy = policy_logprobs(
            model, prompt_ids[:, first:], prompt_mask[:, first:], response_ids[:, :width], response_mask[:, :width],
            temperature=temperature, chunk_tokens=chunk_tokens, with_entropy=with_entropy, autocast=autocast,
        )
        pad = (0, T - width)
        return torch.nn.functional.pad(logp, pad), None if entropy is None else torch.nn.functional.pad(entropy, pad)
    input_ids, attention, positions = sequence_inputs(prompt_ids, prompt_mask, response_ids, response_mask)
    P = prompt_ids.shape[1]
    with torch.autocast(device_type=input_ids.device.type, dtype=torch.bfloat16, enabled=autocast):
        hidden = model.get_decoder()(
            input_ids=input_ids, attention_mask=attention, position_ids=positions
        ).last_hidden_state  # (B, P + T, H)
    predicting = hidden[:, P - 1 : -1]  # (B, T, H): the states that predict each response token
    head = model.get_output_embeddings()
    logp, entropy = token_logprobs(
        predicting, head.weight, response_ids, temperature=temperature, chunk_tokens=chunk_tokens,
        with_entropy=with_entropy, bias=head.bias,
    )
    return logp, entropy
