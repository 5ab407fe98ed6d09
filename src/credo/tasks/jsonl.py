"""Bring your own data: a JSONL file of `{"prompt": ..., "answer": ...}` lines, graded by the final answer.

The answer of a response is the content of its last `\\boxed{...}` (`match: boxed`), its last number
(`match: last_number`), or the boxed content when there is one and else the last number (`auto`). It is
correct when it equals the ground truth as a number (when both parse as numbers) or as a whitespace-trimmed
string. `match: math` instead grades the whole response with math-verify (`credo.tasks.math_grading`):
its answer (the `\\boxed{...}` content, else the last LaTeX or plain expression) is correct when it equals
the ground truth mathematically ("\\frac{1}{2}" = "0.5", "2\\sqrt{2}" = "\\sqrt{8}", "x = 3" = "3"); this
needs the optional package math-verify (`pip install 'credo[tasks]'`). An optional `difficulty` field
buckets the evaluation. A malformed line is an error that names the file and the line: "prompt" must be a
string, "answer" a string or a number, "difficulty" (when present) a string or an integer; null, a list or
a boolean in any of them is an error that names the field.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from credo.extras import require
from credo.tasks.base import TASKS, Problem, Verdict, fair_shares, seeded_epochs, verify_each
from credo.tasks.chat import with_instruction
from credo.tasks.data_limits import check_rows, check_text_file
from credo.tasks.rewards import CustomReward, RewardedTask, RewardOptions

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_FIELDS = (("prompt", str, "a string"), ("answer", (str, int, float), "a string or a number"),
           ("difficulty", (str, int), "a string or an integer"))
"""Each field of a line with the JSON types it may hold (booleans excluded; null never)."""


class JsonlConfig(RewardOptions):
    name: str = "jsonl"
    """The task's name in `task.name`: "jsonl"."""
    path: str
    """Training problems, one JSON object per line with "prompt" and "answer" (and optional "difficulty")."""
    eval_path: str | None = None
    """Held-out problems; None: hold out `eval_fraction` of `path` (a seeded split)."""
    eval_fraction: float = Field(0.1, gt=0.0, lt=1.0)
    """Share of `path` held out for eval when `eval_path` is None (at least one problem; a fixed shuffle)."""
    match: Literal["auto", "boxed", "last_number", "math"] = "auto"
    """How a response's answer is found and compared (see the module docstring); "math": math-verify."""
    verify_budget_s: float = Field(60.0, gt=0.0)
    """Time (wall clock) grading one batch with math-verify (`match: math`) may take in all.

    Each answer's hard bound is the smaller of math-verify's own (16 s) and its fair share, what is left of the
    budget divided by the answers still to grade (`credo.tasks.base.fair_shares`); an answer left without time
    scores 0 ungraded (counted in `verify/sandbox_failures`)."""
    instruction: str | None = None
    """Text appended to every prompt after a blank line (None or "": the prompt alone).

    E.g. `credo.tasks.THOUGHT_INSTRUCTION` for the thought MDP of RRPO/SRPO: one step per thought, each closed
    by `</thought>`, the final answer boxed."""

    @model_validator(mode="after")
    def _math_verify_installed(self) -> JsonlConfig:
        if self.match == "math" and not self.reward:
            require("math_verify", "tasks", "match: math (math-verify grading)")
        return self


