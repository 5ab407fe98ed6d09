"""Red team: code that runs inside the sandbox worker (as a payload evaluated by a scorer would) stays there.

Each attack of issue 33 that concerns the worker, as a call of a hostile scorer function: none may write
outside the scratch directory, start a process, signal the trainer, read its environment, reach a network,
outlive its call, speak for another call or write to the trainer's terminal; and each later call scores as
if the attack had not happened. Every one of these worked against the audit-hook worker this replaced.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import textwrap
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

import credo.tasks.reasoning_gym as rg_task
from credo.tasks import build_task, sandbox, verify_all
from credo.tasks.sandbox import FAILED, ISOLATION_ENV, Sandbox, SandboxUnavailable

pytestmark = pytest.mark.skipif(os.environ.get(ISOLATION_ENV, "").lower() == "none",
                                reason=f"{ISOLATION_ENV}=none: no operating-system boundary to test")

HOSTILE = '''
import json, os, signal, sys, threading, time


def score(answer):
    return 1.0 if answer == "right" else 0.0


def echo(value):
    return value


def rewrite_the_scorer():
    globals()["score"] = lambda answer: 1.0
    globals()["echo"] = lambda value: "pwned"
    return 0.0


def switch_the_hook_off_then_run(sentinel):
    try:  # the audit-hook worker's switch
        setattr(sys.modules["__main__"]._Violation, "active", False)
    except AttributeError:
        pass
    os.system("id > " + sentinel)
    return "ran"


def spawn(command):
    import _posixsubprocess  # starts a program without an audit event
    errpipe_read, errpipe_write = os.pipe()
    return _posixsubprocess.fork_exec(
        [b"/bin/sh", b"-c", command.encode()], [b"/bin/sh"], True, (errpipe_write,), None, None,
        -1, -1, -1, -1, -1, -1, errpipe_read, errpipe_write, True, True, -1, None, None, None, -1, None, False)


def write_through_dir_fd(directory):
    fd = os.open(directory, os.O_RDONLY)
    os.close(os.open("pwned", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    return "wrote"


def remove_through_dir_fd(directory, name):
    os.remove(name, dir_fd=os.open(directory, os.O_RDONLY))
    return "removed"


def rename_out(sentinel):
    with open("inside", "w") as f:
        f.write("x")
    os.rename("inside", sentinel)
    return "renamed"


def symlink_out(sentinel):
    os.symlink(os.path.abspath("inside"), sentinel)
    return "linked"


def signal_through_pidfd(pid):
    signal.pidfd_send_signal(os.pidfd_open(pid), signal.SIGUSR1)
    return "sent"


def kill_the_parent():
    os.kill(os.getppid(), signal.SIGKILL)
    return "killed"


def read_environ(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        return f.read().decode(errors="replace")


def read(path):
    with open(path) as f:
        return f.read()


def parent_pid():
    return os.getppid()


def reschedule():
    os.setpriority(os.PRIO_PROCESS, 0, 19)
    return "reniced"


def pin_to_one_cpu():
    os.sched_setaffinity(0, {0})
    return "pinned"


def async_signal_owner(command):
    import fcntl
    read_end, _ = os.pipe()
    fcntl.fcntl(read_end, command, os.getppid())
    return "owned"


def worker_memory():
    with open(f"/proc/{os.getppid()}/mem", "rb") as f:  # the worker, which forks the next calls
        return "opened"


def network_interfaces():
    with open("/proc/net/dev") as f:
        return sorted(line.split(":")[0].strip() for line in f.readlines()[2:])


def act_between_calls(sentinel, port):
    def later():
        for _ in range(200):
            time.sleep(0.02)
            try:
                with open(sentinel, "w") as f:
                    f.write("x")
                import socket
                socket.create_connection(("127.0.0.1", port), timeout=0.5).sendall(b"pwned")
                return
            except OSError:
                pass

    threading.Thread(target=later, daemon=True).start()
    return 0.0


def forge_replies(count):
    conn_fd = int(sys.argv[1])  # the audit-hook worker's socket to the trainer
    for _ in range(count):
        os.write(conn_fd, len(json.dumps(["ok", 1.0])).to_bytes(4, "big") + json.dumps(["ok", 1.0]).encode())
    return 0.0


def huge_reply():
    return "x" * (2**20 + 10)


def shout():
    print("FORGED TRAINER LOG LINE", flush=True)
    print("FORGED TRAINER LOG LINE", file=sys.stderr, flush=True)
    os.write(1, b"FORGED TRAINER LOG LINE\\n")
    os.write(2, b"FORGED TRAINER LOG LINE\\n")
    return 0.0
'''


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    path = tmp_path_factory.mktemp("scorer") / "redteam_scorer.py"
    path.write_text(textwrap.dedent(HOSTILE))
    box = Sandbox("redteam", path)
    yield box
    box.shutdown()


@pytest.fixture
def outside(tmp_path):
    """A directory outside the worker's scratch directory."""
    directory = tmp_path / "outside"
    directory.mkdir()
    return directory


