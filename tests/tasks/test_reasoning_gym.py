"""`reasoning_gym:<dataset>` tasks: rewards from the datasets' scorers, the eval split, the stream, buckets, errors."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import time
from collections import Counter
from itertools import islice

import pytest
import reasoning_gym  # the test extra installs it

import credo.tasks.reasoning_gym as rg_task
from credo.config import ConfigError, load_config, validate
from credo.extras import MissingExtra
from credo.tasks import (
    ArithTask,
    JsonlTask,
    Problem,
    ReasoningGymTask,
    build_task,
    sandbox_failures,
    task_class,
    verify_all,
)
from credo.tasks.base import verify_each
from credo.tasks.reasoning_gym import DEFAULT_INSTRUCTION, EVAL_SEED_OFFSET, SANDBOX, ReasoningGymConfig, bucket
from credo.tasks.sandbox import Outcome, Sandbox

SMALL = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
"""chain_sum with two one-digit terms: 10 * 10 * 2 = 200 distinct questions."""


def chain_sum(**options) -> ReasoningGymTask:
    task = build_task({"name": "reasoning_gym:chain_sum", "size": 40, "eval_size": 10, **options})
    assert isinstance(task, ReasoningGymTask)
    return task


def terms(problem: Problem) -> int:
    return len(problem.meta["entry"]["metadata"]["expression"].split()) // 2 + 1  # "a + b - c": 5 tokens, 3 terms


# ------------------------------------------------------------------------------------------ problems and rewards


def test_problems_carry_the_question_the_answer_and_the_instruction():
    task = chain_sum()
    assert (task.name, task.checks_steps, len(task.train)) == ("reasoning_gym:chain_sum", False, 40)
    for problem in task.train[:5]:
        expression = problem.meta["entry"]["metadata"]["expression"]
        assert problem.answer == str(eval(expression))  # the ground truth is the sum's value
        assert problem.prompt == f"{problem.meta['question']}\n\n{DEFAULT_INSTRUCTION}"
        assert problem.meta["question"].endswith(f"{expression} =")
        assert problem.difficulty == "all"
    bare = chain_sum(instruction=None)
    assert [p.prompt for p in bare.train] == [p.meta["question"] for p in task.train]  # same seed, same problems


def test_reward_is_the_datasets_score_of_the_extracted_answer():
    task = chain_sum()
    problem = task.train[0]
    truth = problem.answer
    wrong = str(int(truth) + 1)

    def reward(response: str) -> tuple[float, bool]:
        verdict = task.verify(problem, response)
        return verdict.reward, verdict.correct

    assert reward(f"Adding up step by step... <answer>{truth}</answer>") == (1.0, True)
    assert reward(f"<answer>\n {truth} \n</answer>") == (1.0, True)  # reasoning-gym strips the answer
    assert reward(f"so the sum is \\boxed{{{truth}}}") == (1.0, True)  # no tags: the last box
    assert reward(f"<answer>{wrong}</answer> no wait <answer>{truth}</answer>") == (1.0, True)  # the last tag
    assert reward(f"<answer>{truth}</answer> no wait <answer>{wrong}</answer>") == (0.0, False)
    assert reward(f"<answer>{wrong}</answer> though \\boxed{{{truth}}}") == (0.0, False)  # tags before boxes
    assert reward(f"<answer>{wrong}</answer>") == (0.0, False)
    assert reward(f"the sum is {truth}") == (0.0, False)  # no answer tag or box: no answer
    assert reward("<answer></answer>") == (0.0, False)


def test_last_number_fallback_for_models_that_skip_the_format():
    task = chain_sum(answer_fallback="last_number")
    problem = task.train[0]
    truth = int(problem.answer)
    assert task.verify(problem, f"The answer to the problem is {truth}.").reward == 1.0
    assert task.verify(problem, f"{truth} or maybe {truth + 1}").reward == 0.0  # the last number
    assert task.verify(problem, f"<answer>{truth + 1}</answer> {truth}").reward == 0.0  # a tag still wins
    assert task.verify(problem, "no number here").reward == 0.0


@pytest.mark.parametrize(
    ("options", "reward", "correct"),
    [
        ({}, "score", False),  # threshold 1: partial credit is the reward but not correct
        ({"correct_threshold": 0.5}, "score", True),
        ({"correct_threshold": 0.9}, "score", False),
        ({"binary_reward": True}, 0.0, False),
        ({"binary_reward": True, "correct_threshold": 0.5}, 1.0, True),
    ],
)
def test_partial_scores_and_binarisation(options, reward, correct):
    # chain_sum's scorer gives len(truth) / len(answer) when the answer contains the truth: "= 7218" -> 4/6
    task = chain_sum(**options)
    problem = task.train[0]
    score = len(problem.answer) / (len(problem.answer) + 2)
    assert 0.5 < score < 0.9
    verdict = task.verify(problem, f"<answer>= {problem.answer}</answer>")
    assert verdict.reward == pytest.approx(score if reward == "score" else reward)
    assert verdict.correct is correct
    exact = task.verify(problem, f"<answer>{problem.answer}</answer>")
    assert (exact.reward, exact.correct) == (1.0, True)


def test_scores_are_clamped_and_a_raising_scorer_scores_zero(monkeypatch, caplog):
    task = chain_sum()
    problem = task.train[0]
    for raw, expected in [(1.7, 1.0), (-0.2, 0.0), (float("nan"), 0.0), (0.25, 0.25), ("1", 0.0)]:
        monkeypatch.setattr(SANDBOX, "call", lambda function, args, timeout_s, raw=raw: Outcome(value=raw))
        assert task.verify(problem, "<answer>1</answer>").reward == expected
    monkeypatch.undo()
    # prime_factorization's own scorer raises on an answer that is not a product of integers
    primes = build_task({"name": "reasoning_gym:prime_factorization", "size": 5, "eval_size": 2})
    target = primes.train[0]
    with pytest.raises(ValueError):
        primes.dataset.score_answer("abc", target.meta["entry"])
    with caplog.at_level(logging.WARNING, logger="credo.tasks.reasoning_gym"):
        verdict = primes.verify(target, "<answer>abc</answer>")
    assert (verdict.reward, verdict.correct) == (0.0, False)
    assert "the scorer raised ValueError" in caplog.text
    assert primes.verify(target, f"<answer>{target.answer}</answer>").correct


def test_verify_all_turns_scores_into_rewards():
    task = chain_sum(correct_threshold=0.5)
    problem = task.train[3]
    texts = [f"<answer>{problem.answer}</answer>", f"<answer>= {problem.answer}</answer>", "no idea"]
    verdicts, errors = verify_all(task, [problem] * 3, texts, "raise")
    assert errors == 0
    partial = len(problem.answer) / (len(problem.answer) + 2)
    assert [v.reward for v in verdicts] == pytest.approx([1.0, partial, 0.0])
    assert [v.correct for v in verdicts] == [True, True, False]


def test_a_problem_from_elsewhere_is_an_error():
    with pytest.raises(ValueError, match=r"reasoning_gym:chain_sum: the problem carries no reasoning-gym entry"):
        chain_sum().verify(Problem("1 + 1 =", "2"), "<answer>2</answer>")


# ------------------------------------------------------------------------------------------ held-out split and stream


def test_eval_questions_are_disjoint_from_training():
    task = chain_sum(size=150, eval_size=20, config=SMALL)
    train = {p.meta["question"] for p in task.train}
    held_out = [p.meta["question"] for p in task.eval_problems()]
    assert len(held_out) == 20 and len(set(held_out)) == 20
    assert not set(held_out) & train
    # not vacuous: the eval seed's own first items do repeat training questions (150 of 200 possible)
    raw = reasoning_gym.create_dataset("chain_sum", size=20, seed=EVAL_SEED_OFFSET, **SMALL)
    raw_questions = [raw[i]["question"] for i in range(20)]
    assert sum(q in train for q in raw_questions) >= 3
    fresh = list(dict.fromkeys(q for q in raw_questions if q not in train))
    assert held_out[: len(fresh)] == fresh  # drawn in order, repeats skipped, topped up from further draws
    assert [p.meta["question"] for p in chain_sum(size=150, eval_size=20, config=SMALL).eval_problems()] == held_out


def test_the_eval_seed_is_far_from_the_training_items():
    # reasoning-gym seeds item i with seed + i: a nearby eval seed would redraw the training items
    task = chain_sum(size=300, eval_size=30)
    raw = reasoning_gym.create_dataset("chain_sum", size=30, seed=EVAL_SEED_OFFSET)
    assert [p.meta["question"] for p in task.eval_problems()] == [raw[i]["question"] for i in range(30)]
    shifted = reasoning_gym.create_dataset("chain_sum", size=30, seed=1)
    assert [shifted[i]["question"] for i in range(30)] == [p.meta["question"] for p in task.train[1:31]]


def test_a_small_question_space_shrinks_or_empties_the_eval_set(caplog):
    # 600 training draws from 200 questions leave a few unseen: the eval set holds only those
    task = chain_sum(size=600, eval_size=50, config=SMALL)
    unseen = 200 - len({p.meta["question"] for p in task.train})
    with caplog.at_level(logging.WARNING, logger="credo.tasks.reasoning_gym"):
        held_out = task.eval_problems()
    assert 0 < len(held_out) <= unseen < 50
    assert f"only {len(held_out)} held-out problems outside the training set (eval_size 50)" in caplog.text
    with pytest.raises(ValueError, match=r"every eval question also appears in the training set \(size=5000\)"):
        chain_sum(size=5000, eval_size=5, config=SMALL).eval_problems()


def test_train_stream_epochs_resume():
    n = 8
    task = chain_sum(size=n)
    train = [p.prompt for p in task.train]
    stream = [p.prompt for p in islice(task.train_problems(seed=1), 4 * n)]
    epochs = [stream[e * n : (e + 1) * n] for e in range(4)]
    for epoch in epochs:
        assert sorted(epoch) == sorted(train)  # each epoch a permutation of the training set
    assert len({tuple(e) for e in epochs}) > 1  # fresh order per epoch
    assert Counter(stream) == Counter(train * 4)
    assert stream == [p.prompt for p in islice(task.train_problems(seed=1), 4 * n)]  # deterministic
    assert stream != [p.prompt for p in islice(task.train_problems(seed=2), 4 * n)]
    for start in (1, 7, 8, 13, 30):  # resuming at a position = skipping that many
        assert [p.prompt for p in islice(task.train_problems(seed=1, start=start), 4 * n - start)] == stream[start:]


def test_the_dataset_seed_picks_the_problems():
    a, b = chain_sum(seed=0), chain_sum(seed=1)
    assert [p.prompt for p in a.train] != [p.prompt for p in b.train]
    assert [p.prompt for p in a.train] == [p.prompt for p in chain_sum(seed=0).train]


# ------------------------------------------------------------------------------------------ difficulty buckets


def test_buckets_from_bucket_by():
    task = chain_sum(eval_size=60, bucket_by=["num_terms"], config={"max_terms": 3})
    problems = task.eval_problems()
    for problem in problems:
        assert problem.difficulty == f"num_terms={terms(problem)}"
    assert Counter(p.difficulty for p in problems).keys() == {"num_terms=2", "num_terms=3"}
    two = chain_sum(eval_size=20, bucket_by=["num_terms", "num_digits"])
    for problem in two.eval_problems():
        metadata = problem.meta["entry"]["metadata"]
        assert problem.difficulty == f"num_terms={terms(problem)},num_digits={metadata['num_digits']}"
    assert {p.difficulty for p in chain_sum().eval_problems()} == {"all"}


def test_bucket_value_falls_back_to_the_difficulty_mapping():
    entry = {"metadata": {"difficulty": {"base": (2, 16), "value": (0, 1000)}, "value": 7}}
    assert bucket(entry, ["base", "value"], "x") == "base=(2, 16),value=7"
    assert bucket(entry, [], "x") == "all"
    with pytest.raises(ValueError, match=r"x: bucket_by key 'size' is not in the entries' metadata\['difficulty'\]; "
                                         r"available: base, value"):
        bucket(entry, ["size"], "x")
    with pytest.raises(ValueError, match=r"x: the dataset's entries have no metadata\['difficulty'\]"):
        bucket({"metadata": {}}, ["base"], "x")


# ------------------------------------------------------------------------------------------ names and errors


def test_task_class_resolves_families():
    assert task_class("reasoning_gym:chain_sum") is ReasoningGymTask
    assert (task_class("arith"), task_class("jsonl")) == (ArithTask, JsonlTask)
    with pytest.raises(ValueError, match=r"^unknown task 'gym:x'; valid names: arith, calculator, jsonl, dataset, guessing, reasoning_gym:<dataset>$"):
        task_class("gym:x")
    with pytest.raises(ValueError, match=r"task 'reasoning_gym' needs a dataset: reasoning_gym:<dataset>"):
        task_class("reasoning_gym")
    with pytest.raises(ValueError, match=r"task 'arith' takes no ':' suffix \(got 'arith:hard'\)"):
        task_class("arith:hard")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"name": "reasoning_gym:chain_sums"},
         r"unknown reasoning-gym dataset 'chain_sums'; did you mean chain_sum, decimal_chain_sum\?"),
        ({"name": "reasoning_gym:zzzz"}, r"unknown reasoning-gym dataset 'zzzz'; no close match"),
        ({"name": "reasoning_gym:chain_sum", "config": {"max_termz": 3}},
         (r"reasoning_gym:chain_sum: unknown config key 'max_termz' \(did you mean 'max_terms'\?\); "
          r"allowed: allow_negation, max_digits, max_terms, min_digits, min_terms")),
        ({"name": "reasoning_gym:chain_sum", "config": {"min_terms": 5, "max_terms": 3}},
         (r"reasoning_gym:chain_sum: invalid config \{'min_terms': 5, 'max_terms': 3\}: AssertionError: "
          r"max_terms must be >= min_terms")),
        ({"name": "reasoning_gym:chain_sum", "config": {"seed": 3}},
         r"reasoning_gym:chain_sum: set task.seed, not config.seed"),
        ({"name": "reasoning_gym:chain_sum", "bucket_by": ["terms"]},
         r"bucket_by key 'terms' is not in the entries' metadata\['difficulty'\]; available: num_terms, num_digits"),
        ({"name": "reasoning_gym:chain_sum", "size": 0}, r"size\s+Input should be greater than or equal to 1"),
        ({"name": "reasoning_gym:chain_sum", "sizes": 3}, r"sizes\s+Extra inputs are not permitted"),
        ({"name": "reasoning_gym:chain_sum", "correct_threshold": 0},
         r"correct_threshold\s+Input should be greater than 0"),
    ],
)
def test_config_errors(options, message):
    with pytest.raises(ValueError, match=message):
        ReasoningGymConfig(**options)


def test_load_config_validates_reasoning_gym_tasks(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("task:\n  name: reasoning_gym:chain_sum\n  size: 200\n  config: {max_terms: 3}\n"
                    "  bucket_by: [num_terms]\n  binary_reward: true\n")
    config = load_config(path)
    assert config.task == {"name": "reasoning_gym:chain_sum", "size": 200, "config": {"max_terms": 3},
                           "bucket_by": ["num_terms"], "binary_reward": True}
    task = build_task(config.task)
    assert len(task.train) == 200 and all(terms(p) <= 3 for p in task.train)

    def error(overrides) -> str:
        with pytest.raises(ConfigError) as info:
            load_config(path, overrides)
        return str(info.value)

    message = error(["task.name=reasoning_gym:chain_sun"])
    assert "  task: unknown reasoning-gym dataset 'chain_sun'; did you mean chain_sum" in message
    assert "  task: reasoning_gym:chain_sum: unknown config key 'max_term'" in error(["task.config={max_term: 3}"])
    assert re.search(r"task: instruction: Input should be a valid string", error(["task.instruction=[1]"]))
    message = error(["method=oracle_blame"])
    assert "oracle_blame needs blame_start (a task's step checker" in message and "(task reasoning_gym:chain_sum has no step checker)" in message
    assert validate({"task": {"name": "reasoning_gym:chain_sum"}}).task == {"name": "reasoning_gym:chain_sum"}
    with pytest.raises(ConfigError, match=r"task: unknown task 'reasoning-gym:chain_sum'; valid names: arith, "
                                          r"calculator, jsonl, dataset, guessing, reasoning_gym:<dataset>"):
        validate({"task": {"name": "reasoning-gym:chain_sum"}})


def test_missing_package_is_a_missing_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)
    with pytest.raises(MissingExtra, match=re.escape("pip install 'credo[tasks]'")) as info:
        ReasoningGymConfig(name="reasoning_gym:chain_sum")
    needs = "reasoning-gym tasks (task.name: reasoning_gym:<dataset>) needs the optional package 'reasoning_gym'"
    assert needs in str(info.value)
    with pytest.raises(MissingExtra, match=re.escape("credo[tasks]")):
        build_task({"name": "reasoning_gym:chain_sum"})
    with pytest.raises(ConfigError, match=r"(?s)task: reasoning-gym tasks .* pip install 'credo\[tasks\]'"):
        validate({"task": {"name": "reasoning_gym:chain_sum"}})
    assert validate({"task": {"name": "arith"}}).task == {"name": "arith"}  # other tasks do not need it


def test_credo_imports_without_the_tasks_extra():
    code = (
        "import sys; sys.modules['reasoning_gym'] = None; sys.modules['math_verify'] = None\n"
        "import credo.tasks, credo.config, credo.tasks.math_grading\n"
        "assert credo.config.load_config(None).task == {'name': 'arith'}\n"
        "for options in ({'name': 'reasoning_gym:chain_sum'}, {'name': 'jsonl', 'path': 'x', 'match': 'math'}):\n"
        "    try:\n"
        "        credo.config.validate({'task': options})\n"
        "    except credo.config.ConfigError as error:\n"
        "        print(error)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("  task:")]
    assert len(lines) == 2 and all(line.endswith("install it with: pip install 'credo[tasks]'") for line in lines)
    assert "'reasoning_gym'" in lines[0] and "'math_verify'" in lines[1]


def test_some_dataset_scores_are_strictly_partial():
    # the partial credit above is not an artefact of one problem: most near-miss answers score in (0, 1)
    task = chain_sum(size=30)
    scores = [task.verify(p, f"<answer>x{p.answer}</answer>").reward for p in task.train]
    assert all(0 < s < 1 for s in scores)
    assert scores == pytest.approx([len(p.answer) / (len(p.answer) + 1) for p in task.train])


# ------------------------------------------------------------------------------------------ the verification budget

SLEEPY = """
import time


