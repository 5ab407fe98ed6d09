"""Math answers graded with math-verify: sandboxed, time-bounded, and safe to call from any thread.

math-verify bounds its parsing and comparisons with `signal.alarm`, which works only on a process's main
thread (called from another thread with its timeouts on, it raises), and it runs sympy on the response, which
is untrusted. So the grading runs in a sandbox (`credo.tasks.sandbox`: a fresh, confined child of a
persistent worker per answer, behind an operating-system boundary; the grading code is
`credo/tasks/scorers/math_verify_scorer.py`), where math-verify runs on the main thread with its own
timeouts. Each answer gets at most a hard bound; an answer whose grading overruns it (stuck where no
signal reaches, e.g. in C code), dies or hits a limit counts as wrong (a failed verification, its child
killed), and a warning is logged. Calls are serialised (there is one worker); it is shut down at
interpreter exit.

`grade_math(response, truth)` grades one response; `grade_math_many(pairs)` grades a batch with one request
(the worker streams back one verdict per answer); `grade_math_outcomes(pairs)` tells failed verifications
apart. The ground truth may be bare ("1/2", "0.5", "x=3") or LaTeX ("\\frac{1}{2}", "$\\sqrt{8}$",
"\\boxed{3}"); the response is parsed with math-verify's default extraction (the `\\boxed{}` content first,
else the last LaTeX or plain expression).

Timeouts: each of the three math-verify steps of an answer (parse the truth, parse the response, compare)
gets `timeout_s` rounded up to whole seconds (at least 1: `signal.alarm` counts seconds); the hard bound of
an answer is `3 * timeout_s + MARGIN_S`. Below 1 s, math-verify's alarms can outlast the hard bound, which
then strikes first (the answer is wrong either way).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from credo.extras import require
from credo.tasks.sandbox import Outcome, Sandbox

MARGIN_S = 0.5
"""Slack of the hard bound per answer beyond its three math-verify timeouts (IPC, scheduling)."""

SANDBOX = Sandbox("math-verify", "math_verify_scorer")


def grade_math(response: str, truth: str, timeout_s: float = 5.0) -> bool:
    """Whether the response's final answer equals the ground truth mathematically (math-verify)."""
    return grade_math_many([(response, truth)], timeout_s)[0]


def grade_math_many(pairs: Iterable[tuple[str, str]], timeout_s: float = 5.0) -> list[bool]:
    """`grade_math` for each `(response, truth)` pair, in one request to the worker."""
    return [outcome.value is True for outcome in grade_math_outcomes(pairs, timeout_s)]


def grade_math_outcomes(pairs: Iterable[tuple[str, str]], timeout_s: float = 5.0,
                        bound_s: float | None = None) -> list[Outcome]:
    """The sandbox's outcome of grading each pair: `value` True/False, or `failed` (no verdict). `bound_s`: a
    tighter hard bound per answer than `3 * timeout_s + MARGIN_S` (an answer's share of its batch's budget)."""
    calls = [(str(response), str(truth), max(1, math.ceil(timeout_s))) for response, truth in pairs]
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    if bound_s is not None and bound_s <= 0:
        raise ValueError(f"bound_s must be positive, got {bound_s}")
    if not calls:
        return []
    require("math_verify", "tasks", "math grading (match: math)")
    bound = 3 * timeout_s + MARGIN_S
    return SANDBOX.call_many("grade", calls, bound if bound_s is None else min(bound, bound_s))


def shutdown() -> None:
    """Stop the grading worker (a later call starts a fresh one)."""
    SANDBOX.shutdown()


def worker_pid() -> int | None:
    """The grading worker's process id (None when none runs)."""
    return SANDBOX.worker_pid()
