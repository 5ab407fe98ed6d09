"""Multi-turn environments: the calculator's and the guessing game's turns and their per-turn checkers, read
behind the scorer sandbox (`credo.tasks.environment`)."""

from __future__ import annotations

import functools
import itertools
import random

import pytest

from credo.tasks.arith import MODULUS, Chain
from credo.tasks.base import Problem
from credo.tasks.calculator import CalculatorEnvironment
from credo.tasks.environment import TurnOutcome, _turn_outcome, rules_in_process
from credo.tasks.guessing import GuessingEnvironment

CHAIN = Chain(start=12, steps=(("+", 5), ("-", 9), ("+", 3)))  # 12 -> 17 -> 08 -> 11
PROBLEM = Problem(prompt=CHAIN.prompt, answer="11", difficulty="steps=3", meta={"chain": CHAIN})


def play(turns: list[str], call_reward: float = 0.0) -> list[dict]:
    calc = rules_in_process("calculator_env")
    state = CalculatorEnvironment(max_turns=8, call_reward=call_reward).reset(PROBLEM)  # no worker starts yet
    out = []
    for turn in turns:
        reply = calc.step(state, turn)
        out.append(reply)
        state = reply["state"]
    return out


def test_a_right_chain_of_calls_is_right_at_every_turn_and_earns_the_reward():
    replies = play(["<call>12+5</call>", "<call>17-9</call>", "<call>8+3</call>", "\\boxed{11}"])
    assert [r["observation"] for r in replies] == ["<obs>17</obs>", "<obs>8</obs>", "<obs>11</obs>", ""]
    assert [r["correct"] for r in replies] == [True, True, True, True]
    assert replies[-1]["done"] and replies[-1]["reward"] == 1.0


def test_each_call_is_judged_on_the_value_the_calculator_returned_not_on_the_chain_s():
    # the first call adds 6 instead of 5 (wrong); the second applies the right step to the value it got (right);
    # the answer repeats the calculator's value (right as a turn) but is not the chain's answer (reward 0)
    replies = play(["<call>12+6</call>", "<call>18-9</call>", "<call>9+3</call>", "\\boxed{12}"])
    assert [r["correct"] for r in replies] == [False, True, True, True]
    assert replies[-1]["reward"] == 0.0
    # a right final value written after a wrong history is a wrong answer turn that happens to earn the reward
    lucky = play(["<call>12+6</call>", "<call>18-9</call>", "<call>9+3</call>", "\\boxed{11}"])
    assert lucky[-1]["correct"] is False and lucky[-1]["reward"] == 1.0


def test_a_call_earns_its_turn_reward_when_the_true_value_shows_in_the_calculator():
    """MT-GRPO's verifiable turn reward: a call whose result is the chain's true value after the steps taken earns
    `call_reward`, whatever the call's own verdict (a right call after an earlier error shows a wrong value and earns
    nothing); other turns, and every turn without `call_reward`, earn no turn reward."""
    turns = ["<call>12+6</call>", "<call>check</call>", "<call>undo</call>", "<call>12+5</call>", "<call>17-9</call>",
             "<call>8+4</call>", "<call>12-1</call>", "\\boxed{11}"]
    replies = play(turns, call_reward=0.5)
    assert [r.get("turn_reward") for r in replies] == [0.0, None, None, 0.5, 0.5, 0.0, 0.0, None]
    assert replies[6]["kind"] == "call" and replies[6]["correct"] is False  # a call past the chain's end
    assert all("turn_reward" not in r for r in play(turns))


def test_checks_decide_nothing_and_an_undo_is_right_when_it_takes_back_a_wrong_call():
    replies = play(["<call>12+6</call>", "<call>check</call>", "<call>undo</call>", "<call>12+5</call>",
                    "<call>check</call>", "<call>undo</call>"])
    assert [r["kind"] for r in replies] == ["call", "check", "undo", "call", "check", "undo"]
    assert [r["observation"] for r in replies] == ["<obs>18</obs>", "<obs>no</obs>", "<obs>12</obs>",
                                                  "<obs>17</obs>", "<obs>ok</obs>", "<obs>12</obs>"]
    assert [r["correct"] for r in replies] == [False, None, True, True, None, False]
    assert replies[-1]["state"]["taken"] == 0


