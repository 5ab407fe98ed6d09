"""RolloutBatch: construction, `lengths`, `select`, `replace`, and validation errors that name the field.

Expected values are built from the plain Python lists the random batches are generated from, never by
calling the container itself.
"""

from __future__ import annotations

import dataclasses
import random
import re

import pytest
import torch

from credo.batch import RolloutBatch

TOKEN_FIELDS = (
    "response_ids", "response_mask", "old_logp", "loss_mask", "entropy", "ref_logp",
    "segment_ids", "edit_mask", "advantages", "trace_mask",
)
ROW_FIELDS = ("group_id", "rewards", "correct", "prefix_len", "revision_success")
ALL_FIELDS = TOKEN_FIELDS + ROW_FIELDS


# --------------------------------------------------------------------------------------------------
# Helper: a random batch with every optional field, as plain Python lists plus tensors.
# --------------------------------------------------------------------------------------------------
def random_lists(seed: int, *, min_len: int = 0) -> dict:
    """Plain-Python description of a ragged batch: mixed group sizes, shuffled non-contiguous group ids."""
    rng = random.Random(seed)
    sizes = [rng.randint(1, 4) for _ in range(rng.randint(1, 4))]
    ids = rng.sample(range(1000), len(sizes))
    group = [g for g, n in zip(ids, sizes) for _ in range(n)]
    rng.shuffle(group)
    B = len(group)
    T = rng.randint(max(1, min_len), 9)
    lengths = [rng.randint(min_len, T) for _ in range(B)]
    lengths[rng.randrange(B)] = T  # at least one full row
    rows = {name: [] for name in ALL_FIELDS}
    for b, n in enumerate(lengths):
        resp = [t < n for t in range(T)]
        rows["response_ids"].append([rng.randrange(50) for _ in range(T)])  # padding ids are random too
        rows["response_mask"].append(resp)
        rows["old_logp"].append([-5 * rng.random() if t < n else 0.0 for t in range(T)])
        rows["loss_mask"].append([t < n and rng.random() < 0.7 for t in range(T)])
        rows["entropy"].append([3 * rng.random() if t < n else 0.0 for t in range(T)])
        rows["ref_logp"].append([-5 * rng.random() if t < n else 0.0 for t in range(T)])
        seg, cur = [], 0
        for t in range(T):
            if t < n:
                cur += t > 0 and rng.random() < 0.3
                seg.append(cur)
            else:
                seg.append(-1)
        rows["segment_ids"].append(seg)
        rows["edit_mask"].append([t < n and rng.random() < 0.4 for t in range(T)])
        rows["advantages"].append([rng.uniform(-2, 2) if t < n else 0.0 for t in range(T)])
        rows["trace_mask"].append([t < n and rng.random() < 0.5 for t in range(T)])
        correct = rng.random() < 0.5
        rows["group_id"].append(group[b])
        rows["rewards"].append(1.0 if correct else rng.choice([0.0, 0.25, 0.5]))
        rows["correct"].append(correct)
        rows["prefix_len"].append(rng.randint(0, n))
        rows["revision_success"].append(0.0 if correct else rng.choice([0.0, 1 / 3, 2 / 3, 1.0]))
    return {"B": B, "T": T, "lengths": lengths, "rows": rows}


DTYPES = {
    "response_ids": torch.long, "response_mask": torch.bool, "old_logp": torch.float32,
    "loss_mask": torch.bool, "entropy": torch.float32, "ref_logp": torch.float32,
    "segment_ids": torch.long, "edit_mask": torch.bool, "advantages": torch.float32,
    "trace_mask": torch.bool, "group_id": torch.long, "rewards": torch.float32,
    "correct": torch.bool, "prefix_len": torch.long, "revision_success": torch.float32,
}


def fields_of(spec: dict, names=ALL_FIELDS) -> dict[str, torch.Tensor]:
    return {name: torch.tensor(spec["rows"][name], dtype=DTYPES[name]) for name in names}


REQUIRED = ("response_ids", "response_mask", "group_id", "rewards", "old_logp")


