"""Which draws of a prompt become seeds and base rows in RRPO/SRPO group construction (no model).

For one prompt the sampler draws fresh full rollouts, at most `max_draws` (12). Walking them in order, the
first failures become the seeds (never trained on) and the other draws fill the base group until it holds
`base` rows (extra draws are dropped). With no failure in `max_draws` draws (fewer failures than the split
needs seeds), the prompt falls back to one plain group of `seeds * continuations + base` rows, taken from
its draws (i.i.d. samples of the current policy, so reusing them costs no bias and saves generation; the
SRPO code draws fresh ones).

Splits (docs/methods.md sec. 4): `1x4` one seed, a base group of 4 and 4 continuations (8 trained rows);
`2x4` two seeds with 4 continuations each, no base group; `1x8` one seed and 8 continuations;
`nomask` is `1x4` whose suffix rows also train on their prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Split:
    seeds: int
    base: int
    continuations: int
    train_prefix: bool = False

    @property
    def rows(self) -> int:
        """Trained rows per prompt."""
        return self.base + self.seeds * self.continuations


SPLITS: dict[str, Split] = {
    "1x4": Split(seeds=1, base=4, continuations=4),
    "2x4": Split(seeds=2, base=0, continuations=4),
    "1x8": Split(seeds=1, base=0, continuations=8),
    "nomask": Split(seeds=1, base=4, continuations=4, train_prefix=True),
}


@dataclass(frozen=True)
class ResetPlan:
    seeds: tuple[int, ...]
    """Indices of the draws that are seeds (in draw order)."""
    base: tuple[int, ...]
    """Indices of the draws in the base group (or, for a fallback, the plain group)."""
    complete: bool
    """Seeds and base are complete (no more draws are needed)."""
    fallback: bool
    """No seed within `max_draws`: the prompt is a plain group."""


def plan(correct: Sequence[bool], split: Split, max_draws: int = 12) -> ResetPlan:
    """The plan for a prompt whose draws so far have verdicts `correct` (in draw order).

    While the plan is incomplete and fewer than `max_draws` draws exist, the sampler draws more and plans
    again; at `max_draws` an incomplete plan becomes a fallback.
    """
    seeds: list[int] = []
    base: list[int] = []
    for index, ok in enumerate(correct[:max_draws]):
        if not ok and len(seeds) < split.seeds:
            seeds.append(index)
        elif len(base) < split.base:
            base.append(index)
        if len(seeds) == split.seeds and len(base) == split.base:
            return ResetPlan(tuple(seeds), tuple(base), complete=True, fallback=False)
    if len(correct) < max_draws:
        return ResetPlan(tuple(seeds), tuple(base), complete=False, fallback=False)
    plain = tuple(range(min(split.rows, len(correct))))
    return ResetPlan((), plain, complete=True, fallback=True)


def draws_needed(correct: Sequence[bool], split: Split, max_draws: int = 12) -> int:
    """How many more draws to request in the next batched round, never past `max_draws`.

    At least the places still missing (seeds + base rows, the best case), and at least as many draws as
    exist (doubling), so a prompt that keeps succeeding reaches its 12 draws in three rounds, not eight:
    resets cost some extra tokens (all counted) rather than many sequential generation calls.
    """
    current = plan(correct, split, max_draws)
    if current.complete:
        return 0
    missing = (split.seeds - len(current.seeds)) + (split.base - len(current.base))
    return min(max(missing, len(correct)), max_draws - len(correct))
