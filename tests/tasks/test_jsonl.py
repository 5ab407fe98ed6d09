"""The `jsonl` task: reading problems, extracting and comparing answers, the eval split, the training stream."""

from __future__ import annotations

import json
import re
from collections import Counter
from itertools import islice

import pytest

from credo.tasks import build_task
from credo.tasks.base import Problem
from credo.tasks.jsonl import JsonlConfig, JsonlTask, answers_equal, extract_answer, read_problems


def write_jsonl(path, records) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return str(path)


def numbered(tmp_path, n: int, name: str = "data.jsonl") -> str:
    return write_jsonl(tmp_path / name, [{"prompt": f"q{i}", "answer": str(i)} for i in range(n)])


# ------------------------------------------------------------------------------------------ reading


def test_read_problems(tmp_path):
    path = write_jsonl(
        tmp_path / "p.jsonl",
        [
            {"prompt": "1+1?", "answer": "2"},
            "",  # blank lines are skipped
            {"prompt": "capital of France?", "answer": "Paris", "difficulty": "easy"},
            {"prompt": "7?", "answer": 3.5, "difficulty": 2},  # numeric answers and difficulties are stringified
        ],
    )
    assert read_problems(path) == [
        Problem("1+1?", "2", "all"),
        Problem("capital of France?", "Paris", "easy"),
        Problem("7?", "3.5", "2"),
    ]


def test_lines_end_at_newline_alone(tmp_path):
    """A JSON string may hold U+2028, U+2029 and U+0085 raw (`ensure_ascii=False` writes them so); they are no line
    breaks of JSON lines. Windows line ends are read too."""
    path = tmp_path / "u.jsonl"
    records = [{"prompt": "a\u2028b\u2029c\u0085d", "answer": "1"}, {"prompt": "e", "answer": "2"}]
    path.write_text("\r\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\r\n", encoding="utf-8")
    assert read_problems(path) == [Problem("a\u2028b\u2029c\u0085d", "1", "all"), Problem("e", "2", "all")]


def test_malformed_json_names_file_and_line(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "a", "answer": "1"}, "", '{"prompt": "b", '])
    with pytest.raises(ValueError, match=rf"^{re.escape(path)}:3: not valid JSON"):
        read_problems(path)


@pytest.mark.parametrize("line", ['{"prompt": "b"}', '{"answer": "1"}', '["b", "1"]', '"text"'])
def test_missing_field_names_file_and_line(tmp_path, line):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "a", "answer": "1"}, line])
    with pytest.raises(ValueError, match=rf'^{re.escape(path)}:2: each line needs "prompt" and "answer" fields'):
        read_problems(path)


@pytest.mark.parametrize(("record", "field", "got"), [
    ({"prompt": None, "answer": "1"}, "prompt", "null"),
    ({"prompt": "a", "answer": None}, "answer", "null"),
    ({"prompt": "a", "answer": "1", "difficulty": None}, "difficulty", "null"),
    ({"prompt": 7, "answer": "1"}, "prompt", "7"),
    ({"prompt": ["a"], "answer": "1"}, "prompt", '["a"]'),
    ({"prompt": "a", "answer": True}, "answer", "true"),
    ({"prompt": "a", "answer": {"x": 1}}, "answer", '{"x": 1}'),
    ({"prompt": "a", "answer": "1", "difficulty": 0.5}, "difficulty", "0.5"),
])
def test_null_or_wrongly_typed_field_names_file_line_and_field(tmp_path, record, field, got):
    """A null answer used to become the string "None" (and a null prompt the prompt "None")."""
    path = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "a", "answer": "1"}, "", record])
    with pytest.raises(ValueError, match=rf'^{re.escape(path)}:3: "{field}" must be a .*, got {re.escape(got)}$'):
        read_problems(path)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n  \n")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: no problems"):
        read_problems(path)


def test_missing_file(tmp_path):
    path = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError, match=rf"JSONL task file {re.escape(str(path))} does not exist"):
        read_problems(path)
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        JsonlTask(JsonlConfig(path=str(path)))


# ------------------------------------------------------------------------------------------ answers


