"""IGPO's information-gain sampler (`credo.rollout.samplers.info_gain`) and the teacher forcing behind it
(`credo.rollout.score`): each turn's gain in the policy's belief in the gold answer, read from the states before its
turns, on the scripted calculator; the transformers backend's scores equal the policy's log-probs; the refusals."""

from __future__ import annotations

import math

import pytest
import torch
from calculator_script import CHAIN, Chains, TreeScript

from credo.config import ConfigError, load_config
from credo.methods import get_method
from credo.policy import policy_logprobs
from credo.rollout.backend import ScoringBackend
from credo.rollout.generate import left_pad, right_pad
from credo.rollout.groups import ProblemStream
from credo.rollout.samplers.info_gain import InfoGainSampler
from credo.rollout.transformers_backend import TransformersBackend
from credo.tasks.arith import BOXED
from credo.tasks.base import Problem
from credo.testbed import chat_prompt

HIGH, LOW = 0.9, 0.1
"""The scripted policy's probability of each gold token: high once an observation shows the answer, else low."""


class ScoringScript(TreeScript):
    """The scripted calculator policy, scoring a continuation by whether its context last showed the gold answer."""

    def __init__(self):
        super().__init__()
        self.scored = []

    def score(self, contexts, continuations):
        self.scored += list(zip(contexts, continuations, strict=True))
        out = []
        for context, continuation in zip(contexts, continuations, strict=True):
            text = self.tokenizer.decode(context)
            shown = text.rsplit("<obs>", 1)[-1].startswith("11</obs>")
            out.append([math.log(HIGH if shown else LOW)] * len(continuation))
        return out


def options(value="prob", group_size=4):
    return load_config(None, ["method=igpo", "task.name=calculator", "rollout.prompts_per_step=1", f"rollout.group_size={group_size}",
                              "rollout.max_new_tokens=200", f"rollout.info_gain={{value: {value}}}"]).rollout


def sample(value="prob"):
    task, backend = Chains(), ScoringScript()
    rollout = InfoGainSampler().sample(backend, task, ProblemStream(task, seed=0), options(value))
    return task, backend, rollout


def per_turn(rollout, row):
    """Row `row`'s information gain per turn (read at each turn's first token)."""
    thoughts, gains = rollout.checks["thought_ids"][row], rollout.records["info_gain"][row]
    return [float(gains[(thoughts == k).nonzero()[0]]) for k in range(int(thoughts.max()) + 1)]


def test_each_turn_s_gain_is_the_rise_in_the_gold_answer_s_probability_across_it_and_its_observation():
    _, backend, rollout = sample()
    texts = rollout.completions.texts
    # the four episodes in lockstep: one checks and errs (the tree's seed), three solve the chain in three calls
    assert sorted(t.count("<call>") for t in texts) == [3, 3, 3, 4]
    for row, text in enumerate(texts):
        gains = per_turn(rollout, row)
        if text.startswith("<call>12+5</call><call>17-9</call>") or "check" not in text:
            # calls 12+5 -> 17, 17-9 -> 08, 8+3 -> 11 (the answer shows after the third), then the answer turn
            assert gains == pytest.approx([0.0, 0.0, HIGH - LOW, 0.0])
        else:  # the erring episode never shows the answer
            assert gains == pytest.approx([0.0] * len(gains))
    assert rollout.metrics["rollout/info_gain_scored"] == sum(len(per_turn(rollout, r)) for r in range(4))
    assert (rollout.records["info_gain"][~rollout.completions.response_mask] == 0).all()


def test_the_log_prob_value_takes_differences_of_mean_log_probabilities():
    _, _, rollout = sample("log_prob")
    gains = [g for row in range(4) for g in per_turn(rollout, row)]
    assert max(gains) == pytest.approx(math.log(HIGH) - math.log(LOW))
    assert min(gains) == 0.0


def test_each_state_is_scored_as_the_prompt_the_turns_before_it_and_the_answer_s_lead_then_the_gold_answer():
    _, backend, rollout = sample()
    tokenizer = backend.tokenizer
    lead = tokenizer(BOXED, add_special_tokens=False)["input_ids"]
    gold = tokenizer("11", add_special_tokens=False)["input_ids"]
    prompt = tokenizer(chat_prompt(tokenizer, CHAIN.prompt), add_special_tokens=False)["input_ids"]
    c = rollout.completions
    expected = []
    for row in range(4):
        response, thoughts = c.response_ids[row].tolist(), rollout.checks["thought_ids"][row]
        starts = [int((thoughts == k).nonzero()[0]) for k in range(int(thoughts.max()) + 1)]
        expected += [(c.prompt_ids[row][c.prompt_mask[row]].tolist() + response[:s] + lead, gold) for s in starts]
    assert backend.scored == expected
    assert all(context[:len(prompt)] == prompt for context, _ in backend.scored)


def test_a_backend_that_cannot_score_and_an_environment_without_a_gold_answer_are_clear_errors():
    task = Chains()
    with pytest.raises(ValueError, match="does not score text"):
        InfoGainSampler().sample(TreeScript(), task, ProblemStream(task, seed=0), options())

    class NoGold(Chains):
        def __init__(self):
            super().__init__()
            self.environment.gold_answer = lambda problem: None

    task = NoGold()
    with pytest.raises(ValueError, match="gold_answer gives none for"):
        InfoGainSampler().sample(ScoringScript(), task, ProblemStream(task, seed=0), options())


def test_igpo_refuses_a_task_without_an_environment_when_the_config_is_read_and_when_it_samples():
    with pytest.raises(ConfigError, match="the info_gain sampler draws multi-turn episodes only.*task arith"):
        load_config(None, ["method=igpo"])
    from credo.tasks.arith import ArithTask

    task = ArithTask()
    with pytest.raises(ValueError, match="the info_gain sampler draws multi-turn episodes only"):
        InfoGainSampler().sample(ScoringScript(), task, ProblemStream(task, seed=0), options())
    assert load_config(None, ["method=igpo", "task.name=calculator"]).method == "igpo"


def test_the_transformers_backend_scores_a_continuation_as_the_policy_s_log_probs(policy):
    model, tokenizer, _ = policy
    backend = TransformersBackend(model, tokenizer, batch_size=2)
    assert isinstance(backend, ScoringBackend)
    gen = torch.Generator().manual_seed(0)
    contexts = [torch.randint(3, 40, (n,), generator=gen).tolist() for n in (5, 9, 3)]
    continuations = [torch.randint(3, 40, (n,), generator=gen).tolist() for n in (4, 1, 6)]
    model.train()
    scored = backend.score(contexts, continuations)
    assert model.training  # scored in eval mode (no dropout), the training mode restored
    p_ids, p_mask = left_pad(contexts, tokenizer.pad_token_id)
    r_ids, r_mask = right_pad(continuations, tokenizer.pad_token_id)
    model.eval()
    with torch.no_grad():
        expected, _ = policy_logprobs(model, p_ids, p_mask, r_ids, r_mask, temperature=1.0, chunk_tokens=64)
    for row, values in enumerate(scored):
        assert len(values) == len(continuations[row])
        torch.testing.assert_close(torch.tensor(values), expected[row, :len(values)].float(), rtol=1e-4, atol=1e-5)


def test_igpo_is_registered_with_the_information_gain_sampler_and_problem_answers_in_the_environment():
    method = get_method("igpo")
    assert isinstance(method.sampler, InfoGainSampler)
    problem = Problem(CHAIN.prompt, "11", meta={"chain": CHAIN})
    answer = Chains().environment.gold_answer(problem)
    assert (answer.lead, answer.answer) == (BOXED, "11")
