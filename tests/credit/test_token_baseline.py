"""OTB, the optimal token baseline (`otb`, `credo.credit.token_baseline`, arXiv 2602.07078).

Loop reference; verl's own `compute_optimal_token_baseline_advantage` on the same tensors; identities (equal
energies and lengths give the group mean, so OTB is Dr. GRPO; a lone row's tail gets its return; groups of
equal rewards get nothing); intent (the baseline minimises the energy-weighted squared advantages the paper
takes as the gradient variance, so no group-mean baseline does better); and the trainer's `sum_pi_squared`
against the naive softmax of the model's logits."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from batches import random_batch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny import TINY

from credo.batch import RolloutBatch
from credo.credit.token_baseline import OptimalTokenBaseline
from credo.integrations import trl as trl_adapter
from credo.integrations import verl as verl_adapter
from credo.methods import get_method

SHAPES = st.one_of(st.none(), st.lists(st.integers(1, 8), min_size=1, max_size=4).map(tuple))


def energies(batch):
    """(B, T) the paper's `W_t = sum_{j <= t} (1 - 2 pi_j + sum_v pi(v)^2)` over the trained tokens, per token."""
    w = torch.where(batch.loss_mask, 1 - 2 * batch.old_logp.exp() + batch.sum_pi_squared, 0.0)
    return torch.where(batch.loss_mask, w.cumsum(dim=1), 0.0)


def otb_loop(batch, *, zero_tail=True, eps=1e-8):
    """The module docstring written out group by group, position by position, row by row; with the estimator's
    metrics: the share of trained tokens alone at their position, the mean |baseline - the group's mean reward|
    over the other trained tokens of groups whose rewards differ."""
    mask = batch.loss_mask
    out = torch.zeros(batch.old_logp.shape, dtype=torch.float64)
    lone, shifts = 0, []
    for g in batch.group_id.unique().tolist():
        rows = [b for b in range(batch.size) if int(batch.group_id[b]) == g]
        rewards = [float(batch.rewards[b]) for b in rows]
        lone += sum(sum(bool(mask[b, t]) for b in rows) == 1 for t in range(batch.width))
        if max(rewards) == min(rewards):
            continue  # equal rewards: no credit
        realized = {b: 0.0 for b in rows}
        for t in range(batch.width):
            present = [b for b in rows if mask[b, t]]
            for b in present:
                pi = math.exp(float(batch.old_logp[b, t]))
                realized[b] += max(0.0, 1 - 2 * pi + float(batch.sum_pi_squared[b, t]))
            weighted = sum(float(batch.rewards[b]) * realized[b] for b in present)
            total = sum(realized[b] for b in present)
            for b in present:
                if len(present) < 2:
                    baseline = 0.0 if zero_tail else float(batch.rewards[b])
                else:
                    baseline = weighted / (total + eps)
                    shifts.append(abs(baseline - sum(rewards) / len(rewards)))
                out[b, t] = float(batch.rewards[b]) - baseline
    trained = int(mask.sum())
    return out, {"credit/lone_token_share": lone / trained if trained else 0.0,
                 "credit/baseline_shift": sum(shifts) / len(shifts) if shifts else 0.0}


def with_trained_subset(batch, seed):
    """The batch with a random subset of its response tokens trained (holes in `loss_mask`)."""
    gen = torch.Generator().manual_seed(seed)
    return batch.replace(loss_mask=batch.response_mask & (torch.rand(batch.response_mask.shape, generator=gen) < 0.7))


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("zero_tail", [True, False])
def test_matches_the_loop_reference(seed, zero_tail):
    batch = random_batch(seed, dtype=torch.float64, binary_rewards=seed % 2 == 0)
    if seed % 3 == 0:
        batch = with_trained_subset(batch, seed)
    credited, metrics = get_method("otb", estimator={"zero_tail": zero_tail}).credit(batch)
    advantages, loop_metrics = otb_loop(batch, zero_tail=zero_tail)
    torch.testing.assert_close(credited.advantages, advantages, rtol=1e-10, atol=1e-12)
    for key, value in loop_metrics.items():  # the lone share is a float32 mean
        assert metrics[key] == pytest.approx(value, rel=1e-6, abs=1e-12), key


def verl_advantages(batch, function, **kwargs):
    """verl's OTB advantages of `batch`: the reward on each response's last token, uids as strings."""
    mask = batch.response_mask.double()
    last = (batch.lengths - 1).clamp(min=0)
    token_rewards = torch.zeros_like(mask).scatter_(1, last.unsqueeze(1), batch.rewards.unsqueeze(1)) * mask
    index = np.array([f"prompt-{int(g)}" for g in batch.group_id], dtype=object)
    advantages, _ = function(token_rewards, mask, index, batch.old_logp, batch.sum_pi_squared, **kwargs)
    return advantages


