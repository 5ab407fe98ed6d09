"""Token-id rows as one padded batch: prompts padded on the left (generation continues them), responses and scored
sequences on the right; each with its mask of real tokens."""

from __future__ import annotations

import torch
from torch import Tensor


def left_pad(rows: list[list[int]], pad: int) -> tuple[Tensor, Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r) :] = True
    return ids, mask


def right_pad(rows: list[list[int]], pad: int) -> tuple[Tensor, Tensor]:
    width = max(1, max(len(r) for r in rows))
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = True
    return ids, mask
