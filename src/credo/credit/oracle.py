"""Oracle credit: blame from a step checker, the yardsticks for critic-free credit methods.

Two yardsticks, both at GRPO's credit scale on GRPO's groups (docs/methods.md, "The oracles").

**Per-decision blame** (`StepOracleAdvantage`, method `oracle_steps`): each thought is credited by its own
correctness, whatever the outcome, normalised as GRPO normalises rewards but within each decision class, the
thought `j` of the responses to one prompt (group `g`):

    c[b, j] = 1 if the checker judges thought j of row b right, else 0
    A[b, t] = (c[b, j] - mean_{b' in g reaching j} c[b', j]) / (std_{b' in g reaching j} c[b', j] + eps),  j = thought of t

so a right thought in a failure gains, a wrong thought in a lucky success loses, and a class whose thoughts all
agree (every sample right at a near-deterministic step) gets 0, as a group whose rewards agree does under GRPO.
With one thought per response judged by the outcome it is GRPO exactly. Where some thoughts decide nothing (an
agent's turn that checks its tool's value: `thought_judged` leaves them out), they join no class and get 0.

**First-error blame** (`OracleBlameAdvantage`, method `oracle_blame`). On a task whose checker knows each failed
response's first wrong step (the testbed), GRPO's advantages are kept and a failed response is blamed only from
that step onward:

    credit_mask[b, t] = response_mask[b, t] and t >= blame_start[b]      for a failed row b

A correct row with a wrong step inside (a lucky success) gets credit on all its tokens (`lucky="all"`)
or only before its wrong step (`lucky="before"`, nothing on and after the step). Failed rows without a
located step (`blame_start = -1`) are blamed whole. `norm="response"` keeps the unblamed tokens in the
loss mask with advantage 0 (each blamed token weighs what it would under GRPO); `norm="trained"` drops
them from the loss mask, so a per-sequence mean spreads the row's advantage over the blamed tokens only.
docs/testbed.md sec. 3 reports this in a hard regime: greedy 89.8 against 76.9 for GRPO at equal tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from credo.batch import RolloutBatch
from credo.checks import check_choice, check_range
from credo.credit.base import Metrics
from credo.credit.groups import SCALES, GroupAdvantage, failed_rows, group_advantages
from credo.credit.turns import turn_starts

LUCKY = ("all", "before")
NORMS = ("response", "trained")


def blame_mask(response_mask: Tensor, blame_start: Tensor, failed: Tensor, lucky: str = "all") -> Tensor:
    """(B, T) bool: the response tokens that receive their row's advantage under oracle blame."""
    check_choice("blame_mask", "lucky", lucky, LUCKY)
    positions = torch.arange(response_mask.shape[1], device=response_mask.device).unsqueeze(0)  # (1, T)
    located = (blame_start >= 0).unsqueeze(1)
    after = located & (positions >= blame_start.unsqueeze(1))  # on and after the first wrong step
    blamed = torch.where(located, after, True)  # a failure without a located step: all of it
    kept = ~after if lucky == "before" else torch.ones_like(after)
    return response_mask & torch.where(failed.unsqueeze(1), blamed, kept)


