"""IBPO's revision sampler with a scripted policy: references, success shares, shaping, masks, cost, failures."""

from __future__ import annotations

import random

import pytest
import torch
from scripted import ScriptedPolicy, chain_of, wrong_at

from credo.batch import RolloutBatch
from credo.config import ConfigError, load_config
from credo.credit import edit_mask
from credo.methods import get_method
from credo.rollout.groups import ProblemStream
from credo.rollout.revise import REVISE_PROMPT, TESTBED_REVISE_PROMPT, check_template, choose_references
from credo.rollout.samplers.revisions import sample_revisions
from credo.tasks import ArithTask
from credo.tasks.arith import ArithConfig, format_answer, format_step, solution

TASK = ArithTask()


def config(*extra, prompts=1, group=4, k=4, template=TESTBED_REVISE_PROMPT):
    rollout = load_config(None, [f"rollout.prompts_per_step={prompts}", f"rollout.group_size={group}",
                                 "method=ibpo", f"rollout.revisions.k={k}", *extra]).rollout
    return rollout.model_copy(update={"revisions": rollout.revisions.model_copy(update={"prompt": template})})


def run(policy, cfg, seed=0, steps=None):
    """The sampler over arith prompts (of `steps` operations where given)."""
    task = ArithTask(ArithConfig(min_steps=steps, max_steps=steps)) if steps else TASK
    return sample_revisions(policy, task, ProblemStream(task, seed=3), cfg, random.Random(seed))


def scripted_group(pattern):
    """A draw script that answers the i-th draw of a prompt with `pattern[i]`: "ok" (the solution) or an
    int (wrong at that step, off by 1) or a string (that text)."""
    counts = {}

    def draw(prompt):
        n = counts[prompt] = counts.get(prompt, 0) + 1
        item, chain = pattern[(n - 1) % len(pattern)], chain_of(prompt)
        if item == "ok":
            return solution(chain)
        return wrong_at(chain, min(item, len(chain.steps) - 1)) if isinstance(item, int) else item

    return draw


def parts(request):
    """(problem, reference, attempt) of a testbed-form revision request."""
    reference, attempt, problem = request.removeprefix("revise? ").split("\n")
    return problem, reference, attempt


def credit(rollout, **estimator):
    c = rollout.completions
    batch = RolloutBatch(response_ids=c.response_ids, response_mask=c.response_mask, group_id=rollout.group_id,
                         rewards=rollout.rewards, old_logp=torch.zeros(c.response_ids.shape),
                         correct=torch.tensor([v.correct for v in rollout.verdicts]),
                         revision_success=rollout.records["revision_success"], edit_mask=rollout.records["edit_mask"])
    return get_method("ibpo", estimator=estimator).credit(batch)


# ----------------------------------------------------------------------------------------- references
def test_references_are_correct_siblings_first_then_failed_ones():
    correct = [False, True, False, True, False, False, True, False]
    for seed in range(20):
        refs = choose_references(correct, 0, 5, random.Random(seed))
        assert sorted(refs[:3]) == [1, 3, 6] and set(refs[3:]) <= {2, 4, 5, 7} and len(set(refs)) == 5
    assert len({tuple(choose_references(correct, 0, 3, random.Random(s))) for s in range(20)}) > 1  # shuffled


def test_references_cycle_when_the_group_is_small():
    assert choose_references([False, True], 0, 3, random.Random(0)) == [1, 1, 1]
    refs = choose_references([False, False, True], 1, 3, random.Random(0))
    assert refs == [2, 0, 2]  # the correct sibling, the failed one, then around again


def test_a_group_of_one_has_no_reference():
    with pytest.raises(ValueError, match="sibling"):
        choose_references([False], 0, 3)


