"""Oracle blame (issue: the yardstick of perfect blame): masks from first-wrong-token offsets against a loop
reference, the lucky-success and normalisation switches, offsets from thoughts, and its errors."""

from __future__ import annotations

import random

import pytest
import torch
from batches import random_batch
from references import loop_group_advantage

from credo.batch import RolloutBatch
from credo.config import ConfigError, load_config
from credo.credit import blame_mask, failed_rows
from credo.methods import get_method
from credo.rollout.thoughts import ThoughtRules, blame_start
from credo.tasks.arith import ArithConfig, ArithTask, Chain


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


# ---------------------------------------------------------------------------------------------- per-decision blame
def loop_decision_advantages(batch, eps=1e-6):
    """[b][t]: each judged thought's correctness normalised within (group, thought), one thought at a time; 0 on a
    thought not judged."""
    B, T = batch.response_mask.shape
    judged = batch.response_mask if batch.thought_judged is None else batch.thought_judged
    verdicts = {}  # (row, thought) -> right
    for b in range(B):
        for t in range(T):
            if judged[b, t]:
                verdicts[b, int(batch.thought_ids[b, t])] = not bool(batch.thought_wrong[b, t])
    advantage = {}
    for (b, j), right in verdicts.items():
        peers = [float(r) for (b2, j2), r in verdicts.items()
                 if j2 == j and int(batch.group_id[b2]) == int(batch.group_id[b])]
        mean = sum(peers) / len(peers)
        std = (sum((x - mean) ** 2 for x in peers) / len(peers)) ** 0.5
        advantage[b, j] = 0.0 if max(peers) == min(peers) else (float(right) - mean) / (std + eps)
    return [[advantage[b, int(batch.thought_ids[b, t])] if judged[b, t] else 0.0 for t in range(T)]
            for b in range(B)]


@pytest.mark.parametrize("seed", range(40))
def test_decision_advantages_match_loop_reference(seed):
    batch = random_batch(seed, dtype=torch.float64)
    credited, _ = get_method("oracle_steps").credit(batch)
    assert torch.allclose(credited.advantages.double(), torch.tensor(loop_decision_advantages(batch)).double(),
                          atol=1e-5)


def with_unjudged_thoughts(batch: RolloutBatch, seed: int) -> RolloutBatch:
    """`batch` with about a third of its right thoughts left unjudged (an agent's checks, which decide nothing)."""
    generator = torch.Generator().manual_seed(seed)
    unjudged_thought = torch.rand(batch.size, int(batch.thought_ids.max()) + 1, generator=generator) < 0.35
    unjudged = batch.response_mask & ~batch.thought_wrong & unjudged_thought.gather(1, batch.thought_ids.clamp(min=0))
    return batch.replace(thought_judged=batch.response_mask & ~unjudged)


@pytest.mark.parametrize("seed", range(20))
def test_thoughts_that_decide_nothing_join_no_class_and_get_no_credit(seed):
    """A thought the checker did not judge (an agent's check) gets 0 and leaves its class's statistics to the judged
    thoughts: the credit equals the loop reference's, and differs from counting those thoughts as right."""
    batch = with_unjudged_thoughts(random_batch(seed, dtype=torch.float64), seed)
    credited, _ = get_method("oracle_steps").credit(batch)
    assert torch.allclose(credited.advantages.double(), torch.tensor(loop_decision_advantages(batch)).double(),
                          atol=1e-5)
    unjudged = batch.response_mask & ~batch.thought_judged
    assert (credited.advantages[unjudged] == 0).all()


def test_the_unjudged_thoughts_of_these_batches_would_gain_if_counted_right():
    """The batches above exercise the rule: counted as right, many of their unjudged thoughts would gain credit."""
    gained = 0
    for seed in range(20):
        batch = with_unjudged_thoughts(random_batch(seed, dtype=torch.float64), seed)
        as_right, _ = get_method("oracle_steps").credit(batch.replace(thought_judged=None))
        gained += int((as_right.advantages[batch.response_mask & ~batch.thought_judged] > 0).sum())
    assert gained > 50


@pytest.mark.parametrize("seed", range(20))
def test_one_thought_judged_by_its_outcome_is_grpo(seed):
    # The identity: a response that is one thought, wrong exactly when the response failed, gets GRPO's advantage.
    batch = random_batch(seed)
    one = batch.replace(thought_ids=torch.where(batch.response_mask, 0, -1),
                        thought_wrong=batch.response_mask & failed_rows(batch).unsqueeze(1))
    steps, _ = get_method("oracle_steps").credit(one)
    grpo, _ = get_method("grpo").credit(one)
    # An empty response has no thought to judge but counts in its group's outcome statistics: leave its group out.
    empty = batch.group_id[batch.lengths == 0]
    compared = ~torch.isin(batch.group_id, empty)
    assert torch.allclose(steps.advantages[compared], grpo.advantages[compared], atol=1e-5)


