"""Shared test helpers: random rollout batches with padding, variable lengths and mixed group sizes."""

from __future__ import annotations

import torch

from credo.batch import RolloutBatch
from credo.demo import thoughts_as_turns


def random_batch(
    seed: int,
    *,
    group_sizes: tuple[int, ...] | None = None,
    width: int | None = None,
    dtype: torch.dtype = torch.float32,
    binary_rewards: bool = True,
) -> RolloutBatch:
    """A batch with every optional field a method may read, shuffled group ids and ragged rows; its thoughts are also
    the turns of multi-turn episodes (`credo.demo.thoughts_as_turns`: anchor states shared within a group and lone
    ones, no turn rewards, so the turn-level methods' credit is the outcome's)."""
    gen = torch.Generator().manual_seed(seed)
    if group_sizes is None:
        num_groups = int(torch.randint(1, 5, (1,), generator=gen))
        group_sizes = tuple(int(torch.randint(1, 7, (1,), generator=gen)) for _ in range(num_groups))
    B = sum(group_sizes)
    T = width if width is not None else int(torch.randint(1, 40, (1,), generator=gen))
    lengths = torch.randint(0, T + 1, (B,), generator=gen)
    lengths[0] = T  # at least one full row
    response_mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
    ids = torch.tensor([g * 7 + 3 for g, size in enumerate(group_sizes) for _ in range(size)])
    perm = torch.randperm(B, generator=gen)
    if binary_rewards:
        rewards = (torch.rand(B, generator=gen) < 0.5).to(dtype)
    else:
        rewards = torch.rand(B, generator=gen).to(dtype)
    correct = rewards >= 1.0
    success = torch.where(correct, 0.0, torch.randint(0, 4, (B,), generator=gen) / 3.0).to(dtype)
    prefix = (torch.rand(B, generator=gen) * lengths * (torch.rand(B, generator=gen) < 0.5)).long()
    fields = dict(
        response_ids=torch.randint(0, 100, (B, T), generator=gen),
        response_mask=response_mask,
        group_id=ids[perm],
        rewards=rewards,
        old_logp=torch.where(response_mask, -torch.rand(B, T, generator=gen, dtype=dtype) * 3, 0.0),
        entropy=torch.where(response_mask, torch.rand(B, T, generator=gen, dtype=dtype) * 2, 0.0),
        ref_logp=torch.where(response_mask, -torch.rand(B, T, generator=gen, dtype=dtype) * 3, 0.0),
        correct=correct,
        prefix_len=prefix,
        revision_success=success,
        edit_mask=response_mask & (torch.rand(B, T, generator=gen) < 0.4),
    )
    steps = torch.rand(B, T, generator=gen) < 0.2  # a new step starts here
    segments = torch.where(response_mask, steps.long().cumsum(dim=1) - steps[:, :1].long(), -1)
    values = torch.rand(B, T + 1, generator=gen, dtype=dtype).gather(1, segments.clamp(min=0))  # one per step
    fields.update(segment_ids=segments, step_values=torch.where(response_mask, values, 0.0))
    wrong_steps = torch.rand(B, T + 1, generator=gen) < 0.4  # the step checker's verdict on each step
    fields.update(thought_ids=segments, thought_wrong=response_mask & wrong_steps.gather(1, segments.clamp(min=0)))
    fields.update(cutpoint_mask=response_mask & (fields["old_logp"].exp() < 0.9))  # SPO: sampled below p 0.9
    blame = (torch.rand(B, generator=gen) * (lengths + 2)).long() - 1  # -1 (no wrong step) .. length
    pi = fields["old_logp"].exp()  # the sampled token's probability: sum_v pi_v^2 in [pi^2, pi^2 + (1 - pi)^2]
    spread = torch.rand(B, T, generator=gen, dtype=dtype) * (1 - pi).square()
    fields.update(sum_pi_squared=torch.where(response_mask, pi.square() + spread, 0.0))
    fields.update(branch_id=ids[perm] % 3)  # FR3E: the kept response whose state a row continues
    fields.update(edge_mask=response_mask & (torch.rand(B, T, generator=gen) < 0.6))  # SPO-tree: carried edges
    fields.update(tree_id=torch.randint(0, 2, (B,), generator=gen))  # Tree-GRPO: one of two trees of its prompt
    gains = (torch.rand(B, T + 1, generator=gen, dtype=dtype) - 0.3).gather(1, segments.clamp(min=0))  # one per turn
    fields.update(info_gain=torch.where(response_mask, gains, 0.0))  # IGPO: each turn's information gain
    return thoughts_as_turns(RolloutBatch(**fields, blame_start=blame.clamp(max=lengths)))


def moved_logp(batch: RolloutBatch, seed: int, drift: float = 0.3) -> torch.Tensor:
    """Current log-probs a few optimiser steps after `old_logp` (a leaf that requires grad)."""
    gen = torch.Generator().manual_seed(10_000 + seed)
    noise = torch.randn(batch.old_logp.shape, generator=gen, dtype=batch.old_logp.dtype)
    return (batch.old_logp + drift * noise).requires_grad_()