def check_unharmed(box: Sandbox, started: float, bound_s: float = 10.0) -> None:
    """The attack took at most `bound_s`, and the next calls score as before it."""
    assert time.perf_counter() - started < bound_s
    assert [o.value for o in box.call_many("score", [("right",), ("wrong",)], 5)] == [1.0, 0.0]
    assert box.call("echo", (7,), 5).value == 7


def test_a_call_cannot_rewrite_the_scorer_for_the_next_calls(hostile):
    started = time.perf_counter()
    assert hostile.call("rewrite_the_scorer", (), 5).value == 0.0
    check_unharmed(hostile, started)


def test_switching_the_audit_hook_off_runs_no_command(hostile, outside):
    started = time.perf_counter()
    assert hostile.call("switch_the_hook_off_then_run", (str(outside / "pwned"),), 5).failed
    assert not (outside / "pwned").exists()
    check_unharmed(hostile, started)


def test_fork_exec_without_an_audit_event_starts_no_process(hostile, outside):
    started = time.perf_counter()
    outcome = hostile.call("spawn", (f"touch {outside / 'pwned'}",), 5)
    assert outcome.failed  # seccomp killed the call at clone
    time.sleep(0.2)
    assert not (outside / "pwned").exists()
    check_unharmed(hostile, started)


def test_nothing_a_call_starts_outlives_the_worker(hostile, outside):
    started = time.perf_counter()
    hostile.call("spawn", (f"sleep 1; touch {outside / 'pwned'}",), 5)
    hostile.shutdown()
    time.sleep(1.5)
    assert not (outside / "pwned").exists()
    check_unharmed(hostile, started)


@pytest.mark.parametrize("attack", ["write_through_dir_fd", "rename_out", "symlink_out"])
def test_no_write_reaches_outside_the_scratch_directory(hostile, outside, attack):
    started = time.perf_counter()
    argument = str(outside) if attack == "write_through_dir_fd" else str(outside / "pwned")
    assert hostile.call(attack, (argument,), 5).value is None
    assert not (outside / "pwned").exists() and not (outside / "pwned").is_symlink()
    check_unharmed(hostile, started)


def test_no_file_outside_the_scratch_directory_is_removed(hostile, outside):
    victim = outside / "precious"
    victim.write_text("keep")
    started = time.perf_counter()
    assert hostile.call("remove_through_dir_fd", (str(outside), "precious"), 5).value is None
    assert victim.read_text() == "keep"
    check_unharmed(hostile, started)


@pytest.fixture
def trainer_signals():
    received: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda number, frame: received.append(number))
    yield received
    signal.signal(signal.SIGUSR1, previous)


def test_a_call_cannot_signal_the_trainer_or_its_worker(hostile, trainer_signals):
    started = time.perf_counter()
    hostile.call("echo", (1,), 5)
    pid = hostile.worker_pid()
    assert hostile.call("signal_through_pidfd", (os.getpid(),), 5).value is None
    assert hostile.call("kill_the_parent", (), 5).value is None
    time.sleep(0.2)
    assert trainer_signals == [] and hostile.worker_pid() == pid
    check_unharmed(hostile, started)


def test_a_call_cannot_read_the_trainers_environment(hostile, monkeypatch):
    started = time.perf_counter()
    with open(f"/proc/{os.getpid()}/environ", "rb") as f:
        mine = f.read().decode(errors="replace")
    outcome = hostile.call("read_environ", (os.getpid(),), 5)
    assert outcome.value is None and mine  # our pid names no process the worker can see
    check_unharmed(hostile, started)


def test_a_call_cannot_read_files_outside_its_view(hostile, tmp_path):
    token = tmp_path / "token"  # as a key in the user's home or a run directory would be
    token.write_text("hunter2")
    assert hostile.call("read", (str(token),), 5).value is None


