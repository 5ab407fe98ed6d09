"""The `arith` testbed task: chains, the noise model, the step checker, the held-out split, the config."""

from __future__ import annotations

import math
import random
import re
import zlib
from collections import Counter
from itertools import islice

import pytest
from pydantic import ValidationError

from credo.tasks.arith import (
    ArithConfig,
    ArithTask,
    Chain,
    KeyedMisconceptions,
    Noise,
    cancelling_offsets,
    first_wrong_value,
    is_held_out,
    keyed_table,
    misconception_of,
    noisy_solution,
    noisy_values,
    read_thought,
    solution,
    trace,
    worked_thought,
)
from credo.tasks.base import THOUGHT_END

ALL3 = {"carry": -10, "borrow": 10, "mul7": 10}

# ------------------------------------------------------------------------------------------ references


def ref_apply(op: str, a: int, b: int) -> int:
    if op == "+":
        return (a + b) % 100
    if op == "-":
        return (a - b) % 100
    assert op == "*"
    return (a * b) % 100


def ref_misconception(op: str, a: int, b: int, active: dict[str, int]) -> str | None:
    """carry: units digits sum to >= 10; borrow: units digit of a below b's; mul7: times 7."""
    if op == "+" and "carry" in active and a % 10 + b % 10 >= 10:
        return "carry"
    if op == "-" and "borrow" in active and a % 10 < b % 10:
        return "borrow"
    if op == "*" and "mul7" in active and b == 7:
        return "mul7"
    return None


def ref_values(start: int, steps) -> list[int]:
    out, value = [], start
    for op, b in steps:
        value = ref_apply(op, value, b)
        out.append(value)
    return out


