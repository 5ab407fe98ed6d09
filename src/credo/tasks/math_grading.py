"""Math answers graded with math-verify: time-bounded, and safe to call from any thread.

math-verify bounds its parsing and comparisons with `signal.alarm`, which works only on a process's main
thread (called from another thread with its timeouts on, it raises). So the grading runs in one persistent
worker process (multiprocessing's "spawn" context, started on first use), where math-verify runs on the main
thread with its own timeouts. The caller waits for each answer at most a hard bound; a worker that overruns
it (stuck where no signal reaches, e.g. in C code) or dies is killed and restarted, that answer counts as
wrong, and a warning is logged. Calls are serialised by a lock (there is one worker), so a bound measures
only its own answer; the worker is shut down at interpreter exit. As with any use of "spawn", a script
that grades must start its work under `if __name__ == "__main__":` (the worker re-imports the main module).

`grade_math(response, truth)` grades one response; `grade_math_many(pairs)` grades a batch with one request
(the worker streams back one verdict per answer). The ground truth may be bare ("1/2", "0.5", "x=3") or
LaTeX ("\\frac{1}{2}", "$\\sqrt{8}$", "\\boxed{3}"); the response is parsed with math-verify's default
extraction (the `\\boxed{}` content first, else the last LaTeX or plain expression).

Timeouts: each of the three math-verify steps of an answer (parse the truth, parse the response, compare)
gets `timeout_s` rounded up to whole seconds (at least 1: `signal.alarm` counts seconds); the hard bound of
an answer is `3 * timeout_s + MARGIN_S`. Below 1 s, math-verify's alarms can outlast the hard bound, which
then strikes first (the answer is wrong either way, but the worker is restarted, a second or two).
"""

from __future__ import annotations

import atexit
import logging
import math
import multiprocessing
import os
import threading
import time
from collections.abc import Iterable
from multiprocessing.connection import Connection

from credo.extras import require

log = logging.getLogger(__name__)

MARGIN_S = 0.5
"""Slack of the hard bound per answer beyond its three math-verify timeouts (IPC, scheduling)."""

STARTUP_TIMEOUT_S = 120.0
"""How long a fresh worker may take to import math-verify and warm up."""

_LOCK = threading.Lock()
_worker: _Worker | None = None
_atexit_registered = False


def _forget_parents_worker() -> None:
    """In a forked child: the parent's worker and lock are not ours (sharing its pipe would mix verdicts)."""
    global _LOCK, _worker
    _LOCK, _worker = threading.Lock(), None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parents_worker)


def grade_math(response: str, truth: str, timeout_s: float = 5.0) -> bool:
    """Whether the response's final answer equals the ground truth mathematically (math-verify)."""
    return grade_math_many([(response, truth)], timeout_s)[0]


def grade_math_many(pairs: Iterable[tuple[str, str]], timeout_s: float = 5.0) -> list[bool]:
    """`grade_math` for each `(response, truth)` pair, in one request to the worker."""
    pairs = [(str(response), str(truth)) for response, truth in pairs]
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    if not pairs:
        return []
    require("math_verify", "tasks", "math grading (match: math)")
    bound = 3 * timeout_s + MARGIN_S
    results: list[bool] = []
    with _LOCK:
        while len(results) < len(pairs):
            pending = pairs[len(results):]
            worker = _get_worker()
            try:
                worker.submit(pending, timeout_s)
            except OSError:  # the worker died since the last call: start a fresh one
                _stop_worker(graceful=False)
                worker = _get_worker()
                worker.submit(pending, timeout_s)
            for response, _ in pending:
                verdict = worker.receive(bound)
                if verdict is None:  # overran the bound or died: this answer is wrong; resubmit the rest
                    log.warning("math grading of %r took longer than %.1f s (or its worker died): counted as wrong; "
                                "restarting the grading worker", response[-200:], bound)
                    _stop_worker(graceful=False)
                    results.append(False)
                    break
                results.append(verdict)
    return results


def shutdown() -> None:
    """Stop the grading worker (a later call starts a fresh one)."""
    with _LOCK:
        _stop_worker()


def worker_pid() -> int | None:
    """The grading worker's process id (None when none runs)."""
    return _worker.process.pid if _worker is not None else None


class _Worker:
    """One spawned process serving grading requests over a pipe."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child,), name="credo-math-grading", daemon=True)
        self.process.start()
        child.close()
        if not self.conn.poll(STARTUP_TIMEOUT_S):
            self.stop()
            raise RuntimeError(f"the math grading worker did not start within {STARTUP_TIMEOUT_S:.0f} s")
        try:
            status = self.conn.recv()
        except EOFError:
            self.process.join(5)
            status = (f"it exited with code {self.process.exitcode} (multiprocessing's spawn re-imports the main "
                      "module: a script must start its work under `if __name__ == \"__main__\":`)")
        if status != "ready":
            self.stop(graceful=False)
            raise RuntimeError(f"the math grading worker failed to start: {status}")

    def submit(self, pairs: list[tuple[str, str]], timeout_s: float) -> None:
        self.conn.send((pairs, timeout_s))

    def receive(self, bound: float) -> bool | None:
        """The next verdict, or None if it does not come within `bound` seconds or the worker died."""
        try:
            if not self.conn.poll(bound):
                return None
            return self.conn.recv()
        except (EOFError, OSError):
            return None

    def stop(self, graceful: bool = True) -> None:
        """Ask the worker to exit (`graceful`), killing it if it does not within half a second, or kill it."""
        if graceful:
            try:
                self.conn.send(None)
            except (OSError, ValueError):
                pass
            self.process.join(0.5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self.conn.close()


def _get_worker() -> _Worker:
    """The live worker, started (or restarted after a crash) when needed; the caller holds `_LOCK`."""
    global _worker, _atexit_registered
    if _worker is not None and not _worker.process.is_alive():
        _stop_worker(graceful=False)
    if _worker is None:
        started = time.perf_counter()
        _worker = _Worker()
        log.debug("math grading worker %d started in %.2f s", _worker.process.pid, time.perf_counter() - started)
        if not _atexit_registered:
            atexit.register(shutdown)
            _atexit_registered = True
    return _worker


def _stop_worker(graceful: bool = True) -> None:
    global _worker
    if _worker is not None:
        worker, _worker = _worker, None
        worker.stop(graceful)


# ------------------------------------------------------------------------------------------ the worker process


def _serve(conn: Connection) -> None:
    """The worker's loop: receive `(pairs, timeout_s)`, send one verdict per pair; None stops it."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops us
    try:
        import math_verify

        logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # timeouts and parse failures are just "wrong"
        _grade(math_verify, "\\boxed{\\frac{1}{2}}", "0.5", 5)  # warm up the parsers outside any caller's bound
    except Exception as error:
        conn.send(f"{type(error).__name__}: {error}")
        return
    conn.send("ready")
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        pairs, timeout_s = message
        seconds = max(1, math.ceil(timeout_s))
        for response, truth in pairs:
            conn.send(_grade(math_verify, response, truth, seconds))


def _grade(math_verify, response: str, truth: str, seconds: int) -> bool:
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
