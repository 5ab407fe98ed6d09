"""The reset sampler with a scripted policy: seeds, the draw cap, fallbacks, prefixes, masks, normalisation."""

from __future__ import annotations

import random

import pytest
import torch
from scripted import ScriptedPolicy, chain_of, wrong_at

from credo.config import load_config
from credo.methods import get_method
from credo.rollout.groups import ProblemStream
from credo.rollout.samplers.resets import sample_resets
from credo.tasks import ArithTask
from credo.tasks.arith import solution
from credo.testbed import END

TASK = ArithTask()


def config(split="1x4", localiser=None, prompts=2):
    resets = {"split": split} | ({"localiser": localiser} if localiser else {})
    return load_config(None, [f"rollout.prompts_per_step={prompts}", f"rollout.resets={resets}",
                              "rollout.max_new_tokens=48", "method=srpo"]).rollout


def run(policy, cfg, localiser="oracle", seed=0):
    random.seed(seed)
    return sample_resets(policy, TASK, ProblemStream(TASK, seed=3), cfg, localiser)


def test_first_failure_is_the_seed_and_suffix_rows_continue_its_prefix():
    counts = {}

    def draw(prompt):  # per prompt: correct, wrong at step 2 (the seed), then correct
        counts[prompt] = counts.get(prompt, 0) + 1
        chain = chain_of(prompt)
        return wrong_at(chain, 1) if counts[prompt] == 2 else solution(chain)

    def continue_(prompt, after):
        chain = chain_of(prompt)
        full = solution(chain)
        assert full.startswith(after)  # the prefix (thought 1) is the correct first step
        return full[len(after):]

    policy = ScriptedPolicy(draw, continue_)
    rollout = run(policy, config())
    # per prompt: base group of 4 (draws 1, 3, 4, 5) and a suffix group of 4 continuations
    assert rollout.group_id.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]
    assert [v.correct for v in rollout.verdicts] == [True] * 16
    prefix = rollout.records["prefix_len"].tolist()
    assert prefix[:4] == [0] * 4 and prefix[8:12] == [0] * 4
    first_thought = 6  # a thought is 6 tokens: op, operand, =, two digits, </thought>
    assert prefix[4:8] == [first_thought] * 4 and prefix[12:16] == [first_thought] * 4
    assert policy.calls[0] == (2, 5, False)  # one batched round of 5 draws per prompt
    assert rollout.metrics["resets/localiser_exact"] == 1.0 and rollout.metrics["resets/seed_share"] == 1.0
    assert rollout.metrics["resets/correction_rate_exact"] == 1.0
    seg = rollout.records["segment_ids"][4].tolist()
    assert seg[:first_thought] == [0] * first_thought and seg[first_thought] == 1


def test_no_failure_in_twelve_draws_falls_back_to_a_plain_group():
    policy = ScriptedPolicy(lambda prompt: solution(chain_of(prompt)))
    rollout = run(policy, config(prompts=1))
    assert [c[:2] for c in policy.calls] == [(1, 5), (1, 5), (1, 2)]  # 5 + 5 + 2 = 12 draws, batched
    assert rollout.group_id.tolist() == [0] * 8 and rollout.records["prefix_len"].tolist() == [0] * 8
    assert rollout.metrics["resets/fallbacks"] == 1.0 and rollout.metrics["resets/seed_share"] == 0.0
    # every generated token is counted: 12 draws, no continuation
    assert rollout.generated_tokens == sum(len(policy.tokenizer(solution(chain_of(p.prompt)) + END)["input_ids"])
                                           for p in rollout.problems[:1] for _ in range(12))


def test_twelfth_draw_can_still_be_the_seed():
    counts = {}

    def draw(prompt):
        counts[prompt] = counts.get(prompt, 0) + 1
        chain = chain_of(prompt)
        return wrong_at(chain, 0) if counts[prompt] == 12 else solution(chain)

    rollout = run(ScriptedPolicy(draw, lambda p, a: solution(chain_of(p))), config(prompts=1))
    assert rollout.metrics["resets/fallbacks"] == 0.0
    assert rollout.records["prefix_len"].tolist() == [0] * 4 + [0] * 4  # wrong at the first thought: empty prefix


