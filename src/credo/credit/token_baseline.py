"""OTB, the optimal token baseline (arXiv 2602.07078, "The Optimal Token Baseline: Variance Reduction for
Long-Horizon LLM-RL"; verl's `compute_optimal_token_baseline_advantage`, `algorithm.adv_estimator=
optimal_token_baseline`).

GRPO subtracts one baseline, the group's mean reward, from every token of a response. OTB gives every
response position `t` its own baseline: the group's returns weighted by how much gradient energy each
response has accumulated up to `t`, the variance-minimising baseline of a policy gradient whose noise grows
with that energy. For each group and each position `t` (the rows present at `t`):

    w_t = 1 - 2 pi_t + sum_v pi(v)^2                  energy of token t (logit-gradient proxy)
    W_t = sum_{j <= t} w_j                            realized energy of the prefix
    B_t = sum_i G_{i,t} W_{i,t} / (sum_i W_{i,t} + eps)
    A_t = G_t - B_t

`pi_t` is the sampled token's probability and `sum_v pi(v)^2` the sum of squares of the whole next-token
distribution, both the behaviour policy's at the sampling temperature (`old_logp`, `sum_pi_squared`):
`w_t = ||onehot(y_t) - pi||^2`, the squared norm of `d log pi(y_t) / d logits`, which the paper uses in place
of the per-token gradient norm (no backward pass). `w_t >= (1 - pi_t)^2 >= 0`; credo clamps it at 0 against
round-off, so every baseline is a convex combination of the group's returns (up to eps).

credo's reading, settings and choices:
- Returns. credo's rewards are outcome rewards, one per response, undiscounted: `G_t = r` on every token (as
  verl's reward-to-go of a reward on the last token).
- Positions. `t` is the response position; a row is present at `t` where its `loss_mask` is (the trained
  tokens, verl's `response_mask`; the response itself under the group sampler), and only those tokens add
  to `W`. On left-aligned masks this is also what verl's multi-turn `tir_optimal_token_baseline` computes.
- A row alone at its position (fewer than two rows of its group present there: the tail of the single
  longest response beyond the second-longest, or a group of one) has no other response to compare with;
  the formula would make its own return the baseline and its advantage 0. verl's `handle_zero_tail=True`
  (its default, and credo's `zero_tail`) sets that baseline to 0 instead, `A_t = G_t`; `zero_tail=False`
  gives those tokens `A_t = 0`.
- A group whose rewards are all equal gets `A = 0` on every token, as in every credo estimator. verl gives
  it `G eps / (sum W + eps)` (about 1e-8) at shared positions and, under `handle_zero_tail`, the full `G` on
  a lone row's tokens: a credit or blame the group's outcomes do not support, given for length alone.
  Elsewhere credo computes what verl computes (tests/credit/test_token_baseline.py runs verl's function).
- eps = 1e-8, verl's. No normalisation of the advantages (no std scaling, as in verl and the paper); no
  rollout importance weights (verl scales `w` by `rollout_is_weights^2` when its rollout correction is on;
  credo's behaviour log-probs are the trainer's own).
- The loss is verl's default that the paper's verl recipe uses: PPO clip 0.2 with a token mean over the
  batch (`credo.methods`, `otb`).

The trainer scores `sum_pi_squared` with the behaviour log-probs because this estimator `reads` it
(`credo.logprobs.STATISTICS`), which also takes the trainer off its on-policy shortcut: `old_logp` must hold
the behaviour log-probs before credit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from credo.batch import RolloutBatch
from credo.checks import check_range
from credo.credit.base import Metrics
from credo.credit.groups import group_spread


def token_energy(old_logp: Tensor, sum_pi_squared: Tensor, mask: Tensor) -> Tensor:
    """(B, T) `w_t = 1 - 2 pi_t + sum_v pi(v)^2` (clamped at 0) on `mask`, 0 off it.

    >>> pi = torch.tensor([[1.0, 0.5, 0.5]])
    >>> token_energy(pi.log(), torch.tensor([[1.0, 0.5, 0.3]]), torch.tensor([[True, True, False]])).tolist()
    [[0.0, 0.5, 0.0]]
    """
    energy = (1.0 - 2.0 * old_logp.exp() + sum_pi_squared).clamp(min=0.0)
    return torch.where(mask, energy, 0.0)


def token_baselines(
    rewards: Tensor, group_id: Tensor, energy: Tensor, mask: Tensor, *, eps: float = 1e-8
) -> tuple[Tensor, Tensor]:
    """`(baseline, alone)`, both (B, T): OTB's `B_t = sum_i r_i W_{i,t} / (sum_i W_{i,t} + eps)` over the rows
    of each group present at `t` (`mask`), `W` the cumulative sum of `energy` along each row; and where a
    row is the only one of its group present (its baseline is then its own reward). 0 / False off `mask`."""
    realized = torch.where(mask, energy.cumsum(dim=1), 0.0)  # W_{i,t}
    _, inverse = torch.unique(group_id, return_inverse=True)
    shape = (int(inverse.max()) + 1, mask.shape[1])
    weighted = torch.zeros(shape, dtype=energy.dtype, device=energy.device)
    weighted.index_add_(0, inverse, rewards.to(energy.dtype).unsqueeze(1) * realized)  # sum_i r_i W_{i,t}
    total = torch.zeros_like(weighted).index_add_(0, inverse, realized)  # sum_i W_{i,t}
    present = torch.zeros_like(weighted).index_add_(0, inverse, mask.to(energy.dtype))
    baseline = torch.where(mask, (weighted / (total + eps))[inverse], 0.0)
    return baseline, mask & (present < 2)[inverse]


@dataclass(frozen=True, kw_only=True)
class OptimalTokenBaseline:
    """OTB's estimator: each token's reward minus its group's energy-weighted baseline at its position
    (`token_baselines`; module docstring).

    Metrics: `credit/adv_abs_mean` (mean |A| over the trained tokens), `credit/lone_token_share` (the share of
    trained tokens alone at their position) and `credit/baseline_shift` (mean |B_t - the group's mean reward|
    over the other trained tokens of groups whose rewards differ: how far OTB moves from Dr. GRPO's baseline).
    """

    reads: ClassVar[frozenset[str]] = frozenset({"sum_pi_squared"})
    writes: ClassVar[frozenset[str]] = frozenset({"advantages"})

    zero_tail: bool = True
    """Where a row is alone at its position: baseline 0, `A = G` (verl's `handle_zero_tail`); False: `A = 0`."""
    eps: float = 1e-8
    """Added to the group's summed realized energy before dividing (verl's `epsilon`)."""

    def __post_init__(self) -> None:
        check_range("OptimalTokenBaseline", "eps", self.eps, 0.0, low_open=True)

    def __call__(self, batch: RolloutBatch) -> tuple[RolloutBatch, Metrics]:
        if batch.sum_pi_squared is None:
            raise ValueError("OptimalTokenBaseline needs RolloutBatch.sum_pi_squared (the behaviour policy's), "
                             "but it is None")
        mask = batch.loss_mask
        energy = token_energy(batch.old_logp, batch.sum_pi_squared, mask)
        baseline, alone = token_baselines(batch.rewards, batch.group_id, energy, mask, eps=self.eps)
        returns = torch.where(mask, batch.rewards.to(baseline.dtype).unsqueeze(1), 0.0)  # G_t = r
        lone_baseline = 0.0 if self.zero_tail else returns
        advantages = returns - torch.where(alone, lone_baseline, baseline)
        _, inverse, counts = torch.unique(batch.group_id, return_inverse=True, return_counts=True)
        constant = group_spread(batch.rewards, inverse, counts.numel())[inverse] == 0  # (B,)
        advantages = torch.where(constant.unsqueeze(1), 0.0, advantages)
        group_mean = batch.rewards.new_zeros(counts.numel()).index_add_(0, inverse, batch.rewards) / counts
        shared = mask & ~alone & ~constant.unsqueeze(1)
        shift = (baseline - group_mean[inverse].unsqueeze(1)).abs()[shared]
        metrics = {
            "credit/adv_abs_mean": float(advantages[mask].abs().mean()) if mask.any() else 0.0,
            "credit/lone_token_share": float(alone[mask].float().mean()) if mask.any() else 0.0,
            "credit/baseline_shift": float(shift.mean()) if shift.numel() else 0.0,
        }
        return batch.replace(advantages=advantages), metrics