def test_the_sampler_asks_k_minus_1_revisions_per_failure_in_one_batch():
    # group of 4: ok, wrong at step 0, ok, wrong at step 1 -> 2 failures x 3 references, correct siblings first
    policy = ScriptedPolicy(scripted_group(["ok", 0, "ok", 1]), revise=lambda text: "")
    rollout = run(policy, config())
    assert policy.calls[1] == (6, 1, False)  # one generation call for all six revisions
    chain = chain_of(rollout.problems[0].prompt)
    requests = [parts(r) for r in policy.revision_requests]
    assert {a for _, _, a in requests} == {wrong_at(chain, 0), wrong_at(chain, 1)}
    for attempt in (wrong_at(chain, 0), wrong_at(chain, 1)):
        refs = [ref for _, ref, a in requests if a == attempt]
        assert refs[:2] == [solution(chain)] * 2 and refs[2] != solution(chain) and refs[2] != attempt
    assert all(p == chain.prompt for p, _, _ in requests)


def test_the_default_prompt_shows_problem_attempt_and_reference():
    policy = ScriptedPolicy(scripted_group(["ok", 0]), revise=lambda text: "")
    run(policy, config(group=2, k=2, template=REVISE_PROMPT))
    (request,) = policy.revision_requests
    assert "Problem: " in request and "Wrong attempt:\n" in request and "Reference attempt:\n" in request
    assert request.index("Wrong attempt") < request.index("Reference attempt")


def test_no_failure_means_no_revision_call():
    policy = ScriptedPolicy(scripted_group(["ok"]), revise=lambda text: pytest.fail("no revision expected"))
    rollout = run(policy, config(prompts=2))
    assert len(policy.calls) == 1 and rollout.records["revision_success"].tolist() == [0.0] * 8
    assert not rollout.records["edit_mask"].any() and rollout.metrics["revisions/count"] == 0.0


# ----------------------------------------------------------------------------------------- success and shaping
@pytest.mark.parametrize("successes", [0, 1, 2, 3])
@pytest.mark.parametrize("lam", [0.0, 0.6, 1.0])
def test_success_share_and_shaped_rewards(successes, lam):
    # group: ok, wrong at step 1, wrong at step 2, ok. The failure at step 1 gets `successes` good revisions
    # of its 3; the other failure none. R' = r + lam (1 - r) s.
    asked = {}

    def revise(text):
        _, _, attempt = parts(text)
        chain = chain_of(parts(text)[0])
        n = asked[attempt] = asked.get(attempt, 0) + 1
        good = attempt == wrong_at(chain, 1) and n <= successes
        return solution(chain) if good else wrong_at(chain, 0, offset=2)

    rollout = run(ScriptedPolicy(scripted_group(["ok", 1, 2, "ok"]), revise=revise), config())
    s = successes / 3
    torch.testing.assert_close(rollout.records["revision_success"], torch.tensor([0.0, s, 0.0, 0.0]))
    credited, metrics = credit(rollout, revision_weight=lam, use_edit_mask=False)  # the mask is tested below
    shaped = torch.tensor([1.0, lam * s, 0.0, 1.0])
    mean, std = shaped.mean(), shaped.std(unbiased=False)
    want = (shaped - mean) / (std + 1e-6)
    torch.testing.assert_close(credited.advantages[:, 0], want, rtol=1e-5, atol=1e-6)
    assert rollout.metrics["revisions/success_rate"] == pytest.approx(successes / 6)
    assert rollout.metrics["revisions/repairable_share"] == (0.5 if successes else 0.0)
    assert metrics["credit/revision_success"] == pytest.approx(s / 2)


def test_shaping_gives_an_all_fail_group_variance():
    # all four fail; only the failure at the last step is repaired (the first of its three revisions)
    repaired = []

    def revise(text):
        problem, _, attempt = parts(text)
        chain = chain_of(problem)
        if attempt == wrong_at(chain, 5) and not repaired:
            repaired.append(attempt)
            return solution(chain)
        return "x"

    rollout = run(ScriptedPolicy(scripted_group([0, 1, 2, 5]), revise=revise), config(), steps=6)
    assert rollout.records["revision_success"].tolist() == pytest.approx([0, 0, 0, 1 / 3])
    credited, metrics = credit(rollout)
    assert metrics["credit/groups_given_variance"] == 1.0
    adv = credited.advantages
    assert adv[3].max() > 0 and (adv[3] >= 0).all() and (adv[:3, 0] < 0).all()  # the near miss ranks above
    _, plain = credit(rollout, revision_weight=0.0)
    assert plain["credit/groups_given_variance"] == 0.0


