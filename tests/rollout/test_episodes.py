"""Multi-turn episodes sampled turn by turn against an environment (`credo.rollout.episodes`)."""

from __future__ import annotations

import pytest
import torch
from calculator_script import Chains

from credo.rollout.episodes import sample_episodes
from credo.rollout.generate import Completions, left_pad, per_token, right_pad
from credo.tasks.arith import Chain
from credo.tasks.base import Problem
from credo.tasks.calculator import CalculatorEnvironment
from credo.testbed import END, build_tokenizer, chat_prompt

RIGHT = Chain(start=12, steps=(("+", 5), ("-", 9)))   # 12 -> 17 -> 08
CHECKED = Chain(start=30, steps=(("+", 1),))          # 30 -> 31
WRONG = Chain(start=40, steps=(("-", 3),))            # 40 -> 37
SCRIPTS = {
    RIGHT.prompt: ["<call>12+5</call>", "<call>17-9</call>", "\\boxed{08}"],
    CHECKED.prompt: ["<call>30+2</call>", "<call>check</call>", "<call>undo</call>", "<call>30+1</call>",
                     "\\boxed{31}"],
    WRONG.prompt: ["<call>040-4</call>", "\\boxed{36}"],  # one token longer than the others' first calls
}


class TurnScript:
    """A generation backend that answers each episode's next turn from its problem's script, recording the calls'
    stop strings and budgets; `probability` is every drawn token's recorded probability."""

    def __init__(self, probability: float = 0.5):
        self.tokenizer = build_tokenizer()
        self.stops, self.budgets, self.probability = [], [], probability

    def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0, greedy=False, repeat=1, stop=None):
        self.stops.append(stop)
        self.budgets.append(max_new_tokens)
        replies = []
        for ids in prompts:
            text = self.tokenizer.decode(ids)
            problem = text.split("<|user|>")[1].split("<|end|>")[0]
            done = text.split("<|assistant|>", 1)[1].count("</call>")
            reply = SCRIPTS[problem][done]
            replies.append(self.tokenizer(reply + ("" if reply.endswith("</call>") else END),
                                          add_special_tokens=False)["input_ids"][:max_new_tokens])
        pad = self.tokenizer.pad_token_id
        p_ids, p_mask = left_pad(prompts, pad)
        r_ids, r_mask = right_pad(replies, pad)
        texts = self.tokenizer.batch_decode(replies, skip_special_tokens=True)
        probs = torch.where(r_mask, torch.tensor(self.probability), torch.tensor(0.0))
        return Completions(p_ids, p_mask, r_ids, r_mask, texts, torch.zeros(len(prompts), dtype=torch.bool),
                           token_probs=probs, entropies=probs * 2)


def episodes(max_turns=8, budget=200, turn_tokens=24):
    backend = TurnScript()
    problems = [Problem(c.prompt, f"{c.values()[-1]:02d}", meta={"chain": c}) for c in (RIGHT, CHECKED, WRONG)]
    prompts = [backend.tokenizer(chat_prompt(backend.tokenizer, p.prompt), add_special_tokens=False)["input_ids"]
               for p in problems]
    env = CalculatorEnvironment(max_turns=max_turns, turn_tokens=turn_tokens)
    out = sample_episodes(backend, env, problems, prompts, repeat=2, budget_tokens=budget)
    return backend, out


