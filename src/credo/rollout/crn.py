"""Common random numbers for sampling: every draw keyed by where it happens, so paired runs share their noise.

A variance-reduction device for paired comparisons (common random numbers, e.g. Glasserman & Yao 1992,
"Some guidelines and guarantees for common random numbers"). Each response row of a `generate` call gets a
key from (run seed, scope, the call's index within the scope, the row's index in the call); the trainer's
scope is (train, step) and the evaluation's (eval, step). Token `t` of a row is then sampled by inversion
with the uniform `U(key, t)`: the token whose interval of the cumulative distribution (tokens in id order)
holds `U`. Inversion draws exactly from the distribution, as `torch.multinomial` does; what changes is the
coupling: two runs on the same seed draw the same uniforms for the same rows whatever happened before (how
many rows finished, how many calls another method's sampler made in an earlier step), so two methods' first
batches are identical and later batches agree wherever the policies put `U` in the same token's interval:
per token with probability at least 1 - sum_i |F_p(i) - F_q(i)| (F the cumulative distributions), against
sum_i p_i q_i for independent draws.

The uniforms come from a counter-based hash (Wellons' `lowbias32` on 32-bit words in int64 tensors) rather
than a stateful generator, so a row's draw depends on its key and position only, on any device.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

WORD = 0xFFFFFFFF
TRAIN, EVAL = 1, 2
"""The scopes' first word: rollouts of a training step, and the evaluation after a step."""


def hash32(x: Tensor) -> Tensor:
    """Wellons' lowbias32 on the low 32 bits of an int64 tensor (a bijection of 32-bit words)."""
    x = x & WORD
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & WORD
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & WORD
    return x ^ (x >> 16)


def mix(key: Tensor, *words: int | Tensor) -> Tensor:
    """Fold `words` into `key`, one hash per word (int64 tensors of 32-bit words; broadcasts)."""
    for word in words:
        key = hash32(key ^ hash32(torch.as_tensor(word, dtype=torch.long, device=key.device) + 0x9E3779B9))
    return key


def uniforms(keys: Tensor, position: int) -> Tensor:
    """(n,) float64 uniforms in (0, 1), one per row key, for token `position` of each row."""
    return (mix(keys, position).double() + 0.5) / 2.0**32


@dataclass
class CommonRandomNumbers:
    """The keys of a run's sampling calls: `begin(scope...)` opens a scope, each call then takes the next keys.

    Row `r` of the scope's call `c` has the key mix(seed, *scope, c, r). The backend asks for one key per
    response row (`keys`); rows of one prompt's `repeat` samples are consecutive, as `generate` lays them out.
    """

    seed: int
    scope: tuple[int, ...] = (0,)
    calls: int = field(default=0, init=False)

    def begin(self, *scope: int) -> None:
        self.scope, self.calls = scope, 0

    def keys(self, rows: int, device: torch.device | str = "cpu") -> Tensor:
        """(rows,) int64 keys for the next call in the scope."""
        base = mix(torch.tensor(self.seed & WORD, device=device), *self.scope, self.calls)
        self.calls += 1
        return mix(base, torch.arange(rows, device=device))


def sample_by_inversion(probs: Tensor, u: Tensor) -> Tensor:
    """(n, 1) tokens: row i's token is the first whose cumulative probability exceeds u_i times the row's total
    (tokens in id order; rows need not be normalised, e.g. a nucleus with the tail zeroed)."""
    cdf = probs.double().cumsum(dim=-1)
    target = (u.to(cdf.device) * cdf[:, -1]).unsqueeze(-1)
    token = torch.searchsorted(cdf, target, right=True)
    return token.clamp(max=probs.shape[-1] - 1)
