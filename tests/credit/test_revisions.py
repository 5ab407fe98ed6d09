"""IBPO revision credit (docs/methods.md sec. 5): shaped rewards, Levenshtein tables, edit masks, masks per row.

References are plain Python loops (nested-loop Levenshtein DP, a hand-written backtrack following the
documented tie-break rule, per-group mean / std loops); hand cases carry their derivation.
"""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from references import loop_group_advantage

from credo.batch import RolloutBatch
from credo.credit import closest_revision, edit_mask, shaped_rewards
from credo.credit.revisions import edit_distance_table
from credo.methods import get_method


# --------------------------------------------------------------------------------------------------
# Plain-Python references
# --------------------------------------------------------------------------------------------------
def levenshtein(a: list[int], b: list[int]) -> list[list[int]]:
    """(n+1) x (m+1) table: the textbook nested-loop DP with unit costs."""
    n, m = len(a), len(b)
    D = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n + 1):
        D[i][0] = i
    for j in range(m + 1):
        D[0][j] = j
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            D[i][j] = min(D[i - 1][j] + 1, D[i][j - 1] + 1, D[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
    return D


def reference_edit_mask(a: list[int], b: list[int]) -> list[bool]:
    """The documented rule: walk back from (n, m) preferring substitution/match, then deletion, then
    insertion; substituted and deleted source tokens are marked; an insertion before source token i
    (0-based) marks token i, an insertion after the last source token marks the last one."""
    D = levenshtein(a, b)
    n = len(a)
    marked = [False] * n
    i, j = n, len(b)
    while i > 0 or j > 0:
        if i > 0 and j > 0 and D[i][j] == D[i - 1][j - 1] + (0 if a[i - 1] == b[j - 1] else 1):
            if a[i - 1] != b[j - 1]:
                marked[i - 1] = True
            i, j = i - 1, j - 1
        elif i > 0 and D[i][j] == D[i - 1][j] + 1:
            marked[i - 1] = True
            i -= 1
        else:
            assert j > 0 and D[i][j] == D[i][j - 1] + 1
            if n > 0:
                marked[i if i < n else n - 1] = True
            j -= 1
    return marked


def is_subsequence(small: list[int], big: list[int]) -> bool:
    k = 0
    for x in big:
        if k < len(small) and small[k] == x:
            k += 1
    return k == len(small)


def random_tokens(rng: random.Random, max_len: int = 12, alphabet: int = 3) -> list[int]:
    return [rng.randrange(alphabet) for _ in range(rng.randint(0, max_len))]


def mutate(rng: random.Random, seq: list[int], alphabet: int) -> list[int]:
    """A few random edits of `seq` (so that targets are often close to the source)."""
    out = list(seq)
    for _ in range(rng.randint(0, 3)):
        op = rng.randrange(3)
        if op == 0 or not out:
            out.insert(rng.randint(0, len(out)), rng.randrange(alphabet))
        elif op == 1:
            del out[rng.randrange(len(out))]
        else:
            out[rng.randrange(len(out))] = rng.randrange(alphabet)
    return out


def pair(seed: int) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    alphabet = rng.choice([2, 3, 5])
    a = random_tokens(rng, 12, alphabet)
    b = mutate(rng, a, alphabet) if rng.random() < 0.6 else random_tokens(rng, 12, alphabet)
    return a, b


token_lists = st.lists(st.integers(0, 3), max_size=12)


# --------------------------------------------------------------------------------------------------
# shaped_rewards
# --------------------------------------------------------------------------------------------------
# R' = r + lam * (1 - r) * s. For r = 1 it is 1 whatever s (in IBPO s = 0 there anyway); for r = 0 it is lam * s.
SHAPED = {
    (0.0, 0.0, 0.0): 0.0, (0.0, 1 / 3, 0.0): 0.0, (0.0, 2 / 3, 0.0): 0.0, (0.0, 1.0, 0.0): 0.0,
    (0.0, 0.0, 0.6): 0.0, (0.0, 1 / 3, 0.6): 0.2, (0.0, 2 / 3, 0.6): 0.4, (0.0, 1.0, 0.6): 0.6,
    (0.0, 0.0, 1.0): 0.0, (0.0, 1 / 3, 1.0): 1 / 3, (0.0, 2 / 3, 1.0): 2 / 3, (0.0, 1.0, 1.0): 1.0,
    **{(1.0, s, lam): 1.0 for s in (0.0, 1 / 3, 2 / 3, 1.0) for lam in (0.0, 0.6, 1.0)},
}


@pytest.mark.parametrize(("r", "s", "lam"), sorted(SHAPED))
def test_shaped_rewards_hand_values(r, s, lam):
    got = shaped_rewards(torch.tensor([r], dtype=torch.float64), torch.tensor([s], dtype=torch.float64), lam)
    assert got.item() == pytest.approx(SHAPED[(r, s, lam)], abs=1e-12)


def test_shaped_rewards_vectorised_over_rows():
    r = torch.tensor([0.0, 0.0, 1.0, 0.5, 0.25])
    s = torch.tensor([1.0, 1 / 3, 0.0, 0.5, 1.0])
    # 0 + .6*1*1 = .6; .6/3 = .2; 1; .5 + .6*.5*.5 = .65; .25 + .6*.75*1 = .7
    torch.testing.assert_close(shaped_rewards(r, s, 0.6), torch.tensor([0.6, 0.2, 1.0, 0.65, 0.7]))


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.6, 0.9, 0.999])
def test_a_correct_answer_outranks_every_failure(lam):
    # the best failure, s = 1: lam * 1 < 1 = R' of any correct answer
    fail = shaped_rewards(torch.zeros(4, dtype=torch.float64), torch.tensor([0.0, 1 / 3, 2 / 3, 1.0], dtype=torch.float64), lam)
    good = shaped_rewards(torch.ones(4, dtype=torch.float64), torch.zeros(4, dtype=torch.float64), lam)
    assert fail.max().item() < good.min().item() == 1.0
    assert fail.max().item() == pytest.approx(lam)


