"""Custom reward functions from the config (`task.reward`, `credo.tasks.rewards`): loading, weights, None,
the reward_errors policy, verl's `compute_score` style, and that every verification path uses them."""

from __future__ import annotations

import json
import logging
import pickle
import sys
import textwrap
import uuid

import pytest

from credo.config import ConfigError, load_config
from credo.tasks import build_task, verify_all
from credo.tasks.base import Problem, unscored_count
from credo.tasks.chat import ChatPrompt

REWARDS = '''
import math

CALLS = []

def exact(prompts, completions, answer, **columns):
    CALLS.append(len(completions))
    return [1.0 if c.strip() == a else 0.0 for c, a in zip(completions, answer)]

def length(prompts, completions):
    return [float(len(c)) for c in completions]

def only_long(completions, **columns):
    return [1.0 if len(c) > 3 else None for c in completions]

def never(prompts, completions, **columns):
    return [None if i % 2 else math.nan for i in range(len(completions))]

def explodes(prompts, completions, **columns):
    if any("boom" in c for c in completions):
        raise ValueError("cannot score a boom")
    return [0.5] * len(completions)

def wrong_type(prompts, completions, **columns):
    return ["high" if "boom" in c else 0.5 for c in completions]

def wrong_length(prompts, completions, **columns):
    return [0.5]

def empty(prompts, completions, **columns):
    return []

def scalar(prompts, completions, **columns):
    return 0.5

def seen(prompts, completions, answer):
    return [float(len(json.dumps([p, a]))) for p, a in zip(prompts, answer)]

def needs_note(completions, note):
    return [1.0] * len(completions)

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return {"score": 2.0 if solution_str.strip() == ground_truth else 0.0, "acc": False}

def compute_plain(solution_str, ground_truth):
    return 1.0 if solution_str.strip() == ground_truth else 0.0

def compute_raises(data_source, solution_str, ground_truth, extra_info=None):
    raise KeyError("no such key")

NOT_A_FUNCTION = 3
'''


@pytest.fixture
def rewards(tmp_path, monkeypatch):
    """A fresh reward module in the working directory (a unique name per test); yields its name."""
    name = f"my_rewards_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("import json\n" + REWARDS)
    monkeypatch.chdir(tmp_path)
    yield name
    sys.modules.pop(name, None)


def jsonl_task(tmp_path, reward, **options):
    """A `jsonl` task of four problems (answers "1".."4"), loaded through `load_config` with `reward`."""
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"q{i}", "answer": str(i), "difficulty": "easy" if i < 3 else "hard"})
                            + "\n" for i in range(1, 5)))
    config = load_config(None, [f"task={json.dumps({'name': 'jsonl', 'path': str(path), 'eval_path': str(path), 'reward': reward, **options})}"])
    return build_task(config.task)


def problems(task):
    return task.eval_problems()


# ------------------------------------------------------------------------------------------ weights


def test_weighted_sum_and_correct_at(rewards, tmp_path):
    task = jsonl_task(tmp_path, [{"function": f"{rewards}:exact", "weight": 2.0},
                                 {"function": f"{rewards}:length", "weight": -0.5}], correct_at=1.5)
    rows = problems(task)
    verdicts, errors = verify_all(task, rows, ["1", "x", "33", "4"], "raise")
    assert [v.reward for v in verdicts] == [2.0 - 0.5, -0.5, -1.0, 2.0 - 0.5]
    assert [v.correct for v in verdicts] == [True, False, False, True]
    assert errors == 0
    # the trl-style function is called once per batch, not once per row
    assert sys.modules[rewards].CALLS == [4]


def test_single_function_string_replaces_the_tasks_own_reward(rewards, tmp_path):
    task = jsonl_task(tmp_path, f"{rewards}:length")
    [row] = problems(task)[:1]
    # the task's own grading would give 1 for "\\boxed{1}"; the custom reward is the length
    verdict = task.verify(row, "\\boxed{1}")
    assert verdict.reward == 9.0 and verdict.correct  # correct_at defaults to 1.0