@pytest.mark.parametrize(
    ("response", "match", "expected"),
    [
        ("so \\boxed{42}.", "boxed", "42"),
        ("\\boxed{1} then \\boxed{2}", "boxed", "2"),  # the last box
        ("\\boxed{\\frac{1}{2}}", "boxed", "\\frac{1}{2}"),  # nested braces balanced
        ("\\boxed{{a}{b{c}}} tail", "auto", "{a}{b{c}}"),
        ("\\boxed{3", "boxed", None),  # unclosed
        ("the answer is 7", "boxed", None),  # no box: None, no fallback
        ("the answer is 7", "auto", "7"),  # auto falls back to the last number
        ("12 then \\boxed{x} then 99", "auto", "x"),  # auto prefers the box
        ("12 then \\boxed{x} then 99", "last_number", "99"),
        ("total 1,234,567 apples", "last_number", "1,234,567"),
        ("from 3 down to -12.5 degrees", "last_number", "-12.5"),
        ("x = 2, y = -4", "last_number", "-4"),
        ("no digits here", "last_number", None),
        ("no digits here", "auto", None),
        ("version 3. done", "last_number", "3"),  # "3." without decimals is "3"
    ],
)
def test_extract_answer(response, match, expected):
    assert extract_answer(response, match) == expected


@pytest.mark.parametrize(
    ("given", "truth", "equal"),
    [
        ("3.0", "3", True),
        ("3", "3.0", True),
        (" 42 ", "42", True),
        ("1,000", "1000", True),
        ("-0.5", "-.5", True),
        ("3.01", "3", False),
        ("-3", "3", False),
        ("Paris", "Paris ", True),  # trimmed string equality
        ("paris", "Paris", False),  # case matters
        ("\\frac{1}{2}", "\\frac{1}{2}", True),
        ("\\frac{1}{2}", "0.5", False),  # no symbolic equivalence
    ],
)
def test_answers_equal(given, truth, equal):
    assert answers_equal(given, truth) is equal


@pytest.mark.parametrize(
    ("match", "response", "correct"),
    [
        ("auto", "I think \\boxed{12.0}", True),
        ("auto", "it is 12", True),
        ("auto", "\\boxed{13} though 12", False),
        ("boxed", "it is 12", False),
        ("last_number", "\\boxed{12} or 13", False),
    ],
)
def test_verify(tmp_path, match, response, correct):
    path = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "q", "answer": "12"}] * 3)
    task = JsonlTask(JsonlConfig(path=path, match=match))
    verdict = task.verify(Problem("q", "12"), response)
    assert (verdict.correct, verdict.reward, verdict.first_wrong_step) == (correct, float(correct), None)
    assert task.checks_steps is False


# ------------------------------------------------------------------------------------------ splits and streams


@pytest.mark.parametrize(("n", "fraction", "held"), [(30, 0.1, 3), (20, 0.25, 5), (7, 0.01, 1)])
def test_seeded_eval_split(tmp_path, n, fraction, held):
    # held = max(1, round(n * fraction)): 30*0.1 = 3; 20*0.25 = 5; 7*0.01 = 0.07 -> at least 1
    path = numbered(tmp_path, n)
    task = JsonlTask(JsonlConfig(path=path, eval_fraction=fraction))
    eval_prompts = [p.prompt for p in task.eval_problems()]
    train_prompts = [p.prompt for p in task.train]
    assert len(eval_prompts) == held and len(train_prompts) == n - held
    assert not set(eval_prompts) & set(train_prompts)
    assert sorted(eval_prompts + train_prompts) == sorted(f"q{i}" for i in range(n))
    # both keep file order
    assert eval_prompts == sorted(eval_prompts, key=lambda p: int(p[1:]))
    assert train_prompts == sorted(train_prompts, key=lambda p: int(p[1:]))
    # the split is fixed (seeded), not per instance
    assert eval_prompts == [p.prompt for p in JsonlTask(JsonlConfig(path=path, eval_fraction=fraction)).eval_problems()]


def test_too_few_problems_to_split(tmp_path):
    path = numbered(tmp_path, 1)
    with pytest.raises(ValueError, match=rf"{re.escape(path)}: too few problems to hold out 10% for eval"):
        JsonlTask(JsonlConfig(path=path))


def test_eval_path_is_used(tmp_path):
    train = numbered(tmp_path, 5, "train.jsonl")
    held = write_jsonl(tmp_path / "eval.jsonl", [{"prompt": "e1", "answer": "1", "difficulty": "hard"}])
    task = build_task({"name": "jsonl", "path": train, "eval_path": held})
    assert isinstance(task, JsonlTask)
    assert task.eval_problems() == [Problem("e1", "1", "hard")]
    assert [p.prompt for p in task.train] == [f"q{i}" for i in range(5)]  # nothing held out of `path`


