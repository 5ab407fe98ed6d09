"""Memory no process maps stays bounded: memfds are refused behind the boundary, and where the machine offers a
memory cgroup every worker runs in one of its own, limited to its address space plus its scratch space."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from credo.tasks import memory_cgroup
from credo.tasks.sandbox import ISOLATION_ENV, Limits, Sandbox

SCORER = '''
import os


def echo(value):
    return value


def hold_unmapped_memory(megabytes, file_mb):
    """Memory outside `RLIMIT_AS`: memfds written, never mapped (each file at most `file_mb`, `RLIMIT_FSIZE`)."""
    files = []
    chunk = b"x" * 2**20
    for index in range(-(-megabytes // file_mb)):
        files.append(os.memfd_create(f"m{index}"))
        for _ in range(file_mb):
            os.write(files[-1], chunk)
    return "held"
'''

LIMITS = Limits(memory_mb=600, file_mb=16)
"""A worker's bounds in these tests: a cgroup of 616 MiB, which the payload's 800 MiB exceeds."""

offered = pytest.mark.skipif(memory_cgroup.own_memory_cgroup() is None,
                             reason="this machine offers no memory cgroup the trainer may create")


@pytest.fixture
def scorer(tmp_path) -> Path:
    path = tmp_path / "memory_scorer.py"
    path.write_text(textwrap.dedent(SCORER))
    return path


@pytest.mark.skipif(os.environ.get(ISOLATION_ENV, "").lower() == "none",
                    reason=f"{ISOLATION_ENV}=none: no operating-system boundary to test")
def test_behind_the_boundary_a_call_cannot_hold_memory_outside_its_address_space(scorer):
    """`memfd_create` kills the child (seccomp) before it holds 800 MiB its `RLIMIT_AS` of 600 MiB never sees."""
    box = Sandbox("memfd", scorer, LIMITS)
    try:
        assert box.call("hold_unmapped_memory", (800, LIMITS.file_mb), 30).failed
        assert box.call("echo", ("next",), 5).value == "next"
    finally:
        box.shutdown()


@offered
def test_each_worker_runs_in_a_memory_cgroup_of_its_own_removed_when_it_stops(scorer):
    box = Sandbox("cgroup", scorer, LIMITS)
    try:
        assert box.call("echo", (1,), 5).value == 1
        cgroup = box._worker.cgroup
        assert cgroup is not None and cgroup.path.parent == memory_cgroup.own_memory_cgroup()
        assert cgroup.path.name in Path(f"/proc/{box.worker_pid()}/cgroup").read_text()
        limit = next(cgroup.path / name for name in ("memory.max", "memory.limit_in_bytes")
                     if (cgroup.path / name).exists())
        assert int(limit.read_text()) == (LIMITS.memory_mb + LIMITS.file_mb) * 2**20
    finally:
        box.shutdown()
    assert not cgroup.path.exists()


@offered
def test_the_cgroup_bounds_memory_a_worker_without_the_boundary_could_hold(scorer):
    """Without the namespaces and the filter (as the chat-template worker runs) memfds are allowed, and 800 MiB of
    them pass every per-process limit; the cgroup stops the call (the kernel kills in the cgroup only), and a fresh
    worker takes the next call."""
    box = Sandbox("cgroup", scorer, LIMITS, confined=False)
    try:
        assert box.call("hold_unmapped_memory", (800, LIMITS.file_mb), 30).failed
        assert box.call("echo", ("next",), 5).value == "next"
    finally:
        box.shutdown()


def test_no_cgroup_where_the_machine_offers_none(monkeypatch, tmp_path):
    """A v2 hierarchy whose memory controller is not delegated to the trainer's children: no cgroup, no error."""
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "cgroup.subtree_control").write_text("cpu pids\n")
    proc = tmp_path / "cgroup"
    proc.write_text("0::/trainer\n")
    monkeypatch.setattr(memory_cgroup, "CGROUP_ROOT", tmp_path)
    real_read = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: real_read(proc if str(self) == "/proc/self/cgroup"
                                                                           else self, *a, **k))
    assert memory_cgroup.own_memory_cgroup() is None and memory_cgroup.create(2**20) is None
    (tmp_path / "trainer" / "cgroup.subtree_control").write_text("cpu memory pids\n")
    assert memory_cgroup.own_memory_cgroup() == tmp_path / "trainer"