@settings(max_examples=60, deadline=None)
@given(lam=st.floats(0.0, 0.99), s=st.floats(0.0, 1.0), r_fail=st.sampled_from([0.0, 0.25, 0.5, 0.75]))
def test_shaping_keeps_failures_below_one(lam, s, r_fail):
    # r + lam (1 - r) s <= r + lam (1 - r) < r + (1 - r) = 1 for r < 1, lam < 1
    got = shaped_rewards(torch.tensor([r_fail], dtype=torch.float64), torch.tensor([s], dtype=torch.float64), lam).item()
    assert r_fail <= got < 1.0
    assert got == pytest.approx(r_fail + lam * (1 - r_fail) * s, abs=1e-12)


# --------------------------------------------------------------------------------------------------
# edit_distance_table and edit_mask
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(60))
def test_edit_distance_table_matches_nested_loops(seed):
    a, b = pair(seed)
    got = edit_distance_table(a, b)
    assert got.dtype == torch.long
    assert got.tolist() == levenshtein(a, b)


@settings(max_examples=80, deadline=None)
@given(a=token_lists, b=token_lists)
def test_edit_distance_table_hypothesis(a, b):
    assert edit_distance_table(a, b).tolist() == levenshtein(a, b)


def test_edit_distance_hand_values():
    # kitten -> sitting: k->s, e->i, insert g: 3
    kitten, sitting = [ord(c) for c in "kitten"], [ord(c) for c in "sitting"]
    assert edit_distance_table(kitten, sitting)[-1, -1].item() == 3
    assert edit_distance_table([], []).tolist() == [[0]]
    assert edit_distance_table([1, 2], []).tolist() == [[0], [1], [2]]
    assert edit_distance_table([], [1, 2, 3]).tolist() == [[0, 1, 2, 3]]
    # [1, 2] vs [2, 1]: row 1 (source [1]) = [1, 1, 1]: [1]->[2] one sub, [1]->[2, 1] one insertion;
    # row 2 (source [1, 2]) = [2, 1, 2]: [1, 2]->[2] one deletion, [1, 2]->[2, 1] two subs
    assert edit_distance_table([1, 2], [2, 1]).tolist() == [[0, 1, 2], [1, 1, 1], [2, 1, 2]]


@pytest.mark.parametrize("seed", range(80))
def test_edit_mask_matches_reference(seed):
    a, b = pair(seed)
    got = edit_mask(a, b)
    assert got.dtype == torch.bool and got.shape == (len(a),)
    assert got.tolist() == reference_edit_mask(a, b)