# ----------------------------------------------------------------------------------------- edit masks
def ids(policy, text):
    return policy.tokenizer(text + "<|end|>", add_special_tokens=False)["input_ids"]


def test_mask_marks_the_substituted_digits_of_the_closest_successful_revision():
    # the failure is off by 1 at step 1 (0-based) and every later value follows; the revisions are the
    # solution (success), and a failing one that is closer in edit distance (must be ignored).
    replies = []

    def revise(text):  # alternately the solution and a failing revision closer to the failure
        chain = chain_of(parts(text)[0])
        replies.append(solution(chain) if len(replies) % 2 == 0 else wrong_at(chain, 3))
        return replies[-1]

    policy = ScriptedPolicy(scripted_group(["ok", 1]), revise=revise)
    rollout = run(policy, config(group=2, k=3), steps=4)
    chain = chain_of(rollout.problems[0].prompt)
    failed = ids(policy, wrong_at(chain, 1))
    fixed = ids(policy, solution(chain))
    expected = [a != b for a, b in zip(failed, fixed)]  # same length: substitutions only
    assert rollout.records["edit_mask"][1, : len(failed)].tolist() == expected and any(expected)
    assert not expected[0] and not rollout.records["edit_mask"][1, len(failed):].any()  # step 0 was right: no blame
    assert not rollout.records["edit_mask"][0].any()  # the correct row has no mask


@pytest.mark.parametrize("edit", ["insert", "delete"])
def test_mask_from_insertions_and_deletions(edit):
    # A failure that stopped a step early and boxed the value before it (the revision inserts the step), or
    # that wrote one step too many (the revision deletes it): the mask is the alignment's (its cases are
    # tested against a loop reference in credit/test_revisions.py), a deletion marks at least the six extra tokens,
    # and the shared first step is never blamed.
    def failure(chain):
        steps = solution(chain).split("</thought>")[:-1]
        values = chain.values()
        if edit == "insert":
            return "</thought>".join(steps[:-1]) + "</thought>" + format_answer(values[-2])
        extra = format_step("+", 1, (values[-1] + 1) % 100)
        return "</thought>".join(steps) + "</thought>" + extra + format_answer((values[-1] + 1) % 100)

    policy = ScriptedPolicy(lambda prompt: "", revise=lambda text: solution(chain_of(parts(text)[0])))
    counts = {}

    def draw(prompt):
        counts[prompt] = counts.get(prompt, 0) + 1
        return solution(chain_of(prompt)) if counts[prompt] == 1 else failure(chain_of(prompt))

    policy.draw = draw
    rollout = run(policy, config(group=2, k=2), steps=3)
    chain = chain_of(rollout.problems[0].prompt)
    failed, fixed = ids(policy, failure(chain)), ids(policy, solution(chain))
    mask = rollout.records["edit_mask"][1, : len(failed)]
    assert rollout.records["revision_success"].tolist() == [0.0, 1.0]
    assert mask.tolist() == edit_mask(failed, fixed).tolist()
    assert not mask[:6].any() and mask.sum() >= (6 if edit == "delete" else 1)  # step 1 is never blamed


@pytest.mark.parametrize("bad", ["", "no answer at all", "cut"])
def test_empty_unparseable_or_truncated_revisions_fail_without_crashing(bad):
    def revise(text):
        chain = chain_of(parts(text)[0])
        return (solution(chain), True) if bad == "cut" else bad  # a cut revision may even hold the answer

    rollout = run(ScriptedPolicy(scripted_group(["ok", 0, 1, "ok"]), revise=revise), config())
    assert rollout.records["revision_success"].tolist() == [0.0] * 4 and not rollout.records["edit_mask"].any()
    assert rollout.metrics["revisions/success_rate"] == 0.0
    assert rollout.metrics["revisions/truncated_share"] == (1.0 if bad == "cut" else 0.0)
    credited, _ = credit(rollout)
    assert torch.isfinite(credited.advantages).all()


