"""The sandbox's worker process: runs one scorer module's functions on requests from `credo.tasks.sandbox`.

Started as a script (`python -I sandbox_worker.py FD`), never imported as part of credo, so it loads no credo
code and no torch: only the standard library, then the scorer module (a file of plain functions) and what that
imports. `FD` is its end of a socket pair to the parent.

The handshake (pickled, from the trusted parent): the module search path, the scorer module's file, the
memory limit in MiB and the file-size limit in MiB. The worker then sets its limits
(`RLIMIT_AS`, `RLIMIT_FSIZE`, no core files), loads the scorer, calls its `setup()` if it has one, installs an
audit hook, and answers "ready". Each request is `(function, [args, ...], cpu_s)`; for each args tuple it sends one
JSON reply, `["ok", value]`, `["raised", "Type: message"]` (the function raised), `["limit", what]` (it ran
out of memory) or `["blocked", event]` (it tried to start a process, open a socket, load native code or write
outside the scratch directory), and exits after a "limit" or "blocked" reply. Before each call the CPU limit
is set to the CPU time used so far plus `cpu_s`: overrunning it kills the worker (SIGXCPU).
Replies are JSON, not pickle, so that a compromised worker cannot run code in the parent.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import pickle
import resource
import signal
import sys
from multiprocessing.connection import Connection

BLOCKED_EVENTS = ("os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "subprocess.Popen",
                  "socket.", "ctypes.", "os.kill", "os.killpg", "signal.pthread_kill", "sys.addaudithook",
                  "resource.setrlimit", "os.chdir", "os.putenv", "os.unsetenv")
"""Audit events (prefixes) a scorer never needs: refused, and the worker reports the attempt and exits."""

WRITE_EVENTS = ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.symlink", "os.link",
                "os.truncate", "os.utime", "shutil.rmtree", "shutil.copyfile", "shutil.move")
"""Audit events that change the file system: allowed inside the scratch directory only."""


class _Violation:
    """The first refused audit event of the current call (None when none); the hook judges only while a
    scorer function runs (`active`), so the worker's own CPU-limit updates between calls pass."""

    event: str | None = None
    active = False


def _outside(path, scratch: str) -> bool:
    if isinstance(path, int):  # an open file descriptor: judged when it was opened
        return False
    try:
        resolved = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return True
    return os.path.commonpath([resolved, scratch]) != scratch


def _audit(scratch: str):
    def hook(event: str, args: tuple) -> None:
        if not _Violation.active:
            return
        refused = event.startswith(BLOCKED_EVENTS)
        if not refused and event == "open" and len(args) >= 2:
            path, mode = args[0], args[1]
            writes = isinstance(mode, str) and any(flag in mode for flag in "wax+")
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            writes = writes or bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND))
            refused = writes and _outside(path, scratch)
        elif not refused and event in WRITE_EVENTS and args:
            refused = _outside(args[0], scratch)
        if refused:
            _Violation.event = _Violation.event or event
            raise PermissionError(f"credo sandbox: {event} is not allowed")

    return hook


def _set_limits(memory_mb: int, file_mb: int) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * 2**20, memory_mb * 2**20))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_mb * 2**20, file_mb * 2**20))


def _limit_cpu(cpu_s: float) -> None:
    """Allow `cpu_s` more seconds of CPU from now (the soft limit; the hard one is left as it is)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = usage.ru_utime + usage.ru_stime
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = math.ceil(used + cpu_s)
    resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def _load(path: str):
    spec = importlib.util.spec_from_file_location("credo_sandboxed_scorer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _send(conn: Connection, reply: list) -> None:
    conn.send_bytes(json.dumps(reply).encode())


def _call(function, args: tuple) -> list:
    _Violation.event, _Violation.active = None, True
    try:
        value = function(*args)
        reply = ["ok", value]
    except MemoryError:
        reply = ["limit", "memory"]
    except Exception as error:  # the scorer's own failure: the caller decides what it scores
        reply = ["raised", f"{type(error).__name__}: {error}"[:500]]
    finally:
        _Violation.active = False
    if _Violation.event is not None:  # refused, even if the scorer swallowed the PermissionError
        reply = ["blocked", _Violation.event]
    try:
        json.dumps(reply)
    except (TypeError, ValueError):
        reply = ["raised", f"TypeError: the scorer returned a {type(reply[1]).__name__}, not a JSON value"]
    return reply


def main(fd: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops us
    conn = Connection(fd)
    settings = pickle.loads(conn.recv_bytes())
    sys.path[:] = settings["sys_path"]
    sys.dont_write_bytecode = True
    scratch = os.path.realpath(os.getcwd())
    try:
        _set_limits(settings["memory_mb"], settings["file_mb"])
        scorer = _load(settings["scorer"])
        if hasattr(scorer, "setup"):
            scorer.setup()
    except BaseException as error:  # noqa: BLE001 - reported to the parent, which raises it
        _send(conn, ["error", f"{type(error).__name__}: {error}"])
        return
    sys.addaudithook(_audit(scratch))
    _send(conn, ["ready", None])
    while True:
        try:
            message = conn.recv_bytes()
        except (EOFError, OSError):
            return
        request = pickle.loads(message)
        if request is None:
            return
        name, calls, cpu_s = request
        for args in calls:
            _limit_cpu(cpu_s)
            reply = _call(getattr(scorer, name), args)
            _send(conn, reply)
            if reply[0] in ("limit", "blocked"):
                return


if __name__ == "__main__":
    main(int(sys.argv[1]))
