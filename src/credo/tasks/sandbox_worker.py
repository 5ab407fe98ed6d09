"""The sandbox's worker: a fork server that runs each call of a scorer module in a fresh, confined child.

Started as a script (`python -I sandbox_worker.py FD`) by `credo.tasks.sandbox`, inside bubblewrap's
namespaces unless isolation is off; it loads no credo code and no torch: only the standard library, then the
scorer module (a file of plain functions) and what that imports. `FD` is its end of a socket pair to the parent.

The worker itself is trusted: it never runs a call. The handshake (pickled, from the trusted parent) gives the
module search path, the scorer module's file, the memory and file-size limits in MiB and whether to isolate.
The worker sets its limits (`RLIMIT_AS`, `RLIMIT_FSIZE`, no core files), makes itself undumpable (so that no
child reads or writes its memory), loads the scorer, calls its `setup()` if it has one, builds the seccomp
filter (isolated only) and checks in a throwaway child that the kernel enforces it, sends its stdout and
stderr to /dev/null and answers "ready". It exits when its socket closes, even during a call (the parent
died or stopped it).

Each request is `(request_id, function, [args, ...], timeout_s)`. For each args tuple the worker forks a
child, which closes the worker's socket, asks to die with the worker, lowers `RLIMIT_CPU` (`timeout_s`
rounded up, plus one second: a backstop behind the worker's wall-clock bound, never ahead of it, since the
kernel charges CPU time by the tick; the hard limit one second later), `RLIMIT_NOFILE` and `RLIMIT_NPROC`, loads the seccomp filter
(`REFUSED_SYSCALLS` and new processes kill it with SIGSYS), installs an audit hook (see `_audit`), runs the
call and writes its JSON reply to a pipe (the child's only channel: it holds no socket). The worker reads at most `MAX_REPLY_BYTES` of it, kills the child
when the reply is too long or `timeout_s` has passed, reaps it, empties the scratch directory and sends one
JSON message `[request_id, index, kind, detail, clean]`: kind "ok" (detail: the value), "raised" ("Type:
message"), "limit" (memory or file size), "blocked" (a refused operation), "timeout", "toolarge", "died" or
"unreadable"; `clean` is false when the scratch directory could not be emptied, and the worker then exits.
A call therefore starts from the worker's state as it was after `setup()` (and the scorer's `prepare`, run by
the worker on a call's trusted leading arguments, see `credo.tasks.scorers`): nothing one call changes (a scorer
function patched, a thread started, a file left in scratch) reaches the next. Replies are JSON, not pickle,
so that a compromised child cannot run code in the worker or the parent.

A function the scorer module lists in `SHARED_CHILD` (one that reads its arguments as data and keeps nothing: an
environment's `step`, a bounded regular expression and arithmetic) has the calls of one request run one after
another in one confined child (`_serve_shared`): the fork, limits and filter are paid once a request instead of once
an answer (about 4.6 ms an answer on 2 CPU cores, half an agent's training step; `benchmarks/sandbox_cost.py`). The
child writes each call's reply as one line; the worker gives each call its own `timeout_s` from the reply before it,
reads at most `MAX_REPLY_BYTES` a line, and sends each call's message as its line arrives. A call that overruns,
dies, hits a limit, attempts a refused operation or replies with a line too long or unreadable ends the child: that
call fails as it would alone, the scratch directory is emptied, and the calls after it go on in a fresh child. Calls
that share a child share its state and scratch directory; the boundary, the limits and each call's time bound are
the same.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import importlib.util
import json
import math
import os
import pickle
import resource
import select
import shutil
import signal
import sys
import time
from multiprocessing.connection import Connection

MAX_REPLY_BYTES = 2**20
"""The longest reply of a call (its JSON); a longer one is a failure ("toolarge")."""

MAX_FILES = 64
"""`RLIMIT_NOFILE` of a call: the most file descriptors it may hold."""

MAX_TASKS = 64
"""`RLIMIT_NPROC` of a call (threads count; the kernel does not apply it to uid 0)."""

REFUSED_SYSCALLS = (
    "fork", "vfork", "execve", "execveat",  # new processes and programs ("clone" is refused unless a thread)
    "kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo",  # signals and other processes
    "pidfd_open", "pidfd_send_signal", "pidfd_getfd", "ptrace", "process_vm_readv", "process_vm_writev",
    "process_madvise", "kcmp",
    "socket", "socketpair",  # no network, and no new channels
    "io_uring_setup", "io_uring_enter", "io_uring_register",  # io_uring runs operations seccomp does not see
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr",  # the file-system view
    "setrlimit", "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "init_module",
    "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff",
    "sethostname", "setdomainname", "acct", "quotactl", "ioperm", "iopl", "name_to_handle_at",
    "open_by_handle_at",
    "shmget", "shmat", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop", "semctl",
    "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",  # IPC that outlives
    # the child (System V memory held against the worker's limit, a queue carrying state to later answers)
    "sched_setscheduler", "sched_setparam", "sched_setaffinity", "sched_setattr", "setpriority", "ioprio_set",
    # scheduling a later answer's child would inherit through the worker
    "memfd_create", "memfd_secret",  # memory no process maps, outside `RLIMIT_AS` (64 files of `file_mb` each)
)
"""System calls that kill a call's child (SIGSYS) in isolation mode: a scorer needs none of them."""