def test_a_raising_verifier_on_a_revision_follows_reward_errors():
    class Fussy(ArithTask):
        def verify(self, problem, response):
            if response == "boom":
                raise KeyError("unparseable")
            return super().verify(problem, response)

    policy = ScriptedPolicy(scripted_group(["ok", 0]), revise=lambda text: "boom")
    with pytest.raises(RuntimeError, match="KeyError"):
        sample_revisions(policy, Fussy(), ProblemStream(TASK, seed=3), config(group=2, k=2), random.Random(0))
    rollout = sample_revisions(policy, Fussy(), ProblemStream(TASK, seed=3),
                               config("rollout.reward_errors=zero", group=2, k=2), random.Random(0))
    assert rollout.records["revision_success"].tolist() == [0.0, 0.0] and rollout.metrics["rollout/reward_errors"] == 1


# ----------------------------------------------------------------------------------------- cost and metrics
def test_revision_tokens_are_counted_as_cost():
    policy = ScriptedPolicy(scripted_group(["ok", 0, 1, "ok"]), revise=lambda text: solution(chain_of(parts(text)[0])))
    rollout = run(policy, config())
    chain = chain_of(rollout.problems[0].prompt)
    base = sum(len(ids(policy, t)) for t in (solution(chain), wrong_at(chain, 0), wrong_at(chain, 1), solution(chain)))
    extra = 6 * len(ids(policy, solution(chain)))
    assert rollout.generated_tokens == base + extra
    assert rollout.metrics["revisions/tokens"] == extra
    assert rollout.metrics["revisions/extra_cost"] == pytest.approx(extra / base)
    assert rollout.metrics["revisions/success_rate_correct_ref"] == 1.0
    assert rollout.metrics["revisions/success_rate_failed_ref"] == 1.0


def test_references_follow_the_seeded_rng():
    def requests(seed):
        policy = ScriptedPolicy(scripted_group(["ok", 0, 1, 2, 3, 4]), revise=lambda t: "")
        run(policy, config(group=6, k=3), seed=seed, steps=6)
        return policy.revision_requests

    assert requests(1) == requests(1)
    assert any(requests(1) != requests(s) for s in range(2, 6))


def test_rewrites_apply_to_attempt_and_reference():
    policy = ScriptedPolicy(scripted_group(["ok", 0]), revise=lambda text: "")
    cfg = config(group=2, k=2)
    cfg = cfg.model_copy(update={"revisions": cfg.revisions.model_copy(update={"rewrite": [(r"[-+*]\d=", "")]})})
    rollout = run(policy, cfg)
    chain = chain_of(rollout.problems[0].prompt)
    (request,) = policy.revision_requests
    values = "</thought>".join(f"{v:02d}" for v in chain.values()) + "</thought>"
    assert request.split("\n")[0] == "revise? " + values + format_answer(chain.values()[-1])
    assert request.split("\n")[2] == chain.prompt  # the problem is not rewritten


# ----------------------------------------------------------------------------------------- config
@pytest.mark.parametrize("template,message", [
    ("{problem} {attempt}", "missing: reference"),
    ("{problem} {attempt} {reference} {answer}", "unknown: answer"),
    ("{problem {attempt} {reference}", "not a valid format string"),
])
def test_bad_revision_prompts_are_named(template, message):
    with pytest.raises(ValueError, match=message):
        check_template(template)
    with pytest.raises(ConfigError, match="rollout.revisions.prompt"):
        load_config(None, ["method=ibpo", f"rollout.revisions.prompt={template!r}"])


def test_a_bad_rewrite_pattern_is_named():
    with pytest.raises(ConfigError, match=r"rollout.revisions.rewrite: .*'\[oops' is not a regular expression"):
        load_config(None, ["method=ibpo", "rollout.revisions.rewrite=[['[oops', '']]"])


def test_k_below_two_is_rejected():
    with pytest.raises(ConfigError, match="rollout.revisions.k"):
        load_config(None, ["method=ibpo", "rollout.revisions.k=1"])