def score(dataset, options, size, seed, answer, entry):
    time.sleep(float(answer))
    return 1.0


def echo(value):
    return value
"""


def test_scoring_a_batch_within_its_budget_equals_scoring_each_answer():
    task = chain_sum()
    problems = task.train[:4]
    texts = [f"<answer>{p.answer}</answer>" for p in problems[:2]] + ["<answer>x</answer>", "no answer"]
    assert verify_all(task, problems, texts, "raise") == verify_each(task, task.verify, problems, texts, "raise")
    assert task.over_budget == 0


def test_answers_that_overrun_cannot_spend_the_time_of_the_answers_after_them(tmp_path, monkeypatch, caplog):
    """The scorer sleeps as many seconds as the answer says. Two slow answers first (30 s each) once held the whole
    1.5 s budget and the four right answers after them scored 0; now each answer gets what is left divided by the
    answers still to score, so each slow answer stops at its share and the four right ones are scored."""
    (tmp_path / "sleepy_scorer.py").write_text(SLEEPY)
    sandbox = Sandbox("sleepy", tmp_path / "sleepy_scorer.py")
    timeouts = []

    def call(function, args, timeout_s):
        timeouts.append(timeout_s)
        return Sandbox.call(sandbox, function, args, timeout_s)

    monkeypatch.setattr(sandbox, "call", call)
    monkeypatch.setattr(rg_task, "SANDBOX", sandbox)
    task = chain_sum(verify_budget_s=3.0, score_timeout_s=10)
    texts = [f"<answer>{seconds}</answer>" for seconds in ("30", "30", "0", "0", "0", "0")]
    try:
        assert Sandbox.call(sandbox, "echo", (1,), 60).value == 1  # the worker is up before the clock starts
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="credo.tasks.reasoning_gym"):
            verdicts, errors = verify_all(task, task.train[:6], texts, "raise")  # as training scores a batch
        took = time.monotonic() - started
    finally:
        sandbox.shutdown()
    assert [v.reward for v in verdicts] == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    assert [v.sandbox_failed for v in verdicts] == [True, True, False, False, False, False]
    assert (errors, sandbox_failures(verdicts), task.over_budget) == (0, 2, 0)
    assert timeouts[0] == pytest.approx(3.0 / 6, abs=0.05) and len(timeouts) == 6
    assert took < 3.0 + 4.0  # the budget, and two stops and starts of the worker


def test_an_answer_left_without_time_scores_zero_without_scoring(monkeypatch):
    """A budget already spent (the clock moved past it) leaves no share: the answer is not sent to the scorer."""
    task = chain_sum(verify_budget_s=1.0, score_timeout_s=10)
    monkeypatch.setattr(rg_task, "SANDBOX", None)  # a call would fail: none is made
    verdict = task.own_verify(task.train[0], "<answer>0</answer>", share_s=0.0)
    assert (verdict.reward, verdict.sandbox_failed, task.over_budget) == (0.0, True, 1)
