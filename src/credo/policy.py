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
    with torch.autocast(device_type=prompt_ids.device.type, dtype=torch.bfloat16, enabled=autocast):
        predicting = decoder_states(model.get_decoder(), prompt_ids, prompt_mask, response_ids, response_mask)
    head = model.get_output_embeddings()
    return token_logprobs(
        predicting, head.weight, response_ids, temperature=temperature, chunk_tokens=chunk_tokens,
        with_entropy=with_entropy, bias=head.bias,
    )


def decoder_states(decoder, prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor,
                   response_mask: Tensor) -> Tensor:
    """(B, T, H): the decoder's hidden states that predict each response token.

    Rows of a group share their prompt: each distinct prompt runs through the decoder once and its keys and
    values are indexed out to its rows (differentiably: their gradients add up), then the responses run over
    that cache. With G samples per prompt this saves (G - 1) / G of the prompt's forward and backward. A
    batch without a shared prompt runs prompt + response in one pass.
    """
    P = prompt_ids.shape[1]
    key = torch.where(prompt_mask, prompt_ids, -1)  # (B, P): padding never tells prompts apart
    unique, inverse = torch.unique(key, dim=0, return_inverse=True)
    if len(unique) == len(key):
        input_ids, attention, positions = sequence_inputs(prompt_ids, prompt_mask, response_ids, response_mask)
        hidden = decoder(input_ids=input_ids, attention_mask=attention, position_ids=positions).last_hidden_state
        return hidden[:, P - 1 : -1]  # (B, P + T, H) -> (B, T, H)
    from transformers import DynamicCache

    unique_mask = unique >= 0  # (U, P)
    unique_positions = (unique_mask.long().cumsum(dim=1) - 1).clamp(min=0)
    cache = DynamicCache(config=decoder.config)
    prompt_hidden = decoder(input_ids=unique.clamp(min=0), attention_mask=unique_mask.long(),
                            position_ids=unique_positions, past_key_values=cache, use_cache=True).last_hidden_state
    for layer in cache.layers:  # (U, heads, P, d) -> (B, heads, P, d)
        layer.keys, layer.values = layer.keys[inverse], layer.values[inverse]
    _, attention, positions = sequence_inputs(prompt_ids, prompt_mask, response_ids, response_mask)
    response_hidden = decoder(input_ids=response_ids, attention_mask=attention, position_ids=positions[:, P:],
                              past_key_values=cache, use_cache=True).last_hidden_state  # (B, T, H)
    return torch.cat([prompt_hidden[inverse, -1:], response_hidden[:, :-1]], dim=1)  # (B, T, H)
