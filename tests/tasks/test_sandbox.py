"""Untrusted answers: the unsandboxed defect, payloads through every named reasoning-gym dataset, the sandbox itself.

A reasoning-gym scorer used to `eval` the model's answer in credo's own process; now an answer outside its
dataset's grammar never reaches the scorer, and every scorer runs in a sandbox worker with limits.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import reasoning_gym  # the test extra installs it

from credo.tasks import build_task, sandbox_failures, verify_all
from credo.tasks.answer_grammar import GRAMMARS
from credo.tasks.sandbox import FAILED, Limits, Sandbox

NAMED = ["chain_sum"]
"""The reasoning-gym datasets credo's configs and docs name (`grep -r reasoning_gym: configs README.md docs`)."""

DATASETS = NAMED + sorted(GRAMMARS)
"""...plus every dataset whose scorer evaluates answers (countdown, puzzle24, polynomial_multiplication, ...)."""


def payloads(sentinel: Path) -> dict[str, str]:
    return {
        "os.system": f'__import__("os").system("touch {sentinel}")',
        "import": f"import os; os.system('touch {sentinel}')",
        "open": f"open({str(sentinel)!r}, 'w').write('x')",
        "dunder": "().__class__.__bases__[0].__subclasses__()",
        "tower": "7**7**7**7",
        "caret tower": "7^7^7^7",
        "parenthesised tower": "((9**99)**99)**99",
        "huge literal": "9" * 5000 + "**99",
        "huge string": "1" * 10**6,
        "huge nesting": "(" * 5000 + "1" + ")" * 5000,
        "lambda": f"(lambda: __import__('os').system('touch {sentinel}'))()",
        "semicolon": f"1; __import__('os').system('touch {sentinel}')",
        "newline": f"1\n__import__('os').system('touch {sentinel}')",
        "list comprehension": f"[__import__('os').system('touch {sentinel}') for _ in [1]]",
    }


def task_for(dataset: str):
    return build_task({"name": f"reasoning_gym:{dataset}", "size": 3, "eval_size": 1, "score_timeout_s": 5})


def test_the_unsandboxed_scorers_execute_the_answer(tmp_path):
    # the defect, on reasoning-gym's own path: the answer runs in the caller's process
    sentinel = tmp_path / "pwned"
    dataset = reasoning_gym.create_dataset("countdown", size=1, seed=0)
    dataset.score_answer(payloads(sentinel)["os.system"], dataset[0])
    assert sentinel.exists()
    code = ("import reasoning_gym; d = reasoning_gym.create_dataset('countdown', size=1, seed=0); "
            "d.score_answer('7**7**7**7', d[0])")
    with pytest.raises(subprocess.TimeoutExpired):  # no time limit: it would run for minutes
        subprocess.run([sys.executable, "-c", code], timeout=5, check=False)


@pytest.mark.parametrize("dataset", DATASETS)
def test_payloads_score_zero_execute_nothing_and_correct_answers_still_score(dataset, tmp_path):
    task = task_for(dataset)
    problem = task.train[0]
    sentinel = tmp_path / "pwned"
    task.verify(problem, "<answer>0</answer>")  # the worker's start is not a payload's time
    for name, payload in payloads(sentinel).items():
        started = time.perf_counter()
        verdict = task.verify(problem, f"<answer>{payload}</answer>")
        assert (verdict.reward, verdict.correct) == (0.0, False), name
        assert time.perf_counter() - started < 5, name
        assert not sentinel.exists(), name
    verdict = task.verify(problem, f"<answer>{problem.answer}</answer>")
    assert (verdict.reward, verdict.correct) == (1.0, True)


def test_payloads_through_verify_all_are_wrong_not_errors(tmp_path):
    task = task_for("countdown")
    problem = task.train[0]
    texts = [f"<answer>{p}</answer>" for p in payloads(tmp_path / "pwned").values()] + [
        f"<answer>{problem.answer}</answer>"]
    verdicts, errors = verify_all(task, [problem] * len(texts), texts, "raise")
    assert errors == 0 and sandbox_failures(verdicts) == 0  # refused by the grammar: never reached a worker
    assert [v.correct for v in verdicts] == [False] * (len(texts) - 1) + [True]


# ------------------------------------------------------------------------------------------ the sandbox itself