@pytest.mark.parametrize("seed", range(40))
def test_per_decision_blame_credits_each_thought_by_its_own_correctness(seed):
    # Intent: whatever the outcome, a right thought never loses and a wrong one never gains; where its decision
    # class (group, thought) holds both verdicts, a right thought in a failure gains and a wrong thought in a
    # success (a lucky one) loses, so the yardstick is not the first-error blame, which credits those the other way.
    batch = random_batch(seed)
    credited, _ = get_method("oracle_steps").credit(batch)
    adv, response, wrong = credited.advantages, batch.response_mask, batch.thought_wrong
    assert (adv[response & ~wrong] >= 0).all() and (adv[wrong] <= 0).all()
    mixed = mixed_classes(batch)
    failed = failed_rows(batch).unsqueeze(1) & response
    assert (adv[failed & ~wrong & mixed] > 0).all()
    assert (adv[~failed & response & wrong & mixed] < 0).all()
    assert (adv[response & ~mixed] == 0).all()  # a class whose thoughts agree carries no credit, as under GRPO


@pytest.mark.parametrize("seed", range(20))
def test_per_decision_blame_is_at_grpos_scale(seed):
    # Each mixed decision class has advantages of mean 0 and population std 1, as each mixed group has under GRPO:
    # the yardstick moves the policy as far per decision as GRPO does per response, so a gain is credit, not step.
    batch = random_batch(seed, dtype=torch.float64)
    credited, _ = get_method("oracle_steps").credit(batch)
    items = {}
    for b, t in batch.response_mask.nonzero().tolist():
        items[int(batch.group_id[b]), int(batch.thought_ids[b, t]), b] = float(credited.advantages[b, t])
    classes = {}
    for (g, j, _), a in items.items():
        classes.setdefault((g, j), []).append(a)
    checked = 0
    for values in classes.values():
        if any(abs(v) > 0 for v in values):
            values = torch.tensor(values, dtype=torch.float64)
            assert abs(float(values.mean())) < 1e-6 and abs(float(values.std(correction=0)) - 1) < 1e-4
            checked += 1
    assert checked or not mixed_classes(batch).any()


def mixed_classes(batch):
    """(B, T) bool: tokens whose decision class (group, thought) holds a right and a wrong thought."""
    out = torch.zeros_like(batch.response_mask)
    for b, t in batch.response_mask.nonzero().tolist():
        j, g = int(batch.thought_ids[b, t]), int(batch.group_id[b])
        peers = (batch.group_id.unsqueeze(1) == g) & (batch.thought_ids == j) & batch.response_mask
        out[b, t] = bool(batch.thought_wrong[peers].any()) and bool((~batch.thought_wrong[peers]).any())
    return out


def test_per_decision_blame_needs_the_step_checker():
    batch = random_batch(0).replace(thought_ids=None, thought_wrong=None)
    with pytest.raises(ValueError, match="oracle_steps needs RolloutBatch.thought_ids and thought_wrong"):
        get_method("oracle_steps").credit(batch)


@pytest.mark.parametrize("response, errors, wrong", [
    ("+5=12</thought>+3=15</thought>\\boxed{15}", [], ()),
    ("+5=22</thought>+3=25</thought>\\boxed{25}", [(0, "slip")], (0,)),  # right after the error: not blamed
    ("+5=12</thought>+3=1</thought>+4=9</thought>\\boxed{9}", [(1, "format")], (1, 2, 3)),
    ("+5=12</thought>+3=15</thought>", [(2, "answer")], (2,)),  # the missing answer: past the last thought
])
def test_wrong_thoughts_reads_every_wrong_step(response, errors, wrong):
    assert ArithTask.wrong_thoughts(response, errors) == wrong


def test_a_lucky_success_is_blamed_on_its_wrong_steps_only():
    # carry -10 then borrow +10 cancel: the answer is right, both wrong steps are judged wrong, the others right.
    task = ArithTask(ArithConfig(noise={"misconceptions": {"carry": -10, "borrow": 10}}))
    chain = Chain(start=7, steps=(("+", 5), ("-", 8), ("+", 1)))  # 7+5=12 (written 02), 02-8=94 (written 04: 94+10)
    problem = task.problem(chain)
    verdict = task.verify(problem, "+5=02</thought>-8=04</thought>+1=05</thought>\\boxed{05}")
    assert verdict.correct and verdict.wrong_steps == (0, 1) and verdict.first_wrong_step == 0