def test_step_checker_stays_with_a_custom_reward(rewards, monkeypatch):
    config = load_config(None, [f"task.reward={rewards}:length"])
    task = build_task(config.task)
    problem = next(task.train_problems(seed=0))
    verdicts, _ = verify_all(task, [problem], ["nonsense"], "raise")
    assert verdicts[0].reward == 8.0
    assert verdicts[0].first_wrong_step == 0 and verdicts[0].error_kind == "format"  # arith's step checker


# --------------------------------------------------------------------------------------------- None


def test_none_is_no_reward_and_all_none_is_zero_and_counted(rewards, tmp_path, caplog):
    task = jsonl_task(tmp_path, [{"function": f"{rewards}:only_long", "weight": 3.0}, f"{rewards}:never"])
    rows = problems(task)
    with caplog.at_level(logging.WARNING, logger="credo.tasks.rewards"):
        verdicts, errors = verify_all(task, rows, ["long answer", "no", "longer", "x"], "raise")
    assert [v.reward for v in verdicts] == [3.0, 0.0, 3.0, 0.0]
    assert [v.unscored for v in verdicts] == [False, True, False, True]
    assert [v.correct for v in verdicts] == [True, False, True, False]
    assert unscored_count(verdicts) == 2 and errors == 0
    assert "no reward function gave a value for 2 of 4 responses" in caplog.text


# ------------------------------------------------------------------------------------ reward_errors


@pytest.mark.parametrize(("function", "what"), [
    ("explodes", "raised ValueError: cannot score a boom"),
    ("wrong_type", "returned a str ('high'), not a number or None"),
])
def test_a_failing_function_raises_one_line_naming_function_and_prompt(rewards, tmp_path, function, what):
    task = jsonl_task(tmp_path, f"{rewards}:{function}")
    rows = problems(task)
    with pytest.raises(RuntimeError) as info:
        verify_all(task, rows, ["fine", "boom", "fine", "fine"], "raise")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"reward function {rewards}:{function} {what} on prompt 'q2' (response 'boom')")
    assert "rollout.reward_errors=zero" in message


@pytest.mark.parametrize("function", ["explodes", "wrong_type"])
def test_zero_policy_scores_only_the_failing_rows_zero(rewards, tmp_path, caplog, function):
    task = jsonl_task(tmp_path, [f"{rewards}:{function}", f"{rewards}:length"])
    rows = problems(task)
    with caplog.at_level(logging.WARNING, logger="credo.tasks.rewards"):
        verdicts, errors = verify_all(task, rows, ["fine", "boom", "ok", "fine"], "zero")
    assert [v.reward for v in verdicts] == [4.5, 0.0, 2.5, 4.5]
    assert [v.correct for v in verdicts] == [True, False, True, True]
    assert errors == 1
    assert f"reward function {rewards}:{function}" in caplog.text and "'q2'" in caplog.text


def test_a_batch_of_the_wrong_length_fails_every_row(rewards, tmp_path):
    """`wrong_length` returns [0.5] whatever it is given: called again row by row, its one value would fit each row
    by construction (as TRL, which stops at a reward tensor of the wrong shape, credo takes no value from it)."""
    task = jsonl_task(tmp_path, f"{rewards}:wrong_length")
    rows = problems(task)
    with pytest.raises(RuntimeError, match=rf"^reward function {rewards}:wrong_length returned 1 values for 4 rows "):
        verify_all(task, rows, ["a", "b", "c", "d"], "raise")
    verdicts, errors = verify_all(task, rows, ["a", "b", "c", "d"], "zero")
    assert [v.reward for v in verdicts] == [0.0] * 4 and errors == 4