REFUSED_FCNTL = (8, 10, 15)
"""`fcntl` commands that kill a call's child: F_SETOWN, F_SETSIG and F_SETOWN_EX, with which a pipe's I/O signal
(O_ASYNC) reaches a process that `kill` may not."""

BLOCKED_EVENTS = ("os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "subprocess.Popen",
                  "socket.", "ctypes.", "os.kill", "os.killpg", "signal.pthread_kill", "sys.addaudithook",
                  "resource.setrlimit", "os.chdir", "os.putenv", "os.unsetenv")
"""Audit events (prefixes) a scorer never needs: refused, and the call reported "blocked"."""

WRITE_EVENTS = ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.symlink", "os.link",
                "os.truncate", "os.utime", "shutil.rmtree", "shutil.copyfile", "shutil.move")
"""Audit events that change the file system: allowed inside the scratch directory only."""

CHILD_KINDS = ("ok", "raised", "limit", "blocked")
"""The kinds of reply a child may send; the worker adds the others."""

PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4
CLONE_THREAD = 0x10000
LIBC = ctypes.CDLL(None, use_errno=True)


# ------------------------------------------------------------------------------------------ the worker (trusted)

def main(fd: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops us
    _prctl(PR_SET_DUMPABLE, 0)  # a child cannot read or write our memory through /proc or ptrace
    conn = Connection(fd)
    settings = pickle.loads(conn.recv_bytes())
    sys.path[:] = settings["sys_path"]
    sys.dont_write_bytecode = True
    scratch = os.path.realpath(os.getcwd())
    try:
        _set_limits(settings["memory_mb"], settings["file_mb"])
        scorer = _load(settings["scorer"])
        prepared = set(getattr(scorer, "SHARED_CHILD", ())) & set(getattr(scorer, "PREPARE", {}))
        if prepared:
            raise ValueError(f"{sorted(prepared)} are both in SHARED_CHILD and in PREPARE: a shared child's calls "
                             f"are prepared by no one")
        if hasattr(scorer, "setup"):
            scorer.setup()
        syscall_filter = _syscall_filter() if settings["isolated"] else None
        if syscall_filter is not None:
            _check_filter(syscall_filter)
    except BaseException as error:  # noqa: BLE001 - reported to the parent, which raises it
        _send(conn, ["error", f"{type(error).__name__}: {error}"])
        return
    _silence_output()
    _empty(scratch)  # the first call starts as clean as the later ones
    _send(conn, ["ready", None])
    try:
        _serve(conn, scorer, syscall_filter, scratch)
    except _ParentGone:
        return


class _ParentGone(Exception):
    """The parent closed its socket (it died or stopped us) or wrote to it during a call (only to stop us)."""


def _serve(conn: Connection, scorer, syscall_filter, scratch: str) -> None:
    while True:
        try:
            request = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if request is None:
            return
        request_id, name, calls, timeout_s = request
        if name in getattr(scorer, "SHARED_CHILD", ()):
            if not _serve_shared(conn, request_id, getattr(scorer, name), calls, timeout_s, syscall_filter, scratch):
                return
            continue
        for index, args in enumerate(calls):
            _prepare(scorer, name, args)
            call = functools.partial(_call, getattr(scorer, name), args, timeout_s, syscall_filter, scratch)
            kind, detail = _run(conn, call, timeout_s)
            clean = _empty(scratch)
            _send(conn, [request_id, index, kind, detail, clean])
            if not clean:
                return


def _serve_shared(conn: Connection, request_id: int, function, calls: list, timeout_s: float, syscall_filter,
                  scratch: str) -> bool:
    """A request's calls of a `SHARED_CHILD` function, as few children as failures allow (see the module's
    docstring); whether the scratch directory was emptied after each child (else the worker exits)."""
    start = 0
    while start < len(calls):
        start, clean = _run_shared(conn, request_id, function, calls, start, timeout_s, syscall_filter, scratch)
        if not clean:
            return False
    return True


def _run_shared(conn: Connection, request_id: int, function, calls: list, start: int, timeout_s: float,
                syscall_filter, scratch: str) -> tuple[int, bool]:
    """Calls `start`, `start + 1`, ... in one forked child, each call's message sent as its reply line arrives;
    the child's last call (the request's last, or the one that ended it) is reported once the child has exited and
    the scratch directory is emptied. Returns the next call's index and whether the directory was emptied."""
    pid, reply_fd = _fork(conn, lambda fd: _calls_in_child(fd, function, calls[start:], timeout_s, syscall_filter,
                                                          scratch))
    index, pending = start, bytearray()
    try:
        while True:
            line = _read_line(reply_fd, pending, conn.fileno(), time.monotonic() + timeout_s)
            kind, detail = _line_verdict(line, timeout_s)
            if index == len(calls) - 1 or kind not in ("ok", "raised"):
                break
            _send(conn, [request_id, index, kind, detail, True])
            index += 1
    finally:
        os.close(reply_fd)
        os.kill(pid, signal.SIGKILL)  # a no-op on a child that exited (it is not reaped yet)
        _, status = os.waitpid(pid, 0)
    if kind == "died":  # no line: the child ended; its exit status says why
        kind, detail = _verdict(b"", status, timeout_s)
    clean = _empty(scratch)
    _send(conn, [request_id, index, kind, detail, clean])
    return index + 1, clean


def _read_line(fd: int, pending: bytearray, conn_fd: int, deadline: float) -> bytes | str:
    """The next reply line (without its newline) from `fd`, buffered in `pending`, or "timeout", "toolarge" or
    "eof"; raises `_ParentGone`."""
    while True:
        end = pending.find(b"\n")
        if end >= 0:
            line = bytes(pending[:end])
            del pending[: end + 1]
            return "toolarge" if len(line) > MAX_REPLY_BYTES else line
        if len(pending) > MAX_REPLY_BYTES:
            return "toolarge"
        if not _ready(fd, conn_fd, deadline):
            return "timeout"
        chunk = os.read(fd, 2**16)
        if not chunk:
            return "eof"
        pending += chunk


def _line_verdict(line: bytes | str, timeout_s: float) -> tuple[str, object]:
    """The message kind and detail for one reply line of a shared child ("died" when there was none)."""
    return ("died", None) if line == "eof" else _verdict(line, 0, timeout_s)  # status 0: the child still runs


def _prepare(scorer, name: str, args: tuple) -> None:
    """The scorer's `prepare` on the call's trusted leading arguments (see `credo.tasks.scorers`), if it has one;
    should it fail, the call's child fails the same way and reports it."""
    trusted = getattr(scorer, "PREPARE", {}).get(name)
    if trusted:
        with contextlib.suppress(Exception):
            scorer.prepare(*args[:trusted])


def _fork(conn: Connection, work) -> tuple[int, int]:
    """A forked child that closes the worker's socket and runs `work(fd)`, `fd` the write end of its reply pipe,
    then exits; returns its pid and the pipe's read end."""
    reply_fd, child_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(reply_fd)
            conn.close()
            work(child_fd)
        finally:
            os._exit(0)
    os.close(child_fd)
    return pid, reply_fd


def _run(conn: Connection, call, timeout_s: float) -> tuple[str, object]:
    """`call()` in a forked child: its reply `(kind, detail)`, or how it failed."""
    pid, reply_fd = _fork(conn, lambda fd: _write(fd, call()))
    try:
        reply = _read(pid, reply_fd, conn.fileno(), time.monotonic() + timeout_s)
    finally:
        os.close(reply_fd)
        os.kill(pid, signal.SIGKILL)  # a no-op on a child that exited (it is not reaped yet)
        _, status = os.waitpid(pid, 0)
    return _verdict(reply, status, timeout_s)


def _read(pid: int, reply_fd: int, conn_fd: int, deadline: float) -> bytes | str:
    """The child's reply once it has exited, or "timeout" or "toolarge"; raises `_ParentGone`."""
    data = bytearray()
    while _ready(reply_fd, conn_fd, deadline):
        chunk = os.read(reply_fd, 2**16)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REPLY_BYTES:
            return "toolarge"
    pidfd = os.pidfd_open(pid)
    try:
        return bytes(data) if _ready(pidfd, conn_fd, deadline) else "timeout"
    finally:
        os.close(pidfd)


def _ready(fd: int, conn_fd: int, deadline: float) -> bool:
    """Whether `fd` becomes readable before the deadline; raises `_ParentGone` if `conn_fd` does first."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return False
    ready = select.select([fd, conn_fd], [], [], remaining)[0]
    if conn_fd in ready:
        raise _ParentGone
    return fd in ready


def _verdict(reply: bytes | str, status: int, timeout_s: float) -> tuple[str, object]:
    """The message kind and detail for a child's reply and exit status."""
    if reply == "timeout":
        return "timeout", timeout_s
    if reply == "toolarge":
        return "toolarge", MAX_REPLY_BYTES
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGSYS:
            return "blocked", "a refused system call"
        if sig == signal.SIGXCPU:
            return "timeout", timeout_s
        if sig == signal.SIGXFSZ:
            return "limit", "file size"
        return "died", signal.Signals(sig).name
    try:
        kind, detail = json.loads(reply)
        encoded = json.dumps(detail)  # the parent reads the whole message within its own bound
    except (ValueError, TypeError, RecursionError):
        return ("died", f"exit code {os.WEXITSTATUS(status)}") if not reply else ("unreadable", None)
    if kind not in CHILD_KINDS:
        return "unreadable", None
    return ("toolarge", MAX_REPLY_BYTES) if len(encoded) > MAX_REPLY_BYTES else (kind, detail)


def _empty(scratch: str) -> bool:
    """Remove everything in the scratch directory; whether it is empty now."""
    for entry in os.scandir(scratch):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
    return not os.listdir(scratch)


def _syscall_filter():
    """The seccomp filter of a call's child (libseccomp through pyseccomp), built once, loaded in each child."""
    import pyseccomp as seccomp

    syscall_filter = seccomp.SyscallFilter(seccomp.ALLOW)
    for name in REFUSED_SYSCALLS:
        syscall_filter.add_rule(seccomp.KILL_PROCESS, name)
    syscall_filter.add_rule(seccomp.KILL_PROCESS, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_THREAD, 0))
    # clone3's flags are out of a filter's reach; told it does not exist, C libraries fall back to clone
    syscall_filter.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    syscall_filter.add_rule(seccomp.KILL_PROCESS, "prlimit64", seccomp.Arg(0, seccomp.NE, 0))  # others' limits
    for command in REFUSED_FCNTL:
        syscall_filter.add_rule(seccomp.KILL_PROCESS, "fcntl", seccomp.Arg(1, seccomp.EQ, command))
    # a child that clears its death signal would outlive the trainer (its own was set before the filter)
    syscall_filter.add_rule(seccomp.KILL_PROCESS, "prctl", seccomp.Arg(0, seccomp.EQ, PR_SET_PDEATHSIG))
    return syscall_filter


