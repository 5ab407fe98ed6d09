"""The one tensor container of credo: a rollout batch of `B` responses padded to `T` tokens.

Everything downstream (credit estimators, policy losses, the trainer's mini-batches) reads and writes
this container, so a new input (entropies, edit masks, reset offsets) is a new field here rather than a
new argument in ten signatures. It is validated on construction: a wrong shape, dtype or mask raises a
`ValueError` that names the field and the first offending row and position.

Layout. Responses are right-padded: row `b` holds its `n_b` response tokens at positions `0 .. n_b - 1`
and `response_mask[b, t] = t < n_b`. `loss_mask` (the tokens that receive gradient) is a subset of
`response_mask`. Groups are given by `group_id` and may have any sizes.

Example:
    >>> import torch
    >>> batch = RolloutBatch(
    ...     response_ids=torch.tensor([[5, 6, 7], [5, 8, 0]]),
    ...     response_mask=torch.tensor([[True, True, True], [True, True, False]]),
    ...     group_id=torch.tensor([0, 0]),
    ...     rewards=torch.tensor([1.0, 0.0]),
    ...     old_logp=torch.full((2, 3), -1.0),
    ... )
    >>> batch.lengths.tolist()
    [3, 2]
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor

FIELD_SOURCES: dict[str, str] = {
    "correct": "the verifier's verdicts",
    "entropy": "the behaviour policy's token entropies",
    "sum_pi_squared": "the behaviour policy's sums of squared next-token probabilities",
    "ref_logp": "a frozen reference policy's log-probs",
    "blame_start": "a task's step checker: the first wrong step of every failure",
    "prefix_len": "the reset sampler's kept prefixes",
    "segment_ids": "a sampler's thought segments (the reset sampler's thoughts, the vine sampler's steps)",
    "step_values": "the vine sampler's Monte-Carlo values of each step's starting state",
    "revision_success": "the revision sampler's revision outcomes",
    "edit_mask": "the revision sampler's edited-token masks",
    "loss_mask": "a credit estimator's trained tokens",
    "trace_mask": "a credit estimator's trace selection",
    "advantages": "a credit estimator's per-token advantages",
}
"""What fills each optional field. Estimators, losses and samplers declare the fields they read, write and
record by these names (`reads`, `writes`, `records`); `credo.methods.Method` derives a method's needs from
them, and the trainer, the config and the engine adapters check those needs instead of the method's name."""

# Fields by role; used for validation and for selecting rows (mini-batches).
_TOKEN_FLOAT = ("old_logp", "entropy", "sum_pi_squared", "ref_logp", "advantages", "step_values")
_TOKEN_BOOL = ("response_mask", "loss_mask", "trace_mask", "edit_mask")
_ROW_FLOAT = ("rewards", "revision_success")
_PROMPT = ("prompt_ids", "prompt_mask")