def test_wrong_length_is_an_error(rewards, tmp_path):
    task = jsonl_task(tmp_path, f"{rewards}:empty")
    with pytest.raises(RuntimeError, match=rf"^reward function {rewards}:empty returned 0 values for 4 rows on prompt 'q1'"):
        verify_all(task, problems(task), ["a", "b", "c", "d"], "raise")
    verdicts, errors = verify_all(task, problems(task), ["a", "b", "c", "d"], "zero")
    assert errors == 4 and [v.reward for v in verdicts] == [0.0] * 4
    task = jsonl_task(tmp_path, f"{rewards}:scalar")
    with pytest.raises(RuntimeError, match=rf"^reward function {rewards}:scalar returned a float \(0.5\), not a list of 4 "
                                           "numbers or None on prompt 'q1'"):
        verify_all(task, problems(task), ["a", "b", "c", "d"], "raise")


def test_per_row_verify_raises_too(rewards, tmp_path):
    task = jsonl_task(tmp_path, f"{rewards}:explodes")
    with pytest.raises(RuntimeError, match=rf"^reward function {rewards}:explodes raised ValueError"):
        task.verify(problems(task)[0], "boom")


# ------------------------------------------------------------------------------------------ columns


def test_columns_reach_functions_without_kwargs(rewards, tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps({"prompt": "q", "answer": "7"}) + "\n")
    task = build_task(load_config(None, [f"task={json.dumps({'name': 'jsonl', 'path': str(path), 'eval_path': str(path), 'reward': f'{rewards}:seen'})}"]).task)
    # `seen` takes no **kwargs: it is passed the columns it names (answer), not the others (difficulty)
    [verdict], _ = verify_all(task, problems(task), ["r"], "raise")
    assert verdict.reward == len(json.dumps(["q", "7"]))
    # a column that no row has is not invented: the function's own TypeError, through reward_errors
    task = build_task(load_config(None, [f"task={json.dumps({'name': 'jsonl', 'path': str(path), 'eval_path': str(path), 'reward': f'{rewards}:needs_note'})}"]).task)
    with pytest.raises(RuntimeError, match="missing 1 required positional argument: 'note' on prompt 'q'"):
        verify_all(task, problems(task), ["r"], "raise")


# -------------------------------------------------------------------------------------------- verl


def test_verl_style_compute_score(rewards, tmp_path):
    task = jsonl_task(tmp_path, [{"function": f"{rewards}:compute_score", "style": "verl", "weight": 0.5},
                                 {"function": f"{rewards}:compute_plain", "style": "verl"}])
    verdicts, _ = verify_all(task, problems(task), ["1", "x", "3", "5"], "raise")
    # the dict's "score" (2.0 x 0.5) plus the float; `acc` is ignored: correct is reward >= correct_at
    assert [v.reward for v in verdicts] == [2.0, 0.0, 2.0, 0.0]
    assert [v.correct for v in verdicts] == [True, False, True, False]


def test_verl_style_arguments(tmp_path, monkeypatch):
    (tmp_path / "verl_scores.py").write_text(textwrap.dedent('''
        SEEN = []
        def compute_score(data_source, solution_str, ground_truth, extra_info=None):
            SEEN.append((data_source, solution_str, ground_truth, extra_info))
            return 1
    '''))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "verl_scores", raising=False)
    task = jsonl_task(tmp_path, {"function": "verl_scores:compute_score", "style": "verl"})
    verify_all(task, problems(task)[:1], ["resp"], "raise")
    assert sys.modules["verl_scores"].SEEN == [("jsonl", "resp", "1", {"answer": "1", "difficulty": "easy"})]
    sys.modules.pop("verl_scores")