def test_the_working_and_home_directories_stay_out_of_view_though_python_put_them_on_the_path(tmp_path, monkeypatch):
    """`python -m credo` run from a home directory puts it first on `sys.path`; a scorer still cannot read the
    Hugging Face token under it, nor a run directory's files under the working directory."""
    home, work = tmp_path / "home", tmp_path / "home" / "project"
    (home / ".cache" / "huggingface").mkdir(parents=True)
    (work / "runs").mkdir(parents=True)
    (home / ".cache" / "huggingface" / "token").write_text("hf_secret")
    (work / "runs" / "key").write_text("run secret")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(work))
    monkeypatch.syspath_prepend(str(home))
    scorer = tmp_path / "scorers" / "reading_scorer.py"
    scorer.parent.mkdir()
    scorer.write_text(textwrap.dedent(HOSTILE))
    box = Sandbox("reader", scorer)
    try:
        assert box.call("echo", ("alive",), 10).value == "alive"
        for secret in (home / ".cache" / "huggingface" / "token", work / "runs" / "key"):
            assert box.call("read", (str(secret),), 10).value is None
    finally:
        box.shutdown()


@pytest.mark.parametrize(("function", "args"), [
    ("reschedule", ()), ("pin_to_one_cpu", ()), ("async_signal_owner", (8,)), ("async_signal_owner", (10,)),
    ("async_signal_owner", (15,))])
def test_calls_that_would_outlive_their_child_are_refused(hostile, function, args):
    """Scheduling that a later answer's child would inherit through the worker, and I/O signals (F_SETOWN,
    F_SETSIG, F_SETOWN_EX) that reach the worker though `kill` is refused: each kills the child (no audit event
    stops them first: seccomp does), and the next call works."""
    assert hostile.call(function, args, 5).failed
    assert hostile.call("echo", ("next",), 5).value == "next"


def test_the_worker_is_its_namespaces_init(hostile):
    """A call's child sees its worker as PID 1: the namespace's init, which no signal from inside reaches and whose
    exit ends every process left in the namespace (there is no bubblewrap init to keep a child alive)."""
    assert hostile.call("parent_pid", (), 5).value == 1


def test_the_filter_refuses_ipc_that_outlives_the_child_and_clearing_the_death_signal(tmp_path):
    """System V memory, queues and semaphores, POSIX queues and `prctl(PR_SET_PDEATHSIG)` are reachable only through
    ctypes, which the audit hook stops first; the seccomp filter refuses them too, for code that gets past the hook."""
    from credo.tasks.sandbox_worker import _syscall_filter

    with (tmp_path / "filter.pfc").open("w+b") as pfc:
        _syscall_filter().export_pfc(pfc)
        pfc.seek(0)
        text = pfc.read().decode()
    for name in ("shmget", "shmat", "msgget", "msgsnd", "semget", "mq_open", "mq_timedsend", "sched_setattr"):
        assert f'syscall "{name}"' in text, name
    prctl = text.split('syscall "prctl"')[1].split("# filter for syscall")[0]
    assert "$a0.lo32 == 1" in prctl and "KILL_PROCESS" in prctl


def test_a_call_cannot_reach_its_workers_memory(hostile):
    assert hostile.call("worker_memory", (), 5).value is None


def test_a_call_has_no_network(hostile):
    assert hostile.call("network_interfaces", (), 5).value == ["lo"]


def test_a_thread_started_in_one_call_cannot_act_in_the_next(hostile, outside):
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(2.0)
    started = time.perf_counter()
    port = listener.getsockname()[1]
    hostile.call("act_between_calls", (str(outside / "pwned"), port), 5)  # refused if its thread acts before it returns
    for _ in range(5):
        hostile.call("echo", (1,), 5)
    with pytest.raises(TimeoutError):
        listener.accept()
    listener.close()
    assert not (outside / "pwned").exists()
    check_unharmed(hostile, started)


def test_a_call_cannot_answer_for_the_next_ones(hostile):
    started = time.perf_counter()
    hostile.call("forge_replies", (3,), 5)
    check_unharmed(hostile, started)


def test_a_reply_over_the_bound_fails_and_the_next_call_works(hostile):
    started = time.perf_counter()
    assert hostile.call("huge_reply", (), 5).failed
    check_unharmed(hostile, started)


