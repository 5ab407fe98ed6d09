"""A regime's facts (`credo.testbed_facts`, `credo testbed facts`): counted exactly on a scripted policy whose every
response is known, the wrong-step count against a loop reference, and the command on the tiny testbed model."""

from __future__ import annotations

import json
import random
from itertools import islice

import pytest
from scripted import ScriptedPolicy, chain_of, wrong_at
from tiny import TINY_TESTBED

from credo.tasks.arith import OPS, ArithConfig, ArithTask, Chain, format_answer, format_step, solution, trace
from credo.tasks.base import THOUGHT_END
from credo.testbed_facts import regime_facts

CONFIG = ArithConfig(min_steps=5, max_steps=6, eval_steps=(5,), eval_per_bucket=8, invertible_steps=True)  # no error vanishes


def two_errors(chain: Chain, offsets: tuple[int, int]) -> str:
    """Steps 0 and 2 off by the offsets (later steps continuing from the written values)."""
    parts, value = [], chain.start
    for i, (op, b) in enumerate(chain.steps):
        value = (OPS[op](value, b) + {0: offsets[0], 2: offsets[1]}.get(i, 0)) % 100
        parts.append(format_step(op, b, value))
    return "".join(parts) + format_answer(value)


def lucky(chain: Chain) -> str:
    """Step 0's value off by +1 with the wrong value's answer kept right: the last step writes the true answer."""
    parts, value, right = [], chain.start, chain.values()
    for i, (op, b) in enumerate(chain.steps):
        value = (OPS[op](value, b) + (1 if i == 0 else 0)) % 100
        if i == len(chain.steps) - 1:
            value = right[-1]
        parts.append(format_step(op, b, value))
    return "".join(parts) + format_answer(value)


def test_facts_count_each_kind_of_response_exactly():
    """Per problem 8 responses: 3 right, 1 lucky, 2 with one error (step 1), 1 with two, 1 cut mid-thought."""
    def draw(prompt: str) -> str:
        chain = chain_of(prompt)
        script = [solution(chain)] * 3 + [lucky(chain), wrong_at(chain, 1), wrong_at(chain, 1, 50),
                                          two_errors(chain, (1, 2)), solution(chain)[:7]]
        draw.count = getattr(draw, "count", -1) + 1
        return script[draw.count % 8]

    task = ArithTask(CONFIG)
    facts = regime_facts(task, ScriptedPolicy(draw), eval_problems=task.eval_problems(), problems=5, samples=8,
                         seed=0, temperature=1.0, max_new_tokens=48)
    assert facts["responses"] == 40
    assert facts["sampled_accuracy"] == pytest.approx(4 / 8)
    assert facts["lucky_share"] == pytest.approx(1 / 4)
    assert facts["errors_per_failure"] == pytest.approx((1 + 1 + 2 + 1) / 4)
    assert facts["single_error_share"] == pytest.approx(3 / 4)
    assert facts["first_error_kinds"] == {"slip": pytest.approx(3 / 4), "format": pytest.approx(1 / 4)}
    # the greedy draws continue the same script: held-out rows 0..7 get its responses in order
    assert facts["greedy_pass@1"] == pytest.approx(4 / 8)


def reference_wrong_steps(chain: Chain, response: str) -> int:
    """Loop reference: parse each thought by hand; a malformed thought counts one and stops."""
    thoughts, written, wrong = response.split(THOUGHT_END), chain.start, 0
    for i, (op, b) in enumerate(chain.steps):
        text = thoughts[i] if i < len(thoughts) - 1 else ""
        ok = len(text) == 5 and text[0] == op and text[1] == str(b) and text[2] == "=" and text[3:].isdigit()
        if not ok:
            return wrong + 1
        wrong += int(text[3:]) != OPS[op](written, b)
        written = int(text[3:])
    return wrong + (thoughts[len(chain.steps):] != [format_answer(written)])


