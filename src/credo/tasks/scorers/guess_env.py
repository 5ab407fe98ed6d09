"""The guessing game's turns, read in a sandbox worker (`credo.tasks.guessing`): a hidden number in a range the
policy narrows down from feedback.

Turns: `<call>guess 37</call>` answers `<obs>higher</obs>` or `<obs>lower</obs>` (the secret is above or below the
guess) and ends the episode with reward 1 when the guess is the secret; anything else answers `<obs>?</obs>`. The
per-turn checker knows each guess's optimality: with the secret known to lie in `[lo, hi]` (the range the feedback
so far leaves), a guess is right when it is in that range and keeps the worst case of the turns still needed at
its least, `depth(n) = ceil(log2(n + 1))` for `n` candidates (a binary search's; the middle, and near it where
the range allows).

This module imports nothing of credo: it runs in the sandbox's child, the only code that reads the policy's text.
"""

from __future__ import annotations

import re

SHARED_CHILD = ("step",)
"""`step` reads a turn as data with one bounded regular expression and keeps nothing: the turns of one batch share
a confined child (`credo.tasks.sandbox_worker`), each under its own time bound."""

_GUESS = re.compile(r"\s*<call>guess (\d{1,6})</call>\s*")


def depth(candidates: int) -> int:
    """The fewest guesses that find any one of `candidates` numbers in the worst case: ceil(log2(n + 1))."""
    return candidates.bit_length()


def optimal(lo: int, hi: int, guess: int) -> bool:
    """Whether `guess` keeps the worst case of the guesses still needed in `[lo, hi]` at its least."""
    if not lo <= guess <= hi:
        return False
    return 1 + max(depth(guess - lo), depth(hi - guess)) == depth(hi - lo + 1)


def step(state: dict, turn: str) -> dict:
    """The outcome of one turn for the episode in `state`: `{"lo", "hi", "secret"}` (`lo..hi`: the range the
    feedback leaves)."""
    state = dict(state)
    found = _GUESS.fullmatch(turn)
    if found is None:
        return {"observation": "<obs>?</obs>", "done": False, "state": state, "kind": "invalid", "correct": False}
    guess, lo, hi, secret = int(found.group(1)), state["lo"], state["hi"], state["secret"]
    right = optimal(lo, hi, guess)
    if guess == secret:
        return {"observation": "", "done": True, "state": state, "kind": "guess", "correct": right, "reward": 1.0}
    if guess < secret:
        state["lo"] = max(lo, guess + 1)
        return {"observation": "<obs>higher</obs>", "done": False, "state": state, "kind": "guess", "correct": right}
    state["hi"] = min(hi, guess - 1)
    return {"observation": "<obs>lower</obs>", "done": False, "state": state, "kind": "guess", "correct": right}
