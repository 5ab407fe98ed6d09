"""Batched generation with transformers (KV cache, temperature / top-p or greedy, stop strings)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Completions:
    """Prompts and their sampled responses as padded tensors (prompts left-padded, responses right-padded)."""

    prompt_ids: Tensor  # (N, P)
    prompt_mask: Tensor  # (N, P) bool
    response_ids: Tensor  # (N, T)
    response_mask: Tensor  # (N, T) bool, left-aligned
    texts: list[str]
    """Decoded responses without special tokens."""
    truncated: Tensor  # (N,) bool: stopped by max_new_tokens, not by the end token or a stop string

    @property
    def tokens(self) -> int:
        return int(self.response_mask.sum())


def encode_prompts(tokenizer, messages: list[str]) -> list[list[int]]:
    """Token ids of each user message under the model's chat template (with the generation prompt)."""
    if tokenizer.chat_template is None:
        return tokenizer(messages, add_special_tokens=True)["input_ids"]
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": m}], tokenize=False, add_generation_prompt=True)
        for m in messages
    ]
    return tokenizer(texts, add_special_tokens=False)["input_ids"]  # the template holds any BOS itself


def left_pad(rows: list[list[int]], pad: int) -> tuple[Tensor, Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r) :] = True
    return ids, mask


def right_pad(rows: list[list[int]], pad: int) -> tuple[Tensor, Tensor]:
    width = max(1, max(len(r) for r in rows))
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = True
    return ids, mask


@torch.no_grad()
def generate(
    model,
    tokenizer,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    greedy: bool = False,
    stop: list[str] | None = None,
    batch_size: int = 256,
) -> Completions:
    """Sample one response per prompt (repeat a prompt to sample a group). Randomness: torch's global RNG.

    A response ends after the tokenizer's end token (kept: the model learns to stop) or at the end of a
    stop string (kept), or is cut at `max_new_tokens` (`truncated`).
    """
    device = next(model.parameters()).device
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    responses: list[list[int]] = []
    truncated: list[bool] = []
    stop = list(stop or [])
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        ids, mask = left_pad(chunk, pad)
        options = {"do_sample": False} if greedy else {"do_sample": True, "temperature": temperature, "top_p": top_p}
        if stop:
            options.update(stop_strings=stop, tokenizer=tokenizer)
        out = model.generate(
            input_ids=ids.to(device), attention_mask=mask.long().to(device), max_new_tokens=max_new_tokens,
            pad_token_id=pad, eos_token_id=eos, top_k=None, **options,
        )[:, ids.shape[1] :].tolist()
        for row in out:
            response, done = cut_response(row, eos, pad, tokenizer, stop)
            responses.append(response)
            truncated.append(not done)
    prompt_ids, prompt_mask = left_pad(prompts, pad)
    response_ids, response_mask = right_pad(responses, pad)
    texts = tokenizer.batch_decode(responses, skip_special_tokens=True)
    return Completions(prompt_ids, prompt_mask, response_ids, response_mask, texts, torch.tensor(truncated))


def cut_response(row: list[int], eos: int, pad: int, tokenizer, stop: list[str]) -> tuple[list[int], bool]:
    """The response tokens up to and including the end token or the token that completes a stop string."""
    if eos in row:
        return row[: row.index(eos) + 1], True
    if stop:
        text = ""
        for i, token in enumerate(row):
            text += tokenizer.decode([token])
            if any(s in text for s in stop):
                return row[: i + 1], True
    while row and row[-1] == pad and pad != eos:
        row = row[:-1]
    return row, False
