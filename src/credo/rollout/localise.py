"""Localisers of a failed rollout's first wrong thought (RRPO, SRPO, and credo's oracle).

- `random` (RRPO): `k ~ Uniform{1..n}`.
- `self` (SRPO): the policy itself is asked, with a prompt of our own written to the paper's intent: the
  problem and the failed chain as numbered steps, the statement that the final answer is wrong, the
  request for the step where the reasoning *first* went wrong (the originating error, not where it
  shows), not to re-solve, and to end with the step number boxed. Ground truth is never shown.
  `parse_step` reads the answer.
- `oracle`: the task's step checker (the testbed knows every failure's first wrong thought).

Thought indices here are 1-based, as in the paper (`k` in `1..n`); the prefix kept for a reset is
thoughts `1..k-1`. Localiser calls are never trained on.
"""

from __future__ import annotations

import re

from credo.tasks.jsonl import last_boxed

LOCALISE_PROMPT = (
    "The solution below to the problem has a wrong final answer. Find the step where the reasoning first "
    "went wrong: the originating error, not the step where it shows. Do not solve the problem again. "
    "End your reply with the number of that step in \\boxed{{}}.\n\n"
    "Problem: {problem}\n\nSolution:\n{steps}"
)
"""The self-localisation prompt (`{problem}`, `{steps}`: one `Step i: ...` line per thought)."""

STEP_DIGITS = 9
"""The most digits a step number read has: a longer one is out of range (and past 4,300 digits `int` would raise)."""
_INTEGER = re.compile(rf"[+-]?[0-9]{{1,{STEP_DIGITS}}}")
_STEP = re.compile(r"[Ss]tep\s+([0-9]+)")


STEP_FORMAT = "Step {i}: {thought}\n"
"""How each thought is shown to the localiser (`{i}` is 1-based)."""

TESTBED_PROMPT = "first wrong step? {problem}\n{steps}"
TESTBED_STEP_FORMAT = "{i}{thought}"
"""The compact form the testbed model is trained to answer (its tokens are characters: brevity is speed)."""


def localisation_prompt(problem: str, thoughts: list[str], template: str = LOCALISE_PROMPT,
                        step_format: str = STEP_FORMAT) -> str:
    steps = "".join(step_format.format(i=i, thought=t.strip()) for i, t in enumerate(thoughts, start=1))
    return template.format(problem=problem, steps=steps.rstrip("\n"), n=len(thoughts))


def parse_step(text: str, n: int) -> tuple[int, str]:
    """The localised step `k` in `[1, n]` from a localiser's reply, and which rule read it.

    The rules of the SRPO code (`ThoughtICSAgentLoop._parse_error_step`, training/thought_ics_agent_loop.py),
    each tried only when the one before reads nothing in range:
    1. "boxed": the content of the last `\\boxed{...}` (braces balanced), if it is an integer (sign allowed:
       `\\boxed{+3}` is 3) in `[0, n]`; 0 means 1. Earlier boxes are not read.
    2. "step": the last "Step N" mentioned (a space before N), if N is in `[1, n]`. Earlier mentions are not read.
    3. "fallback": 1.
    A number of more than `STEP_DIGITS` digits is out of range in either rule.
    (SRPO reads `\\boxed{0}` as "no error" and stops correcting; a seed here is a known failure, so 0 resets
    to the first thought.)

    >>> parse_step("It is step 2. \\\\boxed{3}", 5), parse_step("Step 4 is wrong", 5), parse_step("Step 12", 5)
    ((3, 'boxed'), (4, 'step'), (1, 'fallback'))
    """
    boxed = (last_boxed(text) or "").strip()
    if _INTEGER.fullmatch(boxed) and 0 <= int(boxed) <= n:
        return max(1, int(boxed)), "boxed"
    steps = _STEP.findall(text)
    if steps and len(steps[-1]) <= STEP_DIGITS and 1 <= int(steps[-1]) <= n:
        return int(steps[-1]), "step"
    return 1, "fallback"
