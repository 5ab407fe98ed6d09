"""A worked example: the per-token credit each method gives to the responses of one toy group.

The toy group: one prompt, four responses of six tokens with rewards 1, 0, 1, 0. The credit of token `t`
of row `b` is `-B * dL/dlogp[b, t]`, the coefficient with which the update pushes that token's log-prob
up (positive) or down (negative); for GRPO on the first mini-batch it is `A_b / n_b`.

Two moments are shown. On the first mini-batch of a rollout batch (`pi = pi_old`) the trace methods
equal GRPO; by the fourth mini-batch the policy has moved and their traces act. Each method sees the
batch its sampler would produce: the fields its sampler records take the values the sampler declares for this
group (`RecordedField.example`): for RRPO/SRPO the four rows continue a failed seed's first two tokens
(`prefix_len = 2`); for IBPO, two of three revisions of row 1 verify (s = 2/3) and changed its tokens
4-5, while row 3 could not be repaired (s = 0); for vine, each response is three steps of two tokens whose
Monte-Carlo values drop across each failure's wrong step. The trainer's fields are filled for every method: for
oracle blame, the step checker puts the first wrong step of row 1 at token 3 and of row 3 at token 5, and for
per-decision blame it judges row 1's last thought right again (three thoughts of two tokens a row); S-trace
keeps the top-20% entropy tokens; for OTB, each position's sum of squared probabilities puts the mass the sampled
token leaves on the others at random. For the turn-level methods (MT-GRPO, GiGPO) the three thoughts are an
episode's turns (`thoughts_as_turns`): all four rows take turn 0 from the environment's start state, rows 0 and 2
take turn 1 from one state and rows 1 and 3 from another, and each row takes turn 2 from its own; the environment
gives no turn rewards.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from credo.batch import RolloutBatch
from credo.methods import METHODS, Method
from credo.rollout.samplers import SAMPLERS

TOKENS = 6
REWARDS = (1.0, 0.0, 1.0, 0.0)
THOUGHTS = torch.arange(TOKENS) // 2
"""Three thoughts of two tokens each; the step checker finds row 1's thought 1 and row 3's thought 2 wrong (the
failures' first wrong steps, `blame_start` 2 and 4; row 1's last thought is right again)."""


@dataclass(frozen=True)
class CreditTable:
    """Per-token credit `(methods, rows, T)` for two moments of a rollout batch."""

    methods: list[str]
    first_minibatch: Tensor
    later_minibatch: Tensor


def thoughts_as_turns(batch: RolloutBatch) -> RolloutBatch:
    """The batch's thoughts as the turns of multi-turn episodes, where it has no turn fields (`turn_anchor`,
    `turn_reward`): each row's thought `t` is its turn `t`, and no turn rewards. The rows of a group diverge over
    the turns: turn 0 is taken from the group's start state, turn `t` from a state shared by the rows whose indices
    agree modulo `2^t`, so states are shared within a group at early turns and lone at late ones (or where one row
    alone reached a shared state)."""
    if batch.turn_anchor is not None:
        return batch
    B = batch.size
    turns = batch.thought_ids.clamp(min=0)
    branch = torch.arange(B, device=turns.device).unsqueeze(1) % 2 ** turns.clamp(max=B.bit_length())  # (B, T)
    anchor = torch.where(batch.response_mask, turns * B + branch, -1)
    return batch.replace(turn_anchor=anchor, turn_reward=torch.zeros_like(batch.old_logp))


def toy_batch(method: Method) -> RolloutBatch:
    """The toy group as `method`'s sampler would hand it to the credit estimator."""
    gen = torch.Generator().manual_seed(0)
    B = len(REWARDS)
    response_mask = torch.ones(B, TOKENS, dtype=torch.bool)
    old_logp = -torch.rand(B, TOKENS, generator=gen) * 1.5
    entropy = torch.rand(B, TOKENS, generator=gen) * 2.0
    pi = old_logp.exp()  # the sampled token's probability; the rest of the mass spread at random (OTB)
    sum_pi_squared = pi**2 + (1 - pi) ** 2 * torch.rand(B, TOKENS, generator=gen)
    return thoughts_as_turns(RolloutBatch(
        response_ids=torch.randint(0, 50, (B, TOKENS), generator=gen),
        response_mask=response_mask,
        group_id=torch.zeros(B, dtype=torch.long),
        rewards=torch.tensor(REWARDS),
        old_logp=old_logp,
        entropy=entropy,
        sum_pi_squared=sum_pi_squared,
        blame_start=torch.tensor([-1, 2, -1, 4]),
        thought_ids=THOUGHTS.repeat(B, 1),
        thought_wrong=THOUGHTS.repeat(B, 1) == torch.tensor([[-1], [1], [-1], [2]]),
        recorded={name: field.example() for name, field in method.sampler.records.items()},
    ))


def recorded_on_the_toy_group() -> list[str]:
    """One line per sampler that records fields: each field on the toy group (a row field's values, a token
    field's meaning), as the sampler declares it."""
    lines = []
    for name in SAMPLERS:
        fields = SAMPLERS.get(name).records
        if fields:
            shown = [f"{field} = {[round(v, 3) for v in declared.example().tolist()]}" if declared.shape == "row"
                     else f"{field} ({declared.meaning})" for field, declared in fields.items()]
            lines.append(f"{name} sampler: {'; '.join(shown)}")
    return lines


def token_credit(method: Method, drift: float) -> Tensor:
    """(B, T) credit `-B dL/dlogp` of `method` on its toy batch, the policy moved by `drift` per token."""
    batch, _ = method.credit(toy_batch(method))
    gen = torch.Generator().manual_seed(1)
    shift = drift * torch.randn(batch.old_logp.shape, generator=gen)
    logp = (batch.old_logp + shift).requires_grad_()
    method.policy_loss(logp, batch).loss.backward()
    return -batch.size * logp.grad


def credit_table(drift: float = 0.15) -> CreditTable:
    names = list(METHODS)
    first = torch.stack([token_credit(METHODS.get(n), 0.0) for n in names])
    later = torch.stack([token_credit(METHODS.get(n), drift) for n in names])
    return CreditTable(names, first, later)