HOSTILE = '''
import os, time


def system(path):
    os.system("touch " + path)
    return "ran"


def write(path):
    with open(path, "w") as f:
        f.write("x")
    return "wrote"


def sleep():
    time.sleep(10**6)


def spin():
    while True:
        pass


def allocate():
    return len(bytearray(10 * 2**30))


def secret(name):
    with open("/proc/self/environ", "rb") as f:
        initial = f.read()
    return [os.environ.get(name), name.encode() in initial, os.getcwd(), os.environ.get("HOME")]


def scratch_write():
    existed = os.path.exists("scratch.txt")
    with open("scratch.txt", "w") as f:
        f.write("ok")
    return [os.path.abspath("scratch.txt"), existed]


def echo(value):
    return value


def threaded(value):
    import threading
    results = []
    thread = threading.Thread(target=lambda: results.append(value * 2))
    thread.start()
    thread.join()
    return results[0]
'''


@pytest.fixture
def hostile(tmp_path):
    path = tmp_path / "hostile_scorer.py"
    path.write_text(textwrap.dedent(HOSTILE))
    sandbox = Sandbox("test", path, Limits(memory_mb=1024))
    yield sandbox
    sandbox.shutdown()


def check_kept(sandbox: Sandbox, pid: int | None) -> None:
    assert sandbox.worker_pid() == pid  # the failed call's child is gone; its worker was never touched
    assert sandbox.call("echo", (7,), 5).value == 7


@pytest.mark.parametrize("function", ["system", "write"])
def test_a_scorer_cannot_run_commands_or_write_outside_its_scratch_directory(hostile, tmp_path, function):
    sentinel = tmp_path / "outside" / "pwned"
    sentinel.parent.mkdir()
    assert hostile.call("echo", (1,), 5).value == 1
    pid = hostile.worker_pid()
    outcome = hostile.call(function, (str(sentinel),), 5)
    assert outcome.failed and hostile.failures == 1
    assert not sentinel.exists()
    check_kept(hostile, pid)


@pytest.mark.parametrize("function", ["sleep", "spin"])
def test_a_scorer_that_never_returns_is_stopped_at_the_limit(hostile, function):
    assert hostile.call("echo", (1,), 5).value == 1
    pid = hostile.worker_pid()
    started = time.perf_counter()
    outcome = hostile.call(function, (), 1.0)
    assert outcome.failed and 1.0 <= time.perf_counter() - started < 3
    check_kept(hostile, pid)


def test_a_scorer_that_allocates_10_gb_fails(hostile):
    assert hostile.call("echo", (1,), 5).value == 1
    pid = hostile.worker_pid()
    outcome = hostile.call("allocate", (), 10)
    assert outcome.failed and hostile.failures == 1
    check_kept(hostile, pid)


def test_a_scorer_sees_no_secrets_and_works_in_a_scratch_directory_emptied_after_each_call(hostile, monkeypatch):
    monkeypatch.setenv("CREDO_TEST_SECRET_TOKEN", "hunter2")
    hostile.shutdown()  # the next worker starts with the secret in the parent's environment
    value, in_initial_environ, cwd, home = hostile.call("secret", ("CREDO_TEST_SECRET_TOKEN",), 5).value
    assert value is None and not in_initial_environ
    assert Path(cwd).name.startswith("credo-sandbox-") and home == cwd
    assert hostile.call("scratch_write", (), 5).value == [str(Path(cwd) / "scratch.txt"), False]
    assert hostile.call("scratch_write", (), 5).value == [str(Path(cwd) / "scratch.txt"), False]  # emptied
    hostile.shutdown()
    assert not Path(cwd).exists()  # the scratch directory is removed with its worker


def test_a_scorer_may_use_threads_within_its_call(hostile):
    assert hostile.call("threaded", (21,), 5).value == 42


def test_a_batch_continues_after_a_failure(hostile, tmp_path):
    outcomes = hostile.call_many("echo", [(1,), (2,)], 5) + hostile.call_many("sleep", [()], 0.5)
    outcomes += hostile.call_many("echo", [(3,)], 5)
    assert [o.value for o in outcomes] == [1, 2, None, 3] and [o.failed for o in outcomes] == [0, 0, 1, 0]


PREPARED = '''
PREPARE = {"built": 1}
_BUILT = []


def prepare(key):
    if key not in _BUILT:
        _BUILT.append(key)


def built(key, answer):
    _BUILT.append(answer)  # a call's own change: gone with its child
    return list(_BUILT)
'''


def test_what_prepare_builds_in_the_worker_is_kept_and_what_a_call_changes_is_not(tmp_path):
    path = tmp_path / "prepared_scorer.py"
    path.write_text(PREPARED)
    box = Sandbox("prepared", path)
    try:
        assert box.call("built", ("a", "x"), 5).value == ["a", "x"]
        assert box.call("built", ("b", "y"), 5).value == ["a", "b", "y"]
    finally:
        box.shutdown()


