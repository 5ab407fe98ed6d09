"""Turn-level advantages from turn rewards: each turn's return-to-go against a baseline of its state, not of its
trajectory's own length.

An episode of `T_i` turns earns turn rewards `r_{i,1} .. r_{i,T_i}` (the environment's `turn_reward`, the last one
carrying the episode's outcome). Turn `t`'s decision is credited with its return-to-go, less the mean return-to-go at
turn `t` of the group's episodes that reached turn `t`:

    G_{i,t} = sum_{k=t}^{T_i} r_{i,k}
    A_{i,t} = G_{i,t} - mean_{j in g, T_j >= t} G_{j,t}          (leave-one-out: over j != i)

The baseline is a function of the state at turn `t` (here its index within its group's prompt), so it is gradient-
neutral however the policy decides how many turns to take. The per-turn-index normalisation that sums
`(r_{i,k} - mu_k)` over a trajectory's own turns (`mu_k` the group's mean turn-`k` reward) subtracts as many means as
the trajectory has turns, a baseline that depends on the action of taking another turn: verl issue #7244 shows its
bias is a hidden `-E[R_intermediate]` per extra turn (docs/results/agents/sources.md, section 6); the test of this
module measures it exactly on a tabular episode and shows this baseline free of it.

With one turn per episode `A_{i,1} = R_i - mean_g R` (leave-one-out: RLOO's), GRPO's centring.

`turn_starts` finds each turn's (or thought's) first token from the batch's `thought_ids`, for every estimator that
reads one value per turn; `discounted_returns` sums turn rewards to go (GiGPO's and IGPO's, and undiscounted here).
"""

from __future__ import annotations

import torch
from torch import Tensor


def turn_starts(thought_ids: Tensor, response_mask: Tensor) -> Tensor:
    """(B, T) bool: the first response token of every turn (or thought: a token whose `thought_ids` differs from the
    token before it), within `response_mask`."""
    changed = torch.nn.functional.pad(thought_ids[:, 1:] != thought_ids[:, :-1], (1, 0), value=True)
    return response_mask & changed


def discounted_returns(turn_rewards: Tensor, gamma: float) -> Tensor:
    """(B, K) `R[i, t] = sum_{k >= t} gamma^(k - t) r[i, k]` of (B, K) turn rewards (0 past an episode's turns)."""
    K = turn_rewards.shape[1]
    k = torch.arange(K, device=turn_rewards.device)
    ahead = k.unsqueeze(0) - k.unsqueeze(1)  # (K, K): k - t
    discount = torch.tensor(gamma, dtype=turn_rewards.dtype, device=turn_rewards.device) ** ahead.clamp(min=0)
    return turn_rewards @ torch.where(ahead >= 0, discount, 0.0).T  # discount[t, k] = gamma^(k - t), k >= t


def turn_returns(turn_rewards: Tensor, turns: Tensor) -> Tensor:
    """(B, K) return-to-go `G[i, t] = sum_{k >= t, k < turns[i]} turn_rewards[i, k]`, 0 past an episode's turns.

    Args:
        turn_rewards: (B, K) float, each episode's turn rewards (entries past `turns[i]` are ignored).
        turns: (B,) int64 in 1..K, each episode's number of turns.
    """
    taken = torch.arange(turn_rewards.shape[1], device=turns.device).unsqueeze(0) < turns.unsqueeze(1)
    return torch.where(taken, discounted_returns(torch.where(taken, turn_rewards, 0.0), 1.0), 0.0)


def turn_advantages(turn_rewards: Tensor, turns: Tensor, group_id: Tensor, *, leave_one_out: bool = True) -> Tensor:
    """(B, K) turn advantages `A[i, t] = G[i, t] - b[g(i), t]`, `b` the mean return-to-go at turn `t` over the
    group's episodes that reached it (without episode `i` with `leave_one_out`; 0 where none other did); 0 past an
    episode's turns."""
    returns = turn_returns(turn_rewards, turns)
    taken = (torch.arange(returns.shape[1], device=turns.device).unsqueeze(0) < turns.unsqueeze(1)).to(returns.dtype)
    _, groups = torch.unique(group_id, return_inverse=True)
    sums = torch.zeros(int(groups.max()) + 1, returns.shape[1], dtype=returns.dtype, device=returns.device)
    counts = torch.zeros_like(sums)
    sums.index_add_(0, groups, returns * taken)
    counts.index_add_(0, groups, taken)
    own_sum, own_count = sums[groups], counts[groups]
    if leave_one_out:
        own_sum, own_count = own_sum - returns * taken, own_count - taken
    baseline = torch.where(own_count > 0, own_sum / own_count.clamp(min=1), 0.0)
    return torch.where(taken > 0, returns - baseline, 0.0)
