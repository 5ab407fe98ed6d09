"""FR3E's adaptive advantage modulation (arXiv 2507.07017; github.com/Zheng0428/FR3E; docs/methods.md sec. 12).

The fr3e sampler (`credo.rollout.samplers.fr3e`) draws groups of continuations from the states `S_0` (the prompt)
and `S_j` (the prompt and a kept response's tokens before its `j`-th highest-entropy position), and records each
row's state as `branch_id` (the kept response) and `prefix_len` (where the state ends). `FirstReturnAdvantage`
credits them: `V(S_j)` is the mean reward of the continuations of `S_j`, and the change of value into `S_j`

    Delta_0 = 1 - V(S_0),    Delta_j = V(S_j) - V(S_{j-1})    (j >= 1),

sharpened over one response's states (`sharpen`, the code's `sharpening_coeff` with alpha = 1.5)

    Delta_j <- sign(Delta_j) |Delta_j|^alpha / sum_i |Delta_i|^alpha,

divides the group-centred reward of every continuation `i` of `S_j`, on its tokens after the prefix:

    A_i = (r_i - mean_{S_j} r) / exp(Delta_j).

A state whose value rose over its predecessor's gets its advantages damped, one whose value fell gets them
amplified (the paper: keep exploring where the policy already improves, press where it went wrong); every sign
is the group's, only the size changes.

The code's settings (`core_algos.py::compute_srpo_outcome_advantage` at commit 509da70): centred rewards without
std scaling (`adv_no_use_std`), sharpening on. Where credo chose:
- `V(S_j)` is the mean reward of all of `S_j`'s continuations. The code takes the share of positive centred
  rewards among the state groups its dynamic sampling kept: the same for binary rewards on a mixed group, but a
  dropped state is skipped (the next state's Delta is taken from the one before it). Credo keeps every state
  group; one all right or all wrong has advantage 0 and counts in the token mean's normaliser
  (`rollout.dynamic_sampling` does not apply).
- Sharpening of a response whose Deltas are all 0 leaves them 0 (the code divides 0 by 0).
- `Delta_0 = 1 - V(S_0)` is the code's value change for the prompt's state, which has no predecessor: the
  prompt's continuations are damped unless the prompt is solved. With no branch point the advantages are the
  centred rewards times `exp(-1)` (sharpened) or `exp(V(S_0) - 1)`, not GRPO's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from credo.batch import RolloutBatch
from credo.credit.base import Metrics
from credo.credit.groups import GroupAdvantage
from credo.credit.resets import suffix_mask

SHARPEN_POWER = 1.5
"""The code's `sharpening_coeff` exponent alpha."""


def value_changes(rewards: Tensor, branch_id: Tensor, prefix_len: Tensor, sharpen: bool) -> Tensor:
    """(B,) the value change `Delta` into each row's state (module docstring), sharpened over its response's
    states with `sharpen`. A state is a `(branch_id, prefix_len)` pair, its value the mean reward of its rows;
    a response's states follow one another by prefix length, the first (the prompt's) against 1."""
    states, inverse = torch.unique(torch.stack([branch_id, prefix_len], dim=1), dim=0, return_inverse=True)
    count = torch.zeros(len(states), dtype=rewards.dtype, device=rewards.device).index_add_(
        0, inverse, torch.ones_like(rewards))
    values = torch.zeros_like(count).index_add_(0, inverse, rewards) / count  # (S,) sorted by branch, then prefix
    first = torch.ones(len(states), dtype=torch.bool, device=rewards.device)
    first[1:] = states[1:, 0] != states[:-1, 0]
    delta = torch.where(first, 1.0 - values, values - values.roll(1))
    if sharpen:
        power = delta.abs() ** SHARPEN_POWER
        _, response = torch.unique(states[:, 0], return_inverse=True)
        total = torch.zeros_like(power).index_add_(0, response, power)[response]
        delta = torch.where(total > 0, delta.sign() * power / total.clamp(min=torch.finfo(power.dtype).tiny), 0.0)
    return delta[inverse]


@dataclass(frozen=True, kw_only=True)
class FirstReturnAdvantage(GroupAdvantage):
    """FR3E's estimator: each state group's centred rewards divided by `exp` of the state's (sharpened) value
    change, on the tokens after the state's prefix (module docstring)."""

    reads: ClassVar[frozenset[str]] = frozenset({"prefix_len", "branch_id"})
    writes: ClassVar[frozenset[str]] = frozenset({"advantages", "loss_mask"})

    scale: str = "none"
    """The code's `adv_no_use_std`: rewards centred on their state group's mean, not scaled by its std."""
    sharpen: bool = True
    """Sharpen the value changes over a response's states (the code's `sharpen`, on in its script)."""

    def loss_mask(self, batch: RolloutBatch, trace_mask: Tensor | None, adv: Tensor) -> tuple[Tensor, Metrics]:
        return batch.loss_mask & suffix_mask(batch.response_mask, batch.prefix_len), {}

    def __call__(self, batch: RolloutBatch) -> tuple[RolloutBatch, Metrics]:
        if batch.prefix_len is None or batch.branch_id is None:
            raise ValueError("FirstReturnAdvantage needs RolloutBatch.prefix_len and branch_id (the fr3e sampler's), "
                             "but they are None")
        credited, metrics = super().__call__(batch)
        delta = value_changes(batch.rewards, batch.branch_id, batch.prefix_len, self.sharpen)
        factor = torch.exp(-delta)  # (B,)
        metrics.update({
            "credit/fr3e_factor_mean": float(factor.mean()),
            "credit/fr3e_value_rise_share": float((delta > 0).float().mean()),
        })
        return credited.replace(advantages=credited.advantages * factor.unsqueeze(1)), metrics
