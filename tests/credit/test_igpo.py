"""IGPO, information-gain turn rewards (`igpo`, `credo.credit.igpo`, arXiv 2510.14967).

A loop reference written from the paper's definitions with the code's normalisation; the public code's computation
(GuoqingWang1/IGPO at 745078b, `compute_grpo_outcome_advantage` and `_compute_turn_level_advantage`) restated in its
own layout (rewards at the last token of each turn and its observation, the outcome at the last valid token, a gain
of 0 written 1e-10) and compared on identical tensors; identities (one-turn episodes are GRPO with the population
std; no information gain under `separate` is GRPO on every turn; `gamma = 0` gives each turn its own normalised
reward); intent (a turn that gained more than its group's turns on average is credited above the turn after it,
one that gained less below it; no credit crosses groups; observations get none; the turn-count-dependent baseline
the module docstring states)."""

from __future__ import annotations

import math

import pytest
import torch
from episodes import episode_batch, turns_of

from credo.batch import RolloutBatch
from credo.credit import GroupAdvantage
from credo.credit.igpo import IGPOAdvantage
from credo.methods import get_method

SWITCHES = [{}, {"norm": "separate"}, {"gamma": 0.9}, {"norm": "separate", "gamma": 0.5}, {"scale": False},
            {"norm": "separate", "scale": False, "gamma": 0.8}, {"eps": 1e-3}, {"gamma": 0.0}]


def igpo_batch(seed: int, **kwargs) -> RolloutBatch:
    """Random ragged episodes whose turns' information gains are the episode builder's turn rewards."""
    batch = episode_batch(seed, **kwargs)
    return batch.replace(info_gain=batch.turn_reward, turn_reward=None, turn_anchor=None)


def loop_igpo(batch: RolloutBatch, *, norm="joint", gamma=1.0, scale=True, eps=1e-6) -> torch.Tensor:
    """The paper's turn rewards (gains, the last turn's the outcome), each group's pools normalised, summed to go."""
    anchors = torch.where(batch.response_mask, 0, -1)
    episodes = turns_of(batch.replace(turn_reward=batch.info_gain, turn_anchor=anchors))
    rewards = {}
    for b, turns in enumerate(episodes):
        rewards[b] = [turn["reward"] for turn in turns[:-1]] + ([float(batch.rewards[b])] if turns else [])

    def pool_of(b: int, k: int) -> str:
        return "outcome" if norm == "separate" and k == len(rewards[b]) - 1 else "gain"

    out = torch.zeros(batch.size, batch.width, dtype=torch.float64)
    for g in batch.group_id.unique().tolist():
        members = [b for b in range(batch.size) if int(batch.group_id[b]) == g]
        pools: dict[str, list[float]] = {}
        for b in members:
            for k, r in enumerate(rewards[b]):
                pools.setdefault(pool_of(b, k), []).append(r)
        stats = {}
        for name, values in pools.items():
            mean = sum(values) / len(values)
            std = math.sqrt(sum((x - mean) ** 2 for x in values) / len(values) + 1e-8)
            stats[name] = (mean, std)
        for b in members:
            normalised = []
            for k, r in enumerate(rewards[b]):
                mean, std = stats[pool_of(b, k)]
                normalised.append((r - mean) / (std + eps) if scale else r - mean)
            for k, turn in enumerate(episodes[b]):
                advantage = sum(gamma ** (j - k) * normalised[j] for j in range(k, len(normalised)))
                for token in turn["tokens"]:
                    out[b, token] = advantage
    return out


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("switches", SWITCHES)
def test_matches_the_loop_reference(seed, switches):
    batch = igpo_batch(seed, max_turns=6, empty_rows=seed % 3 == 0)
    out, _ = IGPOAdvantage(**switches)(batch)
    torch.testing.assert_close(out.advantages, loop_igpo(batch, **switches), rtol=1e-9, atol=1e-9)


def test_a_batch_without_information_gain_is_a_clear_error():
    batch = episode_batch(0)
    with pytest.raises(ValueError, match="igpo needs RolloutBatch.thought_ids and info_gain .*info_gain is None"):
        IGPOAdvantage()(batch)