def test_wrong_steps_match_a_loop_reference():
    task = ArithTask(CONFIG)
    rng = random.Random(0)
    for problem in islice(task.train_problems(seed=3), 300):
        chain = problem.meta["chain"]
        pieces = solution(chain).split(THOUGHT_END)
        for i in rng.sample(range(len(pieces)), rng.randint(0, 3)):
            pieces[i] = rng.choice([pieces[i][:-2] + f"{rng.randrange(100):02d}", pieces[i][:3], "", pieces[i] + "x"])
        response = THOUGHT_END.join(pieces)
        assert task.wrong_steps(chain, response) == reference_wrong_steps(chain, response), response
    chain = chain_of("07+5*3-4?")
    assert task.wrong_steps(chain, solution(chain)) == 0
    assert task.wrong_steps(chain, wrong_at(chain, 0)) == 1
    assert task.wrong_steps(chain, two_errors(chain, (1, 1))) == 2


def test_facts_command_on_the_tiny_model(tmp_path):
    from typer.testing import CliRunner

    from credo.cli import app

    out = tmp_path / "facts.json"
    result = CliRunner().invoke(app, ["testbed", "facts", f"model.testbed={TINY_TESTBED}", "eval.max_problems=2",
                                      "--problems", "3", "--samples", "2", "--json", str(out)])
    assert result.exit_code == 0, result.output
    facts = json.loads(out.read_text())
    assert facts["responses"] == 6 and 0.0 <= facts["sampled_accuracy"] <= 1.0
    assert "lucky_share" in result.output


def test_facts_refuse_a_task_without_chains():
    class Other:
        name = "jsonl"

    with pytest.raises(ValueError, match="task 'jsonl' is not the testbed's arith"):
        regime_facts(Other(), None, eval_problems=[], problems=1, samples=1, seed=0, temperature=1.0,
                     max_new_tokens=8)


def test_a_single_error_that_vanishes_is_a_lucky_success():
    """02+4*5: writing 26 for 02+4 (off by 20) still gives 26*5 = 30 mod 100, the right answer, with one wrong step."""
    class OneChain(ArithTask):
        def train_problems(self, seed, start=0):
            while True:
                yield self.problem(chain_of("02+4*5?"))

    response = f"+4=26{THOUGHT_END}*5=30{THOUGHT_END}" + format_answer(30)
    task = OneChain(ArithConfig(eval_steps=(2,), eval_per_bucket=1))
    assert task.wrong_steps(chain_of("02+4*5?"), response) == 1
    facts = regime_facts(task, ScriptedPolicy(lambda prompt: response), eval_problems=task.eval_problems()[:1],
                         problems=2, samples=2,
                         seed=0, temperature=1.0, max_new_tokens=48)
    assert facts["sampled_accuracy"] == 1.0 and facts["lucky_share"] == 1.0


def reference_decisions(task: ArithTask, chain: Chain, values: list[int]) -> int:
    """Loop reference: the steps of a misconception type counted on the values a response wrote (all well-formed)."""
    count, written = 0, chain.start
    for (op, b), value in zip(chain.steps, values):
        count += ((op == "+" and written % 10 + b >= 10) or (op == "-" and written % 10 < b)
                  or (op == "*" and b == 7))
        written = value
    return count


def test_decisions_are_counted_on_the_written_values_in_either_form():
    """A misconception step depends on the value the response wrote before it, not on the right one; worked and
    compact thoughts count alike; a malformed thought ends the count."""
    for worked in (False, True):
        task = ArithTask(ArithConfig(worked=worked, max_steps=12, noise={"misconceptions": {"carry": -10,
                                                                                            "borrow": 10, "mul7": 10}}))
        rng = random.Random(1)
        for _ in range(200):
            chain = task.random_chain(rng, rng.randint(1, 12))
            values = [(v + rng.choice([0, 0, 0, 10, 90, 37])) % 100 for v in chain.values()]
            assert len(task.decisions(chain, task.write(chain, values, rng))) == reference_decisions(task, chain, values)
        chain = Chain(38, (("+", 5), ("-", 9), ("*", 7)), worked=worked)  # 38+5 carries; 43-9 borrows; *7
        text = trace(chain, [43, 34, 38])
        assert task.decisions(chain, text) == ["carry", "borrow", "mul7"]
        assert task.decisions(chain, text.replace("-9", "-8", 1)) == ["carry"]  # thought 2 names another step: stop