def tiny_fields() -> dict[str, torch.Tensor]:
    """B=3, T=4, lengths 4, 2, 3; every optional field valid. Used to inject one bad value at a time."""
    resp = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
    return {
        "response_ids": torch.tensor([[5, 6, 7, 8], [5, 9, 0, 0], [4, 4, 4, 0]]),
        "response_mask": resp,
        "group_id": torch.tensor([0, 0, 3]),
        "rewards": torch.tensor([1.0, 0.0, 0.5]),
        "old_logp": torch.where(resp, -1.0, 0.0),
        "loss_mask": resp.clone(),
        "entropy": torch.where(resp, 0.5, 0.0),
        "ref_logp": torch.where(resp, -1.5, 0.0),
        "correct": torch.tensor([True, False, False]),
        "segment_ids": torch.tensor([[0, 0, 1, 1], [0, 1, -1, -1], [0, 0, 0, -1]]),
        "prefix_len": torch.tensor([0, 2, 1]),
        "revision_success": torch.tensor([0.0, 1 / 3, 1.0]),
        "edit_mask": torch.tensor([[0, 0, 0, 0], [0, 1, 0, 0], [1, 0, 1, 0]], dtype=torch.bool),
        "advantages": torch.where(resp, 0.25, 0.0),
        "trace_mask": torch.tensor([[1, 0, 1, 0], [0, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.bool),
    }


# --------------------------------------------------------------------------------------------------
# Construction, lengths, select, replace
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(25))
def test_valid_batch_constructs_and_reports_lengths(seed):
    spec = random_lists(seed)
    batch = RolloutBatch(**fields_of(spec))
    assert batch.size == spec["B"] and batch.width == spec["T"]
    assert batch.lengths.tolist() == spec["lengths"]
    for name in ALL_FIELDS:
        assert torch.equal(getattr(batch, name), torch.tensor(spec["rows"][name], dtype=DTYPES[name])), name


@pytest.mark.parametrize("seed", range(10))
def test_loss_mask_defaults_to_response_mask_and_optional_fields_stay_none(seed):
    spec = random_lists(seed)
    batch = RolloutBatch(**fields_of(spec, REQUIRED))
    assert torch.equal(batch.loss_mask, torch.tensor(spec["rows"]["response_mask"]))
    for name in set(ALL_FIELDS) - set(REQUIRED) - {"loss_mask"}:
        assert getattr(batch, name) is None, name


def _pick(spec: dict, kind: str, rng: random.Random):
    """(rows argument for select, the list of row indices it means)."""
    B = spec["B"]
    if kind == "list":
        idx = [rng.randrange(B) for _ in range(rng.randint(1, B + 2))]  # duplicates allowed
        return idx, idx
    if kind == "tensor":
        idx = [rng.randrange(B) for _ in range(rng.randint(1, B + 2))]
        return torch.tensor(idx), idx
    if kind == "negative":
        return [-1, 0], [B - 1, 0]
    start = rng.randrange(B)
    step = rng.randint(1, 2)
    return slice(start, None, step), list(range(start, B, step))


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("kind", ["list", "tensor", "slice", "negative"])
def test_select_takes_rows_of_every_field(seed, kind):
    spec = random_lists(seed)
    batch = RolloutBatch(**fields_of(spec))
    rows, idx = _pick(spec, kind, random.Random(seed + 100))
    sub = batch.select(rows)
    assert sub.size == len(idx) and sub.width == spec["T"]
    assert sub.lengths.tolist() == [spec["lengths"][i] for i in idx]
    for name in ALL_FIELDS:
        expected = torch.tensor([spec["rows"][name][i] for i in idx], dtype=DTYPES[name])
        assert torch.equal(getattr(sub, name), expected), name
    # group ids keep their values (no renumbering)
    assert sub.group_id.tolist() == [spec["rows"]["group_id"][i] for i in idx]


@pytest.mark.parametrize("seed", range(5))
def test_select_keeps_absent_fields_absent(seed):
    spec = random_lists(seed)
    batch = RolloutBatch(**fields_of(spec, REQUIRED + ("entropy",)))
    sub = batch.select([0])
    assert torch.equal(sub.entropy, torch.tensor(spec["rows"]["entropy"][:1]))
    assert sub.prefix_len is None and sub.edit_mask is None and sub.advantages is None
    assert torch.equal(sub.loss_mask, torch.tensor(spec["rows"]["response_mask"][:1]))


def test_select_of_no_rows_is_an_empty_batch_error():
    batch = RolloutBatch(**tiny_fields())
    with pytest.raises(ValueError, match=r"RolloutBatch\.response_ids: the batch is empty \(B = 0\)"):
        batch.select([])


@pytest.mark.parametrize("seed", range(10))
def test_replace_changes_only_the_given_fields_and_validates(seed):
    spec = random_lists(seed)
    batch = RolloutBatch(**fields_of(spec))
    new_rewards = torch.tensor([float(i) / 7 for i in range(spec["B"])])
    new_adv = torch.where(batch.response_mask, 3.0, 0.0)
    changed = batch.replace(rewards=new_rewards, advantages=new_adv, trace_mask=None)
    assert torch.equal(changed.rewards, new_rewards)
    assert torch.equal(changed.advantages, new_adv)
    assert changed.trace_mask is None
    for name in set(ALL_FIELDS) - {"rewards", "advantages", "trace_mask"}:
        assert getattr(changed, name) is getattr(batch, name), name
    # the original is untouched (frozen dataclass)
    assert torch.equal(batch.rewards, torch.tensor(spec["rows"]["rewards"]))
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.rewards = new_rewards  # type: ignore[misc]
    # replace validates again: a NaN reward in row 0
    bad = new_rewards.clone()
    bad[0] = float("nan")
    with pytest.raises(ValueError, match=r"RolloutBatch\.rewards: must be finite: 1 bad value\(s\), first at row 0"):
        batch.replace(rewards=bad)


def test_docstring_example_lengths():
    batch = RolloutBatch(
        response_ids=torch.tensor([[5, 6, 7], [5, 8, 0]]),
        response_mask=torch.tensor([[True, True, True], [True, True, False]]),
        group_id=torch.tensor([0, 0]),
        rewards=torch.tensor([1.0, 0.0]),
        old_logp=torch.full((2, 3), -1.0),
    )
    # row 0: 3 real tokens; row 1: 2 real tokens, one pad
    assert batch.lengths.tolist() == [3, 2]


def test_empty_responses_are_allowed():
    # a row of length 0 is left-aligned (all False) and may carry prefix_len 0
    f = tiny_fields()
    f["response_mask"] = f["response_mask"].clone()
    f["response_mask"][1] = False
    for name in ("loss_mask", "edit_mask", "trace_mask"):
        f[name] = f[name] & f["response_mask"]
    f["segment_ids"] = torch.where(f["response_mask"], f["segment_ids"], -1)
    f["prefix_len"] = torch.tensor([0, 0, 1])
    assert RolloutBatch(**f).lengths.tolist() == [4, 0, 3]


# --------------------------------------------------------------------------------------------------
# Validation: every error is a ValueError whose message names the field
# --------------------------------------------------------------------------------------------------
def _expect(field: str, rest: str) -> str:
    return re.escape(f"RolloutBatch.{field}: ") + rest


def test_tiny_fields_are_valid():
    batch = RolloutBatch(**tiny_fields())
    assert batch.lengths.tolist() == [4, 2, 3]


@pytest.mark.parametrize("name", TOKEN_FIELDS[1:])
@pytest.mark.parametrize("shape", [(3, 5), (3, 3), (4, 4), (3,), (3, 4, 1)])
def test_wrong_shape_of_token_field(name, shape):
    f = tiny_fields()
    f[name] = torch.zeros(shape, dtype=f[name].dtype)
    with pytest.raises(ValueError, match=_expect(name, re.escape(f"has shape {shape}, expected (3, 4) (B=3, T=4)"))):
        RolloutBatch(**f)


@pytest.mark.parametrize("name", ROW_FIELDS)
@pytest.mark.parametrize("shape", [(2,), (4,), (3, 1), (1, 3)])
def test_wrong_shape_of_row_field(name, shape):
    f = tiny_fields()
    f[name] = torch.zeros(shape, dtype=f[name].dtype)
    with pytest.raises(ValueError, match=_expect(name, re.escape(f"has shape {shape}, expected (3,) (B=3, T=4)"))):
        RolloutBatch(**f)


@pytest.mark.parametrize("value", [torch.zeros(3, dtype=torch.long), torch.zeros(3, 4, 1, dtype=torch.long)])
def test_response_ids_must_be_two_dimensional(value):
    f = tiny_fields()
    f["response_ids"] = value
    with pytest.raises(ValueError, match=_expect("response_ids", r"must be a 2-D \(B, T\) tensor")):
        RolloutBatch(**f)


def test_response_ids_must_be_a_tensor():
    f = tiny_fields()
    f["response_ids"] = f["response_ids"].tolist()
    with pytest.raises(ValueError, match=_expect("response_ids", r"must be a 2-D \(B, T\) tensor, got list")):
        RolloutBatch(**f)


@pytest.mark.parametrize("name", ["rewards", "old_logp", "group_id", "loss_mask"])
def test_fields_must_be_tensors(name):
    f = tiny_fields()
    f[name] = f[name].tolist()
    with pytest.raises(ValueError, match=_expect(name, "must be a torch.Tensor, got list")):
        RolloutBatch(**f)


@pytest.mark.parametrize(
    ("name", "dtype", "rest"),
    [
        ("response_ids", torch.float32, "must be an integer tensor, got torch.float32"),
        ("response_ids", torch.bool, "must be an integer tensor, got torch.bool"),
        ("group_id", torch.float32, "must be an integer tensor, got torch.float32"),
        ("prefix_len", torch.float64, "must be an integer tensor, got torch.float64"),
        ("segment_ids", torch.float32, "must be an integer tensor, got torch.float32"),
        ("response_mask", torch.float32, "must be torch.bool, got torch.float32"),
        ("loss_mask", torch.float32, "must be torch.bool, got torch.float32"),
        ("loss_mask", torch.long, "must be torch.bool, got torch.int64"),
        ("trace_mask", torch.uint8, "must be torch.bool, got torch.uint8"),
        ("edit_mask", torch.float32, "must be torch.bool, got torch.float32"),
        ("correct", torch.long, "must be torch.bool, got torch.int64"),
        ("rewards", torch.long, "must be a floating-point tensor, got torch.int64"),
        ("rewards", torch.bool, "must be a floating-point tensor, got torch.bool"),
        ("old_logp", torch.int32, "must be a floating-point tensor, got torch.int32"),
        ("revision_success", torch.long, "must be a floating-point tensor, got torch.int64"),
        ("entropy", torch.long, "must be a floating-point tensor, got torch.int64"),
        ("advantages", torch.long, "must be a floating-point tensor, got torch.int64"),
    ],
)
def test_wrong_dtype(name, dtype, rest):
    f = tiny_fields()
    f[name] = f[name].to(dtype)
    with pytest.raises(ValueError, match=_expect(name, re.escape(rest))):
        RolloutBatch(**f)


def test_float64_and_int32_are_accepted():
    f = tiny_fields()
    f["rewards"] = f["rewards"].double()
    f["old_logp"] = f["old_logp"].double()
    f["response_ids"] = f["response_ids"].int()
    f["group_id"] = f["group_id"].int()
    assert RolloutBatch(**f).rewards.dtype == torch.float64


@pytest.mark.parametrize("name", ["loss_mask", "trace_mask", "edit_mask"])
def test_masks_outside_the_response(name):
    f = tiny_fields()
    mask = f[name].clone()
    mask[1, 3] = True  # row 1 has length 2: position 3 is padding
    mask[2, 3] = True  # row 2 has length 3: position 3 is padding
    f[name] = mask
    with pytest.raises(
        ValueError,
        match=_expect(name, re.escape("selects tokens outside response_mask: 2 bad value(s), first at row 1, position 3")),
    ):
        RolloutBatch(**f)


@pytest.mark.parametrize(
    ("row", "where"),
    [
        # row 1 [1, 0, 1, 0]: 2 real tokens, so the aligned mask is [1, 1, 0, 0]: positions 1 and 2 differ
        ([1, 0, 1, 0], "2 bad value(s), first at row 1, position 1"),
        # row 1 [0, 1, 1, 0]: aligned [1, 1, 0, 0]: positions 0 and 2 differ
        ([0, 1, 1, 0], "2 bad value(s), first at row 1, position 0"),
        # row 1 [0, 0, 0, 1]: aligned [1, 0, 0, 0]: positions 0 and 3 differ
        ([0, 0, 0, 1], "2 bad value(s), first at row 1, position 0"),
    ],
)
def test_response_mask_must_be_left_aligned(row, where):
    f = {k: v for k, v in tiny_fields().items() if k in REQUIRED}
    f["response_mask"] = f["response_mask"].clone()
    f["response_mask"][1] = torch.tensor(row, dtype=torch.bool)
    with pytest.raises(ValueError, match=_expect("response_mask", r"must be left-aligned .*" + re.escape(where))):
        RolloutBatch(**f)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize(
    ("name", "index", "where"),
    [
        ("rewards", (2,), "1 bad value(s), first at row 2"),
        ("revision_success", (1,), "1 bad value(s), first at row 1"),
        ("old_logp", (1, 0), "1 bad value(s), first at row 1, position 0"),
        ("ref_logp", (2, 2), "1 bad value(s), first at row 2, position 2"),
        ("advantages", (0, 3), "1 bad value(s), first at row 0, position 3"),
        # padding is checked too: old_logp must be finite everywhere ("pad with 0")
        ("old_logp", (1, 3), "1 bad value(s), first at row 1, position 3"),
    ],
)
def test_non_finite_values(name, index, where, bad):
    f = tiny_fields()
    value = f[name].clone()
    value[index] = bad
    f[name] = value
    with pytest.raises(ValueError, match=_expect(name, "must be finite: " + re.escape(where))):
        RolloutBatch(**f)


def test_non_finite_count_and_first_position():
    f = tiny_fields()
    logp = f["old_logp"].clone()
    logp[2, 1] = float("nan")
    logp[0, 3] = float("inf")
    logp[2, 2] = float("nan")
    f["old_logp"] = logp
    # 3 bad values; row-major first is (0, 3)
    with pytest.raises(ValueError, match=re.escape("RolloutBatch.old_logp: must be finite: 3 bad value(s), first at row 0, position 3")):
        RolloutBatch(**f)


def test_negative_group_id():
    f = tiny_fields()
    f["group_id"] = torch.tensor([0, -1, -2])
    with pytest.raises(ValueError, match=_expect("group_id", re.escape("must be >= 0: 2 bad value(s), first at row 1"))):
        RolloutBatch(**f)


def test_empty_batch():
    f = {k: v[:0] for k, v in tiny_fields().items()}
    with pytest.raises(ValueError, match=_expect("response_ids", r"the batch is empty \(B = 0\)")):
        RolloutBatch(**f)


@pytest.mark.parametrize(
    ("prefix", "where"),
    [
        ([0, 3, 1], "1 bad value(s), first at row 1"),  # row 1 has length 2
        ([5, 2, 3], "1 bad value(s), first at row 0"),  # row 0 has length 4
        ([0, 2, -1], "1 bad value(s), first at row 2"),
        ([-1, 3, 4], "3 bad value(s), first at row 0"),
    ],
)
def test_prefix_len_outside_response(prefix, where):
    f = tiny_fields()
    f["prefix_len"] = torch.tensor(prefix)
    with pytest.raises(ValueError, match=_expect("prefix_len", r"must lie in \[0, response length\]: " + re.escape(where))):
        RolloutBatch(**f)


def test_prefix_len_bounds_are_inclusive():
    f = tiny_fields()
    f["prefix_len"] = torch.tensor([4, 2, 3])  # exactly the lengths
    assert RolloutBatch(**f).prefix_len.tolist() == [4, 2, 3]
    f["prefix_len"] = torch.tensor([0, 0, 0])
    assert RolloutBatch(**f).prefix_len.tolist() == [0, 0, 0]


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ([0.0, 1.5, 1.0], "1 bad value(s), first at row 1"),
        ([-0.1, 0.5, 1.0], "1 bad value(s), first at row 0"),
        ([0.0, 0.0, 1.0000001], "1 bad value(s), first at row 2"),
    ],
)
def test_revision_success_outside_unit_interval(values, where):
    f = tiny_fields()
    f["revision_success"] = torch.tensor(values, dtype=torch.float64)
    with pytest.raises(ValueError, match=_expect("revision_success", r"must lie in \[0, 1\]: " + re.escape(where))):
        RolloutBatch(**f)


