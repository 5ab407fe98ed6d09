"""RRPO/SRPO reset credit (docs/methods.md sec. 4): suffix masks, separate normalisation, the REINFORCE loss.

References are plain Python loops over rows and tokens; hand examples carry their derivation.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from credo.batch import RolloutBatch
from credo.credit import suffix_mask
from credo.methods import get_method

REWARD_CHOICES = ([0.0, 1.0], [0.0, 0.25, 0.5, 0.75, 1.0], [0.1], [1.0], [0.0], [0.3, 0.7])


# --------------------------------------------------------------------------------------------------
# Helper: a random reset batch (base groups with prefix_len 0, suffix groups with prefix_len >= 1)
# --------------------------------------------------------------------------------------------------
def reset_batch(seed: int, *, random_loss_mask: bool = False, nonempty_loss: bool = False) -> tuple[RolloutBatch, dict]:
    """Mixed group sizes 1..5, shuffled non-contiguous group ids, ragged rows, some constant-reward groups.

    With `nonempty_loss`, every row keeps at least one token after its prefix (in the loss mask).
    """
    rng = random.Random(seed)
    groups = []  # (group id, size, is_suffix, reward choices)
    for gid in rng.sample(range(500), rng.randint(1, 4)):
        groups.append((gid, rng.randint(1, 5), rng.random() < 0.6, rng.choice(REWARD_CHOICES)))
    T = rng.randint(2, 10)
    rows = []
    for gid, size, is_suffix, choices in groups:
        for _ in range(size):
            n = rng.randint(1, T)
            if is_suffix:
                p = rng.randint(1, n - 1) if nonempty_loss and n > 1 else rng.randint(1, n)
                if nonempty_loss and n == 1:
                    p = 0  # cannot be a suffix row with a non-empty suffix; keep it as a base-like row
            else:
                p = 0
            rows.append({"group": gid, "n": n, "prefix": p, "reward": rng.choice(choices)})
    rng.shuffle(rows)
    B = len(rows)
    resp = [[t < r["n"] for t in range(T)] for r in rows]
    if random_loss_mask:
        loss = []
        for r in rows:
            m = [t < r["n"] and rng.random() < 0.7 for t in range(T)]
            if nonempty_loss:
                m[r["n"] - 1] = True  # the last token is always after the prefix
            loss.append(m)
    else:
        loss = [list(x) for x in resp]
    logp = [[-4 * rng.random() if t < r["n"] else 0.0 for t in range(T)] for r in rows]
    batch = RolloutBatch(
        response_ids=torch.tensor([[rng.randrange(30) for _ in range(T)] for _ in range(B)]),
        response_mask=torch.tensor(resp),
        group_id=torch.tensor([r["group"] for r in rows]),
        rewards=torch.tensor([r["reward"] for r in rows]),
        old_logp=torch.tensor(logp),
        loss_mask=torch.tensor(loss) if random_loss_mask else None,
        prefix_len=torch.tensor([r["prefix"] for r in rows]),
    )
    return batch, {"rows": rows, "T": T, "loss": loss, "logp": logp}


def loop_srpo_advantage(rewards: list[float], groups: list[int]) -> list[float]:
    """SRPO code's normalisation: group mean, population std, no eps, 0 where std < 1e-8."""
    out = []
    for i in range(len(rewards)):
        members = [rewards[j] for j in range(len(rewards)) if groups[j] == groups[i]]
        mean = sum(members) / len(members)
        std = math.sqrt(sum((x - mean) ** 2 for x in members) / len(members))
        out.append(0.0 if std < 1e-8 else (rewards[i] - mean) / std)
    return out


def loop_loss_mask(loss: list[list[bool]], prefix: list[int], train_prefix: bool) -> list[list[bool]]:
    return [[bool(loss[b][t]) and (train_prefix or t >= prefix[b]) for t in range(len(loss[b]))] for b in range(len(loss))]


