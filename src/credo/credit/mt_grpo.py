"""MT-GRPO: turn-level credit from turn rewards (arXiv 2505.11821, "Reinforcing Multi-Turn Reasoning in LLM Agents
via Turn-Level Credit Assignment"; github.com/SiliangZeng/Multi-Turn-RL-Agent at 7dbdd08,
`verifiers/trainers/mt_grpo_env_trainer.py`; docs/methods.md sec. 13).

An episode `i` of a group `g` takes `K_i` turns (its `thought_ids`: an observation takes the turn it answers) and
earns the environment's turn rewards `r_{i,0} .. r_{i,K_i - 1}` (`turn_reward`, read at each turn's first token)
and the outcome reward `R_i` (`rewards`). With `norm_g(x)_i = (x_i - mean_g x) / (std_g x + eps)` (0 on a group whose
values are all equal) and `lambda = turn_coef`, the outcome advantage is `A^O_i = norm_g(R)_i`, and:

**`turns="first"`**: the public code's v1 form (`_assign_advantages`), its turn reward a trajectory-level scalar that
credits the first turn (the tokens before the first tool result):

    A^T_i = norm_g(r_{., 0})_i,    A^C_i = norm_g(R + r_{., 0})_i
    A_{i,t} = A^O_i + lambda A^T_i    on the tokens of turn 0          (K_i >= 2)
            = A^O_i                   on the tokens of turns 1 .. K_i - 1
    A_{i,t} = A^C_i                   on every token                   (K_i = 1: the environment never answered)

The code gives an episode without a tool result the group-normalised sum of its turn and outcome rewards (its
`combined_advantages`, GRPO-MR's advantage), normalised over the whole group's sums: mirrored here. Turn rewards of
later turns are not read.

**`turns="all"`**: the general multi-turn form. Each turn `t` is credited with its return-to-go of turn rewards
against the state baseline of `credo.credit.turns.turn_advantages`, the mean return-to-go at turn `t` of the
group's other episodes that reached turn `t`:

    G_{i,t} = sum_{k=t}^{K_i - 1} r_{i,k}
    T_{i,t} = G_{i,t} - mean_{j in g, j != i, K_j > t} G_{j,t}           (0 where no other episode reached t)
    A_{i,t} = A^O_i + lambda T_{i,t}    on the tokens of turn t

The baseline is a function of the state at turn `t`, not of the episode's own number of turns, so the turn term is an
unbiased estimate of `lambda` times the gradient of the expected sum of turn rewards however the policy decides how
many turns to take. The per-turn-index normalisation (MT-GRPO v2's, `sum_{k >= t}^{K_i} (r_{i,k} - mu_k) / sigma_k`)
subtracts as many means as the episode has turns, a baseline that depends on the decision to take another turn:
verl issue #7244's bias, measured in tests/credit/test_mt_grpo.py and test_turns.py; it is not offered. `T` is not
std-normalised (a scale computed from the group's own returns would reintroduce the dependence), so `lambda` weighs
raw turn rewards against the unit-scale `A^O`.

*How the forms relate.* On episodes of two turns whose turn reward sits on the first (`r_{i,1} = 0`), the general
form's turn-0 term is `n/(n - 1) (r_{i,0} - mean_g r_{., 0})` (`n` the group's size) and its turn-1 term 0, that is
v1's `lambda A^T_i` times `n/(n - 1) (std_g + eps)`: the same direction within each group, not the same scale, and it
does not reduce to v1 exactly (v1 divides by a std, the general form is leave-one-out and unscaled; an episode alone in
its group keeps its whole turn reward, baseline 0, where v1 gives it 0). With one turn
per episode the general form gives `A^O_i + lambda n/(n - 1) (r_{i,0} - mean_g r_{., 0})`, where v1 gives `A^C_i`.
With `lambda = 0` the general form is GRPO (the code's conventions), and so is v1 when every episode took two turns
or more; with zero turn rewards both forms are GRPO.

Conventions (the code's, `grpo_env_trainer._compute_normalized_advantages`): contiguous blocks of `num_generations`
(here `group_id`), the sample std (`std_ddof=1`) and `eps = 1e-4` added outside it; `lambda = 1`
(`turn_advantage_coef`). Observation tokens (off `loss_mask`) get 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from credo.batch import RolloutBatch
from credo.checks import check_choice, check_range
from credo.credit.base import Metrics
from credo.credit.groups import group_advantages
from credo.credit.turns import turn_advantages, turn_starts

TURNS = ("first", "all")


def episode_turns(thought_ids: Tensor, turn_reward: Tensor, response_mask: Tensor) -> tuple[Tensor, Tensor]:
    """(B,) each episode's number of turns `K_i` (its last turn's index + 1; 0 for an empty row) and (B, K) its turn
    rewards `r[i, k]`, read at the first token of each turn (0 past an episode's turns and on a turn without tokens).

    Args:
        thought_ids: (B, T) int64, each token's turn (non-decreasing along a row), -1 off the response.
        turn_reward: (B, T) float, the environment's reward for each token's turn.
        response_mask: (B, T) bool.
    """
    last = torch.nn.functional.pad(torch.where(response_mask, thought_ids, -1), (0, 1), value=-1)  # (B, T + 1)
    turns = last.amax(dim=1) + 1
    width = max(int(turns.max()), 1)
    starts = turn_starts(thought_ids, response_mask)
    rows, positions = starts.nonzero(as_tuple=True)  # one item per (row, turn)
    rewards = torch.zeros(thought_ids.shape[0], width, dtype=turn_reward.dtype, device=turn_reward.device)
    rewards[rows, thought_ids[rows, positions]] = turn_reward[rows, positions]
    return turns, rewards


@dataclass(frozen=True, kw_only=True)
class MTGRPOAdvantage:
    """MT-GRPO's turn-level advantages: the group-normalised outcome plus `turn_coef` times a turn advantage, on the
    first turn from its group-normalised turn reward (`turns="first"`, the public code's v1) or on every turn from
    its return-to-go of turn rewards against the state baseline (`turns="all"`); see the module docstring."""

    reads: ClassVar[frozenset[str]] = frozenset({"thought_ids", "turn_reward"})
    writes: ClassVar[frozenset[str]] = frozenset({"advantages"})

    turns: str = "first"
    """"first": the public code's v1 (the first turn's turn reward, group-normalised; one-turn episodes get the
    normalised sum of turn and outcome rewards) | "all": every turn's return-to-go of turn rewards less the group's
    mean at that turn over the other episodes that reached it (unbiased when the policy chooses how many turns)."""
    turn_coef: float = 1.0
    """lambda, the weight of the turn advantage (the code's `turn_advantage_coef`, 1.0)."""
    std_ddof: int = 1
    """The group std's correction: 1, the sample std (the code's `torch.std`); 0, the population std (credo's GRPO)."""
    eps: float = 1e-4
    """Added to the group std (the code's 1e-4, TRL's; credo's GRPO and verl 1e-6)."""

    def __post_init__(self) -> None:
        check_choice("MTGRPOAdvantage", "turns", self.turns, TURNS)
        check_range("MTGRPOAdvantage", "turn_coef", self.turn_coef, 0.0)
        check_choice("MTGRPOAdvantage", "std_ddof", self.std_ddof, (0, 1))
        check_range("MTGRPOAdvantage", "eps", self.eps, 0.0)

    def __call__(self, batch: RolloutBatch) -> tuple[RolloutBatch, Metrics]:
        missing = [name for name in ("thought_ids", "turn_reward") if getattr(batch, name) is None]
        if missing:
            raise ValueError(f"mt_grpo needs RolloutBatch.thought_ids and turn_reward (a task with an environment: "
                             f"multi-turn episodes and their turn rewards), but {' and '.join(missing)} "
                             f"{'is' if len(missing) == 1 else 'are'} None")
        response, thoughts = batch.response_mask, batch.thought_ids
        dtype = torch.promote_types(batch.rewards.dtype, batch.turn_reward.dtype)
        turns, rewards = episode_turns(thoughts, batch.turn_reward.to(dtype), response)  # (B,), (B, K)
        norm = {"std_ddof": self.std_ddof, "eps": self.eps}
        outcome = group_advantages(batch.rewards.to(dtype), batch.group_id, **norm)  # (B,) A^O
        turn_of = thoughts.clamp(min=0, max=rewards.shape[1] - 1)  # (B, T)
        if self.turns == "first":
            first = group_advantages(rewards[:, 0], batch.group_id, **norm)  # (B,) A^T
            combined = group_advantages(batch.rewards.to(dtype) + rewards[:, 0], batch.group_id, **norm)  # (B,) A^C
            tooled = turns >= 2  # the environment answered the first turn and the episode went on
            turn_term = torch.where(tooled.unsqueeze(1) & (thoughts == 0), first.unsqueeze(1), 0.0)  # (B, T)
            row = torch.where(tooled, outcome, combined)  # (B,)
            turn_abs = first.abs()[tooled]
        else:
            table = turn_advantages(rewards, turns, batch.group_id)  # (B, K) T, 0 past each episode's turns
            turn_term = table.gather(1, turn_of)  # (B, T)
            row = outcome
            taken = torch.arange(table.shape[1], device=turns.device).unsqueeze(0) < turns.unsqueeze(1)
            turn_abs = table.abs()[taken]
        advantages = torch.where(batch.loss_mask, row.unsqueeze(1) + self.turn_coef * turn_term, 0.0)  # (B, T)
        trained = batch.loss_mask.sum().clamp(min=1)
        episodes = (turns > 0).sum().clamp(min=1)
        metrics = {
            "credit/adv_abs_mean": float(advantages.abs().sum() / trained),
            "credit/outcome_adv_abs_mean": float(outcome.abs()[turns > 0].sum() / episodes),
            "credit/turn_adv_abs_mean": float(turn_abs.mean()) if turn_abs.numel() else 0.0,
            "credit/one_turn_frac": float(((turns == 1).sum() / episodes)),
            "credit/turns_mean": float(turns.sum() / episodes),
        }
        return batch.replace(advantages=advantages), metrics