def equal_reward_rows(batch):
    """(B, 1) bool: the rows of groups whose rewards are all equal (credo gives them no credit)."""
    same = [bool((batch.rewards[batch.group_id == g] == batch.rewards[b]).all()) for b, g in enumerate(batch.group_id)]
    return torch.tensor(same).unsqueeze(1)


@pytest.mark.parametrize("seed", range(60))
def test_reproduces_verls_optimal_token_baseline(seed):
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    batch = random_batch(seed, dtype=torch.float64, binary_rewards=seed % 2 == 0)
    equal = equal_reward_rows(batch)
    credited, _ = get_method("otb").credit(batch)
    for function in (core_algos.compute_optimal_token_baseline_advantage,
                     core_algos.compute_multi_turn_optimal_token_baseline_advantage):  # the same on these masks
        want = torch.where(equal, 0.0, verl_advantages(batch, function))
        torch.testing.assert_close(credited.advantages, want, rtol=1e-12, atol=1e-12)
    # without the zero tail, and an epsilon too small to count: a lone row's tail gets A = G - G = 0
    credited, _ = get_method("otb", estimator={"zero_tail": False, "eps": 1e-300}).credit(batch)
    verl = verl_advantages(batch, core_algos.compute_optimal_token_baseline_advantage, handle_zero_tail=False,
                           epsilon=1e-300)
    torch.testing.assert_close(credited.advantages, torch.where(equal, 0.0, verl), rtol=1e-10, atol=1e-12)


def ragged_batch(lengths, group_id, rewards, width=6):
    """Rows of the given lengths, groups and rewards; every token with the energy w = 1 - 2 * 0.3 + 0.25."""
    mask = torch.arange(width) < torch.tensor(lengths).unsqueeze(1)
    return RolloutBatch(
        response_ids=torch.zeros(mask.shape, dtype=torch.long), response_mask=mask, group_id=torch.tensor(group_id),
        rewards=torch.tensor(rewards, dtype=torch.float64),
        old_logp=torch.where(mask, math.log(0.3), 0.0).double(), sum_pi_squared=torch.where(mask, 0.25, 0.0).double(),
    )


def test_where_credo_differs_from_verl_groups_of_equal_rewards_get_nothing():
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    batch = ragged_batch([4, 6, 2, 3], [0, 1, 1, 1], [1.0, 1.0, 1.0, 1.0])
    verl = verl_advantages(batch, core_algos.compute_optimal_token_baseline_advantage)
    assert torch.equal(verl[0, :4], torch.ones(4, dtype=torch.float64))  # a group of one: A = G
    assert torch.equal(verl[1, 3:6], torch.ones(3, dtype=torch.float64))  # the longest row's lone tail: A = G
    credited, _ = get_method("otb").credit(batch)
    assert not credited.advantages.any()


def level_batch(seed, width=9):
    """A random batch whose rows are all `width` tokens long, every token with the energy w = 1 - 2 * 0.3 + 0.25."""
    batch = random_batch(seed, width=width, dtype=torch.float64, binary_rewards=seed % 2 == 0)
    full = torch.ones(batch.response_mask.shape, dtype=torch.bool)
    return batch.replace(response_mask=full, loss_mask=full, segment_ids=None, step_values=None,
                         thought_ids=None, thought_wrong=None, turn_anchor=None, turn_reward=None,
                         old_logp=torch.full(full.shape, math.log(0.3), dtype=torch.float64),
                         sum_pi_squared=torch.full(full.shape, 0.25, dtype=torch.float64))


@pytest.mark.parametrize("seed", range(20))
def test_equal_energies_and_lengths_give_the_group_mean_that_is_dr_grpo(seed):
    batch = level_batch(seed)
    otb, _ = get_method("otb").credit(batch)
    dr_grpo, _ = get_method("dr_grpo").credit(batch)  # r - mean_g r, no std scaling
    torch.testing.assert_close(otb.advantages, dr_grpo.advantages, rtol=1e-7, atol=1e-7)


def test_a_lone_tail_gets_its_return_and_a_group_of_one_nothing():
    batch = ragged_batch([5, 2, 3, 4], [0, 0, 0, 1], [1.0, 0.0, 0.0, 1.0], width=5)
    credited, _ = get_method("otb").credit(batch)
    adv = credited.advantages
    assert torch.equal(adv[0, 3:], torch.ones(2, dtype=torch.float64))  # alone beyond the second-longest: A = G
    assert (adv[0, :3] < 1).all() and (adv[0, :3] > 0).all()  # shared positions: A = G - B, 0 < B < 1
    assert not adv[3].any()  # a group of one has equal rewards
    no_tail, _ = get_method("otb", estimator={"zero_tail": False}).credit(batch)
    assert not no_tail.advantages[0, 3:].any()
    torch.testing.assert_close(no_tail.advantages[:, :3], adv[:, :3])


