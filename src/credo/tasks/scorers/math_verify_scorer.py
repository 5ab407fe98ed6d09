"""math-verify grading, run in the sandbox worker (see `credo.tasks.scorers` and `credo.tasks.math_grading`).

math-verify runs on the worker's main thread, so its `signal.alarm` timeouts work.
"""

from __future__ import annotations

import logging


def setup() -> None:
    """Import math-verify and warm its parsers up outside any caller's bound."""
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # timeouts and parse failures are just "wrong"
    grade("\\boxed{\\frac{1}{2}}", "0.5", 5)


def grade(response: str, truth: str, seconds: int) -> bool:
    """Whether the response's answer equals the truth; each math-verify step gets `seconds`."""
    import math_verify

    try:
        gold = _parse_truth(math_verify, truth, seconds)
        if not gold:
            return False
        answer = math_verify.parse(response, parsing_timeout=seconds)
        if not answer:
            return False
        return bool(math_verify.verify(gold, answer, timeout_seconds=seconds))
    except Exception:  # math-verify catches its own errors; anything else is a wrong answer too
        return False


def _parse_truth(math_verify, truth: str, seconds: int) -> list:
    """The ground truth parsed as math: LaTeX as given, bare text ("1/2", "2\\sqrt{2}") inside `$...$`."""
    text = truth.strip()
    if not any(marker in text for marker in ("$", "\\boxed", "\\(", "\\[")):
        parsed = math_verify.parse(f"${text}$", parsing_timeout=seconds)
        if parsed:
            return parsed
    return math_verify.parse(text, parsing_timeout=seconds)