def test_negative_entropy():
    f = tiny_fields()
    ent = f["entropy"].clone()
    ent[2, 1] = -1e-3
    f["entropy"] = ent
    with pytest.raises(ValueError, match=_expect("entropy", re.escape("must be >= 0: 1 bad value(s), first at row 2, position 1"))):
        RolloutBatch(**f)


@pytest.mark.parametrize(
    ("row1", "rest"),
    [
        # row 1 has length 2; position 2 is padding and must be -1
        ([0, 1, 1, -1], "must be -1 off the response: 1 bad value(s), first at row 1, position 2"),
        ([0, 0, -1, 0], "must be -1 off the response: 1 bad value(s), first at row 1, position 3"),
        ([-1, 0, -1, -1], "must be >= 0 on response tokens: 1 bad value(s), first at row 1, position 0"),
        ([0, -3, -1, -1], "must be >= 0 on response tokens: 1 bad value(s), first at row 1, position 1"),
        # decreasing: position 1 holds 1 after a 2 at position 0 (the row is named; the position is
        # checked in test_decreasing_segment_ids_position below)
        ([2, 1, -1, -1], "must be non-decreasing along a response: 1 bad value(s), first at row 1"),
    ],
)
def test_segment_ids_rules(row1, rest):
    f = tiny_fields()
    seg = f["segment_ids"].clone()
    seg[1] = torch.tensor(row1)
    f["segment_ids"] = seg
    with pytest.raises(ValueError, match=_expect("segment_ids", re.escape(rest))):
        RolloutBatch(**f)