def test_verl_style_failure_follows_reward_errors(rewards, tmp_path):
    task = jsonl_task(tmp_path, {"function": f"{rewards}:compute_raises", "style": "verl"})
    with pytest.raises(RuntimeError, match=rf"^reward function {rewards}:compute_raises raised KeyError: 'no such key' on prompt 'q1'"):
        verify_all(task, problems(task), ["a"] * 4, "raise")
    verdicts, errors = verify_all(task, problems(task), ["a"] * 4, "zero")
    assert errors == 4 and all(v.reward == 0.0 for v in verdicts)


# ----------------------------------------------------------------------------------- config errors


@pytest.mark.parametrize(("reward", "message"), [
    ("no_such_module_xyz:fn", "reward function 'no_such_module_xyz:fn': no module named 'no_such_module_xyz'"),
    ("{m}:missing", "reward function '{m}:missing': {m} ({path}) has no attribute 'missing'"),
    ("{m}.exact", "reward function '{m}.exact' must look like 'package.module:function'"),
    ("{m}:NOT_A_FUNCTION", "reward function '{m}:NOT_A_FUNCTION' is a int, not a function"),
    ("{m}:compute_plain", "reward function '{m}:compute_plain' cannot be called as fn(prompts, completions, **columns)"),
])
def test_bad_reward_is_a_config_error(rewards, tmp_path, reward, message):
    path = str(tmp_path / f"{rewards}.py")
    with pytest.raises(ConfigError) as info:
        load_config(None, [f"task.reward={reward.format(m=rewards)}"])
    assert message.format(m=rewards, path=path) in str(info.value)


def test_bad_verl_signature_and_empty_list_are_config_errors(rewards):
    with pytest.raises(ConfigError, match="cannot be called as compute_score"):
        load_config(None, [f"task.reward={{function: '{rewards}:length', style: verl}}"])
    with pytest.raises(ConfigError, match="reward is an empty list"):
        load_config(None, ["task.reward=[]"])


def test_module_raising_on_import_is_a_config_error(tmp_path, monkeypatch):
    (tmp_path / "broken_rewards.py").write_text("raise RuntimeError('half written')\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"importing broken_rewards raised RuntimeError: half written"):
        load_config(None, ["task.reward=broken_rewards:f"])


def test_reward_from_a_file_path(tmp_path, monkeypatch):
    (tmp_path / "scores").mkdir()
    (tmp_path / "scores" / "mine.py").write_text("def r(completions, **kw):\n    return [0.25] * len(completions)\n")
    monkeypatch.chdir(tmp_path)
    task = build_task(load_config(None, ["task.reward=scores/mine.py:r"]).task)
    assert task.verify(next(task.train_problems(seed=0)), "x").reward == 0.25


def test_default_configs_leave_the_testbed_digest_alone():
    from credo.testbed import TestbedConfig

    # the shipped testbed models are found by this hash: new task options must not enter a default dump
    assert TestbedConfig().digest() == "340791c1ad37"


# ------------------------------------------------------------------------------- through a sampler


def test_the_group_sampler_uses_the_custom_reward(rewards, tmp_path):
    from scripted import ScriptedPolicy

    from credo.rollout.groups import sample_round
    from credo.rollout.samplers import RolloutConfig

    task = jsonl_task(tmp_path, [f"{rewards}:exact", f"{rewards}:length"])
    policy = ScriptedPolicy(lambda prompt: prompt[1:])  # "q3" -> "3": right (the task's own reward: 1)
    rollout = sample_round(policy, task, problems(task)[:2], RolloutConfig(group_size=2))
    assert rollout.rewards.tolist() == [2.0, 2.0, 2.0, 2.0]
    assert sys.modules[rewards].CALLS == [4]


def test_conversational_rows_reach_functions_as_trl_gives_them(tmp_path, monkeypatch):
    """A chat-format row's prompt is its message list and its completion `[{"role": "assistant", "content": ...}]`,
    as TRL's GRPOTrainer passes them on a conversational dataset."""
    (tmp_path / "chat_rewards.py").write_text(textwrap.dedent('''
        def system_seen(prompts, completions, **kw):
            return [float(p[0]["role"] == "system" and c[0]["role"] == "assistant" and c[0]["content"] == "x")
                    for p, c in zip(prompts, completions)]
    '''))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "chat_rewards", raising=False)
    task = jsonl_task(tmp_path, "chat_rewards:system_seen")
    problem = Problem(ChatPrompt([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]), "1")
    assert task.verify(problem, "x").reward == 1.0
    assert pickle.loads(pickle.dumps(problem)) == problem
    sys.modules.pop("chat_rewards")


