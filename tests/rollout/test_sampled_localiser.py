"""The reset sampler's `sampled` localiser: the thought after which Monte-Carlo values fall the most, or below a
threshold; its cost is counted as localisation and its accuracy logged like the other localisers'."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from scripted import ScriptedPolicy, chain_of, wrong_at

from credo.config import load_config
from credo.rollout.groups import ProblemStream
from credo.rollout.samplers.resets import ResetSampler, sample_resets
from credo.rollout.values import first_below, largest_drop
from credo.tasks import ArithTask
from credo.tasks.arith import ArithConfig, solution

TASK = ArithTask(ArithConfig(min_steps=4, max_steps=4))


def options(prompts=1, **resets):
    resets = {"localiser": "sampled", "localiser_samples": 4} | resets
    return load_config(None, [f"rollout.prompts_per_step={prompts}", f"rollout.resets={resets}",
                              "rollout.max_new_tokens=48", "method=srpo"]).rollout


def policy(wrong_step: int, successes=None):
    """The second draw of a prompt is wrong at `wrong_step` (0-based), every other draw right. A continuation of
    a wrong prefix stays wrong; of a right prefix of `j` steps it finishes right, or with `successes(j)` right
    on that many of every 4 calls."""
    draws, calls = Counter(), Counter()
    localised = []

    def draw(prompt):
        draws[prompt] += 1
        chain = chain_of(prompt)
        return wrong_at(chain, wrong_step) if draws[prompt] == 2 else solution(chain)

    def continue_(prompt, after):
        chain = chain_of(prompt)
        right, wrong = solution(chain), wrong_at(chain, wrong_step)
        if not right.startswith(after):
            localised.append(after.count("</thought>"))
            assert wrong.startswith(after)
            return wrong[len(after):]
        steps = after.count("</thought>")
        calls[(prompt, after)] += 1
        ok = successes is None or (calls[(prompt, after)] - 1) % 4 < successes(steps)
        return right[len(after):] if ok else "\\boxed{0}"

    return ScriptedPolicy(draw, continue_)


def run(scripted, cfg):
    random.seed(0)
    return sample_resets(scripted, TASK, ProblemStream(TASK, seed=3), cfg, "sampled")


@pytest.mark.parametrize("wrong_step", [0, 1, 3])
def test_exact_values_find_the_first_wrong_thought(wrong_step):
    rollout = run(policy(wrong_step), options())
    assert rollout.metrics["resets/localiser_exact"] == 1.0
    prefix = rollout.records["prefix_len"].tolist()
    assert prefix[4:] == [6 * wrong_step] * 4  # the suffix group continues the right steps before the error


def test_the_threshold_picks_the_first_state_below_it_and_the_drop_the_largest_fall():
    successes = {1: 3, 2: 2, 3: 1}.get  # values 1, 0.75, 0.5, 0.25 before thoughts 1..4; 0 after the wrong one
    by_drop = run(policy(3, successes), options())
    assert by_drop.records["prefix_len"].tolist()[4:] == [0] * 4  # equal falls: the first one, thought 1
    assert by_drop.metrics["resets/localiser_earlier"] == 1.0
    by_threshold = run(policy(3, successes), options(localiser_threshold=0.3))
    assert by_threshold.records["prefix_len"].tolist()[4:] == [12] * 4  # 0.25 < 0.3 after thought 3: reset to 2
    assert by_threshold.metrics["resets/localiser_earlier"] == 1.0


def test_its_continuations_are_counted_as_localisation():
    scripted = policy(1)
    rollout = run(scripted, options(localiser_samples=3))
    localisation = rollout.metrics["resets/tokens_localisation"]
    # the seed: 5 thoughts (4 steps and the answer), a state before each, 3 continuations per state, each the rest
    # of a 29-token response (the prompt's own state: 3 fresh draws)
    assert localisation == sum(3 * (29 - 6 * j) for j in range(5))
    kinds = ("base", "seed", "localisation", "suffix")
    assert rollout.generated_tokens == sum(rollout.metrics[f"resets/tokens_{k}"] for k in kinds)
    assert [c[1] for c in scripted.calls if c[1] == 3]  # k continuations per state from one prefix cache


def test_the_threshold_belongs_to_the_sampled_localiser():
    with pytest.raises(ValueError, match="localiser_threshold = 0.3 applies to the sampled localiser only"):
        load_config(None, ["method=srpo", "rollout.resets.localiser_threshold=0.3"])
    ResetSampler("self").check(options(), checks_steps=False)  # no step checker needed


def test_value_helpers():
    assert largest_drop([0.5, 0.9, 0.1], 0.0) == 2 and largest_drop([1.0, 1.0], 1.0) == 1
    assert first_below([0.5, 0.9, 0.1], 0.0, 0.2) == 2 and first_below([0.5, 0.9], 1.0, 0.2) is None
