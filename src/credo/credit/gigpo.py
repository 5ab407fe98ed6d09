"""GiGPO: group-in-group policy optimisation (arXiv 2505.10978; docs/methods.md sec. 14).

Turn-level credit for multi-turn episodes without a critic or extra rollouts: GRPO's episode-level advantage plus a
step-level advantage computed within *anchor-state groups*, the turns of one prompt's episodes that were taken from
the same environment state.

Episode `i` of a group (prompt) `g` takes turns `t = 1 .. T_i` and earns turn rewards `r_{i,t}`: the environment's
reward for the turn (`turn_reward`), plus the episode's reward (`rewards`) on its last turn (verl-agent's step
rewards: the environment's reward for each step, the outcome on the last one). With `s_{i,t}` the state turn `t` was
taken from (`turn_anchor`, numbered per batch; equal numbers within a group are one state):

    R_i       = sum_t r_{i,t}                                                 (the episode's return)
    A_E(i)    = (R_i - mean_{j in g} R_j) / F({R_j : j in g})                 (Eq. 3, episode advantage)
    R_{i,t}   = sum_{k >= t} gamma^(k - t) r_{i,k}                            (Eq. 5, discounted step return)
    G_S(s)    = {(i, t) : i in g, s_{i,t} = s}                                (Eq. 6, anchor-state group)
    A_S(i, t) = (R_{i,t} - mean_{G_S(s_{i,t})} R) / F({R_{j,k} : (j, k) in G_S(s_{i,t})})   (Eq. 7, step advantage)
    A(i, t)   = A_E(i) + omega * A_S(i, t)                                    (Eq. 8, on every policy token of turn t)

`F` is `std + eps` (`mode="mean_std_norm"`, unbiased std as `torch.std`) or 1 (`mode="mean_norm"`), the same at both
levels. An anchor group may hold turns from different turn indices and several turns of one episode (a state
revisited), as the paper's groups do.

**The public code** (langfengQ/verl-agent, `gigpo/core_gigpo.py`, read at the mirror vanzll/verl-agent
`d0b97244c50f17fb43a6ef0a15bca0e95a044ff7`: `compute_step_discounted_returns`, `compute_gigpo_outcome_advantage`,
`episode_norm_reward`, `build_step_group`, `step_norm_reward`) trains one row per environment step. Its episode
statistics run over those step rows (`compute_mean_std_cross_steps=True`, its default): every episode's return
counted once per turn, a length-weighted mean and std. credo's rows are episodes; `episode_stats="steps"` (the
default) reproduces the code's statistics by weighting each episode by its number of turns, `episode_stats="episodes"`
computes the paper's Eq. 3 (each episode once; the code's `compute_mean_std_cross_steps=False`). The
tests port the code and compare on identical tensors.

Conventions (the code's unless said): unbiased std (`std_ddof=1`), `eps=1e-6` added outside the std; an anchor group
of one turn gets `A_S = 0` (the code's); a group whose values are all equal gets exactly 0 at either level (the code
can leave float round-off there, divided by `eps` under `mean_std_norm`); a group whose episode statistics rest on
a single item (a lone one-turn episode, or a lone episode under `episode_stats="episodes"`) gets `A_E = 0`
(`lone_episode="zero"`, credo's convention for a group of one) or its raw return, `R / (1 + eps)` under
`mean_std_norm` (`lone_episode="score"`, the code's). verl-agent's invalid-action penalty is not the estimator's:
it is the environment's turn reward (a negative `turn_reward`), so it enters both returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from credo.batch import RolloutBatch
from credo.checks import check_choice, check_range
from credo.credit.base import Metrics
from credo.credit.turns import discounted_returns, turn_starts

MODES = ("mean_norm", "mean_std_norm")
EPISODE_STATS = ("steps", "episodes")
LONE = ("zero", "score")


def group_normalise(values: Tensor, groups: Tensor, weights: Tensor, *, std: bool, std_ddof: int, eps: float,
                    lone: str) -> Tensor:
    """(N,) `(v - mean) / (std + eps)` (or `v - mean` without `std`) within groups, each item counted `weights`
    times (integers >= 0: an item of weight 0 enters no statistic). A group of one counted item gets 0 (`lone="zero"`)
    or `v / (1 + eps)` (`v` without `std`; `lone="score"`: mean 0, std 1); a group whose counted values are all equal
    gets exactly 0.

    Args:
        values: (N,) float.
        groups: (N,) int64 in 0 .. num_groups - 1.
        weights: (N,) float, each item's count.
        std, std_ddof, eps: the scale: std with `std_ddof` (1: unbiased) plus `eps`, or none.
        lone: "zero" | "score", the value of a group of one counted item.
    """
    num = int(groups.max()) + 1 if groups.numel() else 0
    counts = torch.zeros(num, dtype=values.dtype, device=values.device).index_add_(0, groups, weights)
    mean = torch.zeros_like(counts).index_add_(0, groups, weights * values) / counts.clamp(min=1)
    centred = values - mean[groups]
    counted = weights > 0
    high = torch.full_like(counts, -torch.inf).scatter_reduce_(0, groups[counted], values[counted], reduce="amax")
    low = torch.full_like(counts, torch.inf).scatter_reduce_(0, groups[counted], values[counted], reduce="amin")
    if std:
        sq = torch.zeros_like(counts).index_add_(0, groups, weights * centred.square())
        deviation = (sq / (counts - std_ddof).clamp(min=1)).sqrt()
        normalised = centred / (deviation[groups] + eps)
    else:
        normalised = centred
    single = (counts == 1)[groups]
    alone = values / (1 + eps) if std else values
    out = torch.where((high == low)[groups], torch.zeros_like(values), normalised)
    return torch.where(single, alone if lone == "score" else torch.zeros_like(values), out)


def gigpo_advantages(thought_ids: Tensor, turn_anchor: Tensor, turn_reward: Tensor, rewards: Tensor, group_id: Tensor,
                     response_mask: Tensor, *, step_weight: float = 1.0, gamma: float = 1.0, mode: str = "mean_norm",
                     episode_stats: str = "steps", lone_episode: str = "zero", std_ddof: int = 1,
                     eps: float = 1e-6) -> tuple[Tensor, dict[str, Tensor]]:
    """(B, T) GiGPO advantages `A_E(i) + step_weight * A_S(i, t)` on every response token of turn `t` of episode `i`
    (0 off the response; the caller masks observations), and the parts: "episode" (B,) `A_E`, "step" (N,) `A_S`
    per turn, "anchor_group" (N,) each turn's anchor group (0 .. groups - 1), "turns" (B,) each episode's turns.

    Args:
        thought_ids: (B, T) int64, each token's turn (non-decreasing along a row), -1 off the response.
        turn_anchor: (B, T) int64, the state each token's turn was taken from (read at the turn's first token).
        turn_reward: (B, T) float, the environment's reward for each token's turn (read at the turn's first token).
        rewards: (B,) float, each episode's reward, added to its last turn's reward.
        group_id: (B,) int64, each episode's group (prompt); anchor groups never span groups.
        response_mask: (B, T) bool.
        step_weight, gamma, mode, episode_stats, lone_episode, std_ddof, eps: `GiGPOAdvantage`'s switches.
    """
    B, T = response_mask.shape
    dtype = torch.promote_types(rewards.dtype, turn_reward.dtype)
    starts = turn_starts(thought_ids, response_mask)
    rows, positions = starts.nonzero(as_tuple=True)  # one item per (episode, turn), row-major
    turns = starts.sum(dim=1)  # (B,)
    if rows.numel() == 0:
        zero = torch.zeros(0, dtype=dtype, device=rewards.device)
        return (torch.zeros(B, T, dtype=dtype, device=rewards.device),
                {"episode": torch.zeros(B, dtype=dtype, device=rewards.device), "step": zero,
                 "anchor_group": zero.long(), "turns": turns})
    first = turns.cumsum(0) - turns  # (B,) each row's first item
    rank = torch.arange(rows.numel(), device=rows.device) - first[rows]  # (N,) the turn's order in its episode
    K = int(turns.max())
    step_rewards = torch.zeros(B, K, dtype=dtype, device=rewards.device)
    step_rewards[rows, rank] = turn_reward[rows, positions].to(dtype)
    ended = turns > 0
    step_rewards[ended, turns[ended] - 1] += rewards[ended].to(dtype)  # the outcome on the last turn
    _, groups = torch.unique(group_id, return_inverse=True)  # (B,)
    std = mode == "mean_std_norm"

    episode_return = step_rewards.sum(dim=1)  # (B,)
    weights = (turns if episode_stats == "steps" else ended).to(dtype)
    episode = group_normalise(episode_return, groups, weights, std=std, std_ddof=std_ddof, eps=eps, lone=lone_episode)

    returns = discounted_returns(step_rewards, gamma)[rows, rank]  # (N,)
    anchors = turn_anchor[rows, positions]
    _, anchor_group = torch.unique(groups[rows] * (int(anchors.max()) + 1) + anchors, return_inverse=True)
    step = group_normalise(returns, anchor_group, torch.ones_like(returns), std=std, std_ddof=std_ddof, eps=eps,
                           lone="zero")

    per_turn = torch.zeros(B, K, dtype=dtype, device=rewards.device)
    per_turn[rows, rank] = episode[rows] + step_weight * step
    token_rank = (starts.long().cumsum(dim=1) - 1).clamp(min=0, max=K - 1)  # (B, T) each token's turn order
    advantages = torch.where(response_mask, per_turn.gather(1, token_rank), 0.0)
    return advantages, {"episode": episode, "step": step, "anchor_group": anchor_group, "turns": turns}


@dataclass(frozen=True, kw_only=True)
class GiGPOAdvantage:
    """GiGPO's two-level advantage: the episode's group-relative return plus `step_weight` times the turn's
    discounted return relative to the other turns taken from the same state in its group (`gigpo_advantages`), on
    the turn's policy tokens (observations get none)."""

    reads: ClassVar[frozenset[str]] = frozenset({"thought_ids", "turn_anchor", "turn_reward"})
    writes: ClassVar[frozenset[str]] = frozenset({"advantages"})

    step_weight: float = 1.0
    """omega, the step advantage's weight (the code's `step_advantage_w`; 0: the episode advantage alone)."""
    gamma: float = 1.0
    """Discount of the step returns over later turns (the code's `algorithm.gamma`; its example scripts use 0.95)."""
    mode: str = "mean_norm"
    """"mean_norm": centred only | "mean_std_norm": divided by std + eps; both levels (the code's `gigpo.mode`)."""
    episode_stats: str = "steps"
    """Episode mean and std over "steps" (each episode once per turn, the code's default) | "episodes" (Eq. 3)."""
    lone_episode: str = "zero"
    """A group whose episode statistics rest on one item: "zero" (credo's) | "score" (its raw return, the code's)."""
    std_ddof: int = 1
    """1: unbiased std (the code's `torch.std`); 0: population std."""
    eps: float = 1e-6
    """Added to the std under "mean_std_norm" (the code's `epsilon`)."""

    def __post_init__(self) -> None:
        check_range("GiGPOAdvantage", "step_weight", self.step_weight, 0.0)
        check_range("GiGPOAdvantage", "gamma", self.gamma, 0.0, 1.0)
        check_choice("GiGPOAdvantage", "mode", self.mode, MODES)
        check_choice("GiGPOAdvantage", "episode_stats", self.episode_stats, EPISODE_STATS)
        check_choice("GiGPOAdvantage", "lone_episode", self.lone_episode, LONE)
        check_choice("GiGPOAdvantage", "std_ddof", self.std_ddof, (0, 1))
        check_range("GiGPOAdvantage", "eps", self.eps, 0.0)

    def __call__(self, batch: RolloutBatch) -> tuple[RolloutBatch, Metrics]:
        missing = [name for name in sorted(self.reads) if getattr(batch, name) is None]
        if missing:
            raise ValueError(f"gigpo needs RolloutBatch.{', '.join(missing)} (a task with an environment: multi-turn "
                             "episodes), but the batch has none")
        adv, parts = gigpo_advantages(
            batch.thought_ids, batch.turn_anchor, batch.turn_reward, batch.rewards, batch.group_id, batch.response_mask,
            step_weight=self.step_weight, gamma=self.gamma, mode=self.mode, episode_stats=self.episode_stats,
            lone_episode=self.lone_episode, std_ddof=self.std_ddof, eps=self.eps)
        advantages = torch.where(batch.loss_mask, adv, 0.0).to(batch.rewards.dtype)  # (B, T)
        return batch.replace(advantages=advantages), _metrics(advantages, batch.loss_mask, parts)


def _metrics(advantages: Tensor, loss_mask: Tensor, parts: dict[str, Tensor]) -> Metrics:
    turns, step, anchor_group = parts["turns"], parts["step"], parts["anchor_group"]
    ended = turns > 0
    sizes = torch.bincount(anchor_group) if anchor_group.numel() else torch.zeros(0)
    return {
        "credit/adv_abs_mean": float(advantages.abs().sum() / loss_mask.sum().clamp(min=1)),
        "credit/episode_adv_abs_mean": float(parts["episode"][ended].abs().mean()) if ended.any() else 0.0,
        "credit/step_adv_abs_mean": float(step.abs().mean()) if step.numel() else 0.0,
        "credit/turns_mean": float(turns[ended].float().mean()) if ended.any() else 0.0,
        "credit/anchor_group_size": float(sizes.float().mean()) if sizes.numel() else 0.0,
        "credit/anchor_singleton_frac": float((sizes == 1).float().mean()) if sizes.numel() else 0.0,
    }