def test_a_turn_outside_the_grammar_is_a_wrong_turn_that_changes_nothing():
    for turn in ["", "<call>12+5", "<call>1234567+1</call>", "<call>__import__('os')</call>", "<call>undo</call>",
                 "<call>12/5</call>", "\u2028<call>12+5</call>x"]:
        reply = play([turn])[0]
        assert (reply["kind"], reply["correct"], reply["done"]) == ("invalid", False, False), turn
        assert reply["state"]["taken"] == 0 and reply["observation"] == "<obs>?</obs>"


def test_calls_past_the_chain_s_end_and_early_answers_are_wrong():
    replies = play(["<call>12+5</call>", "\\boxed{17}"])
    assert replies[-1]["correct"] is False and replies[-1]["reward"] == 0.0
    replies = play(["<call>12+5</call>", "<call>17-9</call>", "<call>8+3</call>", "<call>11+1</call>"])
    assert replies[-1]["correct"] is False
    assert play(["<call>99+5</call>"])[0]["observation"] == f"<obs>{(99 + 5) % MODULUS}</obs>"


@functools.cache
def worst_case(lo: int, hi: int) -> int:
    """The loop reference: the fewest guesses that find any secret in lo..hi in the worst case, by recursion."""
    if lo > hi:
        return 0
    return 1 + min(max(worst_case(lo, g - 1), worst_case(g + 1, hi)) for g in range(lo, hi + 1))


def test_a_guess_is_optimal_exactly_when_it_keeps_the_minimax_number_of_guesses():
    guess = rules_in_process("guess_env")
    for lo, hi in [(1, 1), (1, 2), (1, 7), (1, 10), (3, 20), (0, 31), (5, 37)]:
        for g in range(lo - 1, hi + 2):
            minimax = lo <= g <= hi and 1 + max(worst_case(lo, g - 1), worst_case(g + 1, hi)) == worst_case(lo, hi)
            assert guess.optimal(lo, hi, g) == minimax, (lo, hi, g)


def test_the_guessing_game_narrows_the_range_and_ends_on_the_secret():
    guess = rules_in_process("guess_env")
    problem = Problem("guess 1..10", "7", meta={"low": 1, "high": 10, "secret": 7})
    state = GuessingEnvironment(max_turns=4).reset(problem)
    replies = []
    for turn in ["<call>guess 5</call>", "<call>guess 2</call>", "<call>guess 8</call>", "<call>guess 7</call>"]:
        replies.append(guess.step(state, turn))
        state = replies[-1]["state"]
    assert [r["observation"] for r in replies] == ["<obs>higher</obs>", "<obs>higher</obs>", "<obs>lower</obs>", ""]
    assert [r["correct"] for r in replies] == [True, False, True, True]  # 2 lies outside 6..10 once 5 said higher
    assert replies[-1]["done"] and replies[-1]["reward"] == 1.0
    with pytest.raises(ValueError, match="outside 1..10"):
        GuessingEnvironment(max_turns=4).reset(Problem("guess", "11", meta={"low": 1, "high": 10, "secret": 11}))


def test_a_reply_that_is_not_an_outcome_is_refused():
    good = {"observation": "<obs>1</obs>", "done": False, "state": {"x": 1}, "kind": "call", "correct": True}
    assert _turn_outcome(good) == TurnOutcome("<obs>1</obs>", False, {"x": 1}, "call", True)
    for bad in [None, [], {**good, "state": None}, {**good, "done": 1}, {**good, "correct": "yes"},
                {**good, "reward": True}, {**good, "turn_reward": "1"}, {**good, "observation": 5}]:
        assert _turn_outcome(bad) is None, bad