# --------------------------------------------------------------------------------------------------
# suffix_mask
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(40))
def test_suffix_mask_matches_loop(seed):
    rng = random.Random(seed)
    B, T = rng.randint(1, 8), rng.randint(1, 12)
    lengths = [rng.randint(0, T) for _ in range(B)]
    prefix = [rng.randint(0, T + 2) for _ in range(B)]  # also beyond the row's length
    resp = torch.tensor([[t < n for t in range(T)] for n in lengths])
    got = suffix_mask(resp, torch.tensor(prefix))
    expected = [[t < lengths[b] and t >= prefix[b] for t in range(T)] for b in range(B)]
    assert got.dtype == torch.bool
    assert got.tolist() == expected


def test_suffix_mask_hand_example():
    # row 0: length 5, prefix 2 -> positions 2, 3, 4; row 1: length 3, prefix 0 -> 0, 1, 2;
    # row 2: length 4, prefix 4 -> nothing (the whole response is prefix)
    resp = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0]], dtype=torch.bool)
    got = suffix_mask(resp, torch.tensor([2, 0, 4]))
    assert got.int().tolist() == [[0, 0, 1, 1, 1], [1, 1, 1, 0, 0], [0, 0, 0, 0, 0]]


# --------------------------------------------------------------------------------------------------
# ResetAdvantage via the registered methods
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("method", ["srpo", "rrpo"])
def test_reset_credit_matches_loop_reference(seed, method):
    batch, info = reset_batch(seed, random_loss_mask=seed % 2 == 1)
    rows = info["rows"]
    credited, metrics = get_method(method).credit(batch)
    adv = loop_srpo_advantage([r["reward"] for r in rows], [r["group"] for r in rows])
    prefix = [r["prefix"] for r in rows]
    mask = loop_loss_mask(info["loss"], prefix, train_prefix=False)
    expected = [[adv[b] if mask[b][t] else 0.0 for t in range(info["T"])] for b in range(len(rows))]
    assert credited.loss_mask.tolist() == mask
    torch.testing.assert_close(credited.advantages, torch.tensor(expected), rtol=1e-5, atol=1e-6)
    # prefix tokens of suffix rows: outside the loss mask and exactly zero advantage
    for b, r in enumerate(rows):
        for t in range(r["prefix"]):
            assert not credited.loss_mask[b, t] and credited.advantages[b, t].item() == 0.0
        if r["prefix"] == 0:  # base rows train on every token of their (input) loss mask
            assert credited.loss_mask[b].tolist() == [bool(x) for x in info["loss"][b]]
    share = sum(p > 0 for p in prefix) / len(prefix)
    assert metrics["credit/suffix_row_share"] == pytest.approx(share, abs=1e-7)
    # the other fields are untouched
    assert torch.equal(credited.rewards, batch.rewards) and torch.equal(credited.prefix_len, batch.prefix_len)


@pytest.mark.parametrize("seed", range(25))
def test_train_prefix_variant_keeps_prefix_tokens(seed):
    batch, info = reset_batch(seed, random_loss_mask=seed % 2 == 0)
    rows = info["rows"]
    credited, _ = get_method("srpo", estimator={"train_prefix": True}).credit(batch)
    adv = loop_srpo_advantage([r["reward"] for r in rows], [r["group"] for r in rows])
    mask = loop_loss_mask(info["loss"], [r["prefix"] for r in rows], train_prefix=True)
    assert credited.loss_mask.tolist() == [[bool(x) for x in row] for row in info["loss"]] == mask
    expected = [[adv[b] if mask[b][t] else 0.0 for t in range(info["T"])] for b in range(len(rows))]
    torch.testing.assert_close(credited.advantages, torch.tensor(expected), rtol=1e-5, atol=1e-6)


