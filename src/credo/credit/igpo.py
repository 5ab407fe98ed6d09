"""IGPO: information-gain turn rewards (arXiv 2510.14967, "Information Gain-based Policy Optimization: A Simple and
Effective Approach for Multi-Turn LLM Agents"; github.com/GuoqingWang1/IGPO, the 2026-02-01 release at 745078b,
`verl/trainer/ppo/core_algos.py`: `compute_grpo_outcome_advantage`, `_compute_turn_level_advantage`;
docs/methods.md sec. 15).

An episode `i` of a group `g` takes `K_i` turns (its `thought_ids`: an observation takes the turn it answers). Its
turns' rewards are their information gains (`info_gain`, the `info_gain` sampler's: the rise in the policy's belief
in the gold answer across each turn and its observation), the last turn's its outcome:

    r_{i,k} = IG_{i,k}    for k < K_i - 1,        r_{i,K_i - 1} = R_i

Each reward is normalised within its group, over a pool of the group's rewards:

    r^_{i,k} = (r_{i,k} - mean_P) / (sqrt(var_P + 1e-8) + eps)        (population variance)

with `norm="joint"` (the paper's, and the code function's default) one pool of every reward of the group's episodes,
information gains and outcomes together, and `norm="separate"` (the released train.sh's) two: the group's outcomes,
and every information gain of the group's episodes, pooled over turns. `scale=False` leaves out the division (the
code's `norm_adv_by_std_in_grpo=False`). Each turn is then credited with its discounted sum of normalised rewards
to go, on every token of the turn (observations, off `loss_mask`, get 0):

    A_{i,k} = sum_{j=k}^{K_i - 1} gamma^{j-k} r^_{i,j}

*One turn.* An episode of one turn has only its outcome: with every episode of one turn (or `separate`, where the
outcome pool holds one reward per episode) `A_i = (R_i - mean_g R) / (sqrt(var_g R + 1e-8) + eps)`, GRPO with the
population std and the eps's placement (`credo.credit.GroupAdvantage(std_ddof=0)` up to them).

*Turn counts.* `A_{i,k}` sums its own remaining turns' normalised rewards, so it subtracts `mean_P` once per turn the
episode still takes: a baseline that depends on the episode's own decision to take another turn (verl issue #7244's
structure, docs/results/agents/sources.md secs. 3.7 and 6). It is the method as published and coded; `mt_grpo`'s
`turns: all` shows the state baseline that avoids it.

The code marks turns by the positions of their rewards and writes a gain of exactly 0 as 1e-10 so that the turn
still counts; here turns are explicit, and every turn but the last has its gain (0 included) in the pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from credo.batch import RolloutBatch
from credo.checks import check_choice, check_range
from credo.credit.base import Metrics
from credo.credit.mt_grpo import episode_turns
from credo.credit.turns import discounted_returns

NORMS = ("joint", "separate")


def pooled_normalise(values: Tensor, pools: Tensor, taken: Tensor, *, scale: bool, eps: float) -> Tensor:
    """`values` normalised within each pool: `(x - mean) / (sqrt(var + 1e-8) + eps)` over the pool's `taken` entries
    (population variance; no division without `scale`), 0 where not `taken`. (The code sets the std of a pool of one
    to 1, which changes nothing: its one value's difference from the mean is 0.)

    Args:
        values: (B, K) float. pools: (B, K) int64, each entry's pool (any ids). taken: (B, K) bool.
    """
    _, ids = torch.unique(pools[taken], return_inverse=True)
    chosen = values[taken]
    count = torch.zeros(int(ids.max()) + 1 if ids.numel() else 0, dtype=values.dtype, device=values.device)
    count.index_add_(0, ids, torch.ones_like(chosen))
    mean = torch.zeros_like(count).index_add_(0, ids, chosen) / count.clamp(min=1)
    var = torch.zeros_like(count).index_add_(0, ids, (chosen - mean[ids]) ** 2) / count.clamp(min=1)
    std = torch.sqrt(var + 1e-8)
    normalised = chosen - mean[ids]
    if scale:
        normalised = normalised / (std[ids] + eps)
    out = torch.zeros_like(values)
    out[taken] = normalised
    return out


@dataclass(frozen=True, kw_only=True)
class IGPOAdvantage:
    """IGPO's turn advantages: each turn's information gain (the last turn's outcome) normalised within its group,
    summed to go over the episode's turns (see the module docstring)."""

    reads: ClassVar[frozenset[str]] = frozenset({"thought_ids", "info_gain"})
    writes: ClassVar[frozenset[str]] = frozenset({"advantages"})

    norm: str = "joint"
    """"joint": one pool of the group's information gains and outcomes (the paper's) | "separate": outcomes and
    information gains normalised apart (the released train.sh's)."""
    gamma: float = 1.0
    """The discount over turns (the code's `algorithm.gamma`, 1.0)."""
    scale: bool = True
    """Divide by the pool's std (the code's `norm_adv_by_std_in_grpo`, True); False: centre only."""
    eps: float = 1e-6
    """Added to the pool's std (the code's `epsilon`)."""

    def __post_init__(self) -> None:
        check_choice("IGPOAdvantage", "norm", self.norm, NORMS)
        check_range("IGPOAdvantage", "gamma", self.gamma, 0.0, 1.0)
        check_range("IGPOAdvantage", "eps", self.eps, 0.0)

    def __call__(self, batch: RolloutBatch) -> tuple[RolloutBatch, Metrics]:
        missing = [name for name in ("thought_ids", "info_gain") if getattr(batch, name) is None]
        if missing:
            raise ValueError(f"igpo needs RolloutBatch.thought_ids and info_gain (the info_gain sampler's episodes), "
                             f"but {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} None")
        thoughts, response = batch.thought_ids, batch.response_mask
        dtype = torch.promote_types(batch.rewards.dtype, batch.info_gain.dtype)
        turns, gains = episode_turns(thoughts, batch.info_gain.to(dtype), response)  # (B,), (B, K)
        index = torch.arange(gains.shape[1], device=turns.device).unsqueeze(0)
        taken = index < turns.unsqueeze(1)  # (B, K)
        last = index == (turns - 1).unsqueeze(1)  # the outcome's turn
        rewards = torch.where(last, batch.rewards.to(dtype).unsqueeze(1), gains)
        pools = batch.group_id.unsqueeze(1) * 2 + (last if self.norm == "separate" else torch.zeros_like(last))
        normalised = pooled_normalise(rewards, pools, taken, scale=self.scale, eps=self.eps)
        table = discounted_returns(normalised, self.gamma)  # (B, K), 0 past each episode's turns
        turn_of = thoughts.clamp(min=0, max=table.shape[1] - 1)
        advantages = torch.where(batch.loss_mask, table.gather(1, turn_of), 0.0)  # (B, T)
        gained = taken & ~last
        trained = batch.loss_mask.sum().clamp(min=1)
        episodes = (turns > 0).sum().clamp(min=1)
        metrics = {
            "credit/adv_abs_mean": float(advantages.abs().sum() / trained),
            "credit/info_gain_mean": float(gains[gained].mean()) if gained.any() else 0.0,
            "credit/info_gain_abs_mean": float(gains[gained].abs().mean()) if gained.any() else 0.0,
            "credit/one_turn_frac": float((turns == 1).sum() / episodes),
            "credit/turns_mean": float(turns.sum() / episodes),
        }
        return batch.replace(advantages=advantages), metrics