def variance_proxy(batch, advantages, where):
    """The paper's per-token gradient-variance proxy `sum_t W_t A_t^2` over the tokens `where`."""
    return float((energies(batch) * advantages.square())[where].sum())


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**16), shape=SHAPES, binary=st.booleans(), holes=st.booleans())
def test_the_baseline_minimises_the_energy_weighted_variance_proxy(seed, shape, binary, holes):
    # At each position of each group, B_t = argmin_b sum_i W_{i,t} (G_i - b)^2: the proxy with OTB's baseline is
    # no larger than with the group's mean reward (GRPO's baseline) or with any other one per position.
    batch = random_batch(seed, group_sizes=shape, dtype=torch.float64, binary_rewards=binary)
    if holes:
        batch = with_trained_subset(batch, seed)
    credited, _ = get_method("otb").credit(batch)
    dr_grpo, _ = get_method("dr_grpo").credit(batch)
    _, inverse, counts = torch.unique(batch.group_id, return_inverse=True, return_counts=True)
    present = torch.zeros(len(counts), batch.width, dtype=torch.float64).index_add_(0, inverse, batch.loss_mask.double())
    shared = batch.loss_mask & (present[inverse] >= 2)  # where the baseline is OTB's (not a lone tail)
    otb_proxy = variance_proxy(batch, credited.advantages, shared)
    assert otb_proxy <= variance_proxy(batch, dr_grpo.advantages, shared) + 1e-9
    gen = torch.Generator().manual_seed(seed)
    other = torch.rand(len(counts), batch.width, generator=gen, dtype=torch.float64)[inverse]  # any baseline per position
    other_adv = batch.rewards.unsqueeze(1) - other
    assert otb_proxy <= variance_proxy(batch, other_adv, shared) + 1e-9


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="needs RolloutBatch.sum_pi_squared"):
        OptimalTokenBaseline()(random_batch(0).replace(sum_pi_squared=None))
    with pytest.raises(ValueError, match="eps"):
        get_method("otb", estimator={"eps": 0.0})
    batch = random_batch(0)
    with pytest.raises(ValueError, match=r"sum_pi_squared: must lie in \[0, 1\]"):
        batch.replace(sum_pi_squared=torch.where(batch.response_mask, 1.5, 0.0))


def test_the_method_needs_the_statistic_and_the_engines_say_why_they_cannot_give_it():
    method = get_method("otb")
    assert method.needs == method.behaviour_statistics == {"sum_pi_squared"}
    assert "sum_pi_squared" in trl_adapter.refusal(method)
    assert "sum_pi_squared" in verl_adapter.refusal(method)


def test_the_trainer_scores_sum_pi_squared_as_the_naive_softmax_at_the_sampling_temperature(tmp_path):
    from credo.checkpoint import RunDirectory
    from credo.config import load_config
    from credo.policy import sequence_inputs
    from credo.rollout.groups import ProblemStream
    from credo.train import behaviour_batch, sample_rollout
    from credo.run_setup import build_trainer

    config = load_config(None, TINY + ["method=otb", "rollout.temperature=0.7", "train.logprob_chunk=5"])
    trainer = build_trainer(config, RunDirectory(tmp_path))
    assert not trainer.on_policy  # credit reads old_logp and sum_pi_squared before the update
    rollout = sample_rollout(trainer, ProblemStream(trainer.task, seed=0))
    batch, finite = behaviour_batch(trainer, rollout)
    assert finite and batch.entropy is not None
    c = rollout.completions
    ids, attention, positions = sequence_inputs(c.prompt_ids, c.prompt_mask, c.response_ids, c.response_mask)
    with torch.no_grad():
        logits = trainer.model(input_ids=ids, attention_mask=attention, position_ids=positions).logits.double()
    probs = torch.softmax(logits[:, c.prompt_ids.shape[1] - 1 : -1] / 0.7, dim=-1)  # (B, T, V): predicting responses
    want = torch.where(batch.response_mask, probs.square().sum(dim=-1), 0.0)
    torch.testing.assert_close(batch.sum_pi_squared.double(), want, rtol=1e-5, atol=1e-6)
    pi = probs.gather(-1, c.response_ids.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(batch.old_logp.double(), torch.where(batch.response_mask, pi.log(), 0.0),
                               rtol=1e-5, atol=1e-5)

    grpo = build_trainer(load_config(None, TINY + ["optim.minibatches=2"]), RunDirectory(tmp_path / "grpo"))
    assert behaviour_batch(grpo, sample_rollout(grpo, ProblemStream(grpo.task, seed=0)))[0].sum_pi_squared is None