@settings(max_examples=80, deadline=None)
@given(a=token_lists, b=token_lists)
def test_edit_mask_hypothesis(a, b):
    got = edit_mask(a, b).tolist()
    assert got == reference_edit_mask(a, b)
    distance = levenshtein(a, b)[-1][-1]
    assert sum(got) <= distance  # each edit operation marks at most one source token
    if a:
        assert (sum(got) == 0) == (a == b)
    # the unmarked tokens are matched: in order they form a subsequence of the revision
    assert is_subsequence([x for x, m in zip(a, got) if not m], b)
    # at least n - distance tokens are matched (and unmarked unless an insertion lands on them)
    assert len(a) - sum(got) >= len(a) - distance


@pytest.mark.parametrize(
    ("source", "target", "expected"),
    [
        # identical: nothing marked
        ([1, 2, 3], [1, 2, 3], [0, 0, 0]),
        # empty revision: every source token is deleted
        ([1, 2, 3], [], [1, 1, 1]),
        # substitution 2 -> 7
        ([1, 2, 3], [1, 7, 3], [0, 1, 0]),
        # deletion of the 2: marks it
        ([1, 2, 3, 4], [1, 3, 4], [0, 1, 0, 0]),
        # insertion of 9 between 1 and 2: marks the token after the insertion point, the 2
        ([1, 2, 3], [1, 9, 2, 3], [0, 1, 0]),
        # a run of two inserted tokens in the middle still marks only the token after it
        ([1, 2, 3], [1, 8, 9, 2, 3], [0, 1, 0]),
        # insertion at the start marks the first token
        ([1, 2, 3], [9, 1, 2, 3], [1, 0, 0]),
        # insertion at the end marks the last token
        ([1, 2, 3], [1, 2, 3, 9], [0, 0, 1]),
        # tie-break: [1, 1] -> [1] deletes one of the 1s (distance 1). Walking back from (2, 1),
        # match (D[1][0] + 0 = 1 = D[2][1]) is preferred, so the second 1 is matched and the first deleted.
        ([1, 1], [1], [1, 0]),
        # mixed: [1, 2, 3, 4, 5] -> [1, 7, 3, 5, 6] (distance 3). Walking back: (5, 5) 5 vs 6,
        # D[4][4] + 1 = dist([1,2,3,4], [1,7,3,5]) + 1 = 2 + 1 = 3 = D[5][5]: substitute (mark 5);
        # (4, 4) 4 vs 5, D[3][3] + 1 = 1 + 1 = 2 = D[4][4]: substitute (mark 4); (3, 3) match 3;
        # (2, 2) 2 vs 7: substitute (mark 2); (1, 1) match 1.
        ([1, 2, 3, 4, 5], [1, 7, 3, 5, 6], [0, 1, 0, 1, 1]),
        # mixed with a deletion and an insertion: [1, 2, 3, 4] -> [1, 3, 4, 8, 9] (distance 3:
        # delete 2, insert 8 9 at the end). (4, 5) 4 vs 9: D[3][4] + 1 = dist([1,2,3], [1,3,4,8]) + 1 = 4 > 3;
        # deletion D[3][5] + 1 = 5 > 3; insertion: mark the last token (4), j = 4; likewise for 8 (j = 3);
        # (4, 3) match 4; (3, 2) match 3; (2, 1) 2 vs 1: D[1][0] + 1 = 2 > D[2][1] = 1, deletion
        # D[1][1] + 1 = 1: delete the 2 (mark); (1, 1) match.
        ([1, 2, 3, 4], [1, 3, 4, 8, 9], [0, 1, 0, 1]),
    ],
)
def test_edit_mask_hand_cases(source, target, expected):
    got = edit_mask(source, target)
    assert got.dtype == torch.bool
    assert got.int().tolist() == expected


def test_edit_mask_empty_source():
    got = edit_mask([], [1, 2, 3])
    assert got.dtype == torch.bool and got.shape == (0,)
    assert edit_mask([], []).shape == (0,)


@pytest.mark.parametrize("seed", range(40))
def test_edit_mask_properties(seed):
    a, b = pair(seed + 1000)
    got = edit_mask(a, b).tolist()
    distance = levenshtein(a, b)[-1][-1]
    assert sum(got) <= distance
    if a:
        assert (sum(got) == 0) == (a == b)
    assert is_subsequence([x for x, m in zip(a, got) if not m], b)