def test_base_and_suffix_groups_are_normalised_separately_by_hand():
    # group 0 (base, 4 rows): rewards 1, 0, 0, 0: mean 1/4, population var = (9/16 + 3 * 1/16) / 4 = 3/16,
    #   std = sqrt(3)/4: A = (3/4)/(sqrt(3)/4) = sqrt(3) and (-1/4)/(sqrt(3)/4) = -1/sqrt(3).
    # group 1 (suffix of the same prompt, 2 rows): rewards 1, 0: mean 1/2, std 1/2: A = +1, -1.
    # Normalised jointly (6 rows: mean 1/3) the values would differ, e.g. the first row would get
    # (2/3)/sqrt(2/9) = sqrt(2).
    resp = torch.ones(6, 3, dtype=torch.bool)
    batch = RolloutBatch(
        response_ids=torch.zeros(6, 3, dtype=torch.long),
        response_mask=resp,
        group_id=torch.tensor([7, 7, 7, 7, 2, 2]),
        rewards=torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 0.0]),
        old_logp=torch.full((6, 3), -1.0),
        prefix_len=torch.tensor([0, 0, 0, 0, 1, 2]),
    )
    credited, metrics = get_method("srpo").credit(batch)
    s3 = math.sqrt(3.0)
    expected = torch.tensor([
        [s3, s3, s3],
        [-1 / s3, -1 / s3, -1 / s3],
        [-1 / s3, -1 / s3, -1 / s3],
        [-1 / s3, -1 / s3, -1 / s3],
        [0.0, 1.0, 1.0],  # prefix 1: position 0 is the kept prefix
        [0.0, 0.0, -1.0],  # prefix 2
    ])
    torch.testing.assert_close(credited.advantages, expected, rtol=1e-6, atol=1e-7)
    assert credited.loss_mask.int().tolist() == [[1, 1, 1]] * 4 + [[0, 1, 1], [0, 0, 1]]
    assert metrics["credit/suffix_row_share"] == pytest.approx(2 / 6)


def test_missing_prefix_len_raises():
    batch = RolloutBatch(
        response_ids=torch.zeros(2, 2, dtype=torch.long),
        response_mask=torch.ones(2, 2, dtype=torch.bool),
        group_id=torch.tensor([0, 0]),
        rewards=torch.tensor([1.0, 0.0]),
        old_logp=torch.zeros(2, 2),
    )
    for method in ("srpo", "rrpo"):
        with pytest.raises(ValueError, match="prefix_len"):
            get_method(method).credit(batch)
    with pytest.raises(ValueError, match="prefix_len"):
        get_method("srpo", estimator={"train_prefix": True}).credit(batch)


@pytest.mark.parametrize(
    "value", [0.1, 0.3, 1 / 3, 0.7, 1.0, 0.0, 0.123456789]
)
@pytest.mark.parametrize("size", [2, 3, 5, 7])
def test_equal_rewards_in_a_suffix_group_give_exact_zeros(value, size):
    # the float32 mean of `size` copies of e.g. 0.1 is not exactly 0.1, so a naive (r - mean) / std
    # would give round-off noise over a tiny std; the group must get exactly 0.
    B = size + 2
    rewards = [value] * size + [1.0, 0.0]  # plus a base group with variance: A = +1, -1
    batch = RolloutBatch(
        response_ids=torch.zeros(B, 4, dtype=torch.long),
        response_mask=torch.ones(B, 4, dtype=torch.bool),
        group_id=torch.tensor([1] * size + [0, 0]),
        rewards=torch.tensor(rewards),
        old_logp=torch.full((B, 4), -0.5),
        prefix_len=torch.tensor([2] * size + [0, 0]),
    )
    credited, metrics = get_method("srpo").credit(batch)
    assert torch.equal(credited.advantages[:size], torch.zeros(size, 4))
    assert credited.advantages[size:].tolist() == [[1.0] * 4, [-1.0] * 4]  # (1 - 1/2) / (1/2) exactly
    assert metrics["credit/zero_adv_groups"] == pytest.approx(0.5)


