"""A study plan's predictions, each stated in words with the rule that judges it against the study's results.

STUDY.md's "predictions first": a plan writes, before its runs, what each method's mechanism should do in the regime
and the rule that will decide whether it held; the results script then judges every prediction by its rule and
reports the count, failures first in the reader's eye.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

Results = TypeVar("Results")

@dataclass(frozen=True)
class Prediction(Generic[Results]):
    """One prediction of a plan: the cell it is about, what the plan said, the rule in words, and the rule itself."""

    cell: str
    said: str
    rule: str
    judge: Callable[[Results], tuple[str, str]]
    """`(what was measured, the outcome)`: "held", "failed" or "not decided", the last with its reason where the plan
    gives one ("not decided (no room)")."""


def judged(predictions: list[Prediction[Results]], results: Results) -> tuple[list[tuple[str, ...]], str]:
    """Each prediction's table row `(cell, said, rule, measured, outcome)`, a failure's outcome in bold, and the count
    of each outcome in words, held and failed always named ("0 held, 1 failed, 8 not decided (no room)")."""
    rows, counts = [], {"held": 0, "failed": 0}
    for p in predictions:
        measured, outcome = p.judge(results)
        counts[outcome] = counts.get(outcome, 0) + 1
        rows.append((f"`{p.cell}`", p.said, p.rule, measured, f"**{outcome}**" if outcome == "failed" else outcome))
    return rows, ", ".join(f"{n} {outcome}" for outcome, n in counts.items())