def test_the_registered_method_is_the_paper_s_settings():
    method = get_method("igpo")
    assert method.estimator == IGPOAdvantage(norm="joint", gamma=1.0, scale=True, eps=1e-6)
    assert method.sampler.name == "info_gain" and method.sampler.needs_environment


# --------------------------------------------------------------------------------------------------------------------
# The public code's computation, in its own layout: one row per episode, turns and observations contiguous; a turn's
# information gain at the last token of the turn and its observation, the outcome at the last valid token


def code_layout(batch: RolloutBatch) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """(token_level_rewards, response_mask, index) as the code's reward manager leaves them (float32)."""
    rewards = torch.zeros(batch.size, batch.width, dtype=torch.float32)
    for b in range(batch.size):
        positions = batch.response_mask[b].nonzero().flatten().tolist()
        if not positions:
            continue
        turns = batch.thought_ids[b]
        for k in range(int(turns[positions[-1]])):  # every turn but the last: its gain at its chunk's last token
            end = max(p for p in positions if int(turns[p]) == k)
            gain = float(batch.info_gain[b, end])
            rewards[b, end] = gain if gain != 0 else 1e-10  # info_gain.py: a gain of 0 still marks its turn
        rewards[b, positions[-1]] = float(batch.rewards[b])
    return rewards, batch.response_mask.long(), batch.group_id.tolist()


def code_advantages(token_level_rewards, response_mask, index, *, norm, gamma, scale, epsilon=1e-6):
    """The 2026-02-01 release's `compute_grpo_outcome_advantage` computation: the outcome mask at the last valid
    position, the gain mask at every other nonzero reward, group statistics over the selected positions (population
    variance, sqrt(var + 1e-8), std 1 for a count of one), then per row the discounted sums over its reward
    positions, each broadcast over its turn `(previous reward position, this one]`."""
    bsz, seq_len = token_level_rewards.shape
    last = (response_mask.sum(1) - 1).clamp(min=0)
    positions = torch.arange(seq_len).unsqueeze(0).expand(bsz, -1)
    f1_mask = (positions == last.unsqueeze(1)) & (response_mask == 1)
    ig_mask = (response_mask == 1) & ~f1_mask & (token_level_rewards != 0)
    _, inverse = torch.unique(torch.tensor(index), return_inverse=True)
    groups = int(inverse.max()) + 1
    expanded = inverse.unsqueeze(1).expand(-1, seq_len)

    def stats(mask):
        rows = mask.reshape(-1).nonzero(as_tuple=True)[0]
        if rows.numel() == 0:
            return torch.zeros(groups), torch.ones(groups)
        values, owners = token_level_rewards.reshape(-1)[rows], expanded.reshape(-1)[rows]
        count = torch.zeros(groups).scatter_add_(0, owners, torch.ones_like(values))
        mean = torch.zeros(groups).scatter_add_(0, owners, values) / count.clamp(min=1.0)
        var = torch.zeros(groups).scatter_add_(0, owners, (values - mean[owners]) ** 2) / count.clamp(min=1.0)
        std = torch.where(count <= 1, torch.ones(groups), torch.sqrt(var + 1e-8))
        return mean, std

    normalised = torch.zeros_like(token_level_rewards)
    masks = [f1_mask, ig_mask] if norm == "separate" else [f1_mask | ig_mask]
    for mask in masks:
        mean, std = stats(mask)
        value = token_level_rewards - mean[expanded]
        if scale:
            value = value / (std[expanded] + epsilon)
        normalised = torch.where(mask, value, normalised)
    boundaries = f1_mask | ig_mask
    out = torch.zeros(bsz, seq_len)
    for b in range(bsz):
        ends = boundaries[b].nonzero(as_tuple=True)[0].tolist()
        advantages, running = [], 0.0
        for pos in reversed(ends):
            running = normalised[b, pos].item() + gamma * running
            advantages.append(running)
        advantages.reverse()
        start = 0
        for pos, advantage in zip(ends, advantages, strict=True):
            for t in range(start, pos + 1):
                if response_mask[b, t] == 1:
                    out[b, t] = advantage
            start = pos + 1
    return out


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("switches", [{"norm": "joint", "gamma": 1.0, "scale": True},
                                      {"norm": "separate", "gamma": 1.0, "scale": True},
                                      {"norm": "joint", "gamma": 0.9, "scale": False}])
