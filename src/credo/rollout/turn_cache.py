"""Multi-turn generation that keeps each episode's KV cache from one turn to the next.

`credo.rollout.episodes.sample_episodes` generates each episode's next turn after its whole context: its prompt,
its turns and the environment's observations. A stateless backend call (`generate`) encodes that context again at
every turn, so an episode of T turns encodes its early tokens T times: on the agent testbed (6-step chains, about
10 turns an episode) re-encoding was 63% of an agent's training step. A `TurnSession` keeps every episode's keys and
values in a static cache across turns, so each turn encodes only what came since the episode's last forward pass:
the last token of its previous turn and the observation after it.

**Layout.** Episodes sit in chunks of at most `batch_size` rows, one static cache each, whose slots are shared in
time: a turn appends one block for what is new (each row's new tokens right-aligned in it, padding before them)
and one slot per decoding step. `valid` marks each row's own slots; padding, and the steps a row sat out after its
turn ended while others went on, are holes its attention mask hides. A token's position counts only its row's own
tokens, so its rotary embedding is the one it has in the episode's unbroken sequence: a turn's distribution is the
stateless path's up to float rounding (tests: greedy episodes equal token for token, token probabilities within
1e-5). The first turn is encoded as `generate` encodes a prompt (`shared_prompt_cache`: a group's shared context once,
copied to its rows). Holes cost attention over a cache somewhat longer than the longest episode; an episode that
stops leaves its chunk at the next turn.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from credo.hf_compat import cache_keyword
from credo.rollout.crn import CommonRandomNumbers
from credo.rollout.generate import (
    GROW_TOKENS,
    cache_capacity,
    decode,
    eval_mode,
    grow_cache,
    shared_prompt_cache,
)
from credo.rollout.padding import left_pad


@dataclass
class _Chunk:
    """Up to `batch_size` episodes sharing one static cache."""

    rows: list[int]
    """The session's row of each cache row."""
    cache: Any
    valid: Tensor
    """(n, S) bool: each row's own slots among the S the cache has filled."""
    pending: list[list[int]]
    """Each row's tokens not yet through the model (at least its last token: the one decoding starts from)."""

    def keep(self, indices: list[int]) -> None:
        """Only these cache rows stay (the others' episodes have stopped)."""
        if len(indices) == len(self.rows):
            return
        index = torch.tensor(indices, dtype=torch.long, device=self.valid.device)
        for layer in self.cache.layers:
            if getattr(layer, "is_initialized", True):
                layer.keys, layer.values = layer.keys[index], layer.values[index]
        self.rows = [self.rows[i] for i in indices]
        self.valid = self.valid[index]
        self.pending = [self.pending[i] for i in indices]


