"""The calculator environment: an arithmetic chain (`credo.tasks.arith`) solved through a calculator tool.

The policy calls the calculator once per step with the operation and operands it decides on (`<call>12-3</call>`),
may check its current value or take a call back, and ends with `\\boxed{v}`; the calculator computes each call
faithfully, so every error is a decision in a call, and the per-turn checker (`scorers/calculator_env.py`) knows
which call was wrong: a call is right when it applies the chain's next step to the value the calculator last
returned, whatever came before. A check or an undo does not decide the reward, so the number of turns varies
within a group. The turns are read behind the scorer sandbox.
"""

from __future__ import annotations

from typing import Any

from credo.tasks.arith import MODULUS, Chain
from credo.tasks.base import Problem
from credo.tasks.environment import SandboxedEnvironment

TURN_END = "</call>"
"""The marker that ends a call turn (an answer turn ends at the end token)."""


class CalculatorEnvironment(SandboxedEnvironment):
    """Episodes of a chain's steps through the calculator; `max_turns` bounds the calls, checks, undos and the
    answer together."""

    def __init__(self, max_turns: int, step_seconds: float = 1.0) -> None:
        super().__init__("calculator_env", TURN_END, max_turns, step_seconds)

    def reset(self, problem: Problem) -> dict[str, Any]:
        """The episode's state: the chain (`problem.meta["chain"]`), its answer, and the calculator at the start."""
        chain: Chain = problem.meta["chain"]
        return {"start": chain.start, "ops": [[op, b] for op, b in chain.steps], "modulus": MODULUS,
                "answer": int(problem.answer), "value": chain.start, "taken": 0, "history": []}
