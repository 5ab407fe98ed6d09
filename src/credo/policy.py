"""The policy's token log-probs, and statistics of its next-token distributions, for a batch of prompts and
responses (chunked over tokens), and the frozen reference policy of a KL penalty (`ReferencePolicy`)."""

from __future__ import annotations

import contextlib
from collections.abc import Collection

import torch
from torch import Tensor

from credo.hf_compat import cache_keyword
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
    statistics: Collection[str] = (),
    autocast: bool = False,
) -> tuple[Tensor, dict[str, Tensor]]:
    """(B, T) log-probs of the response tokens under `model` at `temperature`, and the requested `statistics`
    of the next-token distributions, each (B, T) (`credo.logprobs.STATISTICS`: entropies, sums of squares).

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
        logp, stats = policy_logprobs(
            model, prompt_ids[:, first:], prompt_mask[:, first:], response_ids[:, :width], response_mask[:, :width],
            temperature=temperature, chunk_tokens=chunk_tokens, statistics=statistics, autocast=autocast,
        )
        pad = (0, T - width)
        return torch.nn.functional.pad(logp, pad), {name: torch.nn.functional.pad(v, pad) for name, v in stats.items()}
    with torch.autocast(device_type=prompt_ids.device.type, dtype=torch.bfloat16, enabled=autocast):
        predicting = decoder_states(model.get_decoder(), prompt_ids, prompt_mask, response_ids, response_mask)
    head = model.get_output_embeddings()
    return token_logprobs(
        predicting, head.weight, response_ids, temperature=temperature, chunk_tokens=chunk_tokens,
        statistics=statistics, bias=head.bias,
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
    keyword = cache_keyword(decoder)
    prompt_hidden = decoder(input_ids=unique.clamp(min=0), attention_mask=unique_mask.long(),
                            position_ids=unique_positions, **{keyword: cache}, use_cache=True).last_hidden_state
    for layer in cache.layers:  # (U, heads, P, d) -> (B, heads, P, d)
        layer.keys, layer.values = layer.keys[inverse], layer.values[inverse]
    _, attention, positions = sequence_inputs(prompt_ids, prompt_mask, response_ids, response_mask)
    response_hidden = decoder(input_ids=response_ids, attention_mask=attention, position_ids=positions[:, P:],
                              **{keyword: cache}, use_cache=True).last_hidden_state  # (B, T, H)
    return torch.cat([prompt_hidden[inverse, -1:], response_hidden[:, :-1]], dim=1)  # (B, T, H)


class ReferencePolicy:
    """The frozen starting policy a KL penalty measures against (`loss.kl_beta > 0`).

    A full-weight policy gets a copy of itself, made before its first update: in eval mode, without gradients,
    in the policy's dtype and on its device (one more model in memory). A LoRA (peft) policy gets no copy:
    its base weights never train, so the policy with its adapters disabled (`model.disable_adapter()`) is
    the starting model. `logprobs` scores responses under it with no grad.
    """

    def __init__(self, policy, *, lora: bool) -> None:
        self.lora = lora
        if lora:
            self.model = policy
        else:
            import copy

            self.model = copy.deepcopy(policy).eval().requires_grad_(False)

    def logprobs(self, prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor, response_mask: Tensor, *,
                 temperature: float, chunk_tokens: int, autocast: bool = False) -> Tensor:
        """(B, T) log-probs of the response tokens under the reference (`policy_logprobs`'s conventions)."""
        with torch.no_grad(), (self.model.disable_adapter() if self.lora else contextlib.nullcontext()):
            logp, _ = policy_logprobs(self.model, prompt_ids, prompt_mask, response_ids, response_mask,
                                      temperature=temperature, chunk_tokens=chunk_tokens, autocast=autocast)
        return logp

    def frozen_weights(self) -> dict[str, Tensor]:
        """The weights the reference computes with (the LoRA policy's base weights: those that never train)."""
        return {name: p for name, p in self.model.named_parameters() if not (self.lora and p.requires_grad)}

    def fingerprint(self) -> dict[str, float]:
        """A cheap summary of `frozen_weights` (tensors, float64 sums of values and magnitudes) that tells a
        resumed run whether `model.path` still holds its starting weights."""
        weights = self.frozen_weights().values()
        with torch.no_grad():
            return {
                "tensors": len(weights),
                "sum": sum(float(w.sum(dtype=torch.float64)) for w in weights),
                "abs_sum": sum(float(torch.linalg.vector_norm(w, 1, dtype=torch.float64)) for w in weights),
            }