def _check_filter(syscall_filter) -> None:
    """Raise unless the filter, loaded in a throwaway child, kills it for a refused system call (`kill`)."""
    pid = os.fork()
    if pid == 0:
        try:
            syscall_filter.load()
            os.kill(os.getpid(), 0)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    if not (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGSYS):
        raise OSError("the seccomp filter did not take effect (a kernel without seccomp filters?)")


def _silence_output() -> None:
    """From now on nothing the worker or a call prints goes anywhere (never to the trainer's terminal)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)


def _set_limits(memory_mb: int, file_mb: int) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * 2**20, memory_mb * 2**20))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_mb * 2**20, file_mb * 2**20))


def _prctl(option: int, value: int) -> None:
    if LIBC.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def _load(path: str):
    spec = importlib.util.spec_from_file_location("credo_sandboxed_scorer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _send(conn: Connection, message: list) -> None:
    conn.send_bytes(json.dumps(message).encode())


# ------------------------------------------------------------------------------------------ a call's child

def _call(function, args: tuple, timeout_s: float, syscall_filter, scratch: str) -> list:
    """Confine this child, then `function(*args)`: the reply `[kind, detail]`."""
    refused = _confine(timeout_s, syscall_filter, scratch)
    return _reply(function, args, refused)


def _calls_in_child(fd: int, function, calls: list, timeout_s: float, syscall_filter, scratch: str) -> None:
    """Confine this child for `len(calls)` calls, then run them in order, each reply a line on `fd`, until one
    ends the child (a limit or a refused operation: its state is no longer the scorer's)."""
    refused = _confine(timeout_s * len(calls), syscall_filter, scratch)
    for args in calls:
        reply = _reply(function, args, refused)
        _write(fd, reply, end="\n")
        if reply[0] not in ("ok", "raised"):
            return


def _confine(timeout_s: float, syscall_filter, scratch: str) -> list[str]:
    """Confine this child for calls that may take `timeout_s` seconds in all: its death signal, limits, seccomp
    filter and audit hook; returns the list the hook records refused operations in."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the worker is single-threaded: this fires when it exits
    cpu_s = math.ceil(timeout_s) + 1  # behind the worker's deadline: CPU time is charged by the tick
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_NOFILE, (MAX_FILES, MAX_FILES))
    resource.setrlimit(resource.RLIMIT_NPROC, (MAX_TASKS, MAX_TASKS))
    if syscall_filter is not None:
        syscall_filter.load()
    refused: list[str] = []
    sys.addaudithook(_audit(scratch, refused))
    return refused


def _reply(function, args: tuple, refused: list[str]) -> list:
    """`function(*args)` as a reply `[kind, detail]`: "blocked" if it attempted an operation the audit hook refused
    (recorded in `refused` during this call), even if the scorer swallowed the PermissionError."""
    before = len(refused)
    try:
        reply = ["ok", function(*args)]
    except MemoryError:
        reply = ["limit", "memory"]
    except Exception as error:  # the scorer's own failure: the caller decides what it scores
        reply = ["raised", f"{type(error).__name__}: {error}"[:500]]
    if len(refused) > before:
        reply = ["blocked", refused[before]]
    return reply


def _write(fd: int, reply: list, end: str = "") -> None:
    """`reply` as JSON (which holds no raw newline) and `end` on `fd`."""
    try:
        text = json.dumps(reply)
    except (TypeError, ValueError):
        returned = type(reply[1]).__name__
        text = json.dumps(["raised", f"TypeError: the scorer returned a {returned}, not a JSON value"])
    view = memoryview((text + end).encode())
    while view:
        view = view[os.write(fd, view):]


def _audit(scratch: str, refused: list[str]):
    """An audit hook refusing `BLOCKED_EVENTS` and writes outside `scratch`, recording each refusal.

    It runs in the call's own process and cannot be removed, but code that runs there can get around it
    (events it does not see, C code): in isolation mode it only names what was attempted; the namespaces and
    the seccomp filter are the boundary. With isolation off it is the only protection.
    """

    def hook(event: str, args: tuple) -> None:
        blocked = event.startswith(BLOCKED_EVENTS)
        if not blocked and event == "open" and len(args) >= 2:
            path, mode = args[0], args[1]
            writes = isinstance(mode, str) and any(flag in mode for flag in "wax+")
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            writes = writes or bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND))
            blocked = writes and _outside(path, scratch)
        elif not blocked and event in WRITE_EVENTS and args:
            blocked = _outside(args[0], scratch)
        if blocked:
            refused.append(event)
            raise PermissionError(f"credo sandbox: {event} is not allowed")

    return hook


def _outside(path, scratch: str) -> bool:
    if isinstance(path, int):  # an open file descriptor: judged when it was opened
        return False
    try:
        resolved = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return True
    return os.path.commonpath([resolved, scratch]) != scratch


if __name__ == "__main__":
    main(int(sys.argv[1]))
