"""IBPO: revision-based counterfactuals that shape rewards and mask tokens (arXiv 2605.16302).

For each failed response `y_i`, the policy writes `K-1` revisions of it, each given the problem, `y_i` and a
sibling reference. `s_i` is the share of revisions that verify correct (0 for a correct `y_i`). The
shaped reward, before group normalisation, is

    R'_i = r_i + lam * (1 - r_i) * s_i        (lam = 0.6: a correct answer still outranks any failure)

so a failure the model can repair is a near miss and is penalised less; an all-fail group with a fixable
failure gains variance. Loss: GSPO (default) or GRPO clip.

The edited-token mask (credo's reading; the paper gives no code). A successful revision is a counterfactual:
the tokens it had to change (a token-level Levenshtein alignment to the closest successful revision) are
the failure's mistakes, the tokens it kept are what the attempt got right. Shaping can make a repaired
failure's group advantage `A` *positive* (always in an all-fail group with one repairable failure; often
with few correct rows), and putting that `A` on the edited tokens would push up exactly the mistakes the
revision found. So, on a repaired failure (`edit_credit="signed"`, the default):

    edited tokens:   min(A, 0)      (the mistakes are blamed, never credited)
    unedited tokens: max(A, 0)      (the near miss's credit goes to what the repair kept; never blamed)

With `A <= 0` (the usual case: a group with correct rows) this is the paper's mask, only the edits train;
with `A > 0` the credit the shaping earned lands on the kept tokens. `edit_credit="edited"` is the earlier
reading (`A` on the edited tokens whatever its sign), kept as a switch for comparison.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from credo.batch import RolloutBatch
from credo.checks import check_choice, check_range
from credo.credit.base import Metrics
from credo.credit.groups import GroupAdvantage, failed_rows, group_spread


def shaped_rewards(rewards: Tensor, revision_success: Tensor, weight: float = 0.6) -> Tensor:
    """(B,) `R' = r + lambda * (1 - r) * s`, `lambda = weight`."""
    return rewards + weight * (1.0 - rewards) * revision_success


def _distance_rows(source: Sequence[int], target: Sequence[int]) -> Iterator[Tensor]:
    """Rows `D[0], D[1], ..., D[n]` of the Levenshtein table between `source` and `target` (unit costs).

    One vectorised pass per source token: with `tmp_j = min(D[i-1, j-1] + [a_i != b_j], D[i-1, j] + 1)`,
    the insertion chain `D[i, j] = min(tmp_j, D[i, j-1] + 1)` is a running minimum,
    `D[i, j] = j + min_{j' <= j} (tmp_j' - j')`.
    """
    a = torch.as_tensor(list(source), dtype=torch.long)
    b = torch.as_tensor(list(target), dtype=torch.long)
    cols = torch.arange(b.numel() + 1)
    row = cols
    yield row
    for i in range(1, a.numel() + 1):
        tmp = torch.empty_like(row)
        tmp[0] = i
        tmp[1:] = torch.minimum(row[:-1] + (b != a[i - 1]).long(), row[1:] + 1)
        row = torch.cummin(tmp - cols, dim=0).values + cols
        yield row


def edit_distance_table(source: Sequence[int], target: Sequence[int]) -> Tensor:
    """(n+1, m+1) Levenshtein table `D[i, j]` between `source[:i]` and `target[:j]`."""
    return torch.stack(list(_distance_rows(source, target)))


def edit_distance(source: Sequence[int], target: Sequence[int]) -> int:
    """Levenshtein distance between two token sequences, in O(m) memory."""
    *_, last = _distance_rows(source, target)
    return int(last[-1])


def edit_mask(source: Sequence[int], target: Sequence[int]) -> Tensor:
    """(len(source),) bool: the tokens of `source` that an optimal alignment to `target` edits.

    Substituted and deleted source tokens are marked. A run of target tokens inserted before source
    token `i` marks token `i` (the token the policy wrote where the revision diverged); an insertion after
    the last source token marks the last one. Identical sequences mark nothing; an empty target marks all.
    Ties between optimal alignments are broken in the order substitution/match, deletion, insertion,
    walking back from the end. The walk reads only the `n + m` cells it visits.
    """
    table = edit_distance_table(source, target)
    n, m = len(source), len(target)
    marked = torch.zeros(n, dtype=torch.bool)
    i, j = n, m
    while i > 0 or j > 0:
        here = table[i, j].item()
        if i > 0 and j > 0 and here == table[i - 1, j - 1].item() + (source[i - 1] != target[j - 1]):
            if source[i - 1] != target[j - 1]:
                marked[i - 1] = True
            i, j = i - 1, j - 1
        elif i > 0 and here == table[i - 1, j].item() + 1:
            marked[i - 1] = True
            i -= 1
        else:  # insertion of target[j-1] before source token i
            if n > 0:
                marked[min(i, n - 1)] = True
            j -= 1
    return marked


def closest_revision(source: Sequence[int], revisions: Sequence[Sequence[int]]) -> int:
    """Index of the revision with the smallest edit distance to `source` (the first on ties)."""
    if not revisions:
        raise ValueError("closest_revision needs at least one revision")
    distances = [edit_distance(source, r) for r in revisions]
    return distances.index(min(distances))


EDIT_CREDIT = ("signed", "edited")


@dataclass(frozen=True, kw_only=True)
class RevisionAdvantage(GroupAdvantage):
    """IBPO's estimator: group advantages of the shaped rewards; on a repaired failure, the edited tokens
    are blamed (`min(A, 0)`) and the unedited ones credited (`max(A, 0)`), see the module docstring."""

    reads: ClassVar[frozenset[str]] = frozenset({"revision_success", "edit_mask"})
    writes: ClassVar[frozenset[str]] = frozenset({"advantages", "loss_mask"})

    revision_weight: float = 0.6
    """IBPO's lambda: weight of the revision success rate in the shaped reward."""
    use_edit_mask: bool = True
    """Credit a failure with a successful revision by its edit mask (False: every token gets A)."""
    edit_credit: str = "signed"
    """Which tokens of a repaired failure carry its advantage A. "signed": the edited ones when A <= 0,
    the unedited ones when A > 0 (edits never credited, kept tokens never blamed). "edited": the edited
    ones whatever A's sign (the earlier reading; it pushes up the mistakes of a failure with A > 0)."""
    norm: str = "response"
    """How a masked failure is normalised. "response": its other tokens stay in the loss mask with
    advantage 0, so each credited token weighs what it would unmasked. "trained": they leave the loss mask,
    and a per-sequence mean (GSPO, GRPO) spreads the row's whole advantage over its few credited tokens (a
    row with 2 of 40 tokens edited gives each 20 times the weight: on the testbed this tripled the gradient
    norm and IBPO stopped learning)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("RevisionAdvantage", "revision_weight", self.revision_weight, 0.0, 1.0)
        check_choice("RevisionAdvantage", "edit_credit", self.edit_credit, EDIT_CREDIT)
        check_choice("RevisionAdvantage", "norm", self.norm, ("response", "trained"))

    def rewards(self, batch: RolloutBatch) -> tuple[Tensor, Metrics]:
        s = batch.revision_success
        if s is None:
            raise ValueError("IBPO credit needs RolloutBatch.revision_success, but it is None")
        failed = failed_rows(batch)
        if (s[~failed] != 0).any():
            raise ValueError("RolloutBatch.revision_success must be 0 on correct rows (only failures are revised)")
        shaped = shaped_rewards(batch.rewards, s, self.revision_weight)
        metrics = {
            "credit/revision_success": float(s[failed].mean()) if failed.any() else 0.0,
            "credit/groups_given_variance": _groups_given_variance(batch.rewards, shaped, batch.group_id),
        }
        return shaped, metrics

    def loss_mask(self, batch: RolloutBatch, trace_mask: Tensor | None, adv: Tensor) -> tuple[Tensor, Metrics]:
        if not self.use_edit_mask:
            return batch.loss_mask, {}
        credited, repaired = self._credited(batch, adv)
        edited = batch.edit_mask[repaired].sum() / batch.response_mask[repaired].sum().clamp(min=1)
        metrics = {
            "credit/edited_token_frac": float(edited),
            "credit/repaired_positive_share": float((adv[repaired] > 0).float().mean()) if repaired.any() else 0.0,
        }
        return (credited if self.norm == "trained" else batch.loss_mask), metrics

    def credit_mask(self, batch: RolloutBatch, loss_mask: Tensor, adv: Tensor) -> Tensor:
        if not self.use_edit_mask or self.norm == "trained":
            return loss_mask
        return self._credited(batch, adv)[0]

    def _credited(self, batch: RolloutBatch, adv: Tensor) -> tuple[Tensor, Tensor]:
        """(B, T) the loss tokens that carry their row's advantage, and (B,) the repaired failures: on a
        repaired failure the edited tokens (or, with "signed" and A > 0, the unedited ones), elsewhere all."""
        if batch.edit_mask is None:
            raise ValueError("IBPO with use_edit_mask needs RolloutBatch.edit_mask, but it is None")
        repaired = failed_rows(batch) & (batch.revision_success > 0)  # (B,)
        edited = batch.edit_mask
        if self.edit_credit == "signed":
            edited = torch.where((adv > 0).unsqueeze(1), ~edited, edited)  # (B, T)
        return torch.where(repaired.unsqueeze(1), batch.loss_mask & edited, batch.loss_mask), repaired


def _groups_given_variance(raw: Tensor, shaped: Tensor, group_id: Tensor) -> float:
    """Share of groups whose raw rewards are all equal but whose shaped rewards are not."""
    _, inverse = torch.unique(group_id, return_inverse=True)
    num = int(inverse.max()) + 1
    constant_raw = group_spread(raw, inverse, num) == 0
    return float((constant_raw & (group_spread(shaped, inverse, num) > 0)).float().mean())