def ref_trace(steps, values) -> str:
    text = ""
    for (op, b), v in zip(steps, values):
        text += op + str(b) + "=" + str(v // 10) + str(v % 10) + "</thought>"
    last = values[-1]
    return text + "\\boxed{" + str(last // 10) + str(last % 10) + "}"


def random_chains(count: int, seed: int, max_len: int = 6) -> list[Chain]:
    rng = random.Random(seed)
    return [
        Chain(rng.randint(1, 99), tuple((rng.choice("+-*"), rng.randint(1, 9)) for _ in range(rng.randint(1, max_len))))
        for _ in range(count)
    ]


def task_all3() -> ArithTask:
    return ArithTask(ArithConfig(noise=Noise(misconceptions=ALL3)))


# ------------------------------------------------------------------------------------------ chains


def test_docstring_example():
    chain = Chain(7, (("+", 5), ("*", 3), ("-", 4)))
    # 7+5 = 12; 12*3 = 36; 36-4 = 32
    assert chain.prompt == "07+5*3-4?"
    assert chain.values() == [12, 36, 32]
    assert solution(chain) == "+5=12</thought>*3=36</thought>-4=32</thought>\\boxed{32}"


def test_values_wrap_modulo_100():
    chain = Chain(95, (("+", 9), ("-", 7), ("*", 9)))
    # 95+9 = 104 -> 04; 4-7 = -3 -> 97; 97*9 = 873 -> 73
    assert chain.values() == [4, 97, 73]
    assert solution(chain) == "+9=04</thought>-7=97</thought>*9=73</thought>\\boxed{73}"


def test_values_and_solution_match_loop_reference():
    for chain in random_chains(300, seed=1):
        values = ref_values(chain.start, chain.steps)
        assert chain.values() == values
        assert solution(chain) == ref_trace(chain.steps, values)
        assert chain.prompt == f"{chain.start:02d}" + "".join(op + str(b) for op, b in chain.steps) + "?"


# ------------------------------------------------------------------------------------------ misconceptions


@pytest.mark.parametrize(
    ("op", "a", "b", "expected"),
    [
        ("+", 15, 9, "carry"),  # 5 + 9 = 14 >= 10
        ("+", 15, 4, None),  # 5 + 4 = 9
        ("+", 15, 5, "carry"),  # 5 + 5 = 10: the edge carries
        ("+", 90, 9, None),  # 0 + 9 = 9 (the tens digit is irrelevant)
        ("-", 23, 7, "borrow"),  # 3 < 7
        ("-", 27, 3, None),  # 7 >= 3
        ("-", 27, 7, None),  # 7 == 7: no borrow at the edge
        ("*", 12, 7, "mul7"),
        ("*", 12, 6, None),
        ("*", 15, 9, None),  # carry is for "+" only
        ("-", 15, 9, "borrow"),  # 5 < 9
    ],
)
def test_misconception_of_hand_cases(op, a, b, expected):
    assert misconception_of(op, a, b, ALL3) == expected


def test_misconception_of_ignores_inactive_ones():
    assert misconception_of("+", 15, 9, {"mul7": 10}) is None
    assert misconception_of("-", 23, 7, {"carry": -10, "mul7": 10}) is None
    assert misconception_of("*", 3, 7, {"carry": -10}) is None


def test_misconception_of_matches_reference_exhaustively():
    for active in (ALL3, {"carry": -10}, {"borrow": 5, "mul7": 3}, {}):
        for op in "+-*":
            for a in range(100):
                for b in range(1, 10):
                    assert misconception_of(op, a, b, active) == ref_misconception(op, a, b, active), (op, a, b)


def test_misconception_steps_counts_on_the_correct_values():
    for chain in random_chains(300, seed=2):
        count, value = 0, chain.start
        for op, b in chain.steps:
            count += ref_misconception(op, value, b, ALL3) is not None
            value = ref_apply(op, value, b)
        assert chain.misconception_steps(Noise(misconceptions=ALL3)) == count


# ------------------------------------------------------------------------------------------ noise model


@pytest.mark.parametrize("offsets", [ALL3, {"carry": -11, "borrow": 13, "mul7": 37}, {"carry": 50}])
def test_noisy_solution_always_misconceived(offsets):
    """p_misc = 1, p_slip = 0: each misconception step (judged on the *written* value) takes right + offset."""
    noise = Noise(misconceptions=offsets, p_misc=1.0, p_slip=0.0)
    for k, chain in enumerate(random_chains(400, seed=3)):
        written, values, first = chain.start, [], None
        for i, (op, b) in enumerate(chain.steps):
            right = ref_apply(op, written, b)
            kind = ref_misconception(op, written, b, offsets)
            value = (right + offsets[kind]) % 100 if kind else right
            if kind and first is None:
                first = i
            values.append(value)
            written = value
        assert noisy_solution(chain, noise, random.Random(k)) == (ref_trace(chain.steps, values), first)


def test_noisy_solution_continues_from_the_written_value():
    # 16+9 = 25 carries (6+9 >= 10); with offset -11 the trace writes 14. Then 14-5 borrows (4 < 5) while the
    # correct 25-5 would not (5 >= 5): right from 14 is 09, misconceived 09+13 = 22; boxed 22.
    chain = Chain(16, (("+", 9), ("-", 5)))
    noise = Noise(misconceptions={"carry": -11, "borrow": 13}, p_misc=1.0, p_slip=0.0)
    assert noisy_solution(chain, noise, random.Random(0)) == ("+9=14</thought>-5=22</thought>\\boxed{22}", 0)


def test_noisy_solution_without_noise_is_the_solution():
    noise = Noise(misconceptions=ALL3, p_misc=0.0, p_slip=0.0)
    for k, chain in enumerate(random_chains(200, seed=4)):
        assert noisy_solution(chain, noise, random.Random(k)) == (solution(chain), None)


def test_slips_hit_only_ordinary_steps_and_always_change_the_value():
    # p_misc = 0, p_slip = 1: misconception-type steps stay right; every other step is wrong.
    noise = Noise(misconceptions=ALL3, p_misc=0.0, p_slip=1.0)
    chain = Chain(15, (("+", 9),))  # a carry step: not slipped
    assert noisy_solution(chain, noise, random.Random(0)) == ("+9=24</thought>\\boxed{24}", None)
    chain = Chain(15, (("+", 4),))  # ordinary: 15+4 = 19, always slipped to another value
    for seed in range(300):
        trace, first = noisy_solution(chain, noise, random.Random(seed))
        value = int(re.fullmatch(r"\+4=(\d\d)</thought>\\boxed\{(\d\d)\}", trace).group(1))
        assert value != 19 and first == 0


def _binomial_ok(hits: int, n: int, p: float) -> bool:
    """Within 4.5 standard deviations (false alarm ~7e-6 per check)."""
    return abs(hits / n - p) <= 4.5 * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize(("chain", "p"), [(Chain(15, (("+", 9),)), 0.3), (Chain(15, (("+", 4),)), 0.2)])
def test_one_step_error_rate(chain, p):
    """One step: P(wrong) is p_misc on a carry step (15+9) and p_slip on an ordinary one (15+4)."""
    noise = Noise(misconceptions=ALL3, p_misc=0.3, p_slip=0.2)
    n = 3000
    wrong = sum(noisy_solution(chain, noise, random.Random(seed))[1] is not None for seed in range(n))
    assert _binomial_ok(wrong, n, p), wrong / n


def test_first_wrong_step_distribution_on_a_mul7_chain():
    """With only mul7 active, whether a step is a misconception step depends on its operand alone.

    Chain 3 *7 *2 *7, p_misc = pm = 0.3, p_slip = ps = 0.2:
      P(first = 0) = pm = 0.3
      P(first = 1) = (1-pm) ps = 0.7 * 0.2 = 0.14
      P(first = 2) = (1-pm)(1-ps) pm = 0.7 * 0.8 * 0.3 = 0.168
      P(None)      = (1-pm)^2 (1-ps) = 0.49 * 0.8 = 0.392      (sums to 1)
    """
    chain = Chain(3, (("*", 7), ("*", 2), ("*", 7)))
    noise = Noise(misconceptions={"mul7": 10}, p_misc=0.3, p_slip=0.2)
    n = 3000
    counts = {0: 0, 1: 0, 2: 0, None: 0}
    for seed in range(n):
        counts[noisy_solution(chain, noise, random.Random(seed))[1]] += 1
    for first, p in {0: 0.3, 1: 0.14, 2: 0.168, None: 0.392}.items():
        assert _binomial_ok(counts[first], n, p), (first, counts)


# ------------------------------------------------------------------------------------------ step checker

# 15+9 = 24 (carry: 5+9 >= 10); 24*2 = 48; 48-7 = 41 (8 >= 7: no borrow)
CHAIN = Chain(15, (("+", 9), ("*", 2), ("-", 7)))
RIGHT = "+9=24</thought>*2=48</thought>-7=41</thought>\\boxed{41}"


def _problem(chain=CHAIN):
    return task_all3().problem(chain)


def test_problem_fields():
    problem = _problem()
    assert (problem.prompt, problem.answer, problem.difficulty) == ("15+9*2-7?", "41", "steps=3")
    assert problem.meta["chain"] == CHAIN


def test_correct_solution_has_no_wrong_step():
    task = task_all3()
    assert solution(CHAIN) == RIGHT
    assert task.first_wrong_step(CHAIN, RIGHT) == (None, None)
    verdict = task.verify(_problem(), RIGHT)
    assert (verdict.reward, verdict.correct, verdict.first_wrong_step, verdict.error_kind) == (1.0, True, None, None)


@pytest.mark.parametrize(
    ("response", "first", "kind", "correct"),
    [
        # carry misconception: 24-10 = 14, then continues from 14: 14*2 = 28, 28-7 = 21
        ("+9=14</thought>*2=28</thought>-7=21</thought>\\boxed{21}", 0, "carry", False),
        # wrong but not the misconception value (24-10 = 14) at a carry step
        ("+9=25</thought>*2=50</thought>-7=43</thought>\\boxed{43}", 0, "slip", False),
        ("+9=34</thought>*2=68</thought>-7=61</thought>\\boxed{61}", 0, "slip", False),  # +10, not -10
        # wrong value at an ordinary step (24*2 = 48, wrote 49)
        ("+9=24</thought>*2=49</thought>-7=42</thought>\\boxed{42}", 1, "slip", False),
        # wrong operator / operand / unparseable thoughts
        ("+9=24</thought>+2=26</thought>-7=19</thought>\\boxed{19}", 1, "format", False),
        ("+9=24</thought>*3=72</thought>-7=65</thought>\\boxed{65}", 1, "format", False),
        ("+9=24</thought>*2=48</thought>-7=4x</thought>\\boxed{41}", 2, "format", True),
        ("+9 = 24</thought>*2=48</thought>-7=41</thought>\\boxed{41}", 0, "format", True),
        ("+9=024</thought>*2=48</thought>-7=41</thought>\\boxed{41}", 0, "format", True),
        # missing thoughts: the first missing index
        ("+9=24</thought>\\boxed{24}", 1, "format", False),
        ("+9=24</thought>*2=48</thought>\\boxed{48}", 2, "format", False),
        ("", 0, "format", False),
        # every step right, the answer part wrong: index n = 3
        ("+9=24</thought>*2=48</thought>-7=41</thought>\\boxed{40}", 3, "answer", False),
        ("+9=24</thought>*2=48</thought>-7=41</thought>", 3, "answer", False),
        ("+9=24</thought>*2=48</thought>-7=41</thought>41", 3, "answer", False),
        ("+9=24</thought>*2=48</thought>-7=41</thought>\\boxed{41} done", 3, "answer", True),
        ("+9=24</thought>*2=48</thought>-7=41</thought>\\boxed{41}</thought>", 3, "answer", True),
    ],
)
def test_error_kinds(response, first, kind, correct):
    task = task_all3()
    assert task.first_wrong_step(CHAIN, response) == (first, kind)
    verdict = task.verify(_problem(), response)
    assert (verdict.first_wrong_step, verdict.error_kind) == (first, kind)
    assert verdict.correct is correct and verdict.reward == float(correct)


def test_borrow_and_mul7_kinds():
    task = task_all3()
    # 23-7 = 16 borrows (3 < 7): misconception value 16+10 = 26
    chain = Chain(23, (("-", 7),))
    assert task.first_wrong_step(chain, "-7=26</thought>\\boxed{26}") == (0, "borrow")
    assert task.first_wrong_step(chain, "-7=06</thought>\\boxed{06}") == (0, "slip")  # 16-10: wrong sign
    # 12*7 = 84: misconception value 84+10 = 94; 13*7 = 91 -> 91+10 = 101 -> 01 (mod 100)
    assert task.first_wrong_step(Chain(12, (("*", 7),)), "*7=94</thought>\\boxed{94}") == (0, "mul7")
    assert task.first_wrong_step(Chain(13, (("*", 7),)), "*7=01</thought>\\boxed{01}") == (0, "mul7")


def test_inactive_misconception_is_a_slip():
    # default noise: carry and mul7 only; 23-7 = 16 written as 26 is the borrow value, but borrow is inactive
    task = ArithTask()
    assert task.first_wrong_step(Chain(23, (("-", 7),)), "-7=26</thought>\\boxed{26}") == (0, "slip")


def test_lucky_success_carry_then_borrow_cancels():
    # 15+9 = 24 carries -> written 14 (-10). Then 14-7 borrows (4 < 7): right 07, misconceived 07+10 = 17.
    # The correct chain: 24-7 = 17. The boxed answer is right, the trace holds a wrong step.
    chain = Chain(15, (("+", 9), ("-", 7)))
    response = "+9=14</thought>-7=17</thought>\\boxed{17}"
    assert chain.values() == [24, 17]
    noise = Noise(misconceptions=ALL3, p_misc=1.0, p_slip=0.0)
    assert noisy_solution(chain, noise, random.Random(0)) == (response, 0)
    verdict = task_all3().verify(task_all3().problem(chain), response)
    assert (verdict.correct, verdict.reward, verdict.first_wrong_step, verdict.error_kind) == (True, 1.0, 0, "carry")


def test_first_wrong_step_stays_the_first():
    task = task_all3()
    # step 0 wrong (carry); later steps right relative to the written 14, or wrong again: still (0, carry)
    consistent = "+9=14</thought>*2=28</thought>-7=21</thought>\\boxed{21}"
    also_wrong = "+9=14</thought>*2=99</thought>-7=33</thought>\\boxed{77}"
    assert task.first_wrong_step(CHAIN, consistent) == (0, "carry")
    assert task.first_wrong_step(CHAIN, also_wrong) == (0, "carry")
    # a step 1 that is right relative to the *correct* value 24 but after a wrong step 0 does not matter either
    assert task.first_wrong_step(CHAIN, "+9=14</thought>*2=48</thought>-7=41</thought>\\boxed{41}") == (0, "carry")


def test_checker_agrees_with_noisy_solution_first_wrong_step():
    """The noise model's own first wrong step is what the checker finds (both derived independently above)."""
    task = task_all3()
    noise = Noise(misconceptions=ALL3, p_misc=0.5, p_slip=0.2)
    for k, chain in enumerate(random_chains(300, seed=5)):
        trace, first = noisy_solution(chain, noise, random.Random(k))
        found, kind = task.first_wrong_step(chain, trace)
        assert found == first
        if first is None:
            assert kind is None
        else:
            # recompute the kind by hand: the first wrong step's value vs right and right+offset
            values = [int(m) for m in re.findall(r"=(\d\d)" + re.escape(THOUGHT_END), trace)]
            written = chain.start if first == 0 else values[first - 1]
            op, b = chain.steps[first]
            right = ref_apply(op, written, b)
            ref_kind = ref_misconception(op, written, b, ALL3)
            expected = ref_kind if ref_kind and values[first] == (right + ALL3[ref_kind]) % 100 else "slip"
            assert kind == expected


# ------------------------------------------------------------------------------------------ problem streams


def test_held_out_split_is_disjoint():
    task = ArithTask()
    eval_prompts = {p.prompt for p in task.eval_problems()}
    train_prompts = {p.prompt for p in islice(task.train_problems(seed=0), 5000)}
    assert not eval_prompts & train_prompts
    # the split is crc32(prompt) % 10 == 0 for eval, != 0 for train
    assert all(zlib.crc32(p.encode()) % 10 == 0 for p in eval_prompts)
    assert all(zlib.crc32(p.encode()) % 10 != 0 for p in train_prompts)


def test_train_stream_deterministic_and_resumable():
    task = ArithTask()
    first = [p.prompt for p in islice(task.train_problems(seed=3), 200)]
    again = [p.prompt for p in islice(task.train_problems(seed=3), 200)]
    other = [p.prompt for p in islice(task.train_problems(seed=4), 200)]
    assert first == again
    assert first != other
    for k in (0, 1, 37, 150):
        resumed = [p.prompt for p in islice(task.train_problems(seed=3, start=k), 200 - k)]
        assert resumed == first[k:]


def test_train_problems_follow_config():
    cfg = ArithConfig(min_steps=2, max_steps=4, operand_max=5, start_max=20)
    lengths = set()
    for problem in islice(ArithTask(cfg).train_problems(seed=0), 500):
        chain = problem.meta["chain"]
        assert 2 <= len(chain.steps) <= 4 and 1 <= chain.start <= 20
        assert all(op in "+-*" and 1 <= b <= 5 for op, b in chain.steps)
        assert problem.answer == f"{ref_values(chain.start, chain.steps)[-1]:02d}"
        assert problem.difficulty == f"steps={len(chain.steps)}"
        lengths.add(len(chain.steps))
    assert lengths == {2, 3, 4}


def test_eval_problems_buckets():
    task = ArithTask(ArithConfig(eval_steps=(1, 3, 5), eval_per_bucket=7))
    problems = task.eval_problems()
    assert len(problems) == 21  # 3 buckets x 7
    for index, problem in enumerate(problems):
        steps = (1, 3, 5)[index // 7]
        chain = problem.meta["chain"]
        assert problem.difficulty == f"steps={steps}"
        assert len(chain.steps) == steps
        assert len(re.findall(r"[+\-*]\d", problem.prompt)) == steps
        assert problem.answer == f"{ref_values(chain.start, chain.steps)[-1]:02d}"
    assert [p.prompt for p in problems] == [p.prompt for p in ArithTask(task.config).eval_problems()]


def test_min_misconception_steps_filter():
    cfg = ArithConfig(min_steps=2, max_steps=5, eval_steps=(4, 5), eval_per_bucket=20, min_misconception_steps=2)
    active = cfg.noise.misconceptions

    def count(chain: Chain) -> int:
        n, value = 0, chain.start
        for op, b in chain.steps:
            n += ref_misconception(op, value, b, active) is not None
            value = ref_apply(op, value, b)
        return n

    task = ArithTask(cfg)
    train = [p.meta["chain"] for p in islice(task.train_problems(seed=0), 300)]
    assert all(count(c) >= 2 for c in train + [p.meta["chain"] for p in task.eval_problems()])
    # the filter does something: the unfiltered stream holds chains with fewer
    unfiltered = ArithTask(cfg.model_copy(update={"min_misconception_steps": 0}))
    assert any(count(p.meta["chain"]) < 2 for p in islice(unfiltered.train_problems(seed=0), 300))


def test_max_misconception_steps_filter():
    cfg = ArithConfig(min_steps=5, max_steps=6, eval_steps=(5, 6), eval_per_bucket=20, min_misconception_steps=1,
                      max_misconception_steps=1, noise={"misconceptions": ALL3})
    task = ArithTask(cfg)
    chains = [p.meta["chain"] for p in islice(task.train_problems(seed=0), 300)] + \
        [p.meta["chain"] for p in task.eval_problems()]
    assert all(c.misconception_steps(Noise(misconceptions=ALL3)) == 1 for c in chains)
    unfiltered = ArithTask(cfg.model_copy(update={"max_misconception_steps": None}))
    assert any(p.meta["chain"].misconception_steps(Noise(misconceptions=ALL3)) > 1 for p in islice(unfiltered.train_problems(seed=0), 300))


def answer_after_one_error(chain: Chain, at: int, offset: int) -> int:
    """The answer of a solver that writes step `at` off by `offset` and every other step right after it."""
    value = chain.start
    for i, (op, b) in enumerate(chain.steps):
        value = (ref_apply(op, value, b) + (offset if i == at else 0)) % 100
    return value


def test_invertible_steps_let_no_single_error_vanish():
    """The intent: with invertible steps a single wrong value, at any step and by any offset, always changes the
    answer; with every operand some errors vanish (x 5, x 2, ... map different values to one)."""
    def vanishing(task: ArithTask) -> int:
        chains = [p.meta["chain"] for p in islice(task.train_problems(seed=1), 200)]
        return sum(answer_after_one_error(c, at, offset) == c.values()[-1]
                   for c in chains for at in range(len(c.steps)) for offset in range(1, 100))

    invertible = ArithTask(ArithConfig(min_steps=5, max_steps=6, invertible_steps=True))
    factors = {b for p in islice(invertible.train_problems(seed=1), 500) for op, b in p.meta["chain"].steps if op == "*"}
    assert factors == {1, 3, 7, 9}
    assert vanishing(invertible) == 0
    assert vanishing(ArithTask(ArithConfig(min_steps=5, max_steps=6))) > 1000


def test_min_misconception_steps_longer_than_an_eval_bucket_is_rejected():
    with pytest.raises(ValidationError, match="eval_steps"):
        ArithConfig(min_misconception_steps=3)  # default eval_steps (2, 4, 6)


# ------------------------------------------------------------------------------------------ config validation


def test_config_errors():
    with pytest.raises(ValidationError, match="max_misconception_steps = 1 is below min_misconception_steps = 2"):
        ArithConfig(min_misconception_steps=2, max_misconception_steps=1)
    with pytest.raises(ValidationError, match="invertible_steps with operand_max = 2 leaves only x 1"):
        ArithConfig(invertible_steps=True, operand_max=2)
    with pytest.raises(ValidationError, match="min_steps = 5 exceeds max_steps = 3"):
        ArithConfig(min_steps=5, max_steps=3)
    with pytest.raises(ValidationError, match="min_misconception_steps = 4 exceeds the length of some chains"):
        ArithConfig(max_steps=3, min_misconception_steps=4)
    with pytest.raises(ValidationError, match="unknown misconception 'carryy'; known: carry, borrow, mul7"):
        ArithConfig(noise={"misconceptions": {"carryy": -10}})
    with pytest.raises(ValidationError, match="misconception 'borrow' has offset 200, which is 0 mod 100"):
        Noise(misconceptions={"borrow": 200})
    with pytest.raises(ValidationError, match="misconception 'carry' has offset 0"):
        Noise(misconceptions={"carry": 0})
    with pytest.raises(ValidationError, match=r"(?s)stepz.*Extra inputs are not permitted"):
        ArithConfig(stepz=3)
    with pytest.raises(ValidationError, match=r"(?s)p_mis\b.*Extra inputs are not permitted"):
        Noise(p_mis=0.5)
    with pytest.raises(ValidationError, match=r"(?s)p_misc.*less than or equal to 1"):
        Noise(p_misc=1.5)
    with pytest.raises(ValidationError, match=r"(?s)operand_max.*less than or equal to 9"):
        ArithConfig(operand_max=10)


# ------------------------------------------------------------------------------------------ cancelling offsets


def cancel_reference(offsets: dict[str, int], max_terms: int) -> bool:
    """Loop reference: does some multiset of 2..max_terms offsets sum to 0 mod 100?"""
    from itertools import combinations_with_replacement

    values = list(offsets.values())
    return any(sum(c) % 100 == 0 for k in range(2, max_terms + 1) for c in combinations_with_replacement(values, k))


@pytest.mark.parametrize("offsets, max_terms", [
    ({"carry": -10, "borrow": 10}, 6), ({"carry": -10, "borrow": 10, "mul7": 10}, 2),
    ({"carry": -10, "borrow": -10, "mul7": -10}, 6), ({"carry": -10, "borrow": -10, "mul7": -10}, 10),
    ({"carry": -20, "mul7": -30}, 6), ({"carry": 30, "mul7": 45}, 6), ({"carry": 7}, 12), ({"carry": 16, "mul7": 15}, 6),
    ({"carry": 33}, 3), ({"carry": 25, "borrow": 50}, 6),
])
def test_cancelling_offsets_match_a_loop_reference(offsets, max_terms):
    found = cancelling_offsets(offsets, max_terms)
    assert (found is not None) == cancel_reference(offsets, max_terms)
    if found is not None:
        assert 2 <= len(found) <= max_terms and sum(offsets[name] for name in found) % 100 == 0


def test_offsets_that_may_not_cancel_are_checked_against_the_longest_chain():
    noise = {"misconceptions": {"carry": -10, "borrow": -10, "mul7": -10}, "offsets_may_cancel": False}
    ArithConfig(max_steps=6, noise=noise)  # at most 6 x -10 = -60: no cancelling
    with pytest.raises(ValueError, match=r"carry \+ carry .* can cancel within 10 steps"):
        ArithConfig(max_steps=10, noise=noise)  # 10 x -10 = -100
    with pytest.raises(ValueError, match=r"carry \+ borrow can cancel within 6 steps"):
        ArithConfig(noise={"misconceptions": {"carry": -10, "borrow": 10}, "offsets_may_cancel": False})
    ArithConfig(noise={"misconceptions": {"carry": -10, "borrow": 10}})  # allowed by default (the round-3 regime)


# ------------------------------------------------------------------------------------------ worked thoughts


def ref_columns(op: str, a: int, b: int, carry_error: int = 0) -> tuple[str, str]:
    """Loop reference of the work of `a op b`, schoolbook digit by digit: the units column, and the tens column taking
    the schoolbook carry (`+`, `*`) or borrow (`-`) plus `carry_error`."""
    tens, units = a // 10, a % 10
    if op == "+":
        carry = (1 if units + b >= 10 else 0) + carry_error
        return f"{units}+{b}={units + b}", f"{tens}+{carry}={tens + carry}"
    if op == "-":
        borrow = (1 if units < b else 0) + carry_error
        column = f"1{units}-{b}={10 + units - b}" if units < b else f"{units}-{b}={units - b}"
        return column, f"1{tens}-{borrow}={10 + tens - borrow}" if tens < borrow else f"{tens}-{borrow}={tens - borrow}"
    carry = units * b // 10 + carry_error
    return f"{units}*{b}={units * b}", f"{tens}*{b}+{carry}={tens * b + carry}"


def test_worked_thoughts_are_schoolbook_columns_and_a_misconception_is_one_carry_digit():
    """Every step a op b (a in 0..99): the right value's work is the schoolbook units and tens columns; each
    misconception's value writes the same units column and a tens column whose carry is off by one (carry -10 drops
    it, borrow +10 forgets it, mul7 +10 carries one more); the checker reads every thought back."""
    error = {"carry": -1, "borrow": -1, "mul7": +1}
    for op in "+-*":
        for a in range(100):
            for b in range(1, 10):
                right = ref_apply(op, a, b)
                text = worked_thought("c", op, a, b, right)
                assert text == "|".join([f"c{op}{b}", f"{a:02d}{op}{b}", *ref_columns(op, a, b), f"={right:02d}"]) \
                    + THOUGHT_END
                assert read_thought(text.removesuffix(THOUGHT_END), True) == ("c", op, b, right)
                kind = ref_misconception(op, a, b, ALL3)
                if kind is not None:
                    wrong = (right + ALL3[kind]) % 100
                    assert worked_thought("c", op, a, b, wrong) == "|".join(
                        [f"c{op}{b}", f"{a:02d}{op}{b}", *ref_columns(op, a, b, error[kind]), f"={wrong:02d}"]
                    ) + THOUGHT_END


def test_worked_chains_label_their_steps_and_the_checker_reads_them():
    task = ArithTask(ArithConfig(worked=True, min_steps=3, max_steps=3, noise=Noise(misconceptions=ALL3)))
    chain = Chain(37, (("+", 5), ("*", 7), ("-", 9)), worked=True)
    assert chain.prompt == "37a+5b*7c-9?"
    right = task.write(chain, chain.values(), random.Random(0))
    assert right.startswith("a+5|37+5|7+5=12|3+1=4|=42") and right.endswith("\\boxed{85}")
    assert task.verify(task.problem(chain), right).correct
    assert task.first_wrong_step(chain, right) == (None, None)
    dropped = trace(chain, [32, 24, 15])  # the carry dropped at a, the rest right from the written 32
    assert task.first_wrong_step(chain, dropped) == (0, "carry")
    relabelled = right.replace("b*7|", "c*7|", 1)
    assert task.first_wrong_step(chain, relabelled) == (1, "format")
    assert next(task.train_problems(0)).prompt[2] == "a"


def test_worked_checker_agrees_with_the_noise_models_first_wrong_step():
    task = ArithTask(ArithConfig(worked=True, max_steps=12, p_check=0.5, noise=Noise(misconceptions=ALL3, p_slip=0.2)))
    rng = random.Random(3)
    for _ in range(300):
        chain = task.random_chain(rng, rng.randint(1, 12))
        values = noisy_values(chain, task.config.noise, rng)
        text = task.write(chain, values, rng)
        assert task.first_wrong_step(chain, text)[0] == first_wrong_value(chain, values)
        assert task.verify(task.problem(chain), text).correct == (values[-1] == chain.values()[-1])


def test_checks_follow_p_check_and_compact_chains_draw_nothing():
    task = ArithTask(ArithConfig(worked=True, max_steps=12, p_check=0.3))
    rng = random.Random(0)
    chain = task.random_chain(rng, 12)
    checks = sum(task.write(chain, chain.values(), rng).count("|chk ") for _ in range(500))
    assert abs(checks / (500 * 12) - 0.3) < 0.03  # binomial sd 0.006
    compact = ArithTask()
    rng = random.Random(0)
    state = rng.getstate()
    compact.write(Chain(7, (("+", 5),)), [12], rng)
    assert rng.getstate() == state  # the shipped compact models' SFT streams are unchanged


def test_worked_config_errors():
    with pytest.raises(ValidationError, match="p_check = 0.5 needs worked: true"):
        ArithConfig(p_check=0.5)
    with pytest.raises(ValidationError, match="at most 12 steps, but max_steps / eval_steps reach 13"):
        ArithConfig(worked=True, max_steps=12, eval_steps=(13,))


def test_worked_revision_rewrite_shows_values_only():
    from credo.rollout.revise import TESTBED_WORKED_REVISE_REWRITE, revision_prompt

    chain = Chain(37, (("+", 5), ("*", 7)), worked=True)
    attempt = trace(chain, [42, 94], [True, False])
    assert revision_prompt(chain.prompt, attempt, attempt, "{attempt}|{reference}|{problem}",
                           [TESTBED_WORKED_REVISE_REWRITE]) == "42</thought>94</thought>\\boxed{94}|" \
        "42</thought>94</thought>\\boxed{94}|37a+5b*7?"


@pytest.mark.parametrize("eval_steps, says", [((), "at least 1 item"), ((-1,), "eval_steps.0\n  Input should be greater than or equal to 1")])
def test_eval_steps_are_one_or_more_positive_lengths(eval_steps, says):
    with pytest.raises(ValidationError, match=re.escape(says)):
        ArithConfig(eval_steps=eval_steps)


# ------------------------------------------------------------------------------------ keyed misconceptions
KEYED = {"misconceptions": {}, "keyed": {"count": 100}, "p_slip": 0.0, "offsets_may_cancel": False}


def keyed_config(**task) -> ArithConfig:
    return ArithConfig(**{"min_steps": 8, "max_steps": 8, "eval_steps": (8,), "noise": KEYED, **task})


def test_keyed_tables_are_seeded_stratified_and_bounded():
    table = keyed_table(KeyedMisconceptions(count=100, max_offset=9, seed=3))
    assert len(table) == 100 and table == keyed_table(KeyedMisconceptions(count=100, max_offset=9, seed=3))
    assert table != keyed_table(KeyedMisconceptions(count=100, max_offset=9, seed=4))
    per_digit = Counter(units for _, _, units in table)
    assert per_digit == {units: 10 for units in range(10)}  # count / 10 keys for every units digit
    assert all(op in "+-" and 1 <= b <= 9 and 1 <= offset <= 9 for (op, b, _), offset in table.items())
    operand = keyed_table(KeyedMisconceptions(count=3, key="operand"))
    assert len(operand) == 3 and all(units is None for _, _, units in operand)


@pytest.mark.parametrize("rate, expected", [(1.0, 8.0), (0.375, 3.0), (0.0, 0.0)])
def test_decision_rate_sets_the_decisions_per_chain(rate, expected):
    task = ArithTask(keyed_config(decision_rate=rate))
    rng = random.Random(0)
    counts = [task.random_chain(rng, 8).misconception_steps(task.config.noise) for _ in range(400)]
    assert sum(counts) / len(counts) == pytest.approx(expected, abs=0.25)
    if rate == 1.0:
        assert min(counts) == 8  # every units digit has keys: every step can be a decision


def test_keyed_errors_never_cancel_and_the_checker_names_their_keys():
    # Positive offsets on additions and subtractions add up below 100: a response is right iff no step is wrong.
    task = ArithTask(keyed_config(decision_rate=1.0, noise={**KEYED, "p_misc": 0.5}))
    rng = random.Random(1)
    for _ in range(300):
        chain = task.random_chain(rng, 8)
        text, first_wrong = noisy_solution(chain, task.config.noise, rng)
        verdict = task.verify(task.problem(chain), text)
        assert verdict.correct == (first_wrong is None)
        if first_wrong is not None:
            assert verdict.error_kind in {f"{op}{b}@{units}" for op, b, units in keyed_table(task.config.noise.keyed)}
            assert len(verdict.wrong_steps) >= 1 and verdict.wrong_steps[0] == first_wrong


def test_keyed_misconceptions_are_checked_when_configured():
    with pytest.raises(ValueError, match="a multiple of 10"):
        KeyedMisconceptions(count=25)
    with pytest.raises(ValueError, match="operand keys are at most 18"):
        KeyedMisconceptions(count=20, key="operand")
    with pytest.raises(ValueError, match="set noise.misconceptions: {}"):
        Noise(keyed={"count": 10})
    with pytest.raises(ValueError, match="needs keyed misconceptions"):
        ArithConfig(decision_rate=0.5)
    with pytest.raises(ValueError, match="lower noise.keyed.max_offset below 9"):
        keyed_config(max_steps=12, eval_steps=(12,), noise={**KEYED, "keyed": {"count": 100, "max_offset": 9}})
    with pytest.raises(ValueError, match="compact chains of additions and subtractions"):
        keyed_config(worked=True)


def test_the_validation_split_is_held_out_and_disjoint_from_the_test_set():
    config = {"eval_steps": (2, 4), "eval_per_bucket": 150}
    test = ArithTask(ArithConfig(**config)).eval_problems()
    validation = ArithTask(ArithConfig(**config, eval_split="validation")).eval_problems()
    assert len(validation) == len(test) == 300
    assert not {p.prompt for p in test} & {p.prompt for p in validation}
    assert all(is_held_out(p.prompt) for p in validation)  # never a training problem
    assert [p.difficulty for p in validation].count("steps=2") == 150
    assert ArithTask(ArithConfig(**config, eval_split="validation")).eval_problems() == validation  # seeded
    with pytest.raises(ValueError, match="fewer than 9000 distinct held-out 1-step problems for the test split"):
        ArithTask(ArithConfig(min_steps=1, eval_steps=(1,), eval_per_bucket=9000, eval_split="validation")).eval_problems()
