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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

FIELD_SOURCES: dict[str, str] = {
    "correct": "the verifier's verdicts",
    "entropy": "the behaviour policy's token entropies",
    "sum_pi_squared": "the behaviour policy's sums of squared next-token probabilities",
    "ref_logp": "a frozen reference policy's log-probs",
    "blame_start": "a task's step checker: the first wrong step of every failure",
    "thought_ids": "a task's step checker: the thought of every response token",
    "thought_wrong": "a task's step checker: every wrong thought of every response",
    "thought_judged": "a task's step checker: every thought it judged, right or wrong (where some decide nothing)",
    "turn_anchor": "a task's environment: the state each turn of an episode was taken from",
    "turn_reward": "a task's environment: the reward it gave each turn of an episode",
    "loss_mask": "a credit estimator's trained tokens",
    "trace_mask": "a credit estimator's trace selection",
    "advantages": "a credit estimator's per-token advantages",
}
"""What fills each optional field. Estimators, losses and samplers declare the fields they read, write and
record by these names (`reads`, `writes`, `records`); `credo.methods.Method` derives a method's needs from
them, and the trainer, the config and the engine adapters check those needs instead of the method's name. The
fields samplers record join it as their samplers register (`declare_recorded`)."""


@dataclass(frozen=True)
class RecordedField:
    """A field a sampler records beside the responses (`Sampler.records`): its shape, dtype and meaning, the rule
    its values keep, and its value on the demo's toy group."""

    shape: Literal["row", "token"]
    """"row": (B,); "token": (B, T)."""
    dtype: Literal["float", "int", "bool"]
    """float (finite), int64 or bool."""
    meaning: str
    """What it holds, in a phrase (its shape and dtype aside)."""
    rule: Callable[[Tensor, Tensor], tuple[Tensor, str]] | None = None
    """`rule(value, response_mask)` -> (the positions that break it, "must ..."), checked on every batch."""
    example: Callable[[], Tensor] | None = None
    """Its value on `credo.demo`'s toy group (one prompt, four responses of six tokens, rewards 1, 0, 1, 0)."""


def inside_response(mask: Tensor, response: Tensor) -> tuple[Tensor, str]:
    """The rule of every token mask of a batch (`loss_mask`, `trace_mask`, the masks samplers record): it
    selects response tokens only."""
    return mask & ~response, "selects tokens outside response_mask"


def thought_ids_rule(thoughts: Tensor, response: Tensor) -> tuple[Tensor, str]:
    """The rule of a (B, T) thought index: -1 off the response, >= 0 on it, never falling along a response (the
    batch's `thought_ids`, and the `segment_ids` that samplers cutting responses into thoughts record)."""
    off = (thoughts != -1) & ~response
    if off.any():
        return off, "must be -1 off the response"
    if (response & (thoughts < 0)).any():
        return response & (thoughts < 0), "must be >= 0 on response tokens"
    falls = torch.nn.functional.pad((thoughts[:, 1:] < thoughts[:, :-1]) & response[:, 1:], (1, 0))
    return falls, "must be non-decreasing along a response"


RECORDED: dict[str, RecordedField] = {}
"""Every field a registered sampler records, by name (`declare_recorded`); `RolloutBatch` keeps them in
`recorded` and gives them as attributes (`batch.prefix_len`)."""


_RECORDERS: dict[str, dict[str, list[str]]] = {}
"""Field -> its meaning -> the samplers that record it with that meaning (for `FIELD_SOURCES`)."""


def declare_recorded(sampler: str, fields: Mapping[str, RecordedField]) -> None:
    """Add the fields `sampler` records to `RECORDED` and `FIELD_SOURCES`. Two samplers may record a field of one
    name only with the same shape and dtype (the reset and vine samplers' `segment_ids`); a core field's name is
    not available."""
    for name, declared in fields.items():
        if name in _CORE:
            raise ValueError(f"sampler {sampler}: {name!r} is a field of every RolloutBatch, not one to record")
        known = RECORDED.get(name)
        if known is not None and (known.shape, known.dtype) != (declared.shape, declared.dtype):
            raise ValueError(f"sampler {sampler} records {name!r} as {declared.shape} {declared.dtype}; another "
                             f"sampler records it as {known.shape} {known.dtype}")
        RECORDED.setdefault(name, declared)
        _RECORDERS.setdefault(name, {}).setdefault(declared.meaning, []).append(sampler)
        FIELD_SOURCES[name] = "; ".join(f"the {' and '.join(by)} sampler{'s' if len(by) > 1 else ''}'"
                                        f"{'' if len(by) > 1 else 's'} {meaning}"
                                        for meaning, by in _RECORDERS[name].items())


