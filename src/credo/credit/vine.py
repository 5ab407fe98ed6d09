"""Monte-Carlo step advantages (VinePPO, arXiv 2410.01679; github.com/McGill-NLP/VinePPO; docs/methods.md sec. 8).

VinePPO replaces PPO's value network with Monte-Carlo estimates: the value `V(s)` of the state between two
steps of a response is the mean reward of `K` continuations sampled from it (`credo.rollout.values`; the vine
sampler records them per token as `step_values`, the steps as `segment_ids`). Each step's tokens get the
change in estimated value across the step, the response's reward standing for the value after its last step
(the paper's `A(s_t, a_t) = r(s_t, a_t) + V(s_{t+1}) - V(s_t)` with `gamma = 1` and the reward at the end,
`_compute_step_advantages` in the official code):

    A_t = V(s_{i+1}) - V(s_i)        for a token t of step i,    V(s_n) = R (the last step's end)

A response's advantages sum over its steps to `R - V(s_0)`: its outcome against the prompt's value, as a
group baseline gives it, redistributed over the steps that moved the value. With exact values, a failure's
steps before its first error keep or gain value (no negative credit) and the step holding the error carries
its drop.

Normalisation as the paper's trainer (`whiten_advantages: true` in its PPO configs, `masked_whiten`): the
advantages are whitened over the trained tokens, `(A - mean) / sqrt(var + 1e-8)` with the token-weighted mean
and the unbiased variance. The official trainer whitens each (distributed) mini-batch; credo whitens the
rollout batch once, before it is split, as its other estimators normalise. `whiten=False` keeps the raw
value differences (the reading the intent tests pin).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from credo.batch import RolloutBatch
from credo.credit.base import Metrics

WHITEN_EPS = 1e-8
"""Added to the variance before whitening (the official `masked_whiten`)."""


def step_advantages(step_values: Tensor, segment_ids: Tensor, rewards: Tensor, response_mask: Tensor) -> Tensor:
    """(B, T) `V(next step's start) - V(this step's start)` on response tokens, the row's reward after its last
    step; 0 off the response.

    >>> mask = torch.tensor([[True, True, True, False]])
    >>> step_advantages(torch.tensor([[0.5, 0.5, 0.75, 0.0]]), torch.tensor([[0, 0, 1, -1]]), torch.tensor([0.0]),
    ...                 mask).tolist()
    [[0.25, 0.25, -0.75, 0.0]]
    """
    B, T = segment_ids.shape
    steps = int(segment_ids.max().clamp(min=0)) + 2  # one spare column for padding and the step after the last
    spare = steps - 1
    index = torch.where(response_mask, segment_ids, spare)  # (B, T)
    start_values = torch.zeros(B, steps, dtype=step_values.dtype, device=step_values.device)
    start_values.scatter_reduce_(1, index, torch.where(response_mask, step_values, 0.0), reduce="amax",
                                 include_self=False)  # each step's value (the same on all its tokens)
    last = torch.where(response_mask, segment_ids, -1).max(dim=1, keepdim=True).values  # (B, 1)
    following = start_values.gather(1, (index + 1).clamp(max=spare))  # (B, T): the next step's starting value
    after = torch.where(index == last, rewards.unsqueeze(1).to(step_values.dtype), following)
    return torch.where(response_mask, after - step_values, 0.0)


def whiten(values: Tensor, mask: Tensor, eps: float = WHITEN_EPS) -> Tensor:
    """`(x - mean) / sqrt(var + eps)` over `mask` (token-weighted mean, unbiased variance), 0 off `mask`; fewer
    than two tokens are left as they are.

    >>> whiten(torch.tensor([[1.0, 3.0, 9.0]]), torch.tensor([[True, True, False]])).tolist()
    [[-0.7071067690849304, 0.7071067690849304, 0.0]]
    """
    count = int(mask.sum())
    if count < 2:
        return torch.where(mask, values, 0.0)
    mean = values[mask].mean()
    var = (values[mask] - mean).square().sum() / (count - 1)
    return torch.where(mask, (values - mean) * torch.rsqrt(var + eps), 0.0)


@dataclass(frozen=True, kw_only=True)
class VineAdvantage:
    """VinePPO's estimator: each step's tokens get the change in Monte-Carlo value across the step, whitened
    over the batch's trained tokens (module docstring)."""

    reads: ClassVar[frozenset[str]] = frozenset({"segment_ids", "step_values"})
    writes: ClassVar[frozenset[str]] = frozenset({"advantages"})

    whiten: bool = True
    """Whiten the advantages over the trained tokens, as the paper's PPO trainer does; False: raw value changes."""

    def __call__(self, batch: RolloutBatch) -> tuple[RolloutBatch, Metrics]:
        if batch.step_values is None or batch.segment_ids is None:
            raise ValueError("VineAdvantage needs RolloutBatch.step_values and segment_ids (the vine sampler's), "
                             "but they are None")
        raw = step_advantages(batch.step_values, batch.segment_ids, batch.rewards, batch.response_mask)
        mask = batch.loss_mask
        advantages = whiten(raw, mask) if self.whiten else torch.where(mask, raw, 0.0)
        trained = raw[mask]
        metrics = {
            "credit/adv_abs_mean": float(advantages[mask].abs().mean()) if trained.numel() else 0.0,
            "credit/step_adv_mean": float(trained.mean()) if trained.numel() else 0.0,
            "credit/step_adv_std": float(trained.std()) if trained.numel() > 1 else 0.0,
            "credit/negative_token_share": float((trained < 0).float().mean()) if trained.numel() else 0.0,
        }
        return batch.replace(advantages=advantages), metrics
