"""Turn-level advantages (`credo.credit.turns`): a loop reference, GRPO's centring at one turn, and the exact expected
gradient on a tabular episode where the policy decides how many turns to take (verl #7244's bias and its absence)."""

from __future__ import annotations

import itertools

import pytest
import torch

from credo.credit.turns import turn_advantages, turn_returns


def loop_advantages(turn_rewards, turns, group_id, leave_one_out=True):
    B, K = turn_rewards.shape
    out = torch.zeros(B, K)
    returns = [[sum(turn_rewards[i, k].item() for k in range(t, turns[i])) for t in range(K)] for i in range(B)]
    for i in range(B):
        for t in range(turns[i]):
            others = [returns[j][t] for j in range(B) if group_id[j] == group_id[i] and turns[j] > t
                      and (j != i or not leave_one_out)]
            out[i, t] = returns[i][t] - (sum(others) / len(others) if others else 0.0)
    return out


def test_the_advantages_equal_a_loop_reference_and_vanish_past_each_episode():
    torch.manual_seed(0)
    rewards, turns, groups = torch.randn(12, 5), torch.randint(1, 6, (12,)), torch.tensor([0] * 5 + [3] * 4 + [7] * 3)
    for loo in (True, False):
        assert torch.allclose(turn_advantages(rewards, turns, groups, leave_one_out=loo),
                              loop_advantages(rewards, turns, groups, loo), atol=1e-6)
    past = torch.arange(5).unsqueeze(0) >= turns.unsqueeze(1)
    assert (turn_advantages(rewards, turns, groups)[past] == 0).all()
    assert (turn_returns(rewards, turns)[past] == 0).all()


def test_one_turn_episodes_get_grpo_s_centred_reward():
    rewards, groups = torch.tensor([[1.0], [0.0], [1.0], [0.5]]), torch.tensor([0, 0, 1, 1])
    centred = turn_advantages(rewards, torch.ones(4, dtype=torch.long), groups, leave_one_out=False)
    assert torch.allclose(centred[:, 0], torch.tensor([0.5, -0.5, 0.25, -0.25]))
    loo = turn_advantages(rewards, torch.ones(4, dtype=torch.long), groups)  # RLOO: G/(G-1) x the centred reward
    assert torch.allclose(loo[:, 0], 2 * centred[:, 0])


# A tabular episode: at turn k < K the policy calls a tool (another turn, reward BONUS) with probability
# sigmoid(theta_k), or answers (reward ANSWER[k]); at turn K it must answer. The objective is the expected total reward.
K, BONUS, ANSWER, G = 3, 0.2, (0.3, 0.6, 0.7), 3


def episodes():
    """Each possible episode: its turns, its turn rewards, and each decision's (turn, continued) pair."""
    for turns in range(1, K + 1):
        rewards = [BONUS] * (turns - 1) + [ANSWER[turns - 1]]
        decisions = [(k, True) for k in range(turns - 1)] + ([(turns - 1, False)] if turns < K else [])
        yield turns, rewards, decisions


def log_prob(theta, k, continued):
    return torch.nn.functional.logsigmoid(theta[k] if continued else -theta[k])


def per_index_advantages(turn_rewards, turns):
    """The construction #7244 shows biased: per-turn-index means `mu_k` of the turn rewards (leave-one-out, so that
    self-inclusion plays no part), each turn credited with `sum_{k >= t}^{T_i} (r_{i,k} - mu_k)`."""
    n, width = turn_rewards.shape
    out = torch.zeros(n, width)
    for i in range(n):
        for t in range(turns[i]):
            total = 0.0
            for k in range(t, turns[i]):
                others = [turn_rewards[j, k].item() for j in range(n) if j != i and turns[j] > k]
                total += turn_rewards[i, k].item() - (sum(others) / len(others) if others else 0.0)
            out[i, t] = total
    return out


def expected_gradients(theta, advantages):
    """The true gradient of the expected total reward, and the estimator's expected gradient over every group of G
    episodes (exact: each group weighted by its probability, the advantages held fixed, the score function's
    gradient taken)."""
    cases = list(episodes())
    probs = [sum(log_prob(theta, k, c) for k, c in decisions).exp() for _, _, decisions in cases]
    objective = sum(p * sum(rewards) for p, (_, rewards, _) in zip(probs, cases))
    true = torch.autograd.grad(objective, theta)[0]
    surrogate = 0.0
    for group in itertools.product(range(len(cases)), repeat=G):
        weight = torch.stack([probs[c] for c in group]).prod().detach()
        turns = torch.tensor([cases[c][0] for c in group])
        rewards = torch.tensor([cases[c][1] + [0.0] * (K - cases[c][0]) for c in group])
        adv = advantages(rewards, turns)
        for i, c in enumerate(group):
            surrogate = surrogate + weight / G * sum(adv[i, k] * log_prob(theta, k, cont) for k, cont in cases[c][2])
    return true, torch.autograd.grad(surrogate, theta)[0]


@pytest.mark.parametrize("theta", [[0.0, 0.0, 0.0], [1.0, -0.5, 0.0], [-1.5, 2.0, 0.0]])
def test_a_baseline_of_the_turn_s_state_is_unbiased_where_per_index_sums_are_not(theta):
    theta = torch.tensor(theta, requires_grad=True)
    groups = torch.zeros(G, dtype=torch.long)
    true, ours = expected_gradients(theta, lambda r, t: turn_advantages(r, t, groups))
    assert torch.allclose(ours, true, atol=1e-6)
    _, biased = expected_gradients(theta, per_index_advantages)
    assert (biased - true).abs().max() > 0.01  # the per-turn-index sums miss the true gradient