@dataclass(frozen=True)
class RolloutBatch:
    """Response tensors of one rollout batch, with the inputs every credit method may need.

    Shapes: `B` responses, `T` padded response length.
    """

    response_ids: Tensor
    """(B, T) int64: sampled response token ids (padding value is irrelevant)."""
    response_mask: Tensor
    """(B, T) bool: True on real response tokens, a left-aligned prefix of each row."""
    group_id: Tensor
    """(B,) int64 >= 0: the group (prompt) of each row; groups may have different sizes."""
    rewards: Tensor
    """(B,) float: scalar reward of each response (finite)."""
    old_logp: Tensor
    """(B, T) float: log-prob of each sampled token under the behaviour policy (finite; pad with 0)."""
    loss_mask: Tensor | None = None
    """(B, T) bool subset of `response_mask`: tokens that receive gradient; None means `response_mask`."""
    entropy: Tensor | None = None
    """(B, T) float >= 0: entropy of the behaviour policy's next-token distribution (S-trace)."""
    sum_pi_squared: Tensor | None = None
    """(B, T) float in [0, 1]: `sum_v pi(v)^2` of the behaviour policy's next-token distribution (OTB)."""
    ref_logp: Tensor | None = None
    """(B, T) float: log-probs under a frozen reference policy (KL penalty)."""
    correct: Tensor | None = None
    """(B,) bool: the verifier's verdict (IBPO needs it where rewards are not binary)."""
    segment_ids: Tensor | None = None
    """(B, T) int64: thought (or step) index of each response token (0-based, non-decreasing), -1 off the response."""
    step_values: Tensor | None = None
    """(B, T) float: the Monte-Carlo value of the state each token's step (`segment_ids`) starts from, the same
    on every token of a step (vine); 0 off the response."""
    prefix_len: Tensor | None = None
    """(B,) int64: leading response tokens that are a kept prefix (reset continuations), 0 for fresh rows."""
    blame_start: Tensor | None = None
    """(B,) int64: first response token of the row's first wrong step by the task's step checker; -1 where
    no step is wrong (oracle credit)."""
    revision_success: Tensor | None = None
    """(B,) float in [0, 1]: IBPO's share of revisions of the row that verified correct (0 for correct rows)."""
    edit_mask: Tensor | None = None
    """(B, T) bool: IBPO's tokens changed by the closest successful revision (rows without one: all False)."""
    advantages: Tensor | None = None
    """(B, T) float: per-token advantages, written by a credit estimator (zero off `loss_mask`)."""
    trace_mask: Tensor | None = None
    """(B, T) bool subset of `response_mask`: tokens whose ratios enter eligibility traces (S-trace)."""
    prompt_ids: Tensor | None = None
    """(B, P) int64: the prompt tokens, left-padded (the trainer's forward pass needs them)."""
    prompt_mask: Tensor | None = None
    """(B, P) bool: True on real prompt tokens, a right-aligned suffix of each row."""

    def __post_init__(self) -> None:
        if self.loss_mask is None:
            object.__setattr__(self, "loss_mask", self.response_mask)
        _validate(self)

    # ----------------------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """B, the number of responses."""
        return self.response_ids.shape[0]

    @property
    def width(self) -> int:
        """T, the padded response length."""
        return self.response_ids.shape[1]

    @property
    def lengths(self) -> Tensor:
        """(B,) int64: number of response tokens per row."""
        return self.response_mask.sum(dim=1)

    def replace(self, **changes: Tensor | None) -> RolloutBatch:
        """A copy with some fields replaced (validated again)."""
        return dataclasses.replace(self, **changes)

    def select(self, rows: Tensor | slice | list[int]) -> RolloutBatch:
        """The sub-batch of the given rows (e.g. a mini-batch); group ids keep their values."""
        if isinstance(rows, list):
            rows = torch.tensor(rows, dtype=torch.long, device=self.response_ids.device)
        picked = {
            f.name: getattr(self, f.name)[rows]
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        }
        return RolloutBatch(**picked)


def _fail(field: str, message: str) -> None:
    raise ValueError(f"RolloutBatch.{field}: {message}")


def _first_position(bad: Tensor) -> str:
    index = bad.nonzero()[0].tolist()
    where = f"row {index[0]}" + (f", position {index[1]}" if len(index) > 1 else "")
    return f"{int(bad.sum())} bad value(s), first at {where}"


