"""Answer grammars: chosen by the dataset that scores the answer, required where a scorer evaluates, linear time.

Red-team checks (issue 33): a composite's countdown rows used to reach sympy's `parse_expr` unchecked (the
grammar was looked up under "composite"); the list grammars and reasoning-gym's `<answer>` extractor took
quadratic time (`[1` then 20,000 spaces: 8-11 s per answer; 100,000 characters of `<answer>`: 43 s).
"""

from __future__ import annotations

import importlib.util
import math
import sys
import time
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import pytest
import reasoning_gym  # the test extra installs it
from hypothesis import given
from hypothesis import strategies as st
from reasoning_gym.composite import DatasetSpec

from credo.tasks import build_task
from credo.tasks import reasoning_gym as rg_task
from credo.tasks.answer_grammar import GRAMMARS, MAX_LIST_CHARS, REVIEWED, admits, evaluates, guarded
from credo.tasks.reasoning_gym import extract_answer, last_answer_tag
from credo.tasks.sandbox import Outcome

PAYLOADS = [
    "(__import__('os').system('true'))",
    "(setattr(__import__('sys').modules['__main__']._Violation,'active',False), __import__('os').system('true'))",
    "__import__('reasoning_gym').games.countdown.CountdownDataset.__setattr__",
]
"""Answers that would run code in a scorer that `parse_expr`s them (never run here: the scorer is a recorder)."""


class Recorder:
    """A stand-in for the sandbox: records the answers that reach the scorer, and scores each 1."""

    def __init__(self) -> None:
        self.answers: list[str] = []

    def call(self, function: str, args: tuple, timeout_s: float) -> Outcome:
        self.answers.append(args[4])
        return Outcome(value=1.0)


def composite(*parts: str | DatasetSpec):
    specs = [part if isinstance(part, DatasetSpec) else DatasetSpec(part, 1.0, {}) for part in parts]
    return build_task({"name": "reasoning_gym:composite", "size": 12, "eval_size": 1, "config": {"datasets": specs}})


def rows_of(task, source: str):
    return [p for p in task.train if p.meta["entry"]["metadata"]["source_dataset"] == source]


# ------------------------------------------------------------------------------------------ composites


def test_a_composites_countdown_rows_are_checked_by_countdowns_grammar(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(rg_task, "SANDBOX", recorder)
    task = composite("countdown", "chain_sum")
    problem = rows_of(task, "countdown")[0]
    for payload in PAYLOADS:
        verdict = task.verify(problem, f"<answer>{payload}</answer>")
        assert (verdict.reward, verdict.correct, verdict.sandbox_failed) == (0.0, False, False)
    assert recorder.answers == []  # refused by countdown's grammar: the scorer never saw them
    assert task.verify(problem, f"<answer>{problem.answer}</answer>").correct
    chain = rows_of(task, "chain_sum")[0]
    assert task.verify(chain, "<answer>anything</answer>").correct  # chain_sum's scorer evaluates nothing
    assert recorder.answers == [problem.answer, "anything"]


def test_a_composite_entry_without_a_source_dataset_reaches_no_scorer():
    assert admits("composite", "1", {"metadata": {"source_dataset": "chain_sum"}})
    assert not admits("composite", "1", {"metadata": {}})
    assert not admits("composite", "1", {"metadata": {"source_dataset": "composite"}})
    assert admits("composite", "1 + 1", {"metadata": {"source_dataset": "countdown"}})
    assert not admits("composite", PAYLOADS[0], {"metadata": {"source_dataset": "countdown"}})


def test_a_composite_scores_through_the_sandbox():
    task = composite("countdown", "chain_sum")
    problem = rows_of(task, "countdown")[0]
    assert task.verify(problem, f"<answer>{problem.answer}</answer>").correct
    verdict = task.verify(problem, f"<answer>{PAYLOADS[0]}</answer>")
    assert (verdict.correct, verdict.sandbox_failed) == (False, False)  # refused before the worker


# ------------------------------------------------------------------------------------------ validation


def test_an_evaluating_dataset_without_a_grammar_is_refused_at_validation(monkeypatch):
    monkeypatch.delitem(GRAMMARS, "countdown")
    wanted = r"reasoning_gym:(countdown|composite): the scorer of reasoning-gym dataset 'countdown' evaluates answers"
    with pytest.raises(ValueError, match=wanted):
        build_task({"name": "reasoning_gym:countdown", "size": 2, "eval_size": 1})
    with pytest.raises(ValueError, match=wanted):
        composite("chain_sum", "countdown")
    with pytest.raises(ValueError, match=wanted):  # a composite inside a composite
        composite("chain_sum", DatasetSpec("composite", 1.0, {"datasets": [DatasetSpec("countdown", 1.0, {})]}))
    build_task({"name": "reasoning_gym:chain_sum", "size": 2, "eval_size": 1})  # one that evaluates nothing


def test_every_registered_dataset_is_guarded_and_every_review_is_needed():
    registry = reasoning_gym.factory.DATASETS
    assert all(guarded(name, cls) for name, (cls, _) in registry.items())
    assert not set(REVIEWED) & set(GRAMMARS)
    assert all(evaluates(registry[name][0]) for name in list(REVIEWED) + list(GRAMMARS))


def load(path: Path, source: str, monkeypatch):
    """The class `Scorer` of a new module holding `source` (imported as reasoning-gym's modules are)."""
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, path.stem, module)
    spec.loader.exec_module(module)
    return module.Scorer