def read_problems(path: str | Path) -> list[Problem]:
    """Parse a JSONL file (records separated by "\n"; "\r\n" too); errors name the file and line. The file is
    checked first (`credo.tasks.data_limits`: a regular file, its size and rows bounded)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"JSONL task file {path} does not exist")
    check_text_file(path)
    problems = []
    # JSON lines end at "\n" alone: `str.splitlines` would also split at U+2028, U+0085 and other breaks that JSON
    # strings may hold raw, and refuse a valid line.
    for number, line in enumerate(path.read_text().split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{number}: not valid JSON ({error.msg})") from None
        if not isinstance(record, dict) or "prompt" not in record or "answer" not in record:
            raise ValueError(f'{path}:{number}: each line needs "prompt" and "answer" fields')
        for field, allowed, what in _FIELDS:
            value = record.get(field, "all")
            wrong = isinstance(value, bool) or not isinstance(value, allowed)
            if wrong:
                raise ValueError(f'{path}:{number}: "{field}" must be {what}, got {json.dumps(value)[:60]}')
        problems.append(Problem(record["prompt"], str(record["answer"]), str(record.get("difficulty", "all"))))
        check_rows(path, len(problems))
    if not problems:
        raise ValueError(f"{path}: no problems")
    return problems


def extract_answer(response: str, match: str) -> str | None:
    if match in ("auto", "boxed"):
        boxed = last_boxed(response)
        if boxed is not None or match == "boxed":
            return boxed
    numbers = _NUMBER.findall(response)
    return numbers[-1] if numbers else None


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}`, with nested braces balanced."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def train_and_held_out(read: Callable[[str], list[Problem]], config: Any) -> tuple[list[Problem], list[Problem]]:
    """(train, held out) of a file task: `read(config.path)`, and `read(config.eval_path)` when the config names
    one, else the `eval_fraction` split of the training file (`split_held_out`)."""
    problems = read(config.path)
    if config.eval_path is not None:
        return problems, read(config.eval_path)
    return split_held_out(problems, config.eval_fraction, config.path)


def split_held_out(problems: list[Problem], fraction: float, path: str) -> tuple[list[Problem], list[Problem]]:
    """(train, held out): `fraction` of the problems (at least one) held out by a fixed shuffle, both in file order."""
    order = list(range(len(problems)))
    random.Random(0).shuffle(order)
    cut = max(1, round(fraction * len(problems)))
    if cut >= len(problems):
        raise ValueError(f"{path}: too few problems to hold out {fraction:.0%} for eval")
    return [problems[i] for i in sorted(order[cut:])], [problems[i] for i in sorted(order[:cut])]


def grade(response: str, answer: str, match: str, share_s: float | None = None) -> Verdict:
    """A response's final answer against the ground truth (`match`: see the module docstring); math-verify's within
    `share_s` seconds where given (none left: 0, ungraded)."""
    if match == "math":
        from credo.tasks.math_grading import grade_math_outcomes

        if share_s is not None and share_s <= 0:
            return Verdict(reward=0.0, correct=False, sandbox_failed=True)
        [outcome] = grade_math_outcomes([(response, answer)], bound_s=share_s)
        correct = outcome.value is True
        return Verdict(reward=float(correct), correct=correct, sandbox_failed=outcome.failed)
    given = extract_answer(response, match)
    correct = given is not None and answers_equal(given, answer)
    return Verdict(reward=float(correct), correct=correct)


def answers_equal(given: str, truth: str) -> bool:
    a, b = given.strip().replace(",", ""), truth.strip().replace(",", "")
    try:
        return float(a) == float(b)
    except ValueError:
        return a == b


@TASKS.register("jsonl")
class JsonlTask(RewardedTask):
    name = "jsonl"
    checks_steps = False
    Config = JsonlConfig

    def __init__(self, config: JsonlConfig) -> None:
        self.config = config
        self.custom_reward = CustomReward.of(config)
        self.train, self.held_out = train_and_held_out(self.read, config)

    def read(self, path: str) -> list[Problem]:
        """The problems of one file, each prompt with the config's `instruction` appended."""
        return [replace(p, prompt=with_instruction(p.prompt, self.config.instruction)) for p in read_problems(path)]

    def train_problems(self, seed: int, start: int = 0) -> Iterator[Problem]:
        """Epochs over the training problems, each in a fresh seeded order."""
        return seeded_epochs(self.train, seed, start)

    def eval_problems(self) -> list[Problem]:
        return list(self.held_out)

    def own_verify(self, problem: Problem, response: str, share_s: float | None = None) -> Verdict:
        """The final answer against the ground truth (`match`), math-verify's within `share_s` seconds if given."""
        return grade(response, problem.answer, self.config.match, share_s)

    def verify_batch(self, problems: Sequence[Problem], texts: Sequence[str],
                     on_error: str) -> tuple[list[Verdict], int]:
        """The verdicts on a batch and how many verifications failed (`verify_all` calls it when no reward functions
        are named); math-verify's grading shares `verify_budget_s` fairly among the answers (the other matches
        take no time worth a budget and ignore their share)."""
        share_s = fair_shares(self.config.verify_budget_s, len(texts))
        return verify_each(self, lambda problem, text: self.own_verify(problem, text, share_s()), problems, texts,
                           on_error)