# --------------------------------------------------------------------------------------------------
# closest_revision
# --------------------------------------------------------------------------------------------------
def test_closest_revision_hand():
    source = [1, 2, 3]
    # distances: [1,2,3,4,5] -> 2 (two insertions); [1,9,3] -> 1; [1,2] -> 1; [4,5,6] -> 3
    revisions = [[1, 2, 3, 4, 5], [1, 9, 3], [1, 2], [4, 5, 6]]
    assert closest_revision(source, revisions) == 1  # smallest distance 1, first of the two
    assert closest_revision(source, revisions[2:]) == 0  # [1, 2] (1) beats [4, 5, 6] (3)
    assert closest_revision(source, [[7, 7, 7], [1, 2, 3]]) == 1  # 3 vs 0
    assert closest_revision(source, [[7]]) == 0


def test_closest_revision_empty_list_raises():
    with pytest.raises(ValueError, match="at least one revision"):
        closest_revision([1, 2, 3], [])


@pytest.mark.parametrize("seed", range(30))
def test_closest_revision_matches_loop(seed):
    rng = random.Random(seed)
    source = random_tokens(rng, 10, 3)
    revisions = [mutate(rng, source, 3) if rng.random() < 0.7 else random_tokens(rng, 10, 3) for _ in range(rng.randint(1, 6))]
    best, best_d = 0, None
    for k, rev in enumerate(revisions):
        d = levenshtein(source, rev)[-1][-1]
        if best_d is None or d < best_d:  # strict: the first one wins ties
            best, best_d = k, d
    assert closest_revision(source, revisions) == best


# --------------------------------------------------------------------------------------------------
# RevisionAdvantage via get_method("ibpo")
# --------------------------------------------------------------------------------------------------
def ibpo_batch(seed: int, *, with_correct: bool = False) -> tuple[RolloutBatch, dict]:
    """Random IBPO batch: mixed group sizes, shuffled group ids, ragged rows, random loss and edit masks
    (edit masks also on rows without a revision, which must ignore them)."""
    rng = random.Random(seed)
    rows = []
    for gid in rng.sample(range(300), rng.randint(1, 4)):
        kind = rng.choice(["mixed", "all_fail", "all_pass"])
        for _ in range(rng.randint(1, 5)):
            correct = {"mixed": rng.random() < 0.4, "all_fail": False, "all_pass": True}[kind]
            s = 0.0 if correct else rng.choice([0.0, 1 / 3, 2 / 3, 1.0])
            rows.append({"group": gid, "correct": correct, "s": s, "reward": 1.0 if correct else 0.0})
    rng.shuffle(rows)
    B, T = len(rows), rng.randint(1, 8)
    lengths = [rng.randint(0, T) for _ in range(B)]
    resp = [[t < n for t in range(T)] for n in lengths]
    loss = [[t < n and rng.random() < 0.8 for t in range(T)] for n in lengths]
    edit = [[t < n and rng.random() < 0.4 for t in range(T)] for n in lengths]
    batch = RolloutBatch(
        response_ids=torch.tensor([[rng.randrange(20) for _ in range(T)] for _ in range(B)]),
        response_mask=torch.tensor(resp),
        group_id=torch.tensor([r["group"] for r in rows]),
        rewards=torch.tensor([r["reward"] for r in rows]),
        old_logp=torch.tensor([[-rng.random() if m else 0.0 for m in row] for row in resp]),
        loss_mask=torch.tensor(loss),
        revision_success=torch.tensor([r["s"] for r in rows]),
        edit_mask=torch.tensor(edit),
        correct=torch.tensor([r["correct"] for r in rows]) if with_correct else None,
    )
    return batch, {"rows": rows, "T": T, "resp": resp, "loss": loss, "edit": edit}