def test_length_facts_are_the_scripted_lengths():
    """Responses of 8 scripted lengths per group: the median, percentiles, spread and decay span follow exactly."""
    task = ArithTask(CONFIG)
    pads = [0, 2, 4, 6, 8, 10, 12, 14]

    def draw(prompt: str) -> str:
        draw.count = getattr(draw, "count", -1) + 1
        return solution(chain_of(prompt)) + "x" * pads[draw.count % 8]  # one token a character

    facts = regime_facts(task, ScriptedPolicy(draw), eval_problems=task.eval_problems()[:2], problems=4, samples=8,
                         seed=0, temperature=1.0, max_new_tokens=64)
    chains = [p.meta["chain"] for p in islice(task.train_problems(0), 4)]
    # in tokens a compact thought `+5=42</thought>` is 6, the answer `\boxed{42}` 4, and the end token 1
    tokens = sorted(6 * len(c.steps) + 4 + 1 + pad for c in chains for pad in pads)
    assert facts["response_tokens"]["median"] == pytest.approx((tokens[15] + tokens[16]) / 2)
    assert facts["response_tokens"]["max"] == tokens[-1]
    assert facts["group_length_spread"] == 14
    assert facts["decay_span_0.99"] == pytest.approx(0.99 ** -(facts["response_tokens"]["median"] - 1))


def test_decision_type_and_group_facts_are_counted_exactly():
    """Groups of 8: the first problem's all wrong, every other one's half right: `no_success_group_share` is 1 / 5;
    instances per type per batch is decisions per response x batch / types (the noise model's three)."""
    config = ArithConfig(min_steps=5, max_steps=6, eval_steps=(5,), eval_per_bucket=8, invertible_steps=True,
                         noise={"misconceptions": {"carry": -10, "borrow": 10, "mul7": 10}})
    task = ArithTask(config)

    def draw(prompt: str) -> str:
        draw.count = getattr(draw, "count", -1) + 1
        chain = chain_of(prompt)
        return wrong_at(chain, 0, 50) if draw.count < 8 or draw.count % 2 else solution(chain)

    facts = regime_facts(task, ScriptedPolicy(draw), eval_problems=task.eval_problems(), problems=5, samples=8,
                         seed=0, temperature=1.0, max_new_tokens=48, batch_responses=64)
    assert facts["no_success_group_share"] == pytest.approx(1 / 5)
    assert facts["decision_types"] == 3
    assert facts["instances_per_type_per_batch"] == pytest.approx(facts["decisions_per_response"] * 64 / 3)
    assert facts["decisions_per_response"] > 0