def test_reproduces_the_public_code_on_the_same_episodes(seed, switches):
    """On the policy's tokens (observations leave the code's loss through its response-mask processing, and get 0
    here) credo's advantages equal the code's, to float32 and the 1e-10 the code writes for a gain of 0."""
    batch = igpo_batch(seed, max_turns=6, dtype=torch.float32)
    ours, _ = IGPOAdvantage(**switches)(batch)
    theirs = code_advantages(*code_layout(batch), **switches)
    torch.testing.assert_close(ours.advantages, torch.where(batch.loss_mask, theirs, 0.0), rtol=1e-5, atol=2e-5)


# --------------------------------------------------------------------------------------------------------------------
# Identities


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("norm", ["joint", "separate"])
def test_one_turn_episodes_are_grpo_with_the_population_std(seed, norm):
    batch = igpo_batch(seed, one_turn=True, outcome="uniform")
    out, _ = IGPOAdvantage(norm=norm)(batch)
    grpo, _ = GroupAdvantage(std_ddof=0, eps=1e-6)(batch)
    exact = torch.zeros(batch.size, dtype=torch.float64)
    for g in batch.group_id.unique():
        rows = batch.group_id == g
        r = batch.rewards[rows]
        exact[rows] = (r - r.mean()) / (torch.sqrt(r.var(unbiased=False) + 1e-8) + 1e-6) if rows.sum() > 1 else 0.0
    torch.testing.assert_close(out.advantages, torch.where(batch.loss_mask, exact.unsqueeze(1), 0.0))
    torch.testing.assert_close(out.advantages, grpo.advantages, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("seed", range(8))
def test_without_information_gain_separate_normalisation_is_grpo_on_every_turn(seed):
    batch = igpo_batch(seed, turn_rewards="none", outcome="uniform")
    out, _ = IGPOAdvantage(norm="separate")(batch)
    grpo = IGPOAdvantage(norm="separate")(igpo_batch(seed, turn_rewards="none", outcome="uniform",
                                                     one_turn=False))[0]
    per_row = torch.zeros(batch.size, dtype=torch.float64)
    for g in batch.group_id.unique():
        rows = (batch.group_id == g) & batch.response_mask.any(1)
        r = batch.rewards[rows]
        if rows.sum() > 1:
            per_row[rows] = (r - r.mean()) / (torch.sqrt(r.var(unbiased=False) + 1e-8) + 1e-6)
    torch.testing.assert_close(out.advantages, torch.where(batch.loss_mask, per_row.unsqueeze(1), 0.0))
    torch.testing.assert_close(out.advantages, grpo.advantages)


@pytest.mark.parametrize("seed", range(6))
def test_without_discount_each_turn_gets_its_own_normalised_reward_and_the_sums_telescope(seed):
    batch = igpo_batch(seed, max_turns=6)
    own, _ = IGPOAdvantage(gamma=0.0)(batch)
    summed, _ = IGPOAdvantage(gamma=1.0)(batch)
    for b, turns in enumerate(turns_of(batch.replace(turn_anchor=torch.where(batch.response_mask, 0, -1),
                                                     turn_reward=batch.info_gain))):
        tokens = [turn["tokens"][0] for turn in turns]
        for k in range(len(tokens) - 1):  # A_k - A_{k+1} = r^_k at gamma 1
            assert float(summed.advantages[b, tokens[k]] - summed.advantages[b, tokens[k + 1]]) == pytest.approx(
                float(own.advantages[b, tokens[k]]), abs=1e-9)


# --------------------------------------------------------------------------------------------------------------------
# Intent


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("norm", ["joint", "separate"])
def test_a_turn_that_gained_more_than_its_group_s_turns_on_average_is_credited_above_the_turn_after_it(seed, norm):
    """The paper's purpose: a turn is credited by what it added to the policy's belief in the answer. Within an
    episode (gamma 1) the credit falls from a turn to the next exactly when the turn's gain lies above the mean of
    its pool (the group's gains, with `joint` its outcomes too), and rises when it lies below."""
    batch = igpo_batch(seed, sizes=(4, 5, 3), max_turns=6, outcome="uniform")
    out, _ = IGPOAdvantage(norm=norm)(batch)
    anchors = torch.where(batch.response_mask, 0, -1)
    episodes = turns_of(batch.replace(turn_reward=batch.info_gain, turn_anchor=anchors))
    checked = 0
    for g in batch.group_id.unique().tolist():
        members = [b for b in range(batch.size) if int(batch.group_id[b]) == g and episodes[b]]
        gains = [turn["reward"] for b in members for turn in episodes[b][:-1]]
        pool = gains + ([float(batch.rewards[b]) for b in members] if norm == "joint" else [])
        if len(pool) < 2:
            continue
        mean = sum(pool) / len(pool)
        for b in members:
            for k, turn in enumerate(episodes[b][:-1]):
                drop = float(out.advantages[b, turn["tokens"][0]] - out.advantages[b, episodes[b][k + 1]["tokens"][0]])
                if abs(turn["reward"] - mean) > 1e-6:
                    assert (drop > 0) == (turn["reward"] > mean)
                    checked += 1
    assert checked > 5


@pytest.mark.parametrize("seed", range(6))
def test_no_credit_crosses_groups(seed):
    batch = igpo_batch(seed, sizes=(3, 4, 2), max_turns=5)
    out, _ = IGPOAdvantage()(batch)
    first = batch.group_id == batch.group_id[0]
    changed = batch.replace(rewards=torch.where(first, 1 - batch.rewards, batch.rewards),
                            info_gain=torch.where(first.unsqueeze(1), -3 * batch.info_gain, batch.info_gain))
    again, _ = IGPOAdvantage()(changed)
    torch.testing.assert_close(again.advantages[~first], out.advantages[~first])
    assert not torch.equal(again.advantages[first], out.advantages[first])


@pytest.mark.parametrize("seed", range(6))
def test_observations_get_no_advantage(seed):
    batch = igpo_batch(seed)
    out, _ = IGPOAdvantage()(batch)
    assert (out.advantages[~batch.loss_mask] == 0).all()
    assert (out.advantages[batch.loss_mask] != 0).any()


def test_an_extra_turn_lowers_the_credit_of_every_turn_before_it_by_the_pool_s_normalised_zero():
    """The turn-count-dependent baseline the module docstring states: two episodes alike but for one extra turn of
    zero gain (a check) differ on every earlier turn by that turn's normalised reward, -mean / std of the pool,
    though the extra turn changed nothing the answer depends on."""
    # one group: episode 0 takes turns with gains (0.4, 0.2) and answers; episode 1 the same with a check of gain 0
    # inserted before its answer; both succeed. Turns of one token, observations of one token.
    spans = [[(1, 1), (1, 1), (1, 0)], [(1, 1), (1, 1), (1, 1), (1, 0)]]
    gains = [[0.4, 0.2, 0.0], [0.4, 0.2, 0.0, 0.0]]
    width = 8
    ids, policy, gain = torch.full((2, width), -1), torch.zeros(2, width, dtype=torch.bool), torch.zeros(2, width)
    mask = torch.zeros(2, width, dtype=torch.bool)
    for b, row in enumerate(spans):
        at = 0
        for k, (p, o) in enumerate(row):
            ids[b, at:at + p + o], gain[b, at:at + p + o] = k, gains[b][k]
            policy[b, at:at + p], mask[b, at:at + p + o] = True, True
            at += p + o
    batch = RolloutBatch(response_ids=torch.zeros(2, width, dtype=torch.long), response_mask=mask, loss_mask=policy,
                         group_id=torch.zeros(2, dtype=torch.long), rewards=torch.ones(2),
                         old_logp=torch.zeros(2, width), thought_ids=ids, info_gain=gain,
                         thought_wrong=torch.zeros(2, width, dtype=torch.bool))
    out, _ = IGPOAdvantage(norm="separate")(batch)
    pool = [0.4, 0.2, 0.4, 0.2, 0.0]
    mean = sum(pool) / len(pool)
    std = math.sqrt(sum((x - mean) ** 2 for x in pool) / len(pool) + 1e-8)
    for k in range(2):  # turns 0 and 1 start at tokens 0 and 2 in both episodes
        assert float(out.advantages[1, 2 * k] - out.advantages[0, 2 * k]) == pytest.approx(-mean / (std + 1e-6),
                                                                                             rel=1e-5)