@pytest.mark.parametrize("edit_credit", ["signed", "edited"])
@pytest.mark.parametrize("norm", ["response", "trained"])
@pytest.mark.parametrize("seed", range(40))
def test_ibpo_credit_matches_loop_reference(seed, norm, edit_credit):
    batch, info = ibpo_batch(seed, with_correct=seed % 2 == 1)
    rows, T = info["rows"], info["T"]
    B = len(rows)
    credited, metrics = get_method("ibpo", estimator={"norm": norm, "edit_credit": edit_credit}).credit(batch)
    shaped = [r["reward"] + 0.6 * (1 - r["reward"]) * r["s"] for r in rows]
    adv = loop_group_advantage(shaped, [r["group"] for r in rows])
    repaired = [not r["correct"] and r["s"] > 0 for r in rows]

    def carries(b, t):
        # "signed": a repaired failure's edited tokens take min(A, 0), its unedited ones max(A, 0)
        if not repaired[b]:
            return True
        if edit_credit == "signed" and adv[b] > 0:
            return not info["edit"][b][t]
        return info["edit"][b][t]

    mask = [[info["loss"][b][t] and carries(b, t) for t in range(T)] for b in range(B)]
    # "response": unedited tokens stay in the loss mask (the normaliser) with advantage 0. A repaired row
    # whose A is 0 up to round-off may pick either side under "signed" (its credit is ~0 either way).
    tied = [repaired[b] and abs(adv[b]) < 1e-5 for b in range(B)]
    got_mask = credited.loss_mask.tolist()
    want_mask = info["loss"] if norm == "response" else mask
    assert [got_mask[b] for b in range(B) if not tied[b]] == [want_mask[b] for b in range(B) if not tied[b]]
    expected = [[adv[b] if mask[b][t] else 0.0 for t in range(T)] for b in range(B)]
    torch.testing.assert_close(credited.advantages, torch.tensor(expected), rtol=1e-5, atol=1e-5)
    # metrics
    failed = [r["s"] for r in rows if not r["correct"]]
    assert metrics["credit/revision_success"] == pytest.approx(sum(failed) / len(failed) if failed else 0.0, abs=1e-6)
    groups = sorted({r["group"] for r in rows})
    given = 0
    for g in groups:
        raw = [r["reward"] for r in rows if r["group"] == g]
        new = [shaped[b] for b in range(B) if rows[b]["group"] == g]
        given += max(raw) == min(raw) and max(new) > min(new)
    assert metrics["credit/groups_given_variance"] == pytest.approx(given / len(groups))
    edited = sum(sum(info["edit"][b]) for b in range(B) if repaired[b])
    tokens = sum(sum(info["resp"][b]) for b in range(B) if repaired[b])
    assert metrics["credit/edited_token_frac"] == pytest.approx(edited / max(tokens, 1), abs=1e-6)


@pytest.mark.parametrize("seed", range(15))
def test_ibpo_without_edit_mask_keeps_every_loss_token(seed):
    batch, info = ibpo_batch(seed)
    credited, _ = get_method("ibpo", estimator={"use_edit_mask": False}).credit(batch)
    assert credited.loss_mask.tolist() == info["loss"]
    # and it does not need an edit mask at all
    credited2, _ = get_method("ibpo", estimator={"use_edit_mask": False}).credit(batch.replace(edit_mask=None))
    assert torch.equal(credited2.advantages, credited.advantages)