def _validate(batch: RolloutBatch) -> None:
    ids = batch.response_ids
    if not isinstance(ids, Tensor) or ids.dim() != 2:
        _fail("response_ids", f"must be a 2-D (B, T) tensor, got {_describe(ids)}")
    if ids.dtype.is_floating_point or ids.dtype == torch.bool:
        _fail("response_ids", f"must be an integer tensor, got {ids.dtype}")
    B, T = ids.shape
    if B == 0:
        _fail("response_ids", "the batch is empty (B = 0); a rollout batch needs at least one response")

    for f in dataclasses.fields(batch):
        value = getattr(batch, f.name)
        if value is None or f.name == "response_ids":
            continue
        if not isinstance(value, Tensor):
            _fail(f.name, f"must be a torch.Tensor, got {type(value).__name__}")
        if value.device != ids.device:
            _fail(f.name, f"is on {value.device} but response_ids is on {ids.device}")
        token_level = f.name in _TOKEN_FLOAT + _TOKEN_BOOL + ("segment_ids",)
        if f.name in _PROMPT:
            expected = (B, value.shape[-1]) if value.dim() == 2 else (B, "P")
        else:
            expected = (B, T) if token_level else (B,)
        if tuple(value.shape) != expected:
            _fail(f.name, f"has shape {tuple(value.shape)}, expected {expected} (B={B}, T={T})")
        if f.name in _TOKEN_BOOL or f.name in ("correct", "prompt_mask"):
            if value.dtype != torch.bool:
                _fail(f.name, f"must be torch.bool, got {value.dtype}")
        elif f.name in _TOKEN_FLOAT + _ROW_FLOAT:
            if not value.dtype.is_floating_point:
                _fail(f.name, f"must be a floating-point tensor, got {value.dtype}")
            if not torch.isfinite(value).all():
                _fail(f.name, f"must be finite: {_first_position(~torch.isfinite(value))}")
        elif value.dtype.is_floating_point or value.dtype == torch.bool:
            _fail(f.name, f"must be an integer tensor, got {value.dtype}")

    response = batch.response_mask
    lengths = response.sum(dim=1)
    aligned = torch.arange(T, device=ids.device).unsqueeze(0) < lengths.unsqueeze(1)  # (B, T)
    if not torch.equal(aligned, response):
        _fail("response_mask", f"must be left-aligned (True on 0 .. n_b-1 of each row): {_first_position(aligned != response)}")
    for name in ("loss_mask", "trace_mask", "edit_mask"):
        mask = getattr(batch, name)
        if mask is not None and (mask & ~response).any():
            _fail(name, f"selects tokens outside response_mask: {_first_position(mask & ~response)}")
    if (batch.prompt_ids is None) != (batch.prompt_mask is None):
        _fail("prompt_mask", "prompt_ids and prompt_mask come together (both or neither)")
    if batch.prompt_ids is not None:
        if batch.prompt_ids.shape != batch.prompt_mask.shape:
            _fail("prompt_mask", f"has shape {tuple(batch.prompt_mask.shape)}, prompt_ids {tuple(batch.prompt_ids.shape)}")
        P = batch.prompt_mask.shape[1]
        suffix = torch.arange(P, device=ids.device).unsqueeze(0) >= (P - batch.prompt_mask.sum(dim=1)).unsqueeze(1)
        if not torch.equal(suffix, batch.prompt_mask):
            _fail("prompt_mask", f"must be right-aligned (left padding): {_first_position(suffix != batch.prompt_mask)}")
    if (batch.group_id < 0).any():
        _fail("group_id", f"must be >= 0: {_first_position(batch.group_id < 0)}")
    if batch.entropy is not None and (batch.entropy < 0).any():
        _fail("entropy", f"must be >= 0: {_first_position(batch.entropy < 0)}")
    if batch.sum_pi_squared is not None:
        s = batch.sum_pi_squared
        if ((s < 0) | (s > 1)).any():
            _fail("sum_pi_squared", f"must lie in [0, 1]: {_first_position((s < 0) | (s > 1))}")
    if batch.revision_success is not None:
        s = batch.revision_success
        if ((s < 0) | (s > 1)).any():
            _fail("revision_success", f"must lie in [0, 1]: {_first_position((s < 0) | (s > 1))}")
    if batch.prefix_len is not None:
        p = batch.prefix_len
        if ((p < 0) | (p > lengths)).any():
            _fail("prefix_len", f"must lie in [0, response length]: {_first_position((p < 0) | (p > lengths))}")
    if batch.blame_start is not None:
        start = batch.blame_start
        if ((start < -1) | (start > lengths)).any():
            _fail("blame_start", f"must be -1 or lie in [0, response length]: {_first_position((start < -1) | (start > lengths))}")
    if batch.segment_ids is not None:
        seg = batch.segment_ids
        off = (seg != -1) & ~response
        if off.any():
            _fail("segment_ids", f"must be -1 off the response: {_first_position(off)}")
        if (response & (seg < 0)).any():
            _fail("segment_ids", f"must be >= 0 on response tokens: {_first_position(response & (seg < 0))}")
        falls = torch.nn.functional.pad((seg[:, 1:] < seg[:, :-1]) & response[:, 1:], (1, 0))  # (B, T): at the drop
        if falls.any():
            _fail("segment_ids", f"must be non-decreasing along a response: {_first_position(falls)}")


def _describe(value: object) -> str:
    if isinstance(value, Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return type(value).__name__