def test_no_reward_keeps_the_tasks_own_scoring(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps({"prompt": "q", "answer": "7"}) + "\n")
    task = build_task(load_config(None, [f"task={json.dumps({'name': 'jsonl', 'path': str(path), 'eval_path': str(path)})}"]).task)
    assert task.custom_reward is None
    assert [v.reward for v in verify_all(task, problems(task) * 2, ["\\boxed{7}", "8"], "raise")[0]] == [1.0, 0.0]
    assert next(task.train_problems(0)).prompt == "q"


# ------------------------------------------------------------------------------------------ TRL's conventions


def chat_problem(question: str, solution: str) -> Problem:
    return Problem(ChatPrompt([{"role": "user", "content": question}]), solution, meta={"solution": solution})


def test_trls_own_reward_functions_score_conversational_rows(tmp_path):
    """TRL's `trl.rewards` read `completion[0]["content"]`: on conversational rows they score as in TRL (strings
    made them raise "string indices must be integers")."""
    pytest.importorskip("trl")
    task = jsonl_task(tmp_path, ["trl.rewards:accuracy_reward", {"function": "trl.rewards:think_format_reward",
                                                                 "weight": 0.5}])
    rows = [chat_problem("What is half of one?", "$\\frac{1}{2}$")] * 3
    texts = ["<think>half</think>The answer is $\\frac{1}{2}$", "The answer is $\\frac{1}{3}$",
             "<think>x</think>The answer is $\\frac{1}{3}$"]
    verdicts, errors = verify_all(task, rows, texts, "raise")
    assert errors == 0
    assert [v.terms for v in verdicts] == [(("accuracy_reward", 1.0), ("think_format_reward", 1.0)),
                                           (("accuracy_reward", 0.0), ("think_format_reward", 0.0)),
                                           (("accuracy_reward", 0.0), ("think_format_reward", 1.0))]
    assert [v.reward for v in verdicts] == [1.5, 0.0, 0.5]


def test_async_reward_functions_are_awaited_and_run_concurrently(tmp_path, monkeypatch):
    """Two async functions that each wait for the other to start finish only if a batch awaits them together,
    as TRL gathers them; an async function alone (or one row at a time) is awaited too."""
    (tmp_path / "async_rewards.py").write_text(textwrap.dedent('''
        import asyncio

        EVENTS = {}

        def event(name):
            return EVENTS.setdefault((id(asyncio.get_running_loop()), name), asyncio.Event())

        async def first(prompts, completions, **kw):
            event("first").set()
            await asyncio.wait_for(event("second").wait(), 5)
            return [1.0 for _ in completions]

        async def second(prompts, completions, **kw):
            event("second").set()
            await asyncio.wait_for(event("first").wait(), 5)
            return [0.25 for _ in completions]

        class Graded:
            async def __call__(self, prompts, completions, answer, **kw):
                await asyncio.sleep(0)
                return [float(c == a) for c, a in zip(completions, answer)]

        graded = Graded()
    '''))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "async_rewards", raising=False)
    task = jsonl_task(tmp_path, ["async_rewards:first", "async_rewards:second"])
    verdicts, _ = verify_all(task, problems(task), ["1", "2", "3", "4"], "raise")
    assert [v.reward for v in verdicts] == [1.25] * 4
    graded = jsonl_task(tmp_path, "async_rewards:graded")
    assert [v.reward for v in verify_all(graded, problems(graded), ["1", "x", "3", "y"], "raise")[0]] == [1, 0, 1, 0]
    assert graded.verify(problems(graded)[0], "1").reward == 1.0
    sys.modules.pop("async_rewards")