@dataclass(frozen=True, kw_only=True)
class OracleBlameAdvantage(GroupAdvantage):
    """GRPO's advantages, given to a failed response only from its first wrong step onward."""

    reads: ClassVar[frozenset[str]] = frozenset({"blame_start"})
    writes: ClassVar[frozenset[str]] = frozenset({"advantages", "loss_mask"})

    lucky: str = "all"
    """A correct response with a wrong step: credit on "all" its tokens, or only "before" the step."""
    norm: str = "response"
    """"response": unblamed tokens stay in the loss normaliser with advantage 0 | "trained": they leave it."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("OracleBlameAdvantage", "lucky", self.lucky, LUCKY)
        check_choice("OracleBlameAdvantage", "norm", self.norm, NORMS)

    def loss_mask(self, batch: RolloutBatch, trace_mask: Tensor | None, adv: Tensor) -> tuple[Tensor, Metrics]:
        blamed = self._blamed(batch)
        failed = failed_rows(batch)
        share = blamed[failed].sum() / batch.response_mask[failed].sum().clamp(min=1)
        metrics = {"credit/blamed_token_frac": float(share)}
        return (blamed if self.norm == "trained" else batch.loss_mask), metrics

    def credit_mask(self, batch: RolloutBatch, loss_mask: Tensor, adv: Tensor) -> Tensor:
        return loss_mask if self.norm == "trained" else self._blamed(batch)

    def _blamed(self, batch: RolloutBatch) -> Tensor:
        if batch.blame_start is None:
            raise ValueError("oracle_blame needs RolloutBatch.blame_start (a task with a step checker), but it is None")
        return batch.loss_mask & blame_mask(batch.response_mask, batch.blame_start, failed_rows(batch), self.lucky)


def decision_advantages(thought_ids: Tensor, thought_wrong: Tensor, group_id: Tensor, response_mask: Tensor, *,
                        scale: str = "std", std_ddof: int = 0, eps: float = 1e-6,
                        thought_judged: Tensor | None = None) -> Tensor:
    """(B, T) per-decision advantages: each thought's correctness `c = not wrong`, group-normalised within its
    decision class (the rows of one group whose thought `j` was judged; `group_advantages` with the class as the
    group), on every token of the thought; 0 off the response and on thoughts that were not judged.

    Args:
        thought_ids: (B, T) int64, each token's thought (0-based, non-decreasing along a row), -1 off the response.
        thought_wrong: (B, T) bool, the tokens of the thoughts the checker judges wrong.
        group_id: (B,) int64, each row's group (prompt).
        response_mask: (B, T) bool.
        scale: as for `group_advantages` ("none": centred only, unnormalised).
        std_ddof: as for `group_advantages`.
        eps: as for `group_advantages`.
        thought_judged: (B, T) bool, the tokens of the thoughts the checker judged (None: all of them).
    """
    judged = response_mask if thought_judged is None else response_mask & thought_judged
    starts = turn_starts(thought_ids, judged)  # the first token of each judged thought
    rows, positions = starts.nonzero(as_tuple=True)  # one item per (row, thought)
    if rows.numel() == 0:
        return torch.zeros(response_mask.shape, device=response_mask.device)
    thoughts = thought_ids[rows, positions]  # (N,)
    _, groups = torch.unique(group_id, return_inverse=True)
    width = int(thoughts.max()) + 1
    classes = groups[rows] * width + thoughts  # (N,) decision class (group, thought)
    right = (~thought_wrong[rows, positions]).float()  # (N,)
    item = group_advantages(right, classes, scale=scale, std_ddof=std_ddof, eps=eps)  # (N,)
    table = torch.zeros(response_mask.shape[0], width, device=response_mask.device)  # (B, J)
    table[rows, thoughts] = item
    return torch.where(judged, table.gather(1, thought_ids.clamp(min=0, max=width - 1)), 0.0)


@dataclass(frozen=True, kw_only=True)
class StepOracleAdvantage:
    """Per-decision perfect blame: every thought credited by its own correctness, at GRPO's scale
    (`decision_advantages`); the loss mask stays the response, so each token weighs what it does under GRPO."""

    reads: ClassVar[frozenset[str]] = frozenset({"thought_ids", "thought_wrong"})
    writes: ClassVar[frozenset[str]] = frozenset({"advantages"})

    scale: str = "std"
    """"std": each decision class normalised to unit std (GRPO's scale) | "none": centred only | "batch_std"."""
    std_ddof: int = 0
    """0: population std (credo's GRPO); 1: sample std."""
    eps: float = 1e-6
    """Added to each class's std."""

    def __post_init__(self) -> None:
        check_choice("StepOracleAdvantage", "scale", self.scale, SCALES)
        check_choice("StepOracleAdvantage", "std_ddof", self.std_ddof, (0, 1))
        check_range("StepOracleAdvantage", "eps", self.eps, 0.0)

    def __call__(self, batch: RolloutBatch) -> tuple[RolloutBatch, Metrics]:
        if batch.thought_ids is None or batch.thought_wrong is None:
            raise ValueError("oracle_steps needs RolloutBatch.thought_ids and thought_wrong (a task with a step "
                             "checker), but they are None")
        adv = decision_advantages(batch.thought_ids, batch.thought_wrong, batch.group_id, batch.response_mask,
                                  scale=self.scale, std_ddof=self.std_ddof, eps=self.eps,
                                  thought_judged=batch.thought_judged)
        advantages = adv * batch.loss_mask  # (B, T)
        response = batch.response_mask
        failed = failed_rows(batch).unsqueeze(1) & response  # (B, T)
        right = response & ~batch.thought_wrong
        metrics = {
            "credit/adv_abs_mean": float(advantages.abs().sum() / response.sum().clamp(min=1)),
            "credit/wrong_token_frac": float(batch.thought_wrong.sum() / response.sum().clamp(min=1)),
            "credit/failure_right_gain_frac": float(((advantages > 0) & failed & right).sum()
                                                     / (failed & right).sum().clamp(min=1)),
        }
        return batch.replace(advantages=advantages), metrics