def test_std_floor_and_no_eps_of_the_srpo_convention():
    # float64 rewards. Group 0: [0.5, 0.5 + 2e-9]: population std 1e-9 < 1e-8 -> A = 0 (GRPO's default,
    #   eps 1e-6 and no floor, would give 1e-9 / (1e-9 + 1e-6) ~ 1e-3).
    # Group 1: [0.5, 0.5 + 2e-7]: std 1e-7 >= 1e-8 and no eps -> A = +-(1e-7 / 1e-7) = +-1
    #   (with eps 1e-6 it would be 1e-7 / 1.1e-6 ~ 0.09).
    batch = RolloutBatch(
        response_ids=torch.zeros(4, 2, dtype=torch.long),
        response_mask=torch.ones(4, 2, dtype=torch.bool),
        group_id=torch.tensor([0, 0, 1, 1]),
        rewards=torch.tensor([0.5, 0.5 + 2e-9, 0.5, 0.5 + 2e-7], dtype=torch.float64),
        old_logp=torch.zeros(4, 2, dtype=torch.float64),
        prefix_len=torch.tensor([1, 1, 0, 0]),
    )
    credited, _ = get_method("srpo").credit(batch)
    torch.testing.assert_close(
        credited.advantages,
        torch.tensor([[0.0, 0.0], [0.0, 0.0], [-1.0, -1.0], [1.0, 1.0]], dtype=torch.float64),
        rtol=0, atol=1e-6,
    )
    assert torch.equal(credited.advantages[:2], torch.zeros(2, 2, dtype=torch.float64))
    grpo, _ = get_method("grpo").credit(batch)
    assert 5e-4 < grpo.advantages[1, 0].item() < 2e-3  # the same group is not zeroed by GRPO's defaults


# --------------------------------------------------------------------------------------------------
# The SRPO loss: REINFORCE, -(1/B) sum_i A_i mean_{t in loss_mask_i} logp_{i,t}
# --------------------------------------------------------------------------------------------------
def hand_batch() -> tuple[RolloutBatch, torch.Tensor]:
    """7 rows, T = 4; logp of prefix tokens is -100 so that counting them would change the loss visibly."""
    P = -100.0
    lengths = [3, 2, 4, 4, 3, 2, 4]
    logp = torch.tensor([
        [-1.0, -2.0, -3.0, 0.0],  # row 0, base:            mean over 3 tokens = -2
        [-1.0, -1.0, 0.0, 0.0],   # row 1, base:            mean over 2 tokens = -1
        [P, P, -2.0, -4.0],       # row 2, suffix, prefix 2: mean over 2 tokens = -3
        [P, -1.0, -2.0, -3.0],    # row 3, suffix, prefix 1: mean over 3 tokens = -2
        [P, P, -6.0, 0.0],        # row 4, suffix, prefix 2: 1 token = -6
        [P, -5.0, 0.0, 0.0],      # row 5, suffix, prefix 1: 1 token (zero-advantage group)
        [P, P, P, -7.0],          # row 6, suffix, prefix 3: 1 token (zero-advantage group)
    ], dtype=torch.float64)  # float64 throughout, so the hand values can be checked to 1e-10
    resp = torch.tensor([[t < n for t in range(4)] for n in lengths])
    batch = RolloutBatch(
        response_ids=torch.arange(28).reshape(7, 4),
        response_mask=resp,
        group_id=torch.tensor([0, 0, 1, 1, 1, 2, 2]),
        rewards=torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64),
        old_logp=torch.where(resp, -1.0, 0.0).double(),
        prefix_len=torch.tensor([0, 0, 2, 1, 2, 1, 3]),
    )
    return batch, logp