def test_answers_that_reached_countdowns_parse_expr_run_nothing_and_change_no_later_score(tmp_path):
    # the composite dataset's missing grammar let these reach the real scorer (issue 33, item 1)
    reasoning_gym = pytest.importorskip("reasoning_gym")
    from credo.tasks.reasoning_gym import SANDBOX

    entry = reasoning_gym.create_dataset("countdown", size=1, seed=0)[0]
    sentinel = tmp_path / "pwned"

    def score(answer: str):
        return SANDBOX.call("score", ("countdown", {}, 1, 0, answer, entry), 10).value

    started = time.perf_counter()
    switch_off = "setattr(__import__('sys').modules['__main__']._Violation,'active',False)"
    rewrite = ("setattr(__import__('reasoning_gym.games.countdown',fromlist=['x']).CountdownDataset,"
               "'score_answer',__import__('operator').is_not)")
    for payload in (f"({switch_off}, __import__('os').system('id > {sentinel}'))",
                    f"(1, __import__('os').system('id > {sentinel}'))", f"({rewrite},1)"):
        assert score(payload) in (None, 0.01)
    assert not sentinel.exists()
    assert score("1 + 2") < 1.0 and score(entry["answer"]) == 1.0  # the scorer was not rewritten
    assert time.perf_counter() - started < 30  # a worker's start included


def test_a_reply_without_the_right_label_is_rejected():
    ours, theirs = socket.socketpair()
    worker = sandbox._Worker.__new__(sandbox._Worker)
    worker.conn, peer = Connection(ours.detach()), Connection(theirs.detach())
    for forged in (["ok", 1.0], [8, 0, "ok", 1.0, True], [7, 1, "ok", 1.0, True], [7, 0, "done", 1.0, True]):
        peer.send_bytes(json.dumps(forged).encode())
        assert worker.receive(7, 0, 1) == (FAILED, "got a message meant for another call", False)
    peer.send_bytes(json.dumps([7, 0, "ok", 1.0, True]).encode())
    assert worker.receive(7, 0, 1)[0].value == 1.0
    worker.conn.close()
    peer.close()


def test_a_forged_failure_reply_reaches_the_log_as_one_clipped_escaped_line():
    """A child that writes its own failure reply (900 kB, a clipboard-write escape sequence, a fake log line) is
    logged as one line of at most `MAX_DETAIL_CHARS` characters with its control characters escaped; so is an error
    it raises."""
    ours, theirs = socket.socketpair()
    worker = sandbox._Worker.__new__(sandbox._Worker)
    worker.conn, peer = Connection(ours.detach()), Connection(theirs.detach())
    payload = "\x1b]52;c;ZWNobyBwd25lZA==\x07\n2026-12-02 INFO credo: all answers verified\r" + "A" * 900_000
    for kind in ("blocked", "died", "limit", "raised"):
        sender = threading.Thread(target=peer.send_bytes, args=(json.dumps([7, 0, kind, payload, True]).encode(),))
        sender.start()  # 900 kB fill the socket's buffer: the write ends as the reply is read
        outcome, why, _ = worker.receive(7, 0, 5)
        sender.join()
        text = why or outcome.error
        assert len(text) <= sandbox.MAX_DETAIL_CHARS + 60 and "\n" not in text and "\r" not in text
        assert "\x1b" not in text and "\\x1b]52" in text and "\\n2026-12-02 INFO" in text
    worker.conn.close()
    peer.close()


def test_the_workers_output_never_reaches_the_trainers(hostile, capfd):
    capfd.readouterr()
    assert hostile.call("shout", (), 5).value == 0.0
    captured = capfd.readouterr()
    assert "FORGED" not in captured.out + captured.err


def test_without_the_boundary_the_worker_refuses_to_start(tmp_path, monkeypatch):
    path = tmp_path / "plain_scorer.py"
    path.write_text("def echo(value):\n    return value\n")
    monkeypatch.setattr(sandbox, "bwrap_binary", lambda: "/bin/false")  # as if namespaces were refused
    box = Sandbox("refusing", path)
    with pytest.raises(SandboxUnavailable, match=f"{ISOLATION_ENV}=none runs scorers without it"):
        box.call("echo", (1,), 5)
    monkeypatch.setenv(ISOLATION_ENV, "none")  # the documented opt-out
    assert box.call("echo", (1,), 5).value == 1
    box.shutdown()


def test_a_missing_boundary_stops_scoring_even_when_reward_errors_score_zero(monkeypatch):
    # `reward_errors: zero` scores a raising verifier 0; a sandbox that cannot start would score every answer 0
    monkeypatch.setattr(sandbox, "bwrap_binary", lambda: "/bin/false")
    monkeypatch.delenv(ISOLATION_ENV, raising=False)
    box = Sandbox("refusing-in-training", Path(__file__))
    monkeypatch.setattr(rg_task, "SANDBOX", box)
    task = build_task({"name": "reasoning_gym:chain_sum", "size": 8, "eval_size": 2})
    try:
        with pytest.raises(SandboxUnavailable):
            verify_all(task, task.train[:2], ["<answer>1</answer>", "<answer>2</answer>"], "zero")
    finally:
        box.shutdown()
