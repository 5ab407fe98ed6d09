"""The guessing game: a hidden number in a range, which the policy's guesses narrow down from feedback.

Its hidden state is what the turns must discover, and each guess's optimality is computable (a binary search's
worst case, `scorers/guess_env.py`): the per-turn checker of an environment whose turns are not steps of a
known solution. The turns are read behind the scorer sandbox.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from credo.tasks.base import Problem
from credo.tasks.environment import SandboxedEnvironment, rules_in_process

TURN_END = "</call>"
"""The marker that ends a guess."""


class GuessingEnvironment(SandboxedEnvironment):
    """Episodes of guesses at `problem.meta["secret"]` in `problem.meta["low"]..["high"]`."""

    def __init__(self, max_turns: int, turn_tokens: int = 24, step_seconds: float = 1.0) -> None:
        super().__init__("guess_env", TURN_END, max_turns, turn_tokens, step_seconds)

    def reset(self, problem: Problem) -> dict[str, Any]:
        return start_state(problem)


def start_state(problem: Problem) -> dict[str, Any]:
    """An episode's state: the range the secret lies in (all of it, at the start) and the secret."""
    meta = problem.meta
    if not meta["low"] <= meta["secret"] <= meta["high"]:
        raise ValueError(f"guessing problem {problem.prompt!r}: its secret {meta['secret']} is outside "
                         f"{meta['low']}..{meta['high']}")
    return {"lo": meta["low"], "hi": meta["high"], "secret": meta["secret"]}


def problems(seed: int, low: int, high: int) -> Iterator[Problem]:
    """An endless seeded stream of games: the secret uniform in `low..high`, the prompt naming the range."""
    rng = random.Random(seed)
    while True:
        secret = rng.randint(low, high)
        yield Problem(f"guess {low}..{high}?", str(secret), meta={"low": low, "high": high, "secret": secret})


_RULES = rules_in_process("guess_env")


def keyed_offsets(low: int, high: int, seed: int = 0) -> dict[int, int]:
    """The noisy player's misconceptions, one per range size `n` it can face (the decision types): an offset in
    -3..3 but 0 from the middle of the range, which it guesses instead of a best guess."""
    rng = random.Random(f"guess-keys-{seed}")
    return {n: rng.choice([-3, -2, -1, 1, 2, 3]) for n in range(1, high - low + 2)}


def noisy_guess(lo: int, hi: int, offsets: dict[int, int], p_misc: float, rng: random.Random) -> int:
    """The guess a noisy player makes in `lo..hi`: with probability `p_misc` the middle moved by its misconception
    for this range size (kept in the range; it may still happen to be a best guess), else the middle."""
    middle = (lo + hi) // 2
    if rng.random() < p_misc:
        return min(hi, max(lo, middle + offsets[hi - lo + 1]))
    return middle


def noisy_transcript(problem: Problem, offsets: dict[int, int], p_misc: float, rng: random.Random, *,
                     max_turns: int) -> tuple[list[str], list[str]]:
    """An SFT transcript of a game: the noisy player's guesses (`noisy_guess`) until it finds the secret or runs out
    of turns, and the game's observation after each ("" after the last, when it found the secret)."""
    state, turns, observations = start_state(problem), [], []
    while len(turns) < max_turns:
        turn = f"<call>guess {noisy_guess(state['lo'], state['hi'], offsets, p_misc, rng)}</call>"
        reply = _RULES.step(state, turn)
        state = reply["state"]
        turns.append(turn)
        observations.append(reply["observation"])
        if reply["done"]:
            break
    return turns, observations