def test_segment_ids_drop_to_minus_one_at_the_padding_is_fine():
    # the -1 after the last response token is a "decrease" but lies off the response
    f = tiny_fields()
    f["segment_ids"] = torch.tensor([[0, 1, 2, 5], [3, 3, -1, -1], [0, 0, 0, -1]])
    assert RolloutBatch(**f).segment_ids[1].tolist() == [3, 3, -1, -1]


def test_decreasing_segment_ids_in_a_later_row():
    f = tiny_fields()
    f["segment_ids"] = torch.tensor([[0, 0, 1, 1], [0, 1, -1, -1], [0, 2, 1, -1]])
    with pytest.raises(ValueError, match=_expect("segment_ids", r"must be non-decreasing .*first at row 2")):
        RolloutBatch(**f)


def test_decreasing_segment_ids_position():
    # row 2 is [0, 2, 1]: the token that breaks the order is the 1 at position 2 (it is below the 2 before it)
    f = tiny_fields()
    f["segment_ids"] = torch.tensor([[0, 0, 1, 1], [0, 1, -1, -1], [0, 2, 1, -1]])
    with pytest.raises(ValueError, match=_expect("segment_ids", r"must be non-decreasing .*" + re.escape("first at row 2, position 2"))):
        RolloutBatch(**f)


