"""The vine sampler and the Monte-Carlo values behind it, with a scripted policy whose values are known exactly."""

from __future__ import annotations

import random

import pytest
import torch
from scripted import exact_policy

from credo.config import load_config
from credo.methods import get_method
from credo.rollout.groups import ProblemStream
from credo.rollout.samplers.vine import sample_vine
from credo.tasks import ArithTask
from credo.tasks.arith import ArithConfig

TASK = ArithTask(ArithConfig(min_steps=3, max_steps=3))
THOUGHT = 6  # tokens of a testbed step: op, operand, =, two digits, </thought>


def options(prompts=2, group=4, **vine):
    return load_config(None, [f"rollout.prompts_per_step={prompts}", f"rollout.group_size={group}",
                              "rollout.max_new_tokens=48", f"rollout.vine={vine}", "method=vine"]).rollout


def run(policy, cfg, seed=0):
    random.seed(seed)
    return sample_vine(policy, TASK, ProblemStream(TASK, seed=3), cfg)


def test_values_are_exact_when_continuations_are_deterministic():
    policy = exact_policy({1: 1})  # row 1 of each group goes wrong at its second step
    rollout = run(policy, options(k=3))
    values, segments = rollout.records["step_values"], rollout.records["segment_ids"]
    # 3 steps + the answer: 4 thoughts, states after thoughts 1..3; row 1 is worth 1 after step 1, 0 after step 2
    assert segments[1, : 3 * THOUGHT + 1].tolist() == [s for s in range(3) for _ in range(THOUGHT)] + [3]
    row_starts = values[1, [0, THOUGHT, 2 * THOUGHT, 3 * THOUGHT]].tolist()
    assert row_starts == [pytest.approx(1.0), 1.0, 0.0, 0.0]  # prompt: its 3 siblings are all right
    assert values[0, [0, THOUGHT, 2 * THOUGHT]].tolist() == [pytest.approx(2 / 3), 1.0, 1.0]
    credited, _ = get_method("vine", estimator={"whiten": False}).credit(rollout.batch())
    adv = credited.advantages[1, [0, THOUGHT, 2 * THOUGHT, 3 * THOUGHT]].tolist()
    assert adv == [pytest.approx(0.0), -1.0, 0.0, 0.0]  # all the blame on the wrong step


def test_values_are_the_mean_reward_of_k_continuations():
    policy = exact_policy({}, successes=lambda steps: steps)  # after j right steps, j of every 4 finish right
    rollout = run(policy, options(prompts=1, k=4))
    starts = rollout.records["step_values"][0, [THOUGHT, 2 * THOUGHT, 3 * THOUGHT]].tolist()
    assert starts == [0.25, 0.5, 0.75]


def test_every_continuation_token_is_counted_and_the_cost_is_split():
    policy = exact_policy({1: 1})
    rollout = run(policy, options(prompts=1, k=3))
    responses = int(rollout.completions.response_mask.sum())
    assert rollout.metrics["vine/tokens_base"] == responses  # nothing cut: every drawn token is in the batch
    # continuations: per row, from after step j (j = 1..3) the rest of its 22-token response, 3 times each
    expected = sum(3 * (int(n) - j * THOUGHT) for n in rollout.completions.response_mask.sum(dim=1) for j in (1, 2, 3))
    assert rollout.metrics["vine/tokens_values"] == expected
    assert rollout.generated_tokens == responses + expected
    assert rollout.metrics["vine/states_per_response"] == 3.0


def test_continuations_share_their_prefix_and_keep_the_responses_budget():
    policy = exact_policy({})
    run(policy, options(prompts=2, group=4, k=3))
    # the draws (2 prompts x 4), then one call per band of remaining budget: 48 - 6j tokens after j steps
    assert policy.calls[0] == (2, 4, False) and policy.budgets[0] == 48
    assert [c[1] for c in policy.calls[1:]] == [3, 3, 3]  # k continuations per state, one prefix cache each
    assert sorted(policy.budgets[1:]) == [30, 36, 42] and [c[0] for c in policy.calls[1:]] == [8, 8, 8]


def test_failures_only_leaves_a_correct_response_one_step_valued_by_its_siblings():
    policy = exact_policy({1: 1, 2: 0})
    rollout = run(policy, options(prompts=1, k=2, failures_only=True))
    segments = rollout.records["segment_ids"]
    assert set(segments[0][rollout.completions.response_mask[0]].tolist()) == {0}
    assert float(rollout.records["step_values"][0, 0]) == pytest.approx(1 / 3)  # siblings: right, wrong, wrong
    assert int(segments[1].max()) == 3 and rollout.metrics["vine/states_per_response"] == 1.5


def test_max_boundaries_merges_thoughts_into_steps_reproducibly():
    policy = exact_policy({1: 1})
    first = run(policy, options(prompts=1, k=2, max_boundaries=1), seed=5)
    again = run(exact_policy({1: 1}), options(prompts=1, k=2, max_boundaries=1), seed=5)
    assert torch.equal(first.records["segment_ids"], again.records["segment_ids"])
    for row in range(4):
        segments = first.records["segment_ids"][row][first.completions.response_mask[row]]
        assert segments.max() == 1 and segments.diff().sum() == 1  # one estimated state: two steps
    assert first.metrics["vine/states_per_response"] == 1.0


def test_the_largest_drop_is_logged_against_the_step_checker():
    rollout = run(exact_policy({1: 1, 3: 0}), options(prompts=2, k=2))
    assert rollout.metrics["vine/largest_drop_exact"] == 1.0  # exact values: the drop is at the wrong step


def test_a_vine_run_trains_through_the_registry():
    method = get_method("vine")
    assert set(method.sampler.records) == {"segment_ids", "step_values"} and not method.needs
    rollout = run(exact_policy({1: 1}), options(prompts=1, k=2))
    batch = rollout.batch()
    credited, metrics = method.credit(batch)
    assert credited.advantages[1].min() < 0 and metrics["credit/negative_token_share"] > 0


@pytest.mark.parametrize("method", ["vine", "srpo"])
@pytest.mark.parametrize("key", ["rollout.dynamic_sampling=true", "rollout.overlong_buffer=8"])
def test_dapo_options_are_refused_where_the_sampler_would_ignore_them(method, key):
    with pytest.raises(ValueError, match=f"rollout.{key.split('.')[1].split('=')[0]} applies to the group sampler"):
        load_config(None, [f"method={method}", key])
    load_config(None, ["method=ibpo", key])  # IBPO draws its groups with the group sampler: they apply
