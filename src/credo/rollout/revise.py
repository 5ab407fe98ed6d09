"""IBPO's revision requests (arXiv 2605.16302): which siblings a failure is revised against, and the prompt.

For a failed response `y_i` of a group, `K-1` sibling references are chosen, correct siblings first (each
kind in random order, cycling when the group has fewer siblings than `K-1`), and for each the policy is
asked, with a prompt of our own, for a corrected solution given the problem, `y_i` and the sibling. The
paper publishes no prompt; ours states that the attempt is wrong, that the reference may be wrong too,
and asks to keep what the attempt got right, in the same format, ending with the final answer.
Revisions are never trained on.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Sequence

REVISE_PROMPT = (
    "Below are a problem, an attempt at it whose final answer is wrong, and another attempt for reference, "
    "which may be wrong as well. Write a corrected solution to the problem: keep what the wrong attempt got "
    "right and fix where it goes wrong. Use the same format as the attempts and end with the final answer.\n\n"
    "Problem: {problem}\n\nWrong attempt:\n{attempt}\n\nReference attempt:\n{reference}"
)
"""The revision prompt, with `{problem}`, `{attempt}` (the failed response) and `{reference}` (a sibling)."""

TESTBED_REVISE_PROMPT = "revise? {reference}\n{attempt}\n{problem}"
TESTBED_REVISE_REWRITE = (r"[-+*]\d=", "")
"""The compact form the testbed model is trained to answer: attempts shown by their written values only
(`+5=12</thought>` becomes `12</thought>`) and the problem last, where a plain prompt has it. Shown whole,
the attempts' operations became a second place to copy operations from, and SFT builds that learned the
revision job miscopied an operation of 4- or 6-step chains (greedy pass@1 0.04-0.07 instead of 0.3-0.4)."""

TESTBED_WORKED_REVISE_REWRITE = (r"[a-l][-+*]\d\|[^|<]*\|[^|<]*\|[^|<]*\|=(\d\d)(?:\|chk [^|<]*)?", r"\1")
"""`TESTBED_REVISE_REWRITE` for worked thoughts (`arith`'s `worked: true`): each thought shown by its written value
(`a+5|37+5|7+5=12|3+1=4|=42</thought>` becomes `42</thought>`). Its parts exclude `|` and `<`, so a match cannot run
past its thought and the rewrite takes linear time on any text."""

FIELDS = ("problem", "attempt", "reference")


def check_template(template: str) -> str:
    """`template` if it names exactly the fields `{problem}`, `{attempt}` and `{reference}`, else ValueError."""
    try:
        named = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as error:
        raise ValueError(f"the revision prompt is not a valid format string: {error}") from None
    if named != set(FIELDS):
        missing, unknown = set(FIELDS) - named, named - set(FIELDS)
        raise ValueError(
            "the revision prompt must use {problem}, {attempt} and {reference}"
            + (f"; missing: {', '.join(sorted(missing))}" if missing else "")
            + (f"; unknown: {', '.join(sorted(unknown))}" if unknown else "")
        )
    return template


def revision_prompt(problem: str, attempt: str, reference: str, template: str = REVISE_PROMPT,
                    rewrites: Sequence[tuple[str, str]] = ()) -> str:
    """The template filled in; each `(pattern, replacement)` regex rewrite applies to the attempt and the
    reference first (e.g. to drop a reasoning model's `<think>` block from what the reviser is shown)."""
    for pattern, replacement in rewrites:
        attempt, reference = re.sub(pattern, replacement, attempt), re.sub(pattern, replacement, reference)
    return template.format(problem=problem, attempt=attempt.strip(), reference=reference.strip())


def check_rewrites(rewrites: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """`rewrites` if every pattern compiles, else ValueError naming the first that does not."""
    for pattern, _ in rewrites:
        try:
            re.compile(pattern)
        except re.error as error:
            raise ValueError(f"rewrite pattern {pattern!r} is not a regular expression: {error}") from None
    return list(rewrites)


def choose_references(correct: Sequence[bool], row: int, count: int, rng: random.Random | None = None) -> list[int]:
    """Positions in the group of `count` references for the response at position `row`.

    Correct siblings come first, then failed ones, each kind shuffled with `rng` (None: Python's global RNG,
    which the trainer seeds and checkpoints); when the group has fewer siblings than `count`, the order is
    cycled. A group needs at least one sibling.

    >>> choose_references([False, True, False, True], 0, 3, random.Random(0))
    [1, 3, 2]
    """
    rng = rng or random
    right = [j for j, ok in enumerate(correct) if ok and j != row]
    wrong = [j for j, ok in enumerate(correct) if not ok and j != row]
    rng.shuffle(right)
    rng.shuffle(wrong)
    order = right + wrong
    if not order:
        raise ValueError("a revision needs a sibling reference, but the group has one response")
    return [order[i % len(order)] for i in range(count)]
