"""The guessing game: a hidden number in a range, which the policy's guesses narrow down from feedback.

Its hidden state is what the turns must discover, and each guess's optimality is computable (a binary search's
worst case, `scorers/guess_env.py`): the per-turn checker of an environment whose turns are not steps of a
known solution. The turns are read behind the scorer sandbox.
"""

from __future__ import annotations

from typing import Any

from credo.tasks.base import Problem
from credo.tasks.environment import SandboxedEnvironment

TURN_END = "</call>"
"""The marker that ends a guess."""


class GuessingEnvironment(SandboxedEnvironment):
    """Episodes of guesses at `problem.meta["secret"]` in `problem.meta["low"]..["high"]`."""

    def __init__(self, max_turns: int, step_seconds: float = 1.0) -> None:
        super().__init__("guess_env", TURN_END, max_turns, step_seconds)

    def reset(self, problem: Problem) -> dict[str, Any]:
        meta = problem.meta
        if not meta["low"] <= meta["secret"] <= meta["high"]:
            raise ValueError(f"guessing problem {problem.prompt!r}: its secret {meta['secret']} is outside "
                             f"{meta['low']}..{meta['high']}")
        return {"lo": meta["low"], "hi": meta["high"], "secret": meta["secret"]}