def test_turns_and_observations_alternate_in_one_sequence_with_the_policy_s_tokens_marked():
    backend, out = episodes()
    tokenizer = backend.tokenizer
    assert len(out.tokens) == 6 and out.prompts[0] == out.prompts[1]
    text = tokenizer.decode(out.tokens[0])
    assert text == "<call>12+5</call><obs>17</obs><call>17-9</call><obs>8</obs>\\boxed{08}" + END
    policy_text = tokenizer.decode([t for t, mine in zip(out.tokens[0], out.policy[0]) if mine])
    assert policy_text == "<call>12+5</call><call>17-9</call>\\boxed{08}" + END
    observed = tokenizer.decode([t for t, mine in zip(out.tokens[0], out.policy[0]) if not mine])
    assert observed == "<obs>17</obs><obs>8</obs>"
    # turn spans: each policy token carries its turn's index, every observation token -1
    assert sorted(set(out.turns[0])) == [-1, 0, 1, 2]
    assert all((turn == -1) == (not mine) for turn, mine in zip(out.turns[0], out.policy[0]))
    assert out.probs[0] == [0.5 if mine else 0.0 for mine in out.policy[0]]
    assert out.entropies[0] == [1.0 if mine else 0.0 for mine in out.policy[0]]
    assert backend.stops == [["</call>"]] * len(backend.stops)
    assert out.policy_tokens == sum(sum(p) for p in out.policy)


def test_each_episode_keeps_its_turns_outcomes_and_the_environment_s_reward():
    _, out = episodes()
    assert out.rewards == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0] and out.truncated == [False] * 6
    assert [o.correct for o in out.outcomes[0]] == [True, True, True]
    assert [o.kind for o in out.outcomes[2]] == ["call", "check", "undo", "call", "answer"]
    assert [o.correct for o in out.outcomes[2]] == [False, None, True, True, True]
    assert out.texts[2] == SCRIPTS[CHECKED.prompt]  # turn counts vary within a batch: 3 and 5
    assert [o.correct for o in out.outcomes[4]] == [False, True]  # a wrong call, an answer true to its history


def test_an_episode_the_environment_does_not_end_is_truncated_and_earns_nothing():
    _, out = episodes(max_turns=3)  # the checked episode needs 5 turns
    assert out.rewards == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert out.truncated == [False, False, True, True, False, False]
    assert len(out.outcomes[2]) == 3
    _, cut = episodes(budget=30)   # the budget ends every episode before its answer
    assert cut.truncated == [True] * 6 and cut.rewards == [0.0] * 6
    assert all(len(row) <= 30 for row in cut.tokens)


def test_an_episode_near_the_end_of_its_budget_never_shortens_another_s_turn():
    backend, out = episodes(budget=54)  # after the first call and its observation: 24 tokens left, 23 for WRONG
    assert backend.budgets[:3] == [24, 23, 24]  # the second turns: each episode's own limit, one call per limit
    assert all(len(row) <= 54 for row in out.tokens)


def test_episodes_become_a_batch_whose_per_decision_oracle_credits_each_turn_by_its_own_correctness():
    from credo.batch import RolloutBatch
    from credo.credit.oracle import decision_advantages

    backend, out = episodes()
    pad = backend.tokenizer.pad_token_id
    completions = out.completions(pad)
    fields = out.token_fields(completions.response_ids.shape[1])
    verdicts = out.verdicts()
    assert [v.wrong_steps for v in verdicts[::2]] == [(), (0,), (0,)] and [v.correct for v in verdicts[::2]] == [
        True, True, False]
    assert completions.texts[0] == "<call>12+5</call><call>17-9</call>\\boxed{08}"
    batch = RolloutBatch(response_ids=completions.response_ids, response_mask=completions.response_mask,
                         group_id=torch.tensor([0, 0, 1, 1, 2, 2]), rewards=torch.tensor(out.rewards),
                         old_logp=torch.zeros(completions.response_ids.shape), prompt_ids=completions.prompt_ids,
                         prompt_mask=completions.prompt_mask, **fields)  # validated: masks, thought ids' rule
    assert torch.equal(batch.loss_mask, per_token(out.policy, completions.response_ids.shape[1], False, torch.bool))
    # one group of the right episode and the checked one, as if they were one prompt's: per-turn classes
    adv = decision_advantages(batch.thought_ids, batch.thought_wrong, torch.tensor([0, 0, 0, 0, 1, 1]),
                              batch.response_mask)
    assert adv[0, 0] > 0 and adv[2, 0] < 0  # the wrong first call loses, the right one gains
    check = (batch.thought_ids[2] == 1) & batch.loss_mask[2]  # the checked episode's turn 1, a check: not judged
    assert check.any() and not batch.thought_judged[2][check].any() and batch.thought_judged[2][
        (batch.thought_ids[2] == 2) & batch.loss_mask[2]].all()  # its undo is judged (it took back a wrong call)
    observation = ~batch.loss_mask & batch.response_mask
    assert observation[0].any() and not batch.loss_mask[observation].any()