@pytest.mark.parametrize(("body", "evaluating"), [
    ("return float(eval(answer) == 1)", True),
    ("import sympy\n        return float(sympy.simplify(answer) == 1)", True),
    ("return float(answer.strip() == '1')", False),
])
def test_a_new_scorer_that_evaluates_is_found(tmp_path, monkeypatch, body, evaluating):
    scorer = load(tmp_path / f"scorer_{evaluating}_{len(body)}.py",
                  f"class Scorer:\n    def score_answer(self, answer, entry):\n        {body}\n", monkeypatch)
    assert evaluates(scorer) is evaluating
    assert guarded("a_new_dataset", scorer) is not evaluating


@pytest.mark.parametrize(("dataset", "answer", "admitted"), [
    ("spiral_matrix", "1 2 3", True),
    ("spiral_matrix", "[1, 2, 3]", True),
    ("spiral_matrix", "[1, 2, 3", False),
    ("spiral_matrix", "[1, 2, __import__('os')]", False),
    ("binary_matrix", "[[1, 0],\n [0, 1]]", True),
    ("binary_matrix", "[[1, 0], [0, 1]", False),
    ("n_queens", "[['Q', '_'], ['_', 'Q']]", True),
    ("n_queens", "[['Q', 'x']]", False),
    ("string_insertion", "['a', 'b',]", True),
    ("string_insertion", "['ab']", False),
])
def test_the_list_grammars_on_re2_keep_their_language(dataset, answer, admitted):
    assert admits(dataset, answer, ENTRY) is admitted


# ------------------------------------------------------------------------------------------ extraction


@given(st.lists(st.sampled_from(["<answer>", "</answer>", "<answer", "answer>", " ", "\n", "\u2003", "\x1c", "a",
                                 "<", "/"]), max_size=14).map("".join))
def test_the_linear_extractor_reads_answers_as_reasoning_gym_does(text):
    assert last_answer_tag(text) == reasoning_gym.utils.extract_answer(text)


# ------------------------------------------------------------------------------------------ linear time

SIZES = (1_000, 10_000, 100_000)
MAX_RATIO = 40
"""The largest time ratio allowed between inputs ten times apart: quadratic time gives 100, linear time about
10, up to 20 from 10k to 100k characters on a busy machine (the larger inputs no longer fit the caches)."""
FLOOR_S = 1e-3
"""Times below this count as this much: a ratio of tiny times is noise, and growth that stays under
`MAX_RATIO` ms at 100k characters is harmless whatever its order."""