# --------------------------------------------------------------------------------------------------
# Fields a sampler records: declared by the sampler (credo.batch.RecordedField), kept in `recorded`.
# --------------------------------------------------------------------------------------------------
def test_recorded_fields_are_attributes_rows_and_replaceable():
    batch = RolloutBatch(**tiny_fields())
    assert batch.prefix_len is batch.recorded["prefix_len"] and batch.step_values is None  # recorded by no one here
    picked = batch.select([2, 0])
    assert picked.prefix_len.tolist() == [batch.prefix_len[2], batch.prefix_len[0]]
    assert picked.edit_mask.shape == (2, 4)
    dropped = batch.replace(prefix_len=None)
    assert dropped.prefix_len is None and "prefix_len" not in dropped.recorded and batch.prefix_len is not None


def test_a_field_no_sampler_records_is_refused_by_name():
    with pytest.raises(TypeError, match="no field 'blame_segments'.*prefix_len"):
        RolloutBatch(**tiny_fields(), blame_segments=torch.zeros(3))
    with pytest.raises(AttributeError, match="blame_segments"):
        _ = RolloutBatch(**tiny_fields()).blame_segments


def test_a_samplers_declared_rule_is_checked(monkeypatch):
    from credo.batch import RECORDED, RecordedField

    monkeypatch.setitem(RECORDED, "depth", RecordedField(
        "row", "int", "depth of each row", lambda d, response: (d > 2, "must be at most 2")))
    assert RolloutBatch(**tiny_fields(), depth=torch.tensor([0, 2, 1])).depth.tolist() == [0, 2, 1]
    with pytest.raises(ValueError, match=_expect("depth", re.escape("must be at most 2: 1 bad value(s), first at row 1"))):
        RolloutBatch(**tiny_fields(), depth=torch.tensor([0, 3, 1]))
    with pytest.raises(ValueError, match=_expect("depth", "must be an integer tensor")):
        RolloutBatch(**tiny_fields(), depth=torch.zeros(3))


def test_declaring_a_field_clashes_with_a_core_field_or_another_samplers_layout(monkeypatch):
    from credo.batch import FIELD_SOURCES, RECORDED, RecordedField, declare_recorded

    monkeypatch.setattr("credo.batch.RECORDED", dict(RECORDED))
    monkeypatch.setattr("credo.batch.FIELD_SOURCES", dict(FIELD_SOURCES))
    with pytest.raises(ValueError, match="'advantages' is a field of every RolloutBatch"):
        declare_recorded("toy", {"advantages": RecordedField("token", "float", "advantages")})
    with pytest.raises(ValueError, match="records 'prefix_len' as token int; another sampler records it as row int"):
        declare_recorded("toy", {"prefix_len": RecordedField("token", "int", "prefixes")})