def test_a_failed_verification_is_counted_in_the_metric(monkeypatch):
    from credo.tasks import reasoning_gym as rg_task

    task = task_for("chain_sum")
    problem = task.train[0]
    monkeypatch.setattr(rg_task.SANDBOX, "call", lambda function, args, timeout_s: FAILED)
    verdicts, errors = verify_all(task, [problem] * 2, [f"<answer>{problem.answer}</answer>"] * 2, "zero")
    assert errors == 0 and [(v.reward, v.correct, v.sandbox_failed) for v in verdicts] == [(0.0, False, True)] * 2
    assert sandbox_failures(verdicts) == 2


# ------------------------------------------------------------------------------------------ calls sharing a child

SHARED = '''
import os, time

SHARED_CHILD = ("count", "step")
_SEEN = []


def count(value):
    _SEEN.append(value)
    return [len(_SEEN), os.getpid()]


def fresh_count(value):
    return count(value)


def step(kind, value):
    if kind == "nap":
        time.sleep(value)
    elif kind == "sleep":
        time.sleep(10**6)
    elif kind == "raise":
        raise ValueError("bad turn")
    elif kind == "allocate":
        return len(bytearray(10 * 2**30))
    elif kind == "system":
        os.system("touch " + value)
    elif kind == "exit":
        os._exit(3)
    elif kind == "huge":
        return "x" * (2**20 + 10)
    return value
'''


@pytest.fixture
def shared(tmp_path):
    path = tmp_path / "shared_scorer.py"
    path.write_text(SHARED)
    sandbox = Sandbox("shared", path, Limits(memory_mb=1024))
    yield sandbox
    sandbox.shutdown()


def test_the_calls_of_one_request_share_a_child_and_the_next_request_starts_clean(shared):
    first = [o.value for o in shared.call_many("count", [(v,) for v in range(5)], 5)]
    second = [o.value for o in shared.call_many("count", [(v,) for v in range(3)], 5)]
    assert [n for n, _ in first] == [1, 2, 3, 4, 5] and len({pid for _, pid in first}) == 1
    assert [n for n, _ in second] == [1, 2, 3] and {pid for _, pid in second}.isdisjoint(pid for _, pid in first)
    # a function the module does not list keeps a fresh child per call
    assert [o.value[0] for o in shared.call_many("fresh_count", [(v,) for v in range(3)], 5)] == [1, 1, 1]


def test_each_shared_call_has_its_own_time_bound(shared):
    started = time.perf_counter()
    outcomes = shared.call_many("step", [("nap", 0.6)] * 3, 1.0)  # 1.8 s in all, each within its 1 s
    assert [o.value for o in outcomes] == [0.6] * 3 and not any(o.failed for o in outcomes)
    assert time.perf_counter() - started >= 1.8


def test_a_failure_in_a_shared_child_fails_its_own_call_and_the_rest_go_on(shared, tmp_path):
    sentinel = tmp_path / "pwned"
    calls = [("ok", 1), ("sleep", None), ("ok", 2), ("raise", None), ("ok", 3), ("allocate", None), ("ok", 4),
             ("system", str(sentinel)), ("ok", 5), ("exit", None), ("ok", 6), ("huge", None), ("ok", 7)]
    shared.call("step", ("ok", 0), 5)
    pid = shared.worker_pid()
    started = time.perf_counter()
    outcomes = shared.call_many("step", calls, 1.0)
    assert 1.0 <= time.perf_counter() - started < 6
    assert [o.value for o in outcomes] == [1, None, 2, None, 3, None, 4, None, 5, None, 6, None, 7]
    assert [o.failed for o in outcomes] == [0, 1, 0, 0, 0, 1, 0, 1, 0, 1, 0, 1, 0]
    assert outcomes[3].error == "ValueError: bad turn" and shared.failures == 5
    assert not sentinel.exists() and shared.worker_pid() == pid  # no failure reached the worker


def test_a_shared_function_cannot_also_be_prepared(tmp_path):
    path = tmp_path / "both_scorer.py"
    path.write_text('SHARED_CHILD = ("f",)\nPREPARE = {"f": 1}\n\n\ndef prepare(key):\n    pass\n\n\n'
                    'def f(key, answer):\n    return answer\n')
    box = Sandbox("both", path)
    with pytest.raises((RuntimeError, OSError), match=r"\['f'\] are both in SHARED_CHILD and in PREPARE"):
        box.call("f", ("k", 1), 5)