def fill(prefix: str, unit: str, suffix: str = "") -> Callable[[int], str]:
    """Inputs of exactly n characters: `prefix`, `unit` repeated, `suffix`."""
    return lambda n: prefix + (unit * n)[: n - len(prefix) - len(suffix)] + suffix


GRAMMAR_INPUTS = {
    "spaces": fill("", " "),
    "spaces, then a stray letter": fill("", " ", "x"),
    "item, spaces": fill("[1", " ", "x"),
    "row, spaces": fill("[[1]", " ", "x"),
    "letter, spaces": fill("['a'", " ", "x"),
    "cell row, spaces": fill("[['Q']", " ", "x"),
    "separators": fill("[", "1, ", "x"),
    "bare commas": fill("[", ", ", "]"),
    "row separators": fill("[", "[1], ", "x"),
    "letter separators": fill("[", "'a' , ", "x"),
    "cell separators": fill("[[", "'Q',", "'Q']"),
    "opening brackets": fill("", "["),
    "nested brackets": lambda n: "[" * (n // 2) + "]" * (n - n // 2),
    "unclosed list": fill("[", "1,", "1"),
    "unclosed rows": fill("[", "[0, 1],", "[0, 1]"),
    "digits and spaces": fill("", "1 ", "x"),
    "parentheses": fill("", "("),
    "sums": fill("", "1+", "x"),
}
"""Adversarial answers for the grammars: spaces, repeated separators, nested brackets and near-matches."""

EXTRACTION_INPUTS = {
    "unclosed tags": fill("", "<answer>"),
    "one tag, spaces": fill("<answer>", " "),
    "closed tags": fill("", "<answer>a</answer>"),
    "closing tags": fill("", "</answer>"),
    "near tags": fill("", "<answer"),
    "unclosed boxes": fill("", "\\boxed{"),
    "one box, braces": fill("\\boxed{", "{"),
    "numbers with commas": fill("", "1,"),
    "minus signs": fill("", "-"),
    "dotted numbers": fill("", "1."),
}
"""Adversarial responses for credo's extraction (`<answer>` tags, then `\\boxed{}`, then the last number)."""

ENTRY = {"metadata": {"variable": "x", "variables": ["x", "y"]}}


def least_times(check: Callable[[str], object], texts: list[str]) -> list[float]:
    """The least of a few timings of `check` on each text, taken in turns (the machine is shared: a busy spell
    then slows every size alike, and the least is the least disturbed); fewer turns once they take 0.5 s."""
    least, spent = [math.inf] * len(texts), 0.0
    for _ in range(7):
        for i, text in enumerate(texts):
            started = time.perf_counter()
            check(text)
            took = time.perf_counter() - started
            least[i], spent = min(least[i], took), spent + took
        if spent > 0.5:
            break
    return least


def assert_linear(check: Callable[[str], object], make: Callable[[int], str]) -> None:
    """Each tenfold longer input takes less than `MAX_RATIO` times as long (stopping at the first that does not)."""
    for small, large in pairwise(SIZES):
        texts = [make(small), make(large)]
        assert [len(text) for text in texts] == [small, large] and large <= MAX_LIST_CHARS
        short, long = least_times(check, texts)
        ratio = long / max(short, FLOOR_S)
        assert ratio < MAX_RATIO, f"{small} -> {large} characters: {short:.5f} s -> {long:.5f} s"


@pytest.mark.parametrize("dataset", sorted(GRAMMARS))
def test_every_grammar_runs_in_linear_time(dataset):
    for name, make in GRAMMAR_INPUTS.items():
        try:
            assert_linear(lambda answer: admits(dataset, answer, ENTRY), make)
        except AssertionError as error:
            raise AssertionError(f"{dataset}, {name}: {error}") from None


def test_extraction_runs_in_linear_time():
    for name, make in EXTRACTION_INPUTS.items():
        try:
            assert_linear(lambda response: extract_answer(response, "last_number"), make)
        except AssertionError as error:
            raise AssertionError(f"{name}: {error}") from None