def test_the_environments_read_turns_behind_the_sandbox_and_a_failed_step_ends_its_episode():
    env = CalculatorEnvironment(max_turns=8)
    states = [env.reset(PROBLEM), env.reset(PROBLEM)]
    outcomes = env.step_batch(states, ["<call>12+5</call>", "<call>12+6</call>"])
    assert [(o.observation, o.correct, o.failed) for o in outcomes] == [("<obs>17</obs>", True, False),
                                                                         ("<obs>18</obs>", False, False)]
    # a state the scorer cannot read (its own bug, or a forged one) raises in the child: that episode ends, scored 0
    broken = env.step_batch([{"start": 1}, outcomes[0].state], ["<call>1+1</call>", "<call>17-9</call>"])
    assert broken[0] == TurnOutcome("", True, {"start": 1}, kind="failed", reward=0.0, failed=True)
    assert broken[1].correct is True and env.failures == 1
    guesses = GuessingEnvironment(max_turns=4)
    state = guesses.reset(Problem("guess 1..3", "2", meta={"low": 1, "high": 3, "secret": 2}))
    (found,) = guesses.step_batch([state], ["<call>guess 2</call>"])
    assert found.done and found.reward == 1.0 and found.correct is True


def test_a_batch_read_in_one_shared_child_equals_the_rules_turn_by_turn():
    # the environments' `step` shares a child per batch (SHARED_CHILD): 300 random episodes' turns, each state the
    # one the rules in this process reached, read behind the sandbox in one request give the rules' outcomes
    calc = rules_in_process("calculator_env")
    assert calc.SHARED_CHILD == ("step",) and rules_in_process("guess_env").SHARED_CHILD == ("step",)
    env = CalculatorEnvironment(max_turns=8, call_reward=0.5)
    rng = random.Random(0)
    forms = ["<call>{a}+{b}</call>", "<call>{a}-{b}</call>", "<call>{a}*{b}</call>", "<call>check</call>",
             "<call>undo</call>", "\\boxed{{{a}}}", "<call>{a}/{b}</call>", " <call>{a}+{b}</call> "]
    states, turns, expected = [], [], []
    for _ in range(300):
        state = env.reset(PROBLEM)
        for _ in range(rng.randrange(4)):
            state = calc.step(state, rng.choice(forms[:5]).format(a=rng.randrange(30), b=rng.randrange(10)))["state"]
        turn = rng.choice(forms).format(a=rng.randrange(30), b=rng.randrange(10))
        states.append(state)
        turns.append(turn)
        expected.append(_turn_outcome(calc.step(state, turn)))
    assert env.step_batch(states, turns) == expected and env.failures == 0
    assert len({(o.kind, o.correct) for o in expected}) >= 5  # calls right and wrong, checks, undos, answers


def test_a_noisy_transcript_errs_only_in_its_calls_by_the_misconceptions_offsets():
    from credo.tasks.arith import OPS, ArithConfig, ArithTask, Noise
    from credo.tasks.calculator import noisy_transcript

    noise = Noise(misconceptions={}, p_slip=0.0, offsets_may_cancel=False, p_misc=0.6,
                  keyed={"count": 100, "key": "digits"})
    task = ArithTask(ArithConfig(min_steps=8, max_steps=8, decision_rate=1.0, noise=noise))
    calc = rules_in_process("calculator_env")
    rng = random.Random(0)
    kinds, wrong, successes, lengths = {"call": 0, "check": 0, "undo": 0, "answer": 0}, 0, 0, set()
    for problem in itertools.islice(task.train_problems(seed=3), 200):
        steps = problem.meta["chain"].steps
        turns, observations = noisy_transcript(problem, noise, rng, p_check=0.3, p_undo=0.8, max_turns=24)
        state, replies = CalculatorEnvironment(max_turns=24).reset(problem), []
        for turn in turns:  # the transcript replays through the environment's rules to its own observations
            before = state
            replies.append(calc.step(state, turn))
            state = replies[-1]["state"]
            kinds[replies[-1]["kind"]] += 1
            if replies[-1]["kind"] == "call" and not replies[-1]["correct"]:
                # a wrong call applies the right step to the running value misread by the step's misconception's
                # offset: the only errors are the keyed decisions, and they move the result by that offset
                wrong += 1
                op, b = steps[before["taken"]]
                a = before["value"]
                offset = noise.misconception_at(op, a, b)[1]
                assert turn == f"<call>{(a + offset) % 100}{op}{b}</call>"
                assert state["value"] == (OPS[op](a, b) + offset) % 100
        assert [r["observation"] for r in replies] == observations and replies[-1]["done"]
        assert len(turns) <= 24 and replies[-1]["correct"] is (state["taken"] == len(steps))
        standing = [right for _, right in state["history"]]
        if replies[-1]["reward"] == 1.0:  # errors never cancel: a success holds no wrong call left standing
            successes += 1
            assert all(standing) and len(standing) == len(steps)
        lengths.add(len(turns))
    assert kinds["check"] > 0 and kinds["undo"] > 0 and kinds["answer"] == 200
    assert 0.2 < wrong / kinds["call"] < 0.6 and len(lengths) > 5 and successes > 0


