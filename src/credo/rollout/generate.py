"""Batched generation with transformers (KV cache, temperature / top-p or greedy, stop strings)."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

from credo.hf_compat import cache_keyword
from credo.rollout.crn import sample_by_inversion, uniforms
from credo.rollout.decode_step import DecodeStep
from credo.rollout.padding import left_pad, right_pad


@dataclass
class Completions:
    """Prompts and their sampled responses as padded tensors (prompts left-padded, responses right-padded)."""

    prompt_ids: Tensor  # (N, P)
    prompt_mask: Tensor  # (N, P) bool
    response_ids: Tensor  # (N, T)
    response_mask: Tensor  # (N, T) bool, left-aligned
    texts: list[str]
    """Decoded responses without special tokens."""
    truncated: Tensor  # (N,) bool: stopped by max_new_tokens, not by an end token or a stop string
    token_probs: Tensor | None = None
    """(N, T) float: each response token's probability under the temperature-scaled distribution it was drawn
    from (before top-p's cut), 0 off the response; None where the backend does not record it."""
    entropies: Tensor | None = None
    """(N, T) float: the entropy of that distribution (the behaviour policy's uncertainty at each token, as the
    trainer scores `entropy`), 0 off the response; None where the backend does not record it."""

    @property
    def tokens(self) -> int:
        return int(self.response_mask.sum())

    def id_lists(self) -> list[list[int]]:
        """Each response's token ids, without padding (TRL's `completion_ids`)."""
        return [ids[mask].tolist() for ids, mask in zip(self.response_ids, self.response_mask)]

    @classmethod
    def from_lists(cls, prompts: list[list[int]], responses: list[list[int]], texts: list[str],
                   truncated: list[bool], pad: int, probs: list[list[float]] | None = None,
                   entropies: list[list[float]] | None = None) -> Completions:
        """Pad token lists: prompts on the left, responses (and their tokens' `probs` and `entropies`, if given)
        on the right."""
        prompt_ids, prompt_mask = left_pad(prompts, pad)
        response_ids, response_mask = right_pad(responses, pad)
        return cls(prompt_ids, prompt_mask, response_ids, response_mask, texts, torch.tensor(truncated),
                   *(None if values is None else per_token(values, response_ids.shape[1], 0.0, torch.float32)
                     for values in (probs, entropies)))


def per_token(values: Sequence[Sequence[float | int]], width: int, fill: float, dtype: torch.dtype) -> Tensor:
    """(N, width) tensor of each row's per-token `values`, left-aligned, `fill` after them."""
    table = torch.full((len(values), width), fill, dtype=dtype)
    for n, row in enumerate(values):
        table[n, : len(row)] = torch.tensor(row, dtype=dtype)
    return table


def encode_prompts(tokenizer, messages: list[str]) -> list[list[int]]:
    """Token ids of each prompt under the model's chat template (with the generation prompt).

    A prompt is a user message (a string), or a `credo.tasks.ChatPrompt`, whose whole conversation is rendered;
    its system message is folded into the first user message where the template has no system role
    (`credo.tasks.chat`). Without a chat template a string is encoded as it is, a ChatPrompt as its messages'
    contents joined by blank lines."""
    from credo.tasks.chat import ChatPrompt, plain_text, render_chats, system_role, template_messages

    if tokenizer.chat_template is None:
        return tokenizer([plain_text(m) for m in messages], add_special_tokens=True)["input_ids"]
    system = any(isinstance(m, ChatPrompt) and m.messages[0]["role"] == "system" for m in messages) \
        and system_role(tokenizer)
    texts = render_chats(tokenizer, [template_messages(m, system) for m in messages], add_generation_prompt=True)
    return tokenizer(texts, add_special_tokens=False)["input_ids"]  # the template holds any BOS itself


def end_token_ids(model, tokenizer) -> list[int]:
    """Every token id that ends a response: the tokenizer's end token and each end-of-turn id the model's
    generation config declares (`generation_config.eos_token_id`, an int or a list: Qwen2.5's instruct models
    list `<|im_end|>` and `<|endoftext|>`), in that order, without repeats."""
    ids: list[int] = []
    declared = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (tokenizer.eos_token_id, declared):
        ids += [int(i) for i in (value if isinstance(value, (list, tuple)) else [value]) if i is not None]
    return list(dict.fromkeys(ids))


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
    end_ids: Collection[int] | None = None,
    keys: Tensor | None = None,
    cuda_graphs: bool = True,
) -> Completions:
    """Sample `repeat` responses per prompt (rows in prompt order: prompt 0's samples first).

    Each prompt's KV cache is computed once and copied to its samples instead of re-encoding the prompt per
    sample (a group's prompt, a reset's prefix), into a static cache; `decode` then samples token by token.
    Randomness: torch's global RNG, or with `keys` (one int64 key per response row,
    `credo.rollout.crn.CommonRandomNumbers.keys`) the keyed uniforms of common random numbers. A response ends
    after the first end token it samples (kept: the model learns to stop), one of `end_ids` (default
    `end_token_ids(model, tokenizer)`: the tokenizer's end token and the end-of-turn ids the model's generation
    config declares), or at the end of a stop string (kept), or is cut at `max_new_tokens` (`truncated`).
    Each response token's probability under the temperature-scaled distribution is kept (`token_probs`), and
    that distribution's entropy (`entropies`).
    On a GPU each decoding step replays a CUDA graph unless `cuda_graphs` is off (`credo.rollout.decode_step`).
    """
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id
    ends = list(end_token_ids(model, tokenizer) if end_ids is None else end_ids)
    responses: list[list[int]] = []
    probs: list[list[float]] = []
    entropies: list[list[float]] = []
    truncated: list[bool] = []
    per_call = max(1, batch_size // repeat)
    for start in range(0, len(prompts), per_call):
        ids, mask = left_pad(prompts[start : start + per_call], pad)
        ids, mask = ids.to(device), mask.long().to(device)
        cache = shared_prompt_cache(model, ids, mask, repeat, ids.shape[1] + min(max_new_tokens, GROW_TOKENS))
        rows_keys = None if keys is None else keys[start * repeat : (start + len(ids)) * repeat].to(device)
        rows = decode(model, tokenizer, ids.repeat_interleave(repeat, dim=0), mask.repeat_interleave(repeat, dim=0),
                      cache, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, greedy=greedy,
                      stop=list(stop or []), end_ids=ends, keys=rows_keys, cuda_graphs=cuda_graphs)
        for response, response_probs, response_entropies, done in rows:
            responses.append(response)
            probs.append(response_probs)
            entropies.append(response_entropies)
            truncated.append(not done)
    texts = tokenizer.batch_decode(responses, skip_special_tokens=True)
    return Completions.from_lists([p for p in prompts for _ in range(repeat)], responses, texts, truncated, pad,
                                  probs, entropies)


COMPACT_AT = 0.75
"""`decode` drops finished rows from the batch and the cache once at most this share of the rows it last
kept are still running."""
GROW_TOKENS = 64
"""The static cache holds the prompt and this many response positions at first and grows by as many whenever
decoding reaches its end (`grow_cache`), so each step attends over the filled positions and fewer than this many
empty ones, not over the whole response budget: at a 448-token budget, attention over the full cache took 40% of
a decoding step on CPU and 42% of the GPU's time (docs/results/gpu.md)."""


def decode(model, tokenizer, ids: Tensor, mask: Tensor, cache, *, max_new_tokens: int, temperature: float,
           top_p: float, greedy: bool, stop: list[str], end_ids: Collection[int],
           keys: Tensor | None = None, limits: Sequence[int] | None = None, compact: bool = True,
           cuda_graphs: bool = True) -> list[tuple[list[int], list[float], list[float], bool]]:
    """Sample up to `max_new_tokens` after left-padded prompts `ids` (N, P) whose all-but-last tokens are in
    the static `cache` (`mask` (N, P) marks each row's own positions; only `ids`' last column is read); returns
    each row's response tokens, their probabilities under the temperature-scaled distribution and that
    distribution's entropy at each (`token_statistics`), and whether it ended (one of `end_ids`, or a stop
    string). With `keys` (N,), row r's token t is drawn with the uniform `crn.uniforms(keys[r], t)`. With
    `limits` (N,), row r stops after `limits[r]` tokens (at most `max_new_tokens`); without `compact`, finished
    rows stay in the batch and the cache (a turn session keeps every row's cache for its next turn,
    `credo.rollout.turn_cache`).

    A plain loop of forward passes over the cache, one token per step, rather than transformers' `generate`:
    its per-step set-up (logits processors, stopping criteria, input preparation) cost as much as a small
    model's forward pass (benchmarks/vs_trl.py). Rows that have finished leave the batch and the cache
    (`COMPACT_AT`), so the late steps of a batch with a few long responses run on those rows only. Each step's
    forward pass is a `credo.rollout.decode_step.DecodeStep`: on a GPU, a replayed CUDA graph (`cuda_graphs`).
    """
    ends = frozenset(end_ids)
    forward = DecodeStep(model, cache, graphs=cuda_graphs)
    N, P = mask.shape
    attention = torch.zeros(N, P + max_new_tokens, dtype=torch.long, device=ids.device)  # (N, L): the cache's length
    attention[:, :P] = mask
    positions = mask.sum(dim=1, keepdim=True) - 1  # (N, 1): the last prompt token's position
    token = ids[:, -1:]  # (N, 1)
    live = torch.arange(N, device=ids.device)  # the original row of each row still in the batch
    kept = N
    limit = [max_new_tokens] * N if limits is None else list(limits)
    finished = [False] * N  # ended, or at its limit
    tokens: list[list[int]] = [[] for _ in range(N)]
    probs: list[list[float]] = [[] for _ in range(N)]
    entropies: list[list[float]] = [[] for _ in range(N)]
    texts = [""] * N
    ended = [False] * N
    for step in range(max_new_tokens):
        attention[:, P - 1 + step] = 1
        capacity = cache_capacity(cache)
        if P + step > capacity:
            capacity = grow_cache(cache, min(GROW_TOKENS, P + max_new_tokens - capacity))
        logits = forward(token, attention[:, :capacity], positions)  # (n, V)
        u = None if keys is None or greedy else uniforms(keys[live], step)
        token = pick_tokens(logits, temperature=temperature, top_p=top_p, greedy=greedy, u=u)  # (n, 1)
        stats = token_statistics(logits, token, 1.0 if greedy else temperature)  # (n, 2)
        picked = torch.cat([token.double(), stats.double()], dim=1).tolist()  # one transfer per step
        running = []
        for index, (row, (value, prob, entropy)) in enumerate(zip(live.tolist(), picked)):
            if finished[row]:
                continue  # finished at an earlier step, still in the batch until the next compaction
            value = int(value)
            tokens[row].append(value)
            probs[row].append(prob)
            entropies[row].append(entropy)
            if stop:
                texts[row] += tokenizer.decode([value])
            ended[row] = value in ends or any(s in texts[row] for s in stop)
            finished[row] = ended[row] or len(tokens[row]) >= limit[row]
            if not finished[row]:
                running.append(index)
        if not running:
            break
        if compact and len(running) <= COMPACT_AT * kept:
            index = torch.tensor(running, device=ids.device)
            for layer in cache.layers:
                layer.keys, layer.values = layer.keys[index], layer.values[index]
            attention, positions, token, live = attention[index], positions[index], token[index], live[index]
            kept = len(running)
        positions = positions + 1
    return [(tokens[row], probs[row], entropies[row], ended[row]) for row in range(N)]


def cache_capacity(cache) -> int:
    """The positions a static cache holds (each layer the same)."""
    return cache.layers[0].max_cache_len


def grow_cache(cache, extra: int) -> int:
    """Add `extra` empty positions to every layer of a static cache (a layer not yet filled allocates its tensors
    at the new length); returns the new capacity. The cache's masks follow its layers' `max_cache_len`."""
    for layer in cache.layers:
        if getattr(layer, "is_initialized", False):
            keys, values = layer.keys, layer.values
            layer.keys = torch.cat([keys, keys.new_zeros(*keys.shape[:2], extra, keys.shape[3])], dim=2)
            layer.values = torch.cat([values, values.new_zeros(*values.shape[:2], extra, values.shape[3])], dim=2)
        layer.max_cache_len += extra
    return cache_capacity(cache)


def pick_tokens(logits: Tensor, *, temperature: float, top_p: float, greedy: bool, u: Tensor | None = None) -> Tensor:
    """(n, 1) next tokens: the argmax, or a sample at `temperature` from the top-p nucleus (the smallest set
    of tokens whose probability reaches `top_p`, the most likely token always in it): by inversion with the
    uniforms `u` (n,) where given (`credo.rollout.crn`), else `torch.multinomial`."""
    if greedy:
        return logits.argmax(dim=-1, keepdim=True)
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        outside = sorted_probs.cumsum(dim=-1) - sorted_probs >= top_p  # mass before a token already reaches p
        probs = probs.scatter(-1, order, sorted_probs.masked_fill(outside, 0.0))
    return torch.multinomial(probs, 1) if u is None else sample_by_inversion(probs, u)


def token_statistics(logits: Tensor, token: Tensor, temperature: float) -> Tensor:
    """(n, 2): each row's `token` (n, 1) probability under `p = softmax(logits / temperature)` and the entropy
    `-sum_v p_v log p_v` of `p` (clamped at 0 against round-off), both of the whole distribution, before top-p's
    cut, as `credo.logprobs` scores `entropy` (`decode` reads greedy tokens at temperature 1)."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    entropy = (-(logp.exp() * logp).sum(dim=-1)).clamp(min=0.0)
    return torch.stack([logp.gather(-1, token)[:, 0].exp(), entropy], dim=1)


def shared_prompt_cache(model, ids: Tensor, mask: Tensor, repeat: int, max_length: int):
    """A static KV cache of `max_length` positions (`decode` grows it as it fills) holding every prompt but its
    last token, computed once per prompt and copied to its `repeat` samples.

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
              **{cache_keyword(model): prefill}, use_cache=True)
        where = torch.arange(ids.shape[1] - 1, device=ids.device)
        for index, layer in enumerate(prefill.layers):
            cache.update(layer.keys.repeat_interleave(repeat, dim=0), layer.values.repeat_interleave(repeat, dim=0),
                         index, {"cache_position": where})
    return cache


@contextmanager
def eval_mode(model) -> Iterator[None]:
    """The model in eval mode (no dropout) while it samples or scores, then back in the mode it was in."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def cut_response(row: list[int], eos: int | Collection[int], pad: int, tokenizer,
                 stop: list[str]) -> tuple[list[int], bool]:
    """The response tokens up to and including the first end token (`eos`: one id, or every id that ends a
    response, `end_token_ids`) or the token that completes a stop string, whichever comes first (as `decode`
    stops)."""
    ends = frozenset([eos] if isinstance(eos, int) else eos)
    text = ""
    for i, token in enumerate(row):
        if token in ends:
            return row[: i + 1], True
        if stop:
            text += tokenizer.decode([token])
            if any(s in text for s in stop):
                return row[: i + 1], True
    while row and row[-1] == pad and pad not in ends:
        row = row[:-1]
    return row, False
