"""math-verify grading in a worker process: equivalences, from threads, batches, the hard timeout, `match: math`.

The worker is one per test process (started by the first test that grades, about 1 s); only the dead-worker
test restarts it.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time

import pytest

from credo.config import load_config
from credo.extras import MissingExtra
from credo.tasks import JsonlConfig, JsonlTask, Problem, build_task, math_grading, verify_all
from credo.tasks.math_grading import grade_math, grade_math_many, worker_pid

math_verify = pytest.importorskip("math_verify")

HEAVY = "\\boxed{(x+1)^{200000}}"
"""Expanding this takes far longer than a second: math-verify's own timeout (or the hard bound) must stop it."""

EQUAL = [
    ("\\boxed{\\frac{1}{2}}", "0.5"),
    ("so the answer is 0.5", "1/2"),
    ("\\boxed{0.5}", "\\frac{1}{2}"),
    ("\\boxed{0.5}", "$\\frac{1}{2}$"),
    ("\\boxed{0.5}", "\\boxed{\\frac12}"),
    ("Solving, we get x = 3", "3"),
    ("\\boxed{3}", "x=3"),
    ("$2\\sqrt{2}$", "\\sqrt{8}"),
    ("The area is \\boxed{\\frac{\\pi}{2}}", "\\pi/2"),
    ("\\boxed{1,000}", "1000"),
    ("First 7, but the answer is -12", "-12"),
]
DIFFERENT = [
    ("\\boxed{0.6}", "1/2"),
    ("\\boxed{2\\sqrt{3}}", "\\sqrt{8}"),
    ("x = 4", "3"),
    ("\\boxed{12}", "-12"),
    ("I do not know", "2"),
    ("", "2"),
]


def in_thread(function, *args, **kwargs):
    """`function(*args, **kwargs)` run on a fresh thread (not the main one); its result or its exception."""
    out: dict = {}

    def target():
        try:
            out["result"] = function(*args, **kwargs)
        except BaseException as error:  # re-raised on the caller's thread
            out["error"] = error

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(120)
    assert not thread.is_alive()
    if "error" in out:
        raise out["error"]
    return out["result"]


def test_math_verify_alone_cannot_time_out_off_the_main_thread():
    # the reason for the worker process: math-verify's signal.alarm timeouts raise on other threads
    with pytest.raises(ValueError, match="threaded environment"):
        in_thread(math_verify.parse, "\\boxed{1}", parsing_timeout=5)


@pytest.mark.parametrize(("response", "truth"), EQUAL)
def test_equivalent_answers_are_correct_from_a_thread(response, truth):
    assert in_thread(grade_math, response, truth) is True


@pytest.mark.parametrize(("response", "truth"), DIFFERENT)
def test_different_answers_are_wrong(response, truth):
    assert in_thread(grade_math, response, truth) is False


def test_a_batch_equals_the_single_calls():
    pairs = EQUAL + DIFFERENT
    expected = [True] * len(EQUAL) + [False] * len(DIFFERENT)
    assert [grade_math(r, t) for r, t in pairs] == expected
    assert in_thread(grade_math_many, pairs) == expected
    assert grade_math_many(reversed(pairs)) == expected[::-1]  # any iterable, order kept
    assert grade_math_many([]) == []
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        grade_math_many(pairs, timeout_s=0)