# Fields by role; used for validation and for selecting rows (mini-batches).
_TOKEN_FLOAT = ("old_logp", "entropy", "sum_pi_squared", "ref_logp", "advantages", "turn_reward")
_TOKEN_BOOL = ("response_mask", "loss_mask", "trace_mask", "thought_wrong", "thought_judged")
_TOKEN_INT = ("thought_ids", "turn_anchor")
_ROW_FLOAT = ("rewards",)
_PROMPT = ("prompt_ids", "prompt_mask")


@dataclass(frozen=True)
class _Fields:
    """The fields of every `RolloutBatch` (see there)."""

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
    blame_start: Tensor | None = None
    """(B,) int64: first response token of the row's first wrong step by the task's step checker; -1 where
    no step is wrong (oracle credit)."""
    thought_ids: Tensor | None = None
    """(B, T) int64: the thought (step) each response token belongs to, 0-based and non-decreasing along a row, -1
    off the response: the step checker's reading of the response (per-decision oracle credit)."""
    thought_wrong: Tensor | None = None
    """(B, T) bool subset of `response_mask`: the tokens of every thought the task's step checker judges wrong,
    whatever the outcome (a failure's right thoughts are False, a lucky success's wrong ones True)."""
    thought_judged: Tensor | None = None
    """(B, T) bool subset of `response_mask`: the tokens of every thought the checker judged, right or wrong, where
    some thoughts decide nothing (an agent's check of its tool's value); None: every thought is judged."""
    turn_anchor: Tensor | None = None
    """(B, T) int64: in a multi-turn episode (whose turns are its `thought_ids`), the key of the environment state
    each token's turn was taken from (within a group, equal numbers: the same state, GiGPO's anchor state), -1 off
    the response; an observation takes the turn it answers."""
    turn_reward: Tensor | None = None
    """(B, T) float: in a multi-turn episode, the reward the environment gave each token's turn (0 where it gave
    none; an observation takes the turn it answers)."""
    advantages: Tensor | None = None
    """(B, T) float: per-token advantages, written by a credit estimator (zero off `loss_mask`)."""
    trace_mask: Tensor | None = None
    """(B, T) bool subset of `response_mask`: tokens whose ratios enter eligibility traces (S-trace)."""
    prompt_ids: Tensor | None = None
    """(B, P) int64: the prompt tokens, left-padded (the trainer's forward pass needs them)."""
    prompt_mask: Tensor | None = None
    """(B, P) bool: True on real prompt tokens, a right-aligned suffix of each row."""
    recorded: Mapping[str, Tensor] = field(default_factory=dict)
    """The fields the batch's sampler recorded (`RECORDED`: the reset sampler's `prefix_len`, ...), by name."""

    def __post_init__(self) -> None:
        if self.loss_mask is None:
            object.__setattr__(self, "loss_mask", self.response_mask)
        _validate(self)


_CORE = frozenset(f.name for f in dataclasses.fields(_Fields))