def test_train_stream_epochs(tmp_path):
    n = 6
    train = numbered(tmp_path, n, "train.jsonl")
    held = numbered(tmp_path, 1, "eval.jsonl")
    task = JsonlTask(JsonlConfig(path=train, eval_path=held))
    stream = [p.prompt for p in islice(task.train_problems(seed=1), 4 * n)]
    epochs = [stream[e * n : (e + 1) * n] for e in range(4)]
    for epoch in epochs:
        assert sorted(epoch) == [f"q{i}" for i in range(n)]  # each epoch a permutation
    assert len({tuple(e) for e in epochs}) > 1  # fresh order per epoch (P(all 4 equal) = (1/720)^3)
    assert stream == [p.prompt for p in islice(task.train_problems(seed=1), 4 * n)]  # deterministic
    assert stream != [p.prompt for p in islice(task.train_problems(seed=2), 4 * n)]
    for start in (1, 5, 6, 13):
        assert [p.prompt for p in islice(task.train_problems(seed=1, start=start), 4 * n - start)] == stream[start:]
    assert Counter(stream) == {f"q{i}": 4 for i in range(n)}


def test_config_validation():
    with pytest.raises(ValueError, match=r"(?s)match.*'auto', 'boxed', 'last_number' or 'math'"):
        JsonlConfig(path="x", match="regex")
    with pytest.raises(ValueError, match=r"(?s)eval_fraction.*less than 1"):
        JsonlConfig(path="x", eval_fraction=1.0)
    with pytest.raises(ValueError, match=r"(?s)path\s+Field required"):
        JsonlConfig()


def test_instruction_is_appended_to_every_prompt(tmp_path):
    from credo.tasks import THOUGHT_INSTRUCTION, JsonlConfig, JsonlTask

    path = tmp_path / "d.jsonl"
    path.write_text("".join(f'{{"prompt": "q{i}", "answer": "{i}"}}\n' for i in range(20)))
    task = JsonlTask(JsonlConfig(path=str(path), instruction=THOUGHT_INSTRUCTION))
    first = next(task.train_problems(0))
    assert first.prompt.startswith("q") and first.prompt.endswith("\n\n" + THOUGHT_INSTRUCTION)
    assert all(p.prompt.endswith(THOUGHT_INSTRUCTION) for p in task.eval_problems())
    assert task.verify(first, f"</thought>\\boxed{{{first.answer}}}").correct


def test_math_grading_shares_the_batch_budget_so_slow_answers_cannot_zero_the_rest(tmp_path, monkeypatch):
    """`match: math` grades a batch within `verify_budget_s`, each answer bounded by its fair share. Two answers
    that run to their bound come first (a 23-character answer took 5 s of math-verify); the four after them are
    still graded, and the bounds grow as the slow ones leave their shares' remainder to nobody but themselves."""
    import time

    import credo.tasks.math_grading as math_grading
    from credo.tasks import verify_all
    from credo.tasks.sandbox import FAILED, Outcome

    bounds = []

    def grade(pairs, timeout_s=5.0, bound_s=None):
        [(response, _)] = list(pairs)
        bounds.append(bound_s)
        if response == "slow":
            time.sleep(bound_s)
            return [FAILED]
        return [Outcome(value=True)]

    monkeypatch.setattr(math_grading, "grade_math_outcomes", grade)
    path = write_jsonl(tmp_path / "m.jsonl", [{"prompt": f"q{i}", "answer": "1"} for i in range(6)])
    task = build_task({"name": "jsonl", "path": path, "eval_path": path, "match": "math", "verify_budget_s": 1.2})
    rows = task.eval_problems()
    verdicts, errors = verify_all(task, rows, ["slow", "slow", "1", "1", "1", "1"], "raise")
    assert [v.correct for v in verdicts] == [False, False, True, True, True, True] and errors == 0
    assert [v.sandbox_failed for v in verdicts] == [True, True, False, False, False, False]
    assert bounds[0] == pytest.approx(1.2 / 6, abs=0.02) and bounds[1] == pytest.approx(1.0 / 5, abs=0.02)
    assert all(b > 0.15 for b in bounds)  # every answer kept its share