def test_the_command_prints_the_most_common_error_kinds_and_counts_the_rest(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import credo.testbed_facts
    from credo.cli import FACT_ENTRIES, app

    kinds = {f"+{i}@{i}": 0.5 / (i + 1) for i in range(12)}  # a keyed regime's first errors: many kinds
    monkeypatch.setattr(credo.testbed_facts, "regime_facts", lambda *a, **k: {"responses": 4, "first_error_kinds": kinds})
    out = tmp_path / "facts.json"
    result = CliRunner().invoke(app, ["testbed", "facts", f"model.testbed={TINY_TESTBED}", "eval.max_problems=2",
                                      "--json", str(out)], terminal_width=400)
    assert result.exit_code == 0, result.output
    assert f"and {12 - FACT_ENTRIES} more" in result.output and "+0@0 0.500" in result.output
    assert "+11@11" not in result.output and len(json.loads(out.read_text())["first_error_kinds"]) == 12


class CalculatorAgent:
    """A generation backend that plays calculator episodes by script: episode `i` of each group of 4 plays
    `SCRIPTS[i]` ("right": every call right, then the answer; "undone": its first call off by one, a check, an undo,
    then right; "wrong": its first call off by two, never fixed; "checked": right with a check after every call,
    its first call written after a space). Later turns read the script from the first call (the rows of a call are
    the running episodes, which change as episodes end)."""

    SCRIPTS = ("right", "undone", "wrong", "checked")

    def __init__(self) -> None:
        from credo.tasks.calculator import CALL_WORDS
        from credo.testbed import build_tokenizer

        self.tokenizer = build_tokenizer(CALL_WORDS)

    def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0, greedy=False, repeat=1, stop=None):
        import re

        import torch

        from credo.rollout.generate import Completions, left_pad, right_pad
        from credo.testbed import END

        replies = []
        for row, ids in enumerate(prompts):
            text = self.tokenizer.decode(ids)
            chain = chain_of(text.split("<|user|>calc ")[1].split("<|end|>")[0])
            episode = text.split("<|assistant|>", 1)[1]
            turns = re.findall(r"<call>(.*?)</call>", episode)
            values = [int(v) for v in re.findall(r"<obs>(\d+)</obs>", episode)]
            value = values[-1] if values else chain.start
            if greedy:
                script = "right"
            elif not turns:
                script = self.SCRIPTS[row % 4]
            else:
                off = int(re.match(r"\d+", turns[0]).group()) - chain.start
                script = {0: "checked" if episode.startswith(" ") else "right", 1: "undone", 2: "wrong"}[off]
            taken = sum(1 for t in turns if t not in ("check", "undo")) - turns.count("undo")
            if script == "undone" and turns[-1:] == ["check"] and episode.endswith("<obs>no</obs>"):
                reply = "<call>undo</call>"
            elif script in ("undone", "checked") and turns and turns[-1] not in ("check", "undo"):
                reply = "<call>check</call>" if script == "checked" or len(turns) == 1 else None
            else:
                reply = None
            if reply is None:
                if taken == len(chain.steps):
                    reply = f"\\boxed{{{value:02d}}}" + END
                else:
                    op, b = chain.steps[taken]
                    off = {"undone": 1, "wrong": 2}.get(script, 0) if not turns else 0
                    space = " " if script == "checked" and not turns else ""
                    reply = f"{space}<call>{value + off}{op}{b}</call>"
            replies.append(self.tokenizer(reply, add_special_tokens=False)["input_ids"][:max_new_tokens])
        pad = self.tokenizer.pad_token_id
        p_ids, p_mask = left_pad(list(prompts), pad)
        r_ids, r_mask = right_pad(replies, pad)
        texts = self.tokenizer.batch_decode(replies, skip_special_tokens=True)
        return Completions(p_ids, p_mask, r_ids, r_mask, texts, torch.zeros(len(prompts), dtype=torch.bool))


def test_episode_facts_count_each_kind_of_episode_exactly():
    """On the calculator, per problem 4 episodes: right, a wrong call undone then right (a recovered success), a wrong
    call never fixed (a failure with one wrong turn), right with a check after every call."""
    from credo.tasks.calculator import CalculatorConfig, CalculatorTask

    task = CalculatorTask(CalculatorConfig(min_steps=3, max_steps=3, eval_steps=(3,), eval_per_bucket=4))
    facts = regime_facts(task, CalculatorAgent(), eval_problems=task.eval_problems(), problems=5, samples=4,
                         seed=0, temperature=1.0, max_new_tokens=96, batch_responses=8)
    assert facts["responses"] == 20 and facts["greedy_pass@1"] == 1.0
    assert facts["sampled_accuracy"] == pytest.approx(3 / 4) and facts["no_success_group_share"] == 0.0
    # turns: right 3 calls + answer = 4; undone 1 + check + undo + 3 + answer = 7; wrong 3 + answer = 4; checked 7
    assert facts["turns_per_episode"]["median"] == pytest.approx(5.5) and facts["turns_per_episode"]["max"] == 7
    assert facts["group_turn_spread"] == 3
    assert facts["turn_kinds"] == {"call": pytest.approx(13 / 22), "answer": pytest.approx(4 / 22),
                                   "check": pytest.approx(4 / 22), "undo": pytest.approx(1 / 22)}
    assert facts["wrong_turns_per_failure"] == 1.0 and facts["recovered_share"] == pytest.approx(1 / 3)
    # judged turns: the calls, the undo and the answers (checks decide nothing)
    assert facts["decisions_per_episode"] == pytest.approx((4 + 6 + 4 + 4) / 4)
    assert facts["truncated_share"] == 0.0