def test_concurrent_threads_each_get_their_own_verdicts():
    pairs = EQUAL + DIFFERENT
    expected = [True] * len(EQUAL) + [False] * len(DIFFERENT)
    results: list = [None] * 4

    def grade_rotated(k: int) -> None:
        results[k] = [grade_math(r, t) for r, t in pairs[k:] + pairs[:k]]

    threads = [threading.Thread(target=grade_rotated, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert results == [expected[k:] + expected[:k] for k in range(4)]


def test_math_verify_own_timeout_keeps_the_worker():
    grade_math("\\boxed{1}", "1")
    pid = worker_pid()
    started = time.perf_counter()
    assert grade_math(HEAVY, "1", timeout_s=1) is False  # math-verify gives up after its 1 s alarm
    elapsed = time.perf_counter() - started
    assert 0.9 < elapsed < 3.5  # within the hard bound of 3 * 1 + MARGIN_S
    assert worker_pid() == pid  # no restart
    # identical forms match without expanding (well inside 5 s; expanding would take far longer)
    assert grade_math(HEAVY, "(x+1)^{200000}", timeout_s=5) is True


def test_the_hard_bound_stops_the_answer_and_keeps_the_worker(monkeypatch, caplog):
    # timeout_s below a second: math-verify's alarms still wait 1 s, so the caller's hard bound
    # (3 * 0.01 + 0.5 s: room for a fork per answer on a loaded machine) strikes first, as it would for a worker
    # stuck where no alarm reaches
    monkeypatch.setattr(math_grading, "MARGIN_S", 0.5)
    grade_math("\\boxed{1}", "1")
    pid = worker_pid()
    pairs = [(HEAVY, "1"), ("\\boxed{2}", "2"), ("\\boxed{3}", "3"), ("\\boxed{4}", "5")]
    started = time.time()
    with caplog.at_level(logging.WARNING, logger="credo.tasks.sandbox"):
        verdicts = in_thread(grade_math_many, pairs, timeout_s=0.01)
    # only the answer that overran is wrong: its child was killed, the same worker grades the ones after it
    assert verdicts == [False, True, True, False]
    assert worker_pid() == pid
    [warning] = [r for r in caplog.records if "took longer than" in r.getMessage()]
    assert re.search(r"math-verify sandbox: grade\('.*\(x\+1\).*'\) took longer than 0\.53 s; counted as a failed "
                     r"verification$", warning.getMessage())
    assert warning.created - started < 0.9  # the bound (0.53 s) struck before math-verify's own 1 s timeout
    assert grade_math("\\boxed{\\frac{1}{2}}", "0.5") is True


def test_a_dead_worker_is_replaced():
    grade_math("\\boxed{1}", "1")
    pid = worker_pid()
    process = math_grading.SANDBOX._worker.process
    process.kill()
    process.wait(5)
    assert grade_math("\\boxed{2}", "2") is True
    assert worker_pid() not in (None, pid)


def test_missing_package_is_a_missing_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "math_verify", None)
    needs = "math grading (match: math) needs the optional package 'math_verify'"
    with pytest.raises(MissingExtra, match=re.escape(needs)):
        grade_math("\\boxed{1}", "1")
    with pytest.raises(MissingExtra, match=re.escape("pip install 'credo[tasks]'")):
        JsonlConfig(path="x", match="math")
    assert JsonlConfig(path="x").match == "auto"  # other matches do not need it


# ------------------------------------------------------------------------------------------ jsonl `match: math`


def test_jsonl_match_math_end_to_end(tmp_path):
    records = [{"prompt": "half?", "answer": "\\frac{1}{2}"}, {"prompt": "root 8?", "answer": "2\\sqrt{2}"},
               {"prompt": "solve x+1=4", "answer": "3"}, {"prompt": "half again?", "answer": "0.5"}]
    path = tmp_path / "math.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    config = load_config(None, [f"task={{name: jsonl, path: {path}, eval_path: {path}, match: math}}"])
    task = build_task(config.task)
    assert isinstance(task, JsonlTask) and task.config.match == "math"
    problems = task.eval_problems()
    responses = ["\\boxed{0.5}", "$\\sqrt{8}$", "so x = 3", "the answer is \\boxed{\\frac{2}{4}}"]
    assert [in_thread(task.verify, p, r).correct for p, r in zip(problems, responses)] == [True] * 4
    wrong = ["\\boxed{0.25}", "$\\sqrt{6}$", "so x = 4", "\\boxed{1}"]
    verdicts, errors = verify_all(task, problems + problems, responses + wrong, "raise")
    assert errors == 0
    assert [(v.reward, v.correct) for v in verdicts] == [(1.0, True)] * 4 + [(0.0, False)] * 4
    # the string comparison of the default match would have failed the equivalent forms
    plain = JsonlTask(JsonlConfig(path=str(path), eval_path=str(path)))
    assert [plain.verify(p, r).correct for p, r in zip(problems, responses)] == [False, False, True, False]
    assert task.verify(Problem("q", "\\frac{1}{2}"), "\\boxed{0.5}").reward == 1.0