def test_each_functions_mean_and_std_under_trls_names():
    import functools
    import statistics

    from credo.tasks.base import Verdict
    from credo.tasks.rewards import callable_name, is_async
    from credo.train import reward_terms

    verdicts = [Verdict(1.0, True, terms=(("acc", 1.0), ("fmt", None))), Verdict(0.5, False, terms=(("acc", 0.0), ("fmt", 0.5))),
                Verdict(0.0, False, terms=(("acc", 0.5), ("fmt", None)))]
    assert reward_terms(verdicts) == {"rewards/acc/mean": 0.5, "rewards/acc/std": statistics.stdev([1.0, 0.0, 0.5]),
                                      "rewards/fmt/mean": 0.5}  # one value: no std (TRL: NaN)

    def accuracy(prompts, completions, **kw):
        return []

    class Judge:
        async def __call__(self, completions, **kw):
            return []

    assert callable_name(functools.partial(accuracy, scale=2)) == "accuracy" and callable_name(Judge()) == "Judge"
    assert is_async(Judge()) and is_async(functools.partial(Judge())) and not is_async(accuracy)


def test_a_run_logs_each_functions_mean_under_trls_name(tmp_path, monkeypatch):
    from tiny import TINY

    from credo.io import read_jsonl
    from credo.train import train

    (tmp_path / "run_rewards.py").write_text(textwrap.dedent('''
        def boxed(completions, **kw):
            return [float("boxed" in c) for c in completions]

        def short(completions, **kw):
            return [1.0 if len(c) < 30 else None for c in completions]
    '''))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "run_rewards", raising=False)
    config = load_config(None, [*TINY, "train.steps=1", 'task.reward=["run_rewards:boxed", "run_rewards:short"]'])
    train(config, tmp_path / "run", show_progress=False)
    step = next(r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if r.get("step") == 1 and "reward/mean" in r)
    assert 0.0 <= step["rewards/boxed/mean"] <= 1.0 and "rewards/boxed/std" in step
    assert step["rewards/short/mean"] == 1.0 or "rewards/short/mean" not in step  # only the rows it scored
    sys.modules.pop("run_rewards")


def test_trls_keywords_reach_functions_and_their_logs_reach_the_run(tmp_path, monkeypatch):
    """TRL 1.16's keywords: `completion_ids` (the responses' token ids), `trainer_state` (the steps done and the
    run's steps), `log_metric` (averaged into the step record under its name) and `log_extra` (one value per row,
    beside the logged samples); a function that names none of them is passed none."""
    from tiny import TINY

    from credo.io import read_jsonl
    from credo.train import train

    (tmp_path / "kw_rewards.py").write_text(textwrap.dedent('''
        SEEN = []

        def progress(completions, completion_ids, trainer_state, log_metric, log_extra):
            SEEN.append((trainer_state.global_step, trainer_state.max_steps, [len(i) for i in completion_ids],
                         [len(c) for c in completions]))
            log_metric("progress/ids_per_row", sum(map(len, completion_ids)) / len(completion_ids))
            log_extra("first_id", [ids[0] if ids else None for ids in completion_ids])
            return [0.0 for _ in completions]

        def plain(completions):
            return [1.0 for _ in completions]
    '''))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "kw_rewards", raising=False)
    config = load_config(None, [*TINY, "train.steps=2", "train.eval_every=100", "optim.minibatches=2",
                                'task.reward=["kw_rewards:progress", "kw_rewards:plain"]'])
    train(config, tmp_path / "run", show_progress=False)
    import kw_rewards

    probe, *calls = kw_rewards.SEEN  # the check of the rows' shapes, on one row twice before anything is sampled
    assert probe[:2] == (0, 4) and len(probe[2]) == 2 and probe[2][0] == probe[2][1] > 0
    # in optimiser steps, as TRL counts them (2 per step): the first evaluation, each step's sampling, the last
    # in optimiser steps, as TRL counts them (2 per step): the first evaluation (greedy, sampled), each step's
    # sampling, the last evaluation
    assert [(step, steps) for step, steps, *_ in calls] == [(0, 4)] * 3 + [(2, 4)] + [(4, 4)] * 2
    assert all(len(ids) == len(texts) for *_, ids, texts in kw_rewards.SEEN)  # a token count per response
    steps = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "reward/mean" in r]
    assert all(r["progress/ids_per_row"] > 0 for r in steps) and all(r["rewards/plain/mean"] == 1.0 for r in steps)
    samples = list(read_jsonl(tmp_path / "run" / "samples.jsonl"))
    assert samples and all(s["extra"]["first_id"] == s["ids"][0] for s in samples if s["ids"])
    sys.modules.pop("kw_rewards")


