"""Scoring untrusted answers in a sandboxed worker process, with limits; a worker that fails is replaced.

A policy's output is untrusted input, and some scorers evaluate it (reasoning-gym's call `eval` or sympy's
`parse_expr`; math-verify runs sympy on it). A `Sandbox` runs one scorer module, a file of plain functions
that imports no credo code (`credo/tasks/scorers/`), in a persistent worker process
(`credo/tasks/sandbox_worker.py`, started with `subprocess`, so the caller's main module is not re-imported)
with:

- a wall-clock bound per call, enforced by the caller (`call_many`'s `timeout_s`);
- `RLIMIT_CPU` per call (the call's bound, rounded up: the soft limit is reset before each call and
  overrunning it kills the worker), `RLIMIT_AS` (`memory_mb`, the whole worker), `RLIMIT_FSIZE` (`file_mb`);
- a clean environment: only `PATH` and the locale are inherited (no tokens or keys), `HOME` and `TMPDIR` are
  the worker's scratch directory, a fresh temporary directory that is its working directory and is removed
  when it stops; the module search path is the parent's, minus relative entries;
- an audit hook that refuses process creation, sockets, native-code loading, signals and file-system writes
  outside the scratch directory while a scorer runs.

A call that overruns its bound, a worker that dies (e.g. killed by the CPU limit), runs out of memory,
attempts a refused operation or replies with garbage is a *failure*: the call's `Outcome.failed` is true, a
warning is logged, `failures` counts it, and the worker is killed and replaced by a fresh one for the
remaining calls. Calls are serialised by a lock (one worker per sandbox), so a bound measures only its own
call; workers stop at interpreter exit and are forgotten in a forked child.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import pickle
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

WORKER = Path(__file__).with_name("sandbox_worker.py")
SCORERS = Path(__file__).with_name("scorers")
"""The scorer modules a sandbox can host."""

STARTUP_TIMEOUT_S = 120.0
"""How long a fresh worker may take to import its scorer's libraries and warm up."""

MAX_REPLY_BYTES = 2**20
"""A longer reply from a worker is a failure (it is not read into memory)."""

INHERITED_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "SYSTEMROOT")
"""The only environment variables a worker inherits."""

FIXED_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
             "MKL_NUM_THREADS": "1"}


@dataclass(frozen=True)
class Limits:
    """A worker's resource limits."""

    memory_mb: int = 4096
    """`RLIMIT_AS` of the worker process (its imports included)."""
    file_mb: int = 64
    """`RLIMIT_FSIZE`: the largest file the worker may write (in its scratch directory)."""


@dataclass(frozen=True)
class Outcome:
    """One call's result: its JSON value, or the error the function raised, or a sandbox failure."""

    value: Any = None
    error: str | None = None
    """"Type: message" when the scorer function raised (the worker lives on)."""
    failed: bool = False
    """The worker overran the bound, died, hit a limit or attempted a refused operation: no result."""


FAILED = Outcome(failed=True)

_SANDBOXES: weakref.WeakSet[Sandbox] = weakref.WeakSet()


def _forget_parents_workers() -> None:
    """In a forked child: the parent's workers are not ours (sharing their pipes would mix replies)."""
    for sandbox in list(_SANDBOXES):
        sandbox._lock, sandbox._worker = threading.Lock(), None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parents_workers)


def _shutdown_all() -> None:
    for sandbox in list(_SANDBOXES):
        sandbox.shutdown()


atexit.register(_shutdown_all)


class Sandbox:
    """Calls of one scorer module's functions in a sandboxed worker (started on first use)."""

    def __init__(self, name: str, scorer: str | Path, limits: Limits = Limits()) -> None:
        """`scorer`: a module's name in `credo/tasks/scorers/`, or the path of a scorer module file."""
        self.name = name
        self.scorer = scorer if isinstance(scorer, Path) else SCORERS / f"{scorer}.py"
        self.limits = limits
        self.failures = 0
        """Failed calls so far (overruns, deaths, limits, refused operations)."""
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        _SANDBOXES.add(self)

    def call(self, function: str, args: tuple, timeout_s: float) -> Outcome:
        """`function(*args)` in the worker, waiting at most `timeout_s` seconds for its result."""
        return self.call_many(function, [args], timeout_s)[0]

    def call_many(self, function: str, calls: list[tuple], timeout_s: float) -> list[Outcome]:
        """`function(*args)` for each args tuple, in one request; each waits at most `timeout_s` seconds."""
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        outcomes: list[Outcome] = []
        with self._lock:
            while len(outcomes) < len(calls):
                pending = calls[len(outcomes):]
                worker = self._live_worker()
                try:
                    worker.submit(function, pending, timeout_s)
                except OSError:  # the worker died since the last call: start a fresh one
                    self._stop_worker(graceful=False)
                    worker = self._live_worker()
                    worker.submit(function, pending, timeout_s)
                for args in pending:
                    outcome, why = worker.receive(timeout_s)
                    if outcome.failed:  # no result: this call failed; the rest go to a fresh worker
                        self.failures += 1
                        log.warning("%s sandbox: %s(%s) %s; counted as a failed verification, restarting the worker",
                                    self.name, function, _preview(args), why)
                        self._stop_worker(graceful=False)
                        outcomes.append(outcome)
                        break
                    outcomes.append(outcome)
        return outcomes

    def shutdown(self) -> None:
        """Stop the worker (a later call starts a fresh one)."""
        with self._lock:
            self._stop_worker()

    def worker_pid(self) -> int | None:
        """The worker's process id (None when none runs)."""
        return self._worker.process.pid if self._worker is not None else None

    def _live_worker(self) -> _Worker:
        """The live worker, started (or restarted after a crash) when needed; the caller holds the lock."""
        if self._worker is not None and self._worker.process.poll() is not None:
            self._stop_worker(graceful=False)
        if self._worker is None:
            started = time.perf_counter()
            self._worker = _Worker(self)
            log.debug("%s sandbox worker %d started in %.2f s", self.name, self._worker.process.pid,
                      time.perf_counter() - started)
        return self._worker

    def _stop_worker(self, graceful: bool = True) -> None:
        if self._worker is not None:
            worker, self._worker = self._worker, None
            worker.stop(graceful)