class TurnSession:
    """Episodes' KV caches kept across turns: `turn` generates the next turn of the given episodes, `observe` appends
    an environment's tokens to one. Built by `TransformersBackend.open_turns` (see the module's docstring)."""

    def __init__(self, model, tokenizer, contexts: Sequence[list[int]], *, repeat: int, batch_size: int,
                 end_ids: Collection[int], stop: list[str], common_random_numbers: CommonRandomNumbers | None = None,
                 cuda_graphs: bool = True) -> None:
        """`contexts[i]` is the start of rows `i * repeat` to `i * repeat + repeat - 1` (a prompt, and any turns a
        continued episode starts from); every row's context must be non-empty. With `common_random_numbers`, each
        turn's call draws its rows' keys (`CommonRandomNumbers.keys`) as a `generate` call does."""
        self.model, self.tokenizer, self.end_ids, self.stop = model, tokenizer, list(end_ids), stop
        self.common_random_numbers, self.cuda_graphs = common_random_numbers, cuda_graphs
        self.chunks: list[_Chunk] = []
        per_chunk = max(1, batch_size // repeat)
        with torch.no_grad(), eval_mode(model):
            for start in range(0, len(contexts), per_chunk):
                self.chunks.append(self._first_chunk(list(contexts[start: start + per_chunk]), start, repeat))
        self._where = self._locate()

    def _first_chunk(self, contexts: list[list[int]], start: int, repeat: int) -> _Chunk:
        """Rows `start * repeat` on of `contexts`, each context but its last token encoded once for its `repeat`
        rows, as `generate` encodes prompts."""
        device = next(self.model.parameters()).device
        ids, mask = left_pad(contexts, self.tokenizer.pad_token_id)
        ids, mask = ids.to(device), mask.to(device)
        cache = shared_prompt_cache(self.model, ids, mask.long(), repeat, ids.shape[1] - 1 + GROW_TOKENS)
        rows = list(range(start * repeat, (start + len(ids)) * repeat))
        last = ids[:, -1].repeat_interleave(repeat).tolist()
        return _Chunk(rows, cache, mask[:, :-1].repeat_interleave(repeat, dim=0), [[token] for token in last])

    def _locate(self) -> dict[int, tuple[_Chunk, int]]:
        return {row: (chunk, i) for chunk in self.chunks for i, row in enumerate(chunk.rows)}

    def observe(self, row: int, ids: list[int]) -> None:
        """Episode `row`'s environment answered with `ids`: they precede its next turn."""
        chunk, i = self._where[row]
        chunk.pending[i] += ids

    @torch.no_grad()
    def turn(self, rows: Sequence[int], limits: Sequence[int], *, temperature: float, top_p: float, greedy: bool,
             stop: list[str]) -> dict[int, tuple[list[int], list[float], list[float], bool]]:
        """The next turn of each of `rows` (at most `limits[k]` tokens for `rows[k]`): its token ids, their
        probabilities and their distributions' entropies, and whether it ended (an end token or a stop string). The
        session's other episodes have stopped: they leave it."""
        limit_of = dict(zip(rows, limits, strict=True))
        crn = self.common_random_numbers
        keys = None if crn is None or greedy else crn.keys(len(rows))
        key_of = {} if keys is None else dict(zip(rows, keys, strict=True))
        out = {}
        with eval_mode(self.model):
            for chunk in self.chunks:
                chunk.keep([i for i, row in enumerate(chunk.rows) if row in limit_of])
                if not chunk.rows:
                    continue
                chunk_keys = (None if keys is None
                              else torch.stack([key_of[row] for row in chunk.rows]).to(chunk.valid.device))
                results = self._chunk_turn(chunk, [limit_of[row] for row in chunk.rows], chunk_keys,
                                           temperature=temperature, top_p=top_p, greedy=greedy,
                                           stop=[*self.stop, *stop])
                out.update(zip(chunk.rows, results))
        self.chunks = [chunk for chunk in self.chunks if chunk.rows]
        self._where = self._locate()
        return out

    def _chunk_turn(self, chunk: _Chunk, limits: list[int], keys: Tensor | None, **sampling):
        """One chunk's next turn: encode each row's pending tokens but the last into a new block of slots, decode from
        the last, and record which of the decoding steps' slots are each row's."""
        cache, device = chunk.cache, chunk.valid.device
        width = max(len(tokens) for tokens in chunk.pending)
        ids, fresh = left_pad(chunk.pending, self.tokenizer.pad_token_id)  # right-aligned in the new block
        ids, fresh = ids.to(device), fresh.to(device)
        mask = torch.cat([chunk.valid, fresh], dim=1)  # (n, P): P - 1 filled slots, then each row's last token
        if width > 1:
            self._encode(cache, ids[:, :-1], mask[:, :-1])
        results = decode(self.model, self.tokenizer, ids, mask.long(), cache, max_new_tokens=max(limits),
                         limits=limits, compact=False, end_ids=self.end_ids, keys=keys,
                         cuda_graphs=self.cuda_graphs, **sampling)
        steps = max(len(tokens) for tokens, *_ in results)
        fed = torch.zeros(len(limits), steps, dtype=torch.bool, device=device)
        for i, (tokens, *_) in enumerate(results):
            fed[i, :len(tokens)] = True  # the last pending token, then the turn's tokens but its last
        chunk.valid = torch.cat([mask[:, :-1], fed], dim=1)
        chunk.pending = [[tokens[-1]] for tokens, *_ in results]
        return results

    def _encode(self, cache, ids: Tensor, mask: Tensor) -> None:
        """Run the rows' new tokens `ids` (n, W) through the model into the cache's next W slots; `mask` (n, S + W)
        marks each row's own slots, the new ones included."""
        needed = mask.shape[1]
        capacity = cache_capacity(cache)
        if needed > capacity:
            capacity = grow_cache(cache, needed - capacity + GROW_TOKENS)
        attention = torch.zeros(len(ids), capacity, dtype=torch.long, device=ids.device)
        attention[:, :needed] = mask
        positions = (mask.long().cumsum(dim=1) - 1).clamp(min=0)[:, -ids.shape[1]:]
        self.model(input_ids=ids, attention_mask=attention, position_ids=positions,
                   **{cache_keyword(self.model): cache}, use_cache=True, logits_to_keep=1)