def test_shaping_gives_an_all_fail_group_variance():
    # group 5: all four fail; one failure has 1 of 3 revisions correct (s = 1/3).
    #   shaped R' = [0, 0.6 * 1/3, 0, 0] = [0, 0.2, 0, 0]; mean 0.05;
    #   population var = (3 * 0.05^2 + 0.15^2) / 4 = (0.0075 + 0.0225) / 4 = 0.0075, std = sqrt(0.0075)
    #   A = 0.15 / (std + 1e-6) for the fixable row (~ sqrt(3) = 1.732), -0.05 / (std + 1e-6) for the others.
    # group 9: mixed raw rewards [1, 0]: variance already there (not "given"); shaped [1, 0.6 * 2/3 = 0.4]:
    #   mean 0.7, std 0.3: A = +-0.3 / (0.3 + 1e-6).
    # group 2: all correct [1, 1]: shaped [1, 1], A = 0, no variance given.
    # groups_given_variance = 1 of 3 groups.
    T = 3
    resp = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    edit = torch.zeros(8, T, dtype=torch.bool)
    edit[1, 1] = True  # the fixable failure: only its second token was changed by the revision
    edit[5, 0] = True  # the repaired failure of group 9
    batch = RolloutBatch(
        response_ids=torch.zeros(8, T, dtype=torch.long),
        response_mask=resp,
        group_id=torch.tensor([5, 5, 5, 5, 9, 9, 2, 2]),
        rewards=torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0]),
        old_logp=torch.where(resp, -1.0, 0.0),
        revision_success=torch.tensor([0.0, 1 / 3, 0.0, 0.0, 0.0, 2 / 3, 0.0, 0.0]),
        edit_mask=edit,
    )
    credited, metrics = get_method("ibpo").credit(batch)
    std = math.sqrt(0.0075)
    hi, lo = 0.15 / (std + 1e-6), -0.05 / (std + 1e-6)
    a9 = 0.3 / (0.3 + 1e-6)
    expected = torch.tensor([
        [lo, lo, lo],
        [hi, 0.0, 0.0],  # repaired with A > 0: the kept tokens are credited, never the edited one (token 1)
        [lo, 0.0, 0.0],
        [lo, lo, lo],
        [a9, a9, a9],
        [-a9, 0.0, 0.0],  # repaired: only token 0
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
    ])
    torch.testing.assert_close(credited.advantages, expected, rtol=1e-5, atol=1e-6)
    assert hi == pytest.approx(math.sqrt(3), rel=1e-4)
    assert metrics["credit/groups_given_variance"] == pytest.approx(1 / 3)
    # revision success over the 5 failures: (1/3 + 2/3) / 5 = 0.2
    assert metrics["credit/revision_success"] == pytest.approx(0.2, abs=1e-6)
    # edited fraction over the repaired rows 1 and 5: (1 + 1) / (2 + 2) = 0.5
    assert metrics["credit/edited_token_frac"] == pytest.approx(0.5)
    # the earlier reading ("edited") put the positive advantage on the edited token: the mistake
    edited_reading, _ = get_method("ibpo", estimator={"edit_credit": "edited"}).credit(batch)
    torch.testing.assert_close(edited_reading.advantages[1], torch.tensor([0.0, hi, 0.0]), rtol=1e-5, atol=1e-6)
    # without shaping (lam = 0) the all-fail group has no signal at all
    plain, plain_metrics = get_method("ibpo", estimator={"revision_weight": 0.0}).credit(batch)
    assert torch.equal(plain.advantages[:4], torch.zeros(4, T))
    assert plain_metrics["credit/groups_given_variance"] == 0.0


def _small_ibpo(**overrides) -> RolloutBatch:
    fields = dict(
        response_ids=torch.zeros(3, 2, dtype=torch.long),
        response_mask=torch.ones(3, 2, dtype=torch.bool),
        group_id=torch.tensor([0, 0, 0]),
        rewards=torch.tensor([1.0, 0.0, 0.0]),
        old_logp=torch.full((3, 2), -1.0),
        revision_success=torch.tensor([0.0, 0.5, 0.0]),
        edit_mask=torch.tensor([[False, False], [True, False], [False, False]]),
    )
    fields.update(overrides)
    return RolloutBatch(**fields)


def test_revision_success_on_a_correct_row_raises():
    batch = _small_ibpo(revision_success=torch.tensor([0.5, 0.5, 0.0]))
    with pytest.raises(ValueError, match="revision_success must be 0 on correct rows"):
        get_method("ibpo").credit(batch)
    with pytest.raises(ValueError, match="revision_success must be 0 on correct rows"):
        get_method("ibpo", estimator={"use_edit_mask": False}).credit(batch)


def test_missing_revision_success_raises():
    with pytest.raises(ValueError, match="revision_success"):
        get_method("ibpo").credit(_small_ibpo(revision_success=None))
    with pytest.raises(ValueError, match="revision_success"):
        get_method("ibpo", estimator={"use_edit_mask": False}).credit(_small_ibpo(revision_success=None))


def test_missing_edit_mask_raises():
    with pytest.raises(ValueError, match="edit_mask"):
        get_method("ibpo").credit(_small_ibpo(edit_mask=None))


def test_lam_out_of_range_raises():
    with pytest.raises(ValueError, match="revision_weight"):
        get_method("ibpo", estimator={"revision_weight": 1.5})