def _preview(args: tuple) -> str:
    text = ", ".join(repr(a)[:120] for a in args if isinstance(a, str))
    return text[:300]


def worker_env(scratch: str) -> dict[str, str]:
    """The worker's whole environment: `INHERITED_ENV` where set, the scratch directory as home and temp."""
    env = {key: os.environ[key] for key in INHERITED_ENV if key in os.environ}
    env.setdefault("PATH", os.defpath)
    return {**env, **FIXED_ENV, "HOME": scratch, "TMPDIR": scratch}


class _Worker:
    """One worker process, its socket and its scratch directory."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.scratch = tempfile.mkdtemp(prefix="credo-sandbox-")
        parent, child = socket.socketpair()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", str(WORKER), str(child.fileno())], pass_fds=[child.fileno()],
                cwd=self.scratch, env=worker_env(self.scratch), stdin=subprocess.DEVNULL,
            )
        except BaseException:
            parent.close()
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise
        finally:
            child.close()
        self.conn = Connection(parent.detach())
        limits = sandbox.limits
        settings = {"sys_path": [p for p in sys.path if p and os.path.isabs(p)], "scorer": str(sandbox.scorer),
                    "memory_mb": limits.memory_mb, "file_mb": limits.file_mb}
        self.conn.send_bytes(pickle.dumps(settings))
        status = self._handshake()
        if status is not None:
            self.stop(graceful=False)
            raise RuntimeError(f"the {sandbox.name} sandbox worker failed to start: {status}")

    def _handshake(self) -> str | None:
        """None when the worker reports ready, else why it did not."""
        try:
            if not self.conn.poll(STARTUP_TIMEOUT_S):
                return f"no answer within {STARTUP_TIMEOUT_S:.0f} s"
            kind, detail = json.loads(self.conn.recv_bytes(MAX_REPLY_BYTES))
        except (EOFError, OSError, ValueError, TypeError):
            self.process.wait(5)
            return f"it exited with code {self.process.returncode}"
        return None if kind == "ready" else str(detail)

    def submit(self, function: str, calls: list[tuple], cpu_s: float) -> None:
        self.conn.send_bytes(pickle.dumps((function, calls, cpu_s)))

    def receive(self, timeout_s: float) -> tuple[Outcome, str]:
        """The next call's outcome within `timeout_s` seconds, with why it failed ("" when it did not)."""
        try:
            if not self.conn.poll(timeout_s):
                return FAILED, f"took longer than {timeout_s:g} s"
            kind, detail = json.loads(self.conn.recv_bytes(MAX_REPLY_BYTES))
        except (EOFError, OSError):
            self.process.wait(5)
            return FAILED, f"killed its worker (exit code {self.process.returncode})"
        except (ValueError, TypeError):
            return FAILED, "sent an unreadable reply"
        if kind == "ok":
            return Outcome(value=detail), ""
        if kind == "raised":
            return Outcome(error=str(detail)), ""
        if kind == "limit":
            return FAILED, f"ran out of memory (limit {detail})"
        if kind == "blocked":
            return FAILED, f"attempted a refused operation ({detail})"
        return FAILED, "sent an unreadable reply"

    def stop(self, graceful: bool = True) -> None:
        """Ask the worker to exit (`graceful`), killing it if it does not within half a second, or kill it."""
        if graceful:
            try:
                self.conn.send_bytes(pickle.dumps(None))
                self.process.wait(0.5)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)
        self.conn.close()
        shutil.rmtree(self.scratch, ignore_errors=True)