@pytest.mark.parametrize("reply,k", [("\\boxed{2}", 2), ("Step 3", 3), ("nonsense", 1), ("\\boxed{0}", 1), ("\\boxed{99}", 1)])
def test_self_localiser_replies_set_the_reset_point(reply, k):
    policy = ScriptedPolicy(lambda p: wrong_at(chain_of(p), 1), lambda p, a: solution(chain_of(p))[len(a):],
                            localise=lambda text: reply)
    rollout = run(policy, config(split="1x8", prompts=1), localiser="self")
    chain = chain_of(rollout.problems[0].prompt)
    seed_thoughts = [t + "</thought>" for t in wrong_at(chain, 1).split("</thought>")[:-1]]
    prefix = "".join(seed_thoughts[: k - 1])  # the seed's own thoughts 1 .. k-1, the wrong one included if k > 2
    assert rollout.records["prefix_len"].tolist() == [6 * (k - 1)] * 8
    assert all(text.startswith(prefix) for text in rollout.completions.texts)
    assert rollout.group_id.tolist() == [0] * 8  # 1x8: no base group, one suffix group of 8
    assert any(greedy for _, _, greedy in policy.calls)  # 1x8 localises at temperature 0
    assert rollout.metrics["resets/parse_fallback_share"] == float(reply in ("nonsense", "\\boxed{99}"))


def test_random_localiser_is_uniform_over_thoughts():
    positions = []
    for seed in range(60):
        rollout = run(ScriptedPolicy(lambda p: wrong_at(chain_of(p), 0), lambda p, a: "x"), config(prompts=1),
                      localiser="random", seed=seed)
        positions.append(int(rollout.records["prefix_len"][4]))
    assert len(set(positions)) >= 4  # resets land on several thoughts, not one


def test_separate_normalisation_and_suffix_masks_through_the_credit_estimator():
    counts = {}

    def draw(prompt):
        counts[prompt] = counts.get(prompt, 0) + 1
        chain = chain_of(prompt)
        return wrong_at(chain, min(2, len(chain.steps) - 1)) if counts[prompt] in (1, 3) else solution(chain)

    def continue_(prompt, after):  # continuations alternate right and wrong
        counts["c"] = counts.get("c", 0) + 1
        chain = chain_of(prompt)
        return (solution(chain) if counts["c"] % 2 else wrong_at(chain, len(chain.steps) - 1))[len(after):]

    rollout = run(ScriptedPolicy(draw, continue_), config(prompts=1))
    rewards = rollout.rewards.tolist()
    assert rewards[:4] == [1.0, 0.0, 1.0, 1.0]  # base: draws 2, 3 (a failure), 4, 5
    from credo.batch import RolloutBatch

    c = rollout.completions
    batch = RolloutBatch(response_ids=c.response_ids, response_mask=c.response_mask, group_id=rollout.group_id,
                         rewards=rollout.rewards, old_logp=torch.zeros(c.response_ids.shape),
                         prefix_len=rollout.records["prefix_len"], prompt_ids=c.prompt_ids, prompt_mask=c.prompt_mask)
    credited, _ = get_method("srpo").credit(batch)
    adv = credited.advantages
    # base group rewards 1, 0, 1, 1: mean 0.75, population std 0.433 -> +0.577 / -1.732 on every token
    assert adv[0, 0] == pytest.approx(0.25 / 0.4330127, rel=1e-5) and adv[1, 0] == pytest.approx(-0.75 / 0.4330127, rel=1e-5)
    for row in range(4, 8):  # suffix rows: zero credit on the prefix, their own group's advantage after it
        p = int(rollout.records["prefix_len"][row])
        assert p > 0 and not credited.loss_mask[row, :p].any() and credited.loss_mask[row, p]
        assert abs(float(adv[row, p])) == pytest.approx(1.0, rel=1e-5)  # 2 right, 2 wrong: A = +-1


def test_degenerate_responses_never_crash():
    # A policy that never writes the delimiter (thoughts end at the token cap), empty replies, and an
    # all-garbage localiser: every rule of docs/methods.md sec. 4 applies, nothing crashes, and it is counted.
    replies = iter(["", "no delimiter here at all", "12345678901234567890"] * 20)
    policy = ScriptedPolicy(lambda p: next(replies), lambda p, a: "", localise=lambda text: "")
    cfg = load_config(None, ["rollout.prompts_per_step=2", "method=srpo",
                             "rollout.resets={thoughts: {cap_tokens: 4}, localiser: self}"]).rollout
    rollout = run(policy, cfg, localiser="self")
    assert rollout.metrics["resets/parse_fallback_share"] == 1.0  # no number: step 1
    assert rollout.metrics["resets/seed_share"] == 1.0 and not any(v.correct for v in rollout.verdicts)
    assert rollout.records["prefix_len"].tolist() == [0] * 16  # reset to step 1: empty prefixes
    segments = rollout.records["segment_ids"][rollout.completions.response_mask]
    assert int(segments.max()) >= 2  # long replies were cut into several 4-token thoughts
