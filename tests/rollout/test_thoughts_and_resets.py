"""The thought MDP's episode rules, reset planning and localiser parsing (no model)."""

from __future__ import annotations

import pytest

from credo.rollout.localise import localisation_prompt, parse_step
from credo.rollout.reset_plan import SPLITS, draws_needed, plan
from credo.rollout.thoughts import ThoughtRules, episode, split_thoughts

D = "</thought>"


def pieces_of(*thoughts: str) -> list[str]:
    """One token per character, except the delimiter and marker (single tokens, as in the testbed)."""
    out = []
    for thought in thoughts:
        body = thought.replace(D, "\0").replace("\\boxed{", "\1")
        out += [{"\0": D, "\1": "\\boxed{"}.get(c, c) for c in body]
    return out


def test_thoughts_end_at_delimiters_and_caps():
    pieces = pieces_of("+5=12" + D, "*3=36" + D, "\\boxed{36}")
    assert split_thoughts(pieces, ThoughtRules()) == [6, 12, 16]
    # a cap of 4 tokens: "+5=1" | "2</thought>" | "*3=3" | "6</thought>" | "\boxed{" "3" "6" "}"
    assert split_thoughts(pieces, ThoughtRules(cap_tokens=4)) == [4, 6, 10, 12, 16]


def test_delimiter_split_across_tokens():
    pieces = ["+", "5", "</th", "ought>", "x"]
    assert split_thoughts(pieces, ThoughtRules()) == [4, 5]


@pytest.mark.parametrize(
    "rules,thoughts,reason,kept",
    [
        (ThoughtRules(), ["+5=12" + D, "\\boxed{12}<|end|>"], "answer", 2),  # the answer thought ends it
        (ThoughtRules(), ["+5=12" + D, "\\boxed{12}" + D, "+1=13" + D], "answer", 2),  # nothing after it kept
        (ThoughtRules(max_thoughts=2), ["+5=12" + D, "+1=13" + D, "+1=14" + D], "max_thoughts", 2),
        (ThoughtRules(budget_tokens=10), ["+5=12" + D, "+1=13" + D], "budget", 1),  # 12 tokens > 10: cut back
        (ThoughtRules(), ["+5=12" + D, "+1=13"], "eos", 2),
    ],
)
def test_episode_rules(rules, thoughts, reason, kept):
    pieces = pieces_of(*thoughts)
    ids = list(range(len(pieces)))
    result = episode(ids, pieces, rules)
    assert result.reason == reason
    assert result.num_thoughts == kept
    assert result.ids == ids[: result.ends[-1]]
    assert result.segment_ids() == [i for i, (a, b) in enumerate(zip([0] + result.ends, result.ends)) for _ in range(b - a)]
    assert result.prefix(0) == [] and result.prefix(1) == ids[: result.ends[0]]


def test_first_thought_over_budget_keeps_the_budget():
    pieces = pieces_of("+5=12345678" + D)
    result = episode(list(range(len(pieces))), pieces, ThoughtRules(budget_tokens=5))
    assert result.ids == [0, 1, 2, 3, 4] and result.reason == "budget"


S14 = SPLITS["1x4"]


@pytest.mark.parametrize(
    "correct,split,seeds,base,complete,fallback",
    [
        ([True, False, True, True, True], S14, (1,), (0, 2, 3, 4), True, False),  # seed = first failure
        ([False, False, True, True, True], S14, (0,), (1, 2, 3, 4), True, False),  # later failures are base rows
        ([True] * 5, S14, (), (0, 1, 2, 3), False, False),  # no failure yet: draw more
        ([True] * 6 + [False], S14, (6,), (0, 1, 2, 3), True, False),  # extra correct draws dropped
        ([True] * 12, S14, (), tuple(range(8)), True, True),  # 12 draws, no failure: plain group of 8
        ([True] * 11 + [False, False], S14, (11,), (0, 1, 2, 3), True, False),  # the 12th draw still counts
        ([True] * 12 + [False], S14, (), tuple(range(8)), True, True),  # a 13th draw is never used
        ([False, True, False], SPLITS["2x4"], (0, 2), (), True, False),
        ([False] + [True] * 11, SPLITS["2x4"], (), tuple(range(8)), True, True),  # one failure is not enough
        ([True, False], SPLITS["1x8"], (1,), (), True, False),
    ],
)
def test_plan(correct, split, seeds, base, complete, fallback):
    result = plan(correct, split)
    assert (result.seeds, result.base, result.complete, result.fallback) == (seeds, base, complete, fallback)


def test_draws_needed_never_passes_twelve():
    assert draws_needed([], S14) == 5  # one seed and four base rows in the best case
    assert draws_needed([True] * 5, S14) == 5  # only the seed is missing: double the draws
    assert draws_needed([True] * 10, S14) == 2
    assert draws_needed([True] * 12, S14) == 0  # fallback: complete
    assert draws_needed([True, False, True, True, True], S14) == 0


@pytest.mark.parametrize(
    "text,n,want",
    [
        ("the error is in step 2, so \\boxed{2}", 5, (2, "boxed")),
        ("\\boxed{3} no wait \\boxed{4}", 5, (4, "boxed")),  # the last boxed integer
        ("\\boxed{0}", 5, (1, "boxed")),  # 0 means 1
        ("\\boxed{+3}", 5, (3, "boxed")),  # a sign is allowed
        ("\\boxed{ 2 }", 2, (2, "boxed")),
        ("\\boxed{5}", 5, (5, "boxed")),  # the last thought is in range
        ("\\boxed{9}", 5, (1, "fallback")),  # out of range and no Step mention
        ("\\boxed{12}, i.e. Step 2", 5, (2, "step")),  # an out-of-range box falls through to Step N
        ("\\boxed{-2}, i.e. Step 2", 5, (2, "step")),
        ("\\boxed{2} or rather \\boxed{12}", 5, (1, "fallback")),  # only the last box is read (SRPO code)
        ("\\boxed{\\text{3}}", 5, (1, "fallback")),  # not an integer
        ("the first error is in Step 4", 5, (4, "step")),
        ("Step 3 looks fine but Step 7 is wrong \\boxed{9}", 5, (1, "fallback")),  # last Step N out of range
        ("Step 12", 5, (1, "fallback")),  # out of range: rejected like a box, not clamped
        ("Step 2 or Step 12", 5, (1, "fallback")),  # only the last mention is read (SRPO code)
        ("Step3", 5, (1, "fallback")),  # "Step N" needs a space (SRPO code)
        ("garbage", 5, (1, "fallback")),
    ],
)
def test_parse_step(text, n, want):
    assert parse_step(text, n) == want


def test_localisation_prompt_numbers_steps_and_hides_the_answer():
    prompt = localisation_prompt("07+5*3?", ["+5=12</thought>", "*3=36</thought>"])
    assert "Step 1: +5=12</thought>\nStep 2: *3=36</thought>" in prompt
    assert "07+5*3?" in prompt and "\\boxed{}" in prompt and "first went wrong" in prompt