def test_the_noisy_player_errs_by_its_keyed_offsets_and_its_games_replay_through_the_rules():
    from credo.tasks.guessing import keyed_offsets, noisy_transcript, problems

    guess = rules_in_process("guess_env")
    offsets = keyed_offsets(1, 63)
    rng = random.Random(1)
    wrong = turns_seen = found = 0
    lengths = set()
    for problem in itertools.islice(problems(seed=5, low=1, high=63), 300):
        turns, observations = noisy_transcript(problem, offsets, 0.5, rng, max_turns=6)  # a best search needs 6
        state, replies = GuessingEnvironment(max_turns=6).reset(problem), []
        for turn in turns:
            lo, hi = state["lo"], state["hi"]
            replies.append(guess.step(state, turn))
            state = replies[-1]["state"]
            g = int(turn.split()[1].split("<")[0])
            if not replies[-1]["correct"]:  # only a misconception's guess is ever not a best guess
                wrong += 1
                assert g == min(hi, max(lo, (lo + hi) // 2 + offsets[hi - lo + 1])) and g != (lo + hi) // 2
        assert [r["observation"] for r in replies] == observations
        found += replies[-1]["done"]
        turns_seen += len(turns)
        lengths.add(len(turns))
    assert 0.1 < wrong / turns_seen < 0.5 and len(lengths) >= 4 and 0.5 < found / 300 < 1.0


def test_the_calculator_task_prompts_its_form_and_refuses_a_custom_reward():
    from credo.tasks import build_task
    from credo.tasks.calculator import CalculatorConfig

    task = build_task({"name": "calculator", "min_steps": 2, "max_steps": 2, "max_turns": 5})
    problem = next(iter(task.train_problems(seed=0)))
    assert problem.prompt.startswith("calc ") and task.environment.max_turns == 5
    assert all(p.prompt.startswith("calc ") for p in task.eval_problems())
    with pytest.raises(ValueError, match="scored by its environment"):
        CalculatorConfig(reward="my_rewards:accuracy")


def test_the_guessing_task_limits_turns_to_the_minimax_and_holds_out_every_secret_once():
    from credo.tasks import build_task

    for high in (1 + 1, 10, 63, 64, 100):
        task = build_task({"name": "guessing", "high": high})
        assert task.environment.max_turns == worst_case(1, high)
        assert [int(p.answer) for p in task.eval_problems()] == list(range(1, high + 1))
    assert build_task({"name": "guessing", "max_turns": 9}).environment.max_turns == 9
    stream = build_task({"name": "guessing", "high": 10}).train_problems(3)
    assert {p.prompt for p in itertools.islice(stream, 20)} == {"guess 1..10?"}
    with pytest.raises(ValueError, match="low = 5 must be below high = 5"):
        build_task({"name": "guessing", "low": 5, "high": 5})
