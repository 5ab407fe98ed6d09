"""The noisy oracle localiser: a step checker's first wrong thought, right with a dialled probability and wrong
by the SRPO paper's earlier/later profile otherwise (`credo.rollout.samplers.resets.noisy_oracle`)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from scripted import ScriptedPolicy, chain_of, wrong_at

from credo.config import ConfigError, load_config
from credo.rollout.groups import ProblemStream
from credo.rollout.samplers.resets import noisy_oracle, sample_resets
from credo.tasks import ArithTask
from credo.tasks.arith import solution

TASK = ArithTask()


def shares(first_wrong, thoughts, accuracy, earlier, draws=20_000):
    rng = random.Random(7)
    counts = Counter()
    for _ in range(draws):
        k = noisy_oracle(first_wrong, thoughts, accuracy, earlier, rng)
        assert 1 <= k <= thoughts
        counts["exact" if k == first_wrong else "earlier" if k < first_wrong else "later"] += 1
    return {name: counts[name] / draws for name in ("exact", "earlier", "later")}


@pytest.mark.parametrize("accuracy", [0.0, 0.25, 0.5, 0.75])
def test_the_oracle_is_right_as_often_as_dialled_and_errs_by_the_papers_profile(accuracy):
    got = shares(4, 8, accuracy, 38 / 88)
    assert got["exact"] == pytest.approx(accuracy, abs=0.015)
    assert got["earlier"] == pytest.approx((1 - accuracy) * 38 / 88, abs=0.015)
    assert got["later"] == pytest.approx((1 - accuracy) * 50 / 88, abs=0.015)


def test_errors_take_the_side_that_exists_and_a_perfect_oracle_draws_nothing():
    assert shares(1, 6, 0.0, 1.0)["later"] == 1.0  # no thought before the first: every error is later
    assert shares(6, 6, 0.0, 0.0)["earlier"] == 1.0  # none after the last: every error is earlier
    assert shares(1, 1, 0.0, 0.5)["exact"] == 1.0  # one thought: nothing else to name
    rng = random.Random(3)
    state = rng.getstate()
    assert noisy_oracle(3, 5, 1.0, 0.5, rng) == 3 and rng.getstate() == state  # same stream as before the switch


def test_the_reset_sampler_localises_with_the_noisy_oracle_and_logs_its_accuracy():
    def draw(prompt):  # every draw fails at its third thought: each prompt's seed is wrong at step 3
        return wrong_at(chain_of(prompt), 2)

    def continue_(prompt, after):
        return solution(chain_of(prompt))[len(after):]

    def run(accuracy):
        options = load_config(None, ["method=srpo", "rollout.prompts_per_step=64", "task.min_steps=5",
                                     "task.max_steps=6", "rollout.resets.localiser=oracle",
                                     f"rollout.resets.oracle_accuracy={accuracy}"]).rollout
        random.seed(0)
        return sample_resets(ScriptedPolicy(draw, continue_), TASK, ProblemStream(TASK, seed=3), options, "oracle")

    perfect, noisy = run(1.0).metrics, run(0.25).metrics
    assert perfect["resets/localiser_exact"] == 1.0
    assert noisy["resets/localiser_exact"] == pytest.approx(0.25, abs=0.15)
    assert noisy["resets/localiser_earlier"] > 0 and noisy["resets/localiser_later"] > 0


def test_oracle_accuracy_applies_to_the_oracle_localiser_only():
    with pytest.raises(ConfigError, match=r"oracle_accuracy = 0.5 applies to the oracle localiser only.*'self'"):
        load_config(None, ["method=srpo", "rollout.resets.oracle_accuracy=0.5"])
    load_config(None, ["method=srpo", "rollout.resets.localiser=oracle", "rollout.resets.oracle_accuracy=0.5"])