class RolloutBatch(_Fields):
    """Response tensors of one rollout batch, with the inputs every credit method may need.

    Shapes: `B` responses, `T` padded response length. Besides its own fields, a batch holds the fields its
    sampler recorded (`RECORDED`, declared by each sampler): given to the constructor and `replace` by name like
    the others (`prefix_len=...`; None drops one), read as attributes (`batch.prefix_len`, None where not recorded).
    """

    def __init__(self, recorded: Mapping[str, Tensor] | None = None, **fields: Tensor | None) -> None:
        kept = dict(recorded or {})
        for name in [n for n in fields if n not in _CORE]:
            if name not in RECORDED:
                raise TypeError(f"RolloutBatch has no field {name!r}: not one of its own, nor one a registered "
                                f"sampler records ({', '.join(sorted(RECORDED)) or 'none registered'})")
            value = fields.pop(name)
            if value is None:
                kept.pop(name, None)
            else:
                kept[name] = value
        super().__init__(**fields, recorded=kept)

    def __getattr__(self, name: str) -> Tensor | None:
        if name in RECORDED:
            return self.__dict__.get("recorded", {}).get(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

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
            if f.name != "recorded" and getattr(self, f.name) is not None
        }
        return RolloutBatch(**picked, recorded={name: value[rows] for name, value in self.recorded.items()})


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
        if value is None or f.name in ("response_ids", "recorded"):
            continue
        if not isinstance(value, Tensor):
            _fail(f.name, f"must be a torch.Tensor, got {type(value).__name__}")
        if value.device != ids.device:
            _fail(f.name, f"is on {value.device} but response_ids is on {ids.device}")
        token_level = f.name in _TOKEN_FLOAT + _TOKEN_BOOL + _TOKEN_INT
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
    for name, value in batch.recorded.items():
        _validate_recorded(name, value, batch.response_mask)
    for name in ("loss_mask", "trace_mask", "thought_wrong", "thought_judged"):
        mask = getattr(batch, name)
        if mask is not None:
            bad, must = inside_response(mask, response)
            if bad.any():
                _fail(name, f"{must}: {_first_position(bad)}")
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
    if batch.thought_ids is not None:
        bad, must = thought_ids_rule(batch.thought_ids, response)
        if bad.any():
            _fail("thought_ids", f"{must}: {_first_position(bad)}")
    if batch.turn_anchor is not None:
        anchor = batch.turn_anchor
        bad = torch.where(response, anchor < 0, anchor != -1)
        if bad.any():
            _fail("turn_anchor", f"must be >= 0 on response tokens and -1 off them: {_first_position(bad)}")
    if (batch.thought_ids is None) != (batch.thought_wrong is None):
        _fail("thought_wrong", "thought_ids and thought_wrong come together (both or neither)")
    if batch.thought_judged is not None:
        if batch.thought_ids is None:
            _fail("thought_judged", "comes with thought_ids and thought_wrong (the checker's thoughts)")
        unjudged = batch.thought_wrong & ~batch.thought_judged
        if unjudged.any():
            _fail("thought_judged", f"must hold every wrong thought: {_first_position(unjudged)}")
    if batch.blame_start is not None:
        start = batch.blame_start
        if ((start < -1) | (start > lengths)).any():
            _fail("blame_start", f"must be -1 or lie in [0, response length]: {_first_position((start < -1) | (start > lengths))}")


def _validate_recorded(name: str, value: object, response: Tensor) -> None:
    declared = RECORDED.get(name)
    if declared is None:
        _fail(name, f"is not a field any registered sampler records ({', '.join(sorted(RECORDED))})")
    if not isinstance(value, Tensor):
        _fail(name, f"must be a torch.Tensor, got {type(value).__name__}")
    if value.device != response.device:
        _fail(name, f"is on {value.device} but response_ids is on {response.device}")
    B, T = response.shape
    expected = (B, T) if declared.shape == "token" else (B,)
    if tuple(value.shape) != expected:
        _fail(name, f"has shape {tuple(value.shape)}, expected {expected} (B={B}, T={T})")
    if declared.dtype == "bool" and value.dtype != torch.bool:
        _fail(name, f"must be torch.bool, got {value.dtype}")
    if declared.dtype == "float":
        if not value.dtype.is_floating_point:
            _fail(name, f"must be a floating-point tensor, got {value.dtype}")
        if not torch.isfinite(value).all():
            _fail(name, f"must be finite: {_first_position(~torch.isfinite(value))}")
    if declared.dtype == "int" and (value.dtype.is_floating_point or value.dtype == torch.bool):
        _fail(name, f"must be an integer tensor, got {value.dtype}")
    if declared.rule is not None:
        bad, must = declared.rule(value, response)
        if bad.any():
            _fail(name, f"{must}: {_first_position(bad)}")


def _describe(value: object) -> str:
    if isinstance(value, Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return type(value).__name__
