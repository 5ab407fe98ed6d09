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

    @classmethod
    def from_lists(cls, prompts: list[list[int]], responses: list[list[int]], texts: list[str],
                   truncated: list[bool], pad: int) -> Completions:
        """Pad token lists: prompts on the left, responses on the right."""
        prompt_ids, prompt_mask = left_pad(prompts, pad)
        response_ids, response_mask = right_pad(responses, pad)
        return cls(prompt_ids, prompt_mask, response_ids, response_mask, texts, torch.tensor(truncated))


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
    repeat: int = 1,
) -> Completions:
    """Sample `repeat` responses per prompt (rows in prompt order: prompt 0's samples first).

    Each prompt's KV cache is computed once and copied to its samples instead of re-encoding the prompt per
    sample (a group's prompt, a reset's prefix), into a static cache; `decode` then samples token by token.
    Randomness: torch's global RNG. A response ends after the tokenizer's end token (kept: the model learns
    to stop) or at the end of a stop string (kept), or is cut at `max_new_tokens` (`truncated`).
    """
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id
    responses: list[list[int]] = []
    truncated: list[bool] = []
    per_call = max(1, batch_size // repeat)
    for start in range(0, len(prompts), per_call):
        ids, mask = left_pad(prompts[start : start + per_call], pad)
        ids, mask = ids.to(device), mask.long().to(device)
        cache = shared_prompt_cache(model, ids, mask, repeat, ids.shape[1] + max_new_tokens)
        rows = decode(model, tokenizer, ids.repeat_interleave(repeat, dim=0), mask.repeat_interleave(repeat, dim=0),
                      cache, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, greedy=greedy,
                      stop=list(stop or []))
        for response, done in rows:
            responses.append(response)
            truncated.append(not done)
    texts = tokenizer.batch_decode(responses, skip_special_tokens=True)
    return Completions.from_lists([p for p in prompts for _ in range(repeat)], responses, texts, truncated, pad)


COMPACT_AT = 0.75
"""`decode` drops finished rows from the batch and the cache once at most this share of the rows it last
kept are still running."""


def decode(model, tokenizer, ids: Tensor, mask: Tensor, cache, *, max_new_tokens: int, temperature: float,
           top_p: float, greedy: bool, stop: list[str]) -> list[tuple[list[int], bool]]:
    """Sample up to `max_new_tokens` after left-padded prompts `ids` (N, P) whose all-but-last tokens are in
    the static `cache`; returns each row's response tokens and whether it ended (end token or stop string).

    A plain loop of forward passes over the cache, one token per step, rather than transformers' `generate`:
    its per-step set-up (logits processors, stopping criteria, input preparation) cost as much as a small
    model's forward pass (benchmarks/vs_trl.py). Rows that have finished leave the batch and the cache
    (`COMPACT_AT`), so the late steps of a batch with a few long responses run on those rows only.
    """
    eos = tokenizer.eos_token_id
    N, P = ids.shape
    attention = torch.zeros(N, P + max_new_tokens, dtype=torch.long, device=ids.device)  # (N, L): the cache's length
    attention[:, :P] = mask
    positions = mask.sum(dim=1, keepdim=True) - 1  # (N, 1): the last prompt token's position
    token = ids[:, -1:]  # (N, 1)
    live = torch.arange(N, device=ids.device)  # the original row of each row still in the batch
    kept = N
    tokens: list[list[int]] = [[] for _ in range(N)]
    texts = [""] * N
    ended = [False] * N
    for step in range(max_new_tokens):
        attention[:, P - 1 + step] = 1
        logits = model(input_ids=token, attention_mask=attention, position_ids=positions, past_key_values=cache,
                       use_cache=True, logits_to_keep=1).logits[:, -1].float()  # (n, V)
        token = pick_tokens(logits, temperature=temperature, top_p=top_p, greedy=greedy)  # (n, 1)
        running = []
        for index, (row, value) in enumerate(zip(live.tolist(), token[:, 0].tolist())):
            if ended[row]:
                continue  # finished at an earlier step, still in the batch until the next compaction
            tokens[row].append(value)
            if stop:
                texts[row] += tokenizer.decode([value])
            ended[row] = value == eos or any(s in texts[row] for s in stop)
            if not ended[row]:
                running.append(index)
        if not running:
            break
        if len(running) <= COMPACT_AT * kept:
            index = torch.tensor(running, device=ids.device)
            for layer in cache.layers:
                layer.keys, layer.values = layer.keys[index], layer.values[index]
            attention, positions, token, live = attention[index], positions[index], token[index], live[index]
            kept = len(running)
        positions = positions + 1
    return [(tokens[row], ended[row]) for row in range(N)]


def pick_tokens(logits: Tensor, *, temperature: float, top_p: float, greedy: bool) -> Tensor:
    """(n, 1) next tokens: the argmax, or a sample at `temperature` from the top-p nucleus (the smallest set
    of tokens whose probability reaches `top_p`, the most likely token always in it)."""
    if greedy:
        return logits.argmax(dim=-1, keepdim=True)
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        outside = sorted_probs.cumsum(dim=-1) - sorted_probs >= top_p  # mass before a token already reaches p
        probs = probs.scatter(-1, order, sorted_probs.masked_fill(outside, 0.0))
    return torch.multinomial(probs, 1)


def shared_prompt_cache(model, ids: Tensor, mask: Tensor, repeat: int, max_length: int):
    """A static KV cache of `max_length` positions holding every prompt but its last token, computed once
    per prompt and copied to its `repeat` samples.

    `generate` then feeds only the last prompt token of each sample before sampling. A static cache is
    written in place; transformers' dynamic cache grows by concatenation at every decoding step, which
    copies the whole cache each step and dominated CPU decoding of long sequences (see
    benchmarks/reset_prefix_reuse.py).
    """
    from transformers import DynamicCache, StaticCache

    cache = StaticCache(config=model.config, max_cache_len=max_length)
    if ids.shape[1] > 1:
        prefill = DynamicCache(config=model.config)
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=positions[:, :-1],
              past_key_values=prefill, use_cache=True)
        where = torch.arange(ids.shape[1] - 1, device=ids.device)
        for index, layer in enumerate(prefill.layers):
            cache.update(layer.keys.repeat_interleave(repeat, dim=0), layer.values.repeat_interleave(repeat, dim=0),
                         index, {"cache_position": where})
    return cache


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


class TransformersBackend:
    """The generation backend the samplers call: a transformers model and its tokenizer.

    Samplers only need `tokenizer` and `generate(prompts, ...)`, so a scripted policy (tests) or another
    engine (`credo.rollout.vllm_backend.VllmBackend`) can stand in for it. The model samples in eval mode
    (no dropout) and is put back in the mode it was in.
    """

    def __init__(self, model, tokenizer, *, batch_size: int = 256, stop: list[str] | None = None) -> None:
        self.model, self.tokenizer, self.batch_size, self.stop = model, tokenizer, batch_size, stop

    def generate(self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, greedy: bool = False, repeat: int = 1) -> Completions:
        was_training = self.model.training
        self.model.eval()
        try:
            return generate(
                self.model, self.tokenizer, prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                top_p=top_p, greedy=greedy, stop=self.stop, batch_size=self.batch_size, repeat=repeat,
            )
        finally:
            self.model.train(was_training)

    def sync_weights(self) -> None:
        """Nothing to do: this backend samples from the policy itself."""