def test_srpo_loss_value_and_gradient_by_hand():
    # Advantages (population std, no eps):
    #   group 0 (base) rewards 1, 0: mean 1/2, std 1/2 -> A0 = +1, A1 = -1.
    #   group 1 (suffix) rewards 1, 0, 0: mean 1/3, var = (4/9 + 1/9 + 1/9)/3 = 2/9, std = sqrt(2)/3
    #     -> A2 = (2/3)/(sqrt(2)/3) = sqrt(2), A3 = A4 = (-1/3)/(sqrt(2)/3) = -1/sqrt(2).
    #   group 2 (suffix) rewards 0, 0 -> A5 = A6 = 0 (the rows still count in B).
    # Row means of logp over the suffix tokens: -2, -1, -3, -2, -6, -5, -7.
    # sum_i A_i * mean_i = -2 + 1 - 3 sqrt(2) + 2/sqrt(2) + 6/sqrt(2) + 0 + 0
    #                    = -1 - 3 sqrt(2) + 4 sqrt(2) = sqrt(2) - 1
    # loss = -(1/7) (sqrt(2) - 1) = (1 - sqrt(2)) / 7 ~ -0.0591734
    batch, logp = hand_batch()
    method = get_method("srpo")
    credited, _ = method.credit(batch)
    logp = logp.clone().requires_grad_()
    out = method.policy_loss(logp, credited)
    r2 = math.sqrt(2.0)
    assert out.loss.item() == pytest.approx((1 - r2) / 7, rel=1e-10)
    out.loss.backward()
    # d loss / d logp_{i,t} = -A_i / (B |loss_mask_i|) on the row's loss tokens, B = 7:
    #   row 0: -1/21 on 0..2; row 1: +1/14 on 0..1; row 2: -sqrt(2)/14 on 2..3;
    #   row 3: (1/sqrt(2))/21 on 1..3; row 4: (1/sqrt(2))/7 on 2; rows 5, 6: 0.
    g = [[0.0] * 4 for _ in range(7)]
    g[0][0] = g[0][1] = g[0][2] = -1 / 21
    g[1][0] = g[1][1] = 1 / 14
    g[2][2] = g[2][3] = -r2 / 14
    g[3][1] = g[3][2] = g[3][3] = 1 / (r2 * 21)
    g[4][2] = 1 / (r2 * 7)
    torch.testing.assert_close(logp.grad, torch.tensor(g, dtype=torch.float64), rtol=1e-10, atol=1e-12)


def test_srpo_nomask_loss_counts_the_prefix():
    # train_prefix=True: rows 2..6 now average over all their tokens, prefix included:
    #   row 2: (-100 - 100 - 2 - 4)/4 = -51.5; row 3: (-100 - 1 - 2 - 3)/4 = -26.5; row 4: (-100 - 100 - 6)/3;
    #   rows 5, 6 have A = 0. Rows 0, 1 as before: -2 and -1 with A = +1, -1.
    # sum A_i mean_i = -2 + 1 + sqrt(2) * (-51.5) - (1/sqrt(2)) * (-26.5 - 206/3)
    batch, logp = hand_batch()
    method = get_method("srpo", estimator={"train_prefix": True})
    credited, _ = method.credit(batch)
    r2 = math.sqrt(2.0)
    total = -2 + 1 + r2 * (-51.5) - (1 / r2) * (-26.5 - 206 / 3)
    assert method.policy_loss(logp, credited).loss.item() == pytest.approx(-total / 7, rel=1e-10)


@pytest.mark.parametrize("seed", range(30))
def test_srpo_loss_and_gradient_match_loop(seed):
    batch, info = reset_batch(seed, random_loss_mask=seed % 3 == 0, nonempty_loss=True)
    rows, T = info["rows"], info["T"]
    B = len(rows)
    method = get_method("srpo")
    credited, _ = method.credit(batch)
    adv = loop_srpo_advantage([r["reward"] for r in rows], [r["group"] for r in rows])
    mask = loop_loss_mask(info["loss"], [r["prefix"] for r in rows], train_prefix=False)
    assert all(any(row) for row in mask)  # every row has a loss token: B counts all rows
    rng = random.Random(seed + 7)
    cur = [[rng.uniform(-6, 0) for _ in range(T)] for _ in range(B)]
    logp = torch.tensor(cur, requires_grad=True)
    out = method.policy_loss(logp, credited)
    expected_loss = -sum(
        adv[b] * sum(cur[b][t] for t in range(T) if mask[b][t]) / sum(mask[b]) for b in range(B)
    ) / B
    assert out.loss.item() == pytest.approx(expected_loss, rel=1e-5, abs=1e-6)
    out.loss.backward()
    grad = [[-adv[b] / (B * sum(mask[b])) if mask[b][t] else 0.0 for t in range(T)] for b in range(B)]
    torch.testing.assert_close(logp.grad, torch.tensor(grad), rtol=1e-5, atol=1e-7)