def test_each_turn_carries_the_anchor_state_it_was_taken_from():
    """GiGPO's anchor states: a turn's `turn_anchor` numbers the calculator as the policy met it (steps taken and the
    value shown), so the two episodes of one problem share an anchor turn for turn, an undo returns to the anchor of
    the call it took back, and no state of one problem shares a number with another problem's."""
    from credo.batch import RolloutBatch

    backend, out = episodes()
    assert out.anchors[0] == ["0:12", "1:17", "2:8"] and out.anchors[0] == out.anchors[1]
    assert out.anchors[2] == ["0:30", "1:32", "1:32", "0:30", "1:31"]  # the undo takes the calculator back
    completions = out.completions(backend.tokenizer.pad_token_id)
    fields = out.token_fields(completions.response_ids.shape[1])
    batch = RolloutBatch(response_ids=completions.response_ids, response_mask=completions.response_mask,
                         group_id=torch.tensor([0, 0, 1, 1, 2, 2]), rewards=torch.tensor(out.rewards),
                         old_logp=torch.zeros(completions.response_ids.shape), **fields)
    anchor, turns = batch.turn_anchor, batch.thought_ids
    numbers = {key: n for n, key in enumerate(dict.fromkeys(key for row in out.anchors for key in row))}
    for row in range(6):  # every token of a turn (its observation too) carries its turn's anchor
        keys = [anchor[row][batch.response_mask[row] & (turns[row] == t)].unique().tolist()
                for t in range(len(out.anchors[row]))]
        assert keys == [[numbers[key]] for key in out.anchors[row]]
    assert (anchor[~batch.response_mask] == -1).all()
    assert (batch.turn_reward == 0).all()  # the calculator gives no turn rewards


def test_a_task_with_an_environment_trains_and_evaluates_on_episodes():
    from credo.config import EvalConfig
    from credo.evaluate import evaluate_policy
    from credo.rollout.groups import ProblemStream, _merge, sample_groups
    from credo.rollout.samplers import RolloutConfig

    task = Chains((RIGHT, CHECKED, WRONG), CalculatorEnvironment(max_turns=8), checks_steps=False)
    backend = TurnScript()
    options = RolloutConfig(prompts_per_step=3, group_size=2, max_new_tokens=200)
    rollout = sample_groups(backend, task, ProblemStream(task, seed=0), options)
    assert rollout.rewards.tolist() == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    assert rollout.generated_tokens == int(rollout.checks["loss_mask"].sum()) < rollout.completions.tokens
    batch = rollout.batch(**rollout.checks)  # as the trainer builds it (train.behaviour_batch)
    observations = batch.response_mask & ~batch.loss_mask
    assert observations.any() and batch.blame_start.tolist() == [-1, -1, 0, 0, 0, 0]
    # dynamic sampling's merge keeps each row's fields, re-padded
    merged = _merge([(rollout, 4), (rollout, 0)], 2, backend.tokenizer.pad_token_id)
    assert set(merged.checks) == {"loss_mask", "thought_ids", "thought_wrong", "thought_judged", "blame_start",
                                  "turn_anchor", "turn_reward"}
    for name, value in merged.checks.items():
        assert torch.equal(value[:2], rollout.checks[name][4:6, : value.shape[-1]] if value.dim() == 2
                           else rollout.checks[name][4:6]), name
    result = evaluate_policy(backend, task, task.problems, EvalConfig(samples=2, ks=[1, 2]), max_new_tokens=200, seed=0)
    assert result["greedy_pass@1"] == pytest.approx(2 / 3) and result["pass@1"] == pytest.approx(2 / 3)
