"""Group advantages against loop references, in credo's, verl's, TRL's and SRPO's conventions."""

from __future__ import annotations

import math

import pytest
import torch
from batches import random_batch

from credo.credit import GroupAdvantage, group_advantages


def loop_advantages(rewards, group_id, *, scale="std", ddof=0, eps=1e-6, floor=0.0):
    """Obvious reference: per row, the mean and std of its group's rewards (plain Python floats)."""
    r = [float(x) for x in rewards]
    g = [int(x) for x in group_id]
    out = []
    all_mean = sum(r) / len(r)
    batch_std = math.sqrt(sum((x - all_mean) ** 2 for x in r) / (len(r) - ddof)) if len(r) > ddof else 0.0
    for i in range(len(r)):
        members = [r[j] for j in range(len(r)) if g[j] == g[i]]
        mean = sum(members) / len(members)
        if max(members) == min(members):
            out.append(0.0)
            continue
        if scale == "none":
            out.append(r[i] - mean)
            continue
        if scale == "std":
            std = math.sqrt(sum((x - mean) ** 2 for x in members) / (len(members) - ddof))
        else:
            std = batch_std
        out.append(0.0 if std < floor else (r[i] - mean) / (std + eps))
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize(
    "convention",
    [
        dict(scale="std", ddof=0, eps=1e-6),  # credo default
        dict(scale="std", ddof=1, eps=1e-6),  # verl
        dict(scale="std", ddof=1, eps=1e-4),  # TRL scale_rewards="group"
        dict(scale="batch_std", ddof=1, eps=1e-4),  # TRL scale_rewards="batch"
        dict(scale="std", ddof=0, eps=0.0, floor=1e-8),  # SRPO code
        dict(scale="none"),  # Dr. GRPO
    ],
)
def test_group_advantages_match_loop_reference(seed, convention):
    batch = random_batch(seed, dtype=torch.float64, binary_rewards=seed % 2 == 0)
    options = {"ddof": 0, "eps": 1e-6, "floor": 0.0, **convention}
    got = group_advantages(
        batch.rewards, batch.group_id, scale=options["scale"], std_ddof=options["ddof"],
        eps=options["eps"], std_floor=options["floor"],
    )
    want = loop_advantages(batch.rewards, batch.group_id, **options)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def verl_grpo(scores, index, epsilon=1e-6):
    """verl 0.9.1 `compute_grpo_outcome_advantage`, transcribed: sample std, groups of one get A = r."""
    groups = {}
    for s, i in zip(scores.tolist(), index.tolist()):
        groups.setdefault(i, []).append(s)
    out = []
    for s, i in zip(scores.tolist(), index.tolist()):
        members = torch.tensor(groups[i], dtype=torch.float64)
        if len(members) == 1:
            out.append(s)
        else:
            out.append((s - members.mean().item()) / (members.std().item() + epsilon))
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("seed", range(10))
def test_verl_convention_reproduced_for_groups_of_two_or_more(seed):
    batch = random_batch(seed, group_sizes=(2, 5, 8, 3), dtype=torch.float64, binary_rewards=False)
    got = group_advantages(batch.rewards, batch.group_id, std_ddof=1, eps=1e-6)
    torch.testing.assert_close(got, verl_grpo(batch.rewards, batch.group_id), rtol=1e-12, atol=1e-12)


def test_trl_convention_reproduced():
    # TRL: (r - mean) / (std_unbiased + 1e-4), groups of num_generations consecutive rows.
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.5, 1.0, 0.25, 0.0], dtype=torch.float64)
    grouped = rewards.view(2, 4)
    want = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).flatten()
    got = group_advantages(rewards, torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]), std_ddof=1, eps=1e-4)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_hand_computed_group():
    # rewards 1, 0, 0, 0: mean 0.25, population std sqrt(0.1875) = 0.4330; A = 0.75/0.4330 = 1.7321, -0.5774.
    got = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.tensor([4, 4, 4, 4]), eps=0.0)
    torch.testing.assert_close(got, torch.tensor([math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3)]))


@pytest.mark.parametrize("value", [0.0, 0.1, 0.7, 1.0, 1 / 3])
@pytest.mark.parametrize("scale", ["std", "batch_std", "none"])
def test_equal_rewards_give_exactly_zero(value, scale):
    rewards = torch.tensor([value] * 7 + [0.0, 1.0])
    got = group_advantages(rewards, torch.tensor([0] * 7 + [1, 1]), scale=scale, std_ddof=1, eps=1e-4)
    assert torch.equal(got[:7], torch.zeros(7))  # exact, not merely small
    assert (got[7:] != 0).all()


def test_groups_of_one_row_get_zero_not_nan():
    got = group_advantages(torch.tensor([1.0, 0.0, 1.0]), torch.tensor([0, 1, 2]), std_ddof=1)
    assert torch.equal(got, torch.zeros(3))


def test_estimator_broadcasts_to_loss_mask_and_clamps():
    batch = random_batch(3, group_sizes=(4, 4))
    credited, metrics = GroupAdvantage(min_advantage=-0.1)(batch)
    per_row = group_advantages(batch.rewards, batch.group_id).clamp(min=-0.1)
    want = per_row.unsqueeze(1) * batch.loss_mask
    assert torch.equal(credited.advantages, want)
    assert credited.advantages.min() >= -0.1
    assert metrics["credit/adv_abs_mean"] == pytest.approx(float(per_row.abs().mean()))


@pytest.mark.parametrize(
    "field,value,message",
    [("scale", "group", "scale"), ("std_ddof", 2, "std_ddof"), ("eps", -1.0, "eps"), ("min_advantage", 0.5, "min_advantage")],
)
def test_bad_switches_name_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        GroupAdvantage(**{field: value})
