"""Oracle blame (issue: the yardstick of perfect blame): masks from first-wrong-token offsets against a loop
reference, the lucky-success and normalisation switches, offsets from thoughts, and its errors."""

from __future__ import annotations

import random

import pytest
import torch
from references import loop_group_advantage

from credo.batch import RolloutBatch
from credo.config import ConfigError, load_config
from credo.credit import blame_mask
from credo.methods import get_method
from credo.rollout.thoughts import ThoughtRules, blame_start


def loop_blame(lengths, starts, failed, lucky):
    """[b][t] bool: the documented rule, one token at a time."""
    T = max(lengths + [1])
    out = []
    for n, start, fail in zip(lengths, starts, failed):
        row = []
        for t in range(T):
            if t >= n:
                row.append(False)
            elif fail:
                row.append(start < 0 or t >= start)
            else:
                row.append(not (lucky == "before" and 0 <= start <= t))
        out.append(row)
    return out


def random_case(seed):
    rng = random.Random(seed)
    B = rng.randint(1, 9)
    lengths = [rng.randint(0, 12) for _ in range(B)]
    failed = [rng.random() < 0.6 for _ in range(B)]
    starts = [rng.choice([-1, rng.randint(0, n)]) for n in lengths]
    groups = [rng.randrange(3) for _ in range(B)]
    return lengths, starts, failed, groups


@pytest.mark.parametrize("lucky", ["all", "before"])
@pytest.mark.parametrize("seed", range(30))
def test_blame_mask_matches_loop_reference(seed, lucky):
    lengths, starts, failed, _ = random_case(seed)
    T = max(lengths + [1])
    response = torch.arange(T).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    mask = blame_mask(response, torch.tensor(starts), torch.tensor(failed), lucky)
    assert mask.tolist() == loop_blame(lengths, starts, failed, lucky)


def batch_of(lengths, starts, failed, groups):
    T = max(lengths + [1])
    response = torch.arange(T).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    return RolloutBatch(
        response_ids=torch.zeros(len(lengths), T, dtype=torch.long), response_mask=response,
        group_id=torch.tensor(groups), rewards=torch.tensor([0.0 if f else 1.0 for f in failed]),
        old_logp=torch.where(response, -1.0, 0.0), correct=torch.tensor([not f for f in failed]),
        blame_start=torch.tensor(starts),
    )


@pytest.mark.parametrize("norm", ["response", "trained"])
@pytest.mark.parametrize("lucky", ["all", "before"])
@pytest.mark.parametrize("seed", range(20))
def test_oracle_credit_matches_loop_reference(seed, lucky, norm):
    lengths, starts, failed, groups = random_case(seed)
    credited, metrics = get_method("oracle_blame", estimator={"lucky": lucky, "norm": norm}).credit(
        batch_of(lengths, starts, failed, groups))
    adv = loop_group_advantage([0.0 if f else 1.0 for f in failed], groups)
    blamed = loop_blame(lengths, starts, failed, lucky)
    expected = [[adv[b] if blamed[b][t] else 0.0 for t in range(len(blamed[b]))] for b in range(len(lengths))]
    torch.testing.assert_close(credited.advantages, torch.tensor(expected), rtol=1e-5, atol=1e-6)
    response = [[t < n for t in range(len(blamed[0]))] for n in lengths]
    assert credited.loss_mask.tolist() == (blamed if norm == "trained" else response)
    on_failed = sum(sum(blamed[b]) for b in range(len(lengths)) if failed[b])
    assert metrics["credit/blamed_token_frac"] == pytest.approx(
        on_failed / max(1, sum(lengths[b] for b in range(len(lengths)) if failed[b])))


@pytest.mark.parametrize("case,start,failed,lucky,expected", [
    ("first step wrong", 0, True, "all", [1, 1, 1, 1, 1, 1]),
    ("last step wrong", 4, True, "all", [0, 0, 0, 0, 1, 1]),
    ("no wrong step, failed (no step located)", -1, True, "all", [1, 1, 1, 1, 1, 1]),
    ("unparseable: the checker blames step 0", 0, True, "before", [1, 1, 1, 1, 1, 1]),
    ("clean success", -1, False, "before", [1, 1, 1, 1, 1, 1]),
    ("lucky success, all", 2, False, "all", [1, 1, 1, 1, 1, 1]),
    ("lucky success, before", 2, False, "before", [1, 1, 0, 0, 0, 0]),
])
def test_hand_cases(case, start, failed, lucky, expected):
    response = torch.ones(1, 6, dtype=torch.bool)
    mask = blame_mask(response, torch.tensor([start]), torch.tensor([failed]), lucky)
    assert mask.int().tolist() == [expected], case


def test_blame_start_from_thoughts():
    rules = ThoughtRules()
    pieces = ["+", "5", "=", "1", "2", "</thought>", "*", "3", "=", "3", "6", "</thought>", "\\boxed{", "3", "6", "}"]
    assert blame_start(pieces, None, rules) == -1
    assert blame_start(pieces, 0, rules) == 0
    assert blame_start(pieces, 1, rules) == 6
    assert blame_start(pieces, 2, rules) == 12  # the answer thought
    assert blame_start(pieces, 5, rules) == 12  # a missing step: from the last thought
    assert blame_start([], 0, rules) == 0


def test_missing_offsets_and_tasks_without_a_step_checker_are_errors(tmp_path):
    batch = batch_of([3, 3], [1, -1], [True, False], [0, 0]).replace(blame_start=None)
    with pytest.raises(ValueError, match="blame_start"):
        get_method("oracle_blame").credit(batch)
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "1+1?", "answer": "2"}\n')
    with pytest.raises(ConfigError, match=r"oracle_blame needs blame_start \(a task.s step checker: .*\(task jsonl has no step checker\)"):
        load_config(None, ["method=oracle_blame", f"task={{name: jsonl, path: {data}}}"])
    with pytest.raises(ValueError, match="lucky"):
        get_method("oracle_blame", estimator={"lucky": "some"})


@pytest.mark.parametrize("start", [-2, 4])
def test_blame_start_outside_the_response_is_rejected(start):
    with pytest.raises(ValueError, match="blame_start"):
        batch_of([3], [start], [True], [0])
