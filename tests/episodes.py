"""Random multi-turn episodes for the turn-level methods' tests (GiGPO, IGPO): ragged turns of policy tokens, each
followed by an observation but the last, and each turn's fields as the batch lays them out."""

from __future__ import annotations

from typing import Any

import torch

from credo.batch import RolloutBatch


def draw_outcomes(kind: str, size: int, gen: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """(size,) episodes' outcomes: "binary" (0 or 1), "dyadic" ({0, 0.25, .., 1}) or "uniform" ([0, 1))."""
    if kind == "binary":
        return (torch.rand(size, generator=gen) < 0.5).to(dtype)
    if kind == "dyadic":
        return torch.randint(0, 5, (size,), generator=gen).to(dtype) / 4
    return torch.rand(size, generator=gen, dtype=dtype)


def episode_batch(seed: int, *, sizes: tuple[int, ...] | None = None, max_turns: int = 5, states: int | None = None,
                  turn_rewards: str = "random", outcome: str = "binary", one_turn: bool = False,
                  empty_rows: bool = False, dtype: torch.dtype = torch.float64) -> RolloutBatch:
    """A batch of multi-turn episodes with ragged turn counts and lengths, shuffled groups whose anchor numbers
    coincide (state `s` of one prompt and of another carry the same number), states revisited within an episode,
    lone anchor states and lone episodes.

    turn_rewards: "random" (half the turns 0, the rest in [-1, 1]), "dyadic" (in {0, +-0.5, +-0.25}) or "none".
    outcome: "binary" (0 or 1), "uniform" ([0, 1)) or "dyadic" ({0, 0.25, .., 1})."""
    gen = torch.Generator().manual_seed(seed)

    def draw(high: int, low: int = 0) -> int:
        return int(torch.randint(low, high, (1,), generator=gen))

    if sizes is None:
        sizes = tuple(draw(6, 1) for _ in range(draw(5, 1)))
    states = states if states is not None else max_turns + 2
    spans: list[list[tuple[int, int, int, float]]] = []  # per row: (policy tokens, observation tokens, anchor, reward)
    group_of: list[int] = []
    for g, size in enumerate(sizes):
        for _ in range(size):
            turns = 1 if one_turn else draw(max_turns + 1, 1)
            if empty_rows and draw(8) == 0:
                turns = 0
            row = []
            for t in range(turns):
                anchor = 0 if one_turn else draw(states)
                reward = 0.0
                if turn_rewards == "random" and draw(2):
                    reward = float(torch.rand(1, generator=gen)) * 2 - 1
                elif turn_rewards == "dyadic":
                    reward = [0.0, 0.5, -0.5, 0.25, -0.25][draw(5)]
                row.append((draw(5, 1), draw(4) if t < turns - 1 else 0, anchor, reward))
            spans.append(row)
            group_of.append(g * 3 + 1)
    B = len(spans)
    width = max(1, max(sum(p + o for p, o, _, _ in row) for row in spans)) + draw(3)
    ids = torch.full((B, width), -1)
    mask = torch.zeros(B, width, dtype=torch.bool)
    policy = torch.zeros(B, width, dtype=torch.bool)
    anchor = torch.full((B, width), -1)
    reward = torch.zeros(B, width, dtype=dtype)
    for b, row in enumerate(spans):
        at = 0
        for t, (p, o, s, r) in enumerate(row):
            ids[b, at:at + p + o], anchor[b, at:at + p + o], reward[b, at:at + p + o] = t, s, r
            policy[b, at:at + p] = True
            mask[b, at:at + p + o] = True
            at += p + o
    rewards = draw_outcomes(outcome, B, gen, dtype)
    perm = torch.randperm(B, generator=gen)  # groups interleaved
    fields = dict(response_ids=torch.randint(0, 50, (B, width), generator=gen), response_mask=mask, loss_mask=policy,
                  group_id=torch.tensor(group_of), rewards=rewards, correct=rewards >= 1,
                  old_logp=torch.where(mask, -torch.rand(B, width, generator=gen, dtype=dtype), 0.0),
                  thought_ids=ids, thought_wrong=torch.zeros(B, width, dtype=torch.bool), turn_anchor=anchor,
                  turn_reward=reward)
    return RolloutBatch(**{k: v[perm] for k, v in fields.items()})


def turns_of(batch: RolloutBatch) -> list[list[dict[str, Any]]]:
    """Each row's turns in order: the turn's anchor, reward (the turn's own) and policy tokens."""
    out = []
    for b in range(batch.size):
        turns: list[dict[str, Any]] = []
        for t in range(batch.width):
            if not batch.response_mask[b, t]:
                continue
            if not turns or turns[-1]["id"] != int(batch.thought_ids[b, t]):
                turns.append({"id": int(batch.thought_ids[b, t]), "anchor": int(batch.turn_anchor[b, t]),
                              "reward": float(batch.turn_reward[b, t]), "tokens": []})
            if batch.loss_mask[b, t]:
                turns[-1]["tokens"].append(t)
        out.append(turns)
    return out
