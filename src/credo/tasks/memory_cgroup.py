"""A memory cgroup around each sandbox worker, where the machine offers one.

A worker's `RLIMIT_AS` bounds what each of its processes maps, and a call's child is forked from the worker, so
together they map at most that. Memory no process maps is outside it: a memfd's pages written but never mapped, pipe
buffers, the scratch tmpfs, the kernel's objects. A cgroup's memory limit counts all of it, for every process of the
worker together (the worker and its call's child), so `Sandbox` starts each worker in a fresh cgroup of its own,
limited to the worker's address space plus its scratch space (`Limits.memory_mb + Limits.file_mb`, no swap). At the
limit the kernel reclaims, then kills a process of the cgroup (the call fails, or its worker dies and is replaced);
nothing outside it is touched. When the worker stops, whatever is left in its cgroup is killed and the cgroup removed.

The machine offers one when the trainer's own memory cgroup accepts children it may limit: cgroup v1's memory
hierarchy where the trainer may write it (root, as in most containers), or cgroup v2 with the memory controller
enabled for the children of the trainer's cgroup (`cgroup.subtree_control`; a delegated subtree). Elsewhere
`create` returns None and the worker runs with its other bounds (docs/security.md says what that leaves).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
"""Where the cgroup file systems are mounted (v2 at the root; v1's memory hierarchy at `memory/`)."""

PREFIX = "credo-sandbox-"
"""Each worker's cgroup is named `credo-sandbox-<trainer pid>-<n>`."""

_numbers = itertools.count()


@dataclass(frozen=True)
class MemoryCgroup:
    """One worker's memory cgroup (a directory of a cgroup file system)."""

    path: Path

    def command(self, command: list[str]) -> list[str]:
        """`command` started inside this cgroup: a shell moves itself in, then becomes `command`, so every
        process the command starts is in the cgroup from its first instruction."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs"), *command]

    def remove(self) -> None:
        """Kill whatever is left in the cgroup and remove it (a cgroup goes once its processes are reaped)."""
        for _ in range(50):
            try:
                pids = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
            except OSError:
                return  # already gone
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.02)


def create(limit_bytes: int) -> MemoryCgroup | None:
    """A fresh memory cgroup below the trainer's own, limited to `limit_bytes` without swap; None where the
    machine offers none (see the module's docstring)."""
    parent = own_memory_cgroup()
    if parent is None:
        return None
    _remove_stale(parent)
    path = parent / f"{PREFIX}{os.getpid()}-{next(_numbers)}"
    try:
        path.mkdir()
    except OSError:
        return None
    limits = [("memory.max", "memory.swap.max"), ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes")]
    try:
        memory, swap = next(pair for pair in limits if (path / pair[0]).exists())
        (path / memory).write_text(str(limit_bytes))
        if (path / swap).exists():
            (path / swap).write_text("0" if swap == "memory.swap.max" else str(limit_bytes))
    except (StopIteration, OSError):
        MemoryCgroup(path).remove()
        return None
    return MemoryCgroup(path)


def own_memory_cgroup() -> Path | None:
    """The directory of the trainer's memory cgroup where it may create limited children in it, else None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    entries = [line.split(":", 2) for line in lines if line.count(":") >= 2]
    v1 = [path for _, controllers, path in entries if "memory" in controllers.split(",")]
    if v1:
        directory = CGROUP_ROOT / "memory" / v1[0].lstrip("/")
    else:
        v2 = [path for hierarchy, controllers, path in entries if hierarchy == "0" and not controllers]
        if not v2:
            return None
        directory = CGROUP_ROOT / v2[0].lstrip("/")
        try:
            if "memory" not in (directory / "cgroup.subtree_control").read_text().split():
                return None
        except OSError:
            return None
    return directory if directory.is_dir() and os.access(directory, os.W_OK) else None


def _remove_stale(parent: Path) -> None:
    """Remove the empty cgroups of earlier trainers that died before removing their own."""
    for path in parent.glob(f"{PREFIX}*"):
        pid = path.name[len(PREFIX):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(OSError):
                path.rmdir()