def test_ibpo_uses_correct_instead_of_reward_below_one():
    # Code rewards (fraction of tests). Row 1 scores 0.9 but the verifier says correct: with `correct`
    # given it is not a failure, so a non-zero revision_success on it is an error ...
    base = dict(
        response_ids=torch.zeros(3, 2, dtype=torch.long),
        response_mask=torch.ones(3, 2, dtype=torch.bool),
        group_id=torch.tensor([0, 0, 0]),
        old_logp=torch.full((3, 2), -1.0),
        edit_mask=torch.tensor([[True, False], [False, True], [False, True]]),
    )
    bad = RolloutBatch(
        rewards=torch.tensor([0.5, 0.9, 0.0]), revision_success=torch.tensor([0.0, 0.5, 0.0]),
        correct=torch.tensor([False, True, False]), **base,
    )
    with pytest.raises(ValueError, match="revision_success must be 0 on correct rows"):
        get_method("ibpo").credit(bad)
    # ... while without `correct` the same row (reward 0.9 < 1) is a failure and may be revised.
    # Shaped R' = [0.5, 0.9 + 0.6 * 0.1 * 0.5, 0] = [0.5, 0.93, 0]: row 1 is above the mean, so its credit
    # goes to its unedited token 0, never to the edited token 1.
    credited, _ = get_method("ibpo").credit(bad.replace(correct=None))
    assert (credited.advantages != 0).tolist() == [[True, True], [True, False], [True, True]]

    # Row 0 scores 1.0 but the verifier rejects it (correct=False): a failure only when `correct` is given.
    # rewards [1.0, 0.5, 0.0], s = [1/3, 0, 0]: shaped R' = [1 + 0.6 * 0 * 1/3, 0.5, 0] = [1, 0.5, 0]
    # (s does not move a reward of 1); mean 0.5, population std sqrt((0.25 + 0 + 0.25)/3) = sqrt(1/6)
    # -> A = [0.5, 0, -0.5] / (sqrt(1/6) + 1e-6). Row 0 is "repaired" with A > 0: it trains only on the
    # token its revision kept (token 1), never on the edited token 0.
    flagged = RolloutBatch(
        rewards=torch.tensor([1.0, 0.5, 0.0]), revision_success=torch.tensor([1 / 3, 0.0, 0.0]),
        correct=torch.tensor([False, True, False]), **base,
    )
    credited, metrics = get_method("ibpo", estimator={"norm": "trained"}).credit(flagged)
    a = 0.5 / (math.sqrt(1 / 6) + 1e-6)
    assert credited.loss_mask.tolist() == [[False, True], [True, True], [True, True]]
    torch.testing.assert_close(credited.advantages, torch.tensor([[0.0, a], [0.0, 0.0], [-a, -a]]), rtol=1e-5, atol=1e-6)
    # failures by `correct`: rows 0 and 2 -> mean s = (1/3 + 0) / 2
    assert metrics["credit/revision_success"] == pytest.approx(1 / 6, abs=1e-6)
    with pytest.raises(ValueError, match="revision_success must be 0 on correct rows"):
        get_method("ibpo").credit(flagged.replace(correct=None))  # by reward, row 0 (1.0) is correct


@pytest.mark.parametrize("method", ["ibpo", "ibpo_clip"])
def test_response_normalisation_keeps_the_weight_of_each_edited_token(method):
    # A repaired failure with 2 of its 5 tokens edited. "response": the edited tokens get exactly the
    # gradient they get without the mask, the others none. "trained": a per-sequence token mean spreads the
    # row's advantage over the 2 edited tokens, each weighing 5/2 times as much.
    batch = _small_ibpo(
        response_ids=torch.zeros(3, 5, dtype=torch.long), response_mask=torch.ones(3, 5, dtype=torch.bool),
        old_logp=torch.full((3, 5), -1.0),
        edit_mask=torch.tensor([[False] * 5, [False, True, False, True, False], [False] * 5]),
    )

    def grad(**estimator):
        m = get_method(method, estimator=estimator)
        credited, _ = m.credit(batch)
        logp = batch.old_logp.clone().requires_grad_()
        m.policy_loss(logp, credited).loss.backward()
        return logp.grad[1]

    plain, response, trained = grad(use_edit_mask=False), grad(), grad(norm="trained")
    edited = torch.tensor([False, True, False, True, False])
    torch.testing.assert_close(response[edited], plain[edited])
    assert torch.equal(response[~edited], torch.zeros(3)) and torch.equal(trained[~edited], torch.zeros(3))
    torch.testing.assert_close(trained[edited], plain[edited] * 5 / 2)
