"""What the scorer sandbox costs: a worker's start and each answer's call, against the same work without it.

Measured in one run, interleaved, so that the ratios hold on a noisy machine:

- **worker start**: the first call of a fresh `Sandbox` on a scorer that imports nothing (bubblewrap, the
  namespaces, the worker's interpreter, its seccomp self-check, the memory cgroup where the machine offers one),
  behind the boundary and without it (`confined=False`), against a bare interpreter's start
  (`python -I -c pass`), the floor of any worker;
- **per answer**: a call of a scorer that returns its argument (the fork of the worker, the child's limits,
  filter and reply), behind the boundary and without it, each the median over `--answers` calls;
- **per answer in a shared child**: the same function listed in the scorer's `SHARED_CHILD` (as the agent
  environments' `step` is), `--answers` calls in one request behind the boundary: one child for all of them;
- **math-verify per answer**: `credo.tasks.math_grading.grade_math_outcomes` on answers as a `jsonl` task grades
  them (one sandboxed call each, behind the boundary), against `math_verify` on the same answers in this process;
- **a reward model's tokenizer per answer**: `credo.tasks.bounded_tokenizer.BoundedTokenizer` on 840-character
  responses (one sandboxed call each) against the same tokenizer in this process, the testbed's tokenizer.

Printed: each time and ratio; last, `RESULT boundary_answer_ratio=<x> shared_child_speedup=<y>`: a call behind the
boundary over the same call without it (the namespaces', filter's and cgroup's share of an answer's cost), and an
answer's cost in a child of its own over its cost in a request's shared child.

    PYTHONPATH=src python benchmarks/sandbox_cost.py            # about a minute on 2 CPU cores
    PYTHONPATH=src python benchmarks/sandbox_cost.py --quick    # smoke test in seconds
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from credo.tasks.sandbox import Sandbox

ECHO = 'SHARED_CHILD = ("shared_echo",)\n\n\ndef echo(value):\n    return value\n\n\nshared_echo = echo\n'


def median_seconds(work: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def worker_starts(scorer: Path, repeats: int) -> dict[str, float]:
    """Median seconds to the first reply of a fresh worker, confined and not, and of a bare interpreter."""
    def first_call(confined: bool) -> None:
        box = Sandbox("bench", scorer, confined=confined)
        try:
            box.call("echo", (1,), 30)
        finally:
            box.shutdown()

    bare = [sys.executable, "-I", "-c", "pass"]
    return {"bare interpreter": median_seconds(lambda: subprocess.run(bare, check=True), repeats),
            "worker, behind the boundary": median_seconds(lambda: first_call(True), repeats),
            "worker, without it": median_seconds(lambda: first_call(False), repeats)}


def per_answer(scorer: Path, answers: int) -> dict[str, float]:
    """Median seconds per `echo` call, behind the boundary and without it, and per call of a request of `answers`
    calls sharing a child behind the boundary (workers started beforehand)."""
    out = {}
    for label, confined in (("behind the boundary", True), ("without it", False)):
        box = Sandbox("bench", scorer, confined=confined)
        try:
            box.call("echo", (0,), 30)
            out[label] = median_seconds(lambda box=box: box.call("echo", ("x" * 100,), 30), answers)
            if confined:
                batch = [("x" * 100,)] * answers
                out["in a shared child"] = median_seconds(
                    lambda box=box: box.call_many("shared_echo", batch, 30), 3) / answers
        finally:
            box.shutdown()
    return out


def math_verify_per_answer(answers: int) -> dict[str, float]:
    """Seconds per answer graded by math-verify in the sandbox and in this process."""
    import math_verify

    from credo.tasks.math_grading import grade_math_outcomes

    pairs = [(f"The answer is \\boxed{{\\frac{{{i}}}{{2}}}}", f"{i / 2}") for i in range(answers)]
    grade_math_outcomes(pairs[:1])  # the worker's start, not counted

    def in_process() -> None:
        for response, truth in pairs:
            math_verify.verify(math_verify.parse(f"${truth}$"), math_verify.parse(response))

    return {"sandboxed": median_seconds(lambda: grade_math_outcomes(pairs), 3) / answers,
            "in process": median_seconds(in_process, 3) / answers}


def tokenizer_per_answer(answers: int) -> dict[str, float]:
    """Seconds per 840-character response tokenized through `BoundedTokenizer` and in this process."""
    from credo.tasks.bounded_tokenizer import BoundedTokenizer
    from credo.testbed import build_tokenizer

    tokenizer = build_tokenizer()
    bounded = BoundedTokenizer(tokenizer, "bench")
    texts = [f"The sum is {i}; " * 60 for i in range(answers)]
    bounded(texts[:1])  # the worker's start, not counted

    def plain() -> None:
        tokenizer(text=texts, return_tensors="pt", padding=True, padding_side="right", add_special_tokens=False)

    return {"sandboxed": median_seconds(lambda: bounded(texts), 3) / answers,
            "in process": median_seconds(plain, 3) / answers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="A smoke test in seconds (few repeats).")
    parser.add_argument("--answers", type=int, default=128, help="Calls per per-answer measurement.")
    args = parser.parse_args()
    answers, starts = (8, 2) if args.quick else (args.answers, 5)
    with tempfile.TemporaryDirectory(prefix="credo_sandbox_bench_") as folder:
        scorer = Path(folder) / "echo_scorer.py"
        scorer.write_text(ECHO)
        start = worker_starts(scorer, starts)
        answer = per_answer(scorer, answers)
    grading = math_verify_per_answer(answers)
    tokenizing = tokenizer_per_answer(answers)
    bare = start["bare interpreter"]
    print(f"worker start (median of {starts}):")
    for label, seconds in start.items():
        print(f"  {label:30s} {seconds * 1e3:8.1f} ms  {seconds / bare:5.1f}x a bare interpreter")
    print(f"per answer (median of {answers} calls of a scorer that returns its argument):")
    for label, seconds in answer.items():
        print(f"  {label:30s} {seconds * 1e3:8.2f} ms")
    ratio = answer["behind the boundary"] / answer["without it"]
    print(f"  the boundary's share: {ratio:.2f}x the unconfined call")
    shared = answer["behind the boundary"] / answer["in a shared child"]
    print(f"  a child per answer over a request's shared child: {shared:.1f}x")
    for name, pair in (("math-verify", grading), ("a reward model's tokenizer", tokenizing)):
        print(f"{name} per answer: sandboxed {pair['sandboxed'] * 1e3:.2f} ms, in process "
              f"{pair['in process'] * 1e3:.3f} ms ({pair['sandboxed'] / pair['in process']:.1f}x)")
    print(f"RESULT boundary_answer_ratio={ratio:.2f} shared_child_speedup={shared:.1f}")


if __name__ == "__main__":
    main()