TRL_DOCS_STYLE = '''
def content_length(completions, **kw):
    return [float(len(c[0]["content"])) for c in completions]
'''


def test_a_function_that_cannot_take_the_rows_shape_stops_the_run_before_sampling(tmp_path, monkeypatch, caplog):
    """A reward written for conversational rows (`completion[0]["content"]`) on a plain-text dataset fails when the
    run starts, naming the function and the shape it was given; under reward_errors=zero it is a warning."""
    from tiny import TINY

    from credo.train import train

    (tmp_path / "docs_rewards.py").write_text(TRL_DOCS_STYLE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "docs_rewards", raising=False)
    config = load_config(None, [*TINY, "train.steps=1", "task.reward=docs_rewards:content_length"])
    with pytest.raises(ValueError, match=r"^reward function docs_rewards:content_length raised TypeError: string "
                                         r"indices must be integers.* when called on a batch of the first training row twice \(a "
                                         r"plain-text row: prompts and completions are strings\) with its answer "):
        train(config, tmp_path / "run", show_progress=False)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
    zero = config.model_copy(update={"rollout": config.rollout.model_copy(update={"reward_errors": "zero"})})
    with caplog.at_level(logging.WARNING, logger="credo.tasks.rewards"):
        train(zero, tmp_path / "zero", show_progress=False)
    assert any("plain-text row" in r.getMessage() and "score 0" in r.getMessage() for r in caplog.records)
    sys.modules.pop("docs_rewards")


def test_a_function_returning_one_value_for_any_batch_stops_the_run_before_sampling(tmp_path, monkeypatch):
    """The pre-sampling check calls the function on a batch of two rows: a function that returns one value
    whatever it is given (which a one-row call cannot tell from a right one) stops the run there."""
    from tiny import TINY

    from credo.train import train

    (tmp_path / "one_value.py").write_text("def reward(prompts, completions, **kw):\n    return [1.0]\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "one_value", raising=False)
    config = load_config(None, [*TINY, "train.steps=1", "task.reward=one_value:reward"])
    with pytest.raises(ValueError, match=r"^reward function one_value:reward returned 1 values for 2 rows when called "
                                         r"on a batch of the first training row twice"):
        train(config, tmp_path / "run", show_progress=False)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
    sys.modules.pop("one_value")


def test_every_task_class_takes_the_task_protocols_defaults():
    """The loop reads `custom_reward` and `verify_batch` from every task without a fallback: each task class
    (registered, and verl's) subclasses `Task`, whose defaults they are."""
    from credo.integrations.verl_agent import VerlTask
    from credo.tasks import TASKS, Task

    for cls in [TASKS.get(name) for name in TASKS] + [VerlTask]:
        assert Task in cls.__mro__, cls
        assert "custom_reward" in dir(cls) and "verify_batch" in dir(cls)
