"""SPO-chain (arXiv 2505.23564): the sampler with a scripted policy whose values are known exactly, the segment
estimator against a loop and against the official code's functions, its identities and its intent."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
import torch
from batches import random_batch
from scripted import ScriptedPolicy, exact_policy
from tiny import TINY

from credo.batch import RolloutBatch
from credo.config import load_config
from credo.credit import failed_rows
from credo.credit.spo import SegmentAdvantage
from credo.methods import get_method
from credo.rollout.groups import ProblemStream
from credo.rollout.samplers.spo_chain import boundaries, sample_spo_chain, segment_layout
from credo.rollout.thoughts import THOUGHT_END
from credo.tasks import ArithTask
from credo.tasks.arith import ArithConfig

TASK = ArithTask(ArithConfig(min_steps=3, max_steps=3))
THOUGHT = 6  # tokens of a testbed step: op, operand, =, two digits, </thought>
LOW, HIGH = 0.5, 0.99  # scripted sampling probabilities: a thought's first token, every other token


def options(prompts=2, group=4, **spo):
    return load_config(None, [f"rollout.prompts_per_step={prompts}", f"rollout.group_size={group}",
                              "rollout.max_new_tokens=48", f"rollout.spo_chain={spo}", "method=spo_chain"]).rollout


class ProbedPolicy(ScriptedPolicy):
    """A scripted policy that records token probabilities: each thought's first token is sampled with
    probability `LOW` (a cutpoint), every other token with `HIGH`."""

    def generate(self, prompts, **kwargs):
        out = super().generate(prompts, **kwargs)
        (end,) = self.tokenizer(THOUGHT_END, add_special_tokens=False)["input_ids"]
        after_end = torch.nn.functional.pad(out.response_ids[:, :-1] == end, (1, 0), value=True)
        probs = torch.where(out.response_mask, torch.where(after_end, LOW, HIGH), 0.0)
        return dataclasses.replace(out, token_probs=probs)


def probed_policy(wrong_rows: dict[int, int], successes=None) -> ProbedPolicy:
    """`scripted.exact_policy` whose generations report each token's probability (`ProbedPolicy`)."""
    return exact_policy(wrong_rows, successes, ProbedPolicy)


def run(policy, cfg, seed=0):
    random.seed(seed)
    return sample_spo_chain(policy, TASK, ProblemStream(TASK, seed=3), cfg)


# --- the sampler -----------------------------------------------------------------------------------------------


def test_segments_values_and_mask_are_exact_when_continuations_are_deterministic():
    policy = probed_policy({1: 1})  # row 1 of each group goes wrong at its second step
    rollout = run(policy, options(interval=1, k=3))
    values, segments = rollout.records["step_values"], rollout.records["segment_ids"]
    # cutpoints at each thought's first token: boundaries before thoughts 2, 3 and the answer
    assert segments[1, : 3 * THOUGHT + 1].tolist() == [s for s in range(3) for _ in range(THOUGHT)] + [3]
    assert rollout.records["cutpoint_mask"][1, : 3 * THOUGHT + 1].tolist() == [t % THOUGHT == 0
                                                                               for t in range(3 * THOUGHT + 1)]
    row_starts = values[1, [0, THOUGHT, 2 * THOUGHT, 3 * THOUGHT]].tolist()
    assert row_starts == [pytest.approx(1.0), 1.0, 0.0, 0.0]  # prompt: its 3 siblings are all right
    credited, _ = get_method("spo_chain", estimator={"whiten": False}).credit(rollout.batch())
    adv = credited.advantages[1]
    assert adv[[0, THOUGHT, 2 * THOUGHT, 3 * THOUGHT]].tolist() == [pytest.approx(0.0), -1.0, 0.0, 0.0]
    assert adv[~rollout.records["cutpoint_mask"][1]].eq(0).all()  # the probability mask
    assert credited.loss_mask[1].sum() == 4  # only the cutpoints train


def test_every_interval_th_cutpoint_starts_a_segment():
    policy = probed_policy({}, successes=lambda steps: steps)  # after j right steps, j of every 4 finish right
    rollout = run(policy, options(prompts=1, interval=2, k=4))
    # cutpoints at 0, 6, 12, 18: boundaries before the 1st and 3rd; the 1st is the prompt
    segments = rollout.records["segment_ids"][0, : 3 * THOUGHT + 1].tolist()
    assert segments == [0] * (2 * THOUGHT) + [1] * (THOUGHT + 1)
    assert float(rollout.records["step_values"][0, 2 * THOUGHT]) == 0.5  # 2 right steps: 2 of 4 finish right
    assert rollout.metrics["spo/boundaries_per_response"] == 1.0


def test_every_continuation_token_is_counted_and_continuations_keep_the_budget():
    policy = probed_policy({1: 1})
    rollout = run(policy, options(prompts=2, interval=1, k=3))
    responses = int(rollout.completions.response_mask.sum())
    assert rollout.metrics["spo/tokens_base"] == responses
    # per row, from each boundary c (6, 12, 18) the rest of its response, 3 times each
    expected = sum(3 * (int(n) - c) for n in rollout.completions.response_mask.sum(dim=1) for c in (6, 12, 18))
    assert rollout.metrics["spo/tokens_values"] == expected
    assert rollout.generated_tokens == responses + expected
    assert policy.calls[0] == (2, 4, False) and policy.budgets[0] == 48
    assert [c[1] for c in policy.calls[1:]] == [3, 3, 3] and sorted(policy.budgets[1:]) == [30, 36, 42]
    assert rollout.metrics["spo/cutpoint_share"] == pytest.approx(4 * 8 / responses)


def test_max_cutpoints_bounds_the_boundaries_reproducibly():
    first = run(probed_policy({1: 1}), options(prompts=1, interval=1, k=2, max_cutpoints=1), seed=5)
    again = run(probed_policy({1: 1}), options(prompts=1, interval=1, k=2, max_cutpoints=1), seed=5)
    assert torch.equal(first.records["segment_ids"], again.records["segment_ids"])
    for row in range(4):
        segments = first.records["segment_ids"][row][first.completions.response_mask[row]]
        assert segments.max() == 1 and segments.diff().sum() == 1
    assert first.metrics["spo/boundaries_per_response"] == 1.0


def test_a_backend_without_token_probabilities_is_refused():
    with pytest.raises(ValueError, match="does not record"):
        run(exact_policy({}), options(prompts=1))


def test_boundaries_are_every_interval_th_low_probability_token():
    probs = [0.95, 0.5, 0.97, 0.3, 0.2, 0.99, 0.1, 0.4]  # below 0.9 at 1, 3, 4, 6, 7
    assert boundaries(probs, 0.9, 1, None, random) == [1, 3, 4, 6, 7]
    assert boundaries(probs, 0.9, 2, None, random) == [1, 4, 7]
    assert boundaries(probs, 0.35, 1, None, random) == [3, 4, 6]
    assert boundaries([0.1, 0.95, 0.2], 0.9, 1, None, random) == [2]  # before the first token: the prompt


# --- the estimator -----------------------------------------------------------------------------------------------


def loop_segment_advantages(batch: RolloutBatch, prob_mask: bool, whiten: bool) -> torch.Tensor:
    """SPO's advantages token by token: the value where the next segment starts (the reward after the last)
    minus the value where this token's segment starts, on the trained tokens (the cutpoints under the probability
    mask), whitened over them (mean, unbiased variance, eps 1e-8)."""
    out = torch.zeros(batch.response_ids.shape, dtype=torch.float64)
    trained = []
    for b in range(batch.size):
        n = int(batch.response_mask[b].sum())
        segments = batch.segment_ids[b, :n].tolist()
        start = {}
        for t, s in enumerate(segments):
            start.setdefault(s, float(batch.step_values[b, t]))
        for t, s in enumerate(segments):
            if batch.loss_mask[b, t] and (not prob_mask or batch.cutpoint_mask[b, t]):
                later = [u for u in start if u > s]
                out[b, t] = (start[min(later)] if later else float(batch.rewards[b])) - start[s]
                trained.append((b, t))
    if whiten and len(trained) > 1:
        xs = [float(out[b, t]) for b, t in trained]
        mean = sum(xs) / len(xs)
        var = sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)
        for b, t in trained:
            out[b, t] = (out[b, t] - mean) / math.sqrt(var + 1e-8)
    return out


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("prob_mask, whiten", [(True, True), (True, False), (False, False)])
def test_segment_advantages_match_the_loop(seed, prob_mask, whiten):
    batch = random_batch(seed, dtype=torch.float64)
    credited, _ = SegmentAdvantage(prob_mask=prob_mask, whiten=whiten)(batch)
    assert torch.allclose(credited.advantages, loop_segment_advantages(batch, prob_mask, whiten), atol=1e-9)
    assert torch.equal(credited.loss_mask, batch.response_mask & (batch.cutpoint_mask if prob_mask else True))


@pytest.mark.parametrize("seed", range(20))
def test_one_segment_is_grpo_direction(seed):
    """No boundary: every token gets R - V(s_0), V(s_0) the mean of its siblings' rewards, which is
    G / (G - 1) (R - group mean): GRPO's direction."""
    batch = random_batch(seed, group_sizes=(4, 3, 5), dtype=torch.float64, binary_rewards=False)
    rewards, groups = batch.rewards, batch.group_id
    siblings = torch.stack([(rewards[groups == g].sum() - r) / ((groups == g).sum() - 1) for r, g in zip(rewards, groups)])
    one = batch.replace(segment_ids=torch.where(batch.response_mask, 0, -1),
                        step_values=torch.where(batch.response_mask, siblings.unsqueeze(1), 0.0))
    credited, _ = SegmentAdvantage(prob_mask=False, whiten=False)(one)
    means = torch.stack([rewards[groups == g].mean() for g in groups])
    sizes = torch.stack([(groups == g).sum() for g in groups]).to(rewards.dtype)
    expected = (sizes / (sizes - 1) * (rewards - means)).unsqueeze(1).expand_as(credited.advantages)
    assert torch.allclose(credited.advantages, torch.where(batch.response_mask, expected, 0.0), atol=1e-12)


# --- the official code, ported ---------------------------------------------------------------------------------
# github.com/AIFrameResearch/SPO, commit b9fc6a263dec54e28137fd488a9b9c0e0d026025:
# src/treetune/episode_generators/math_episode_generator_with_mc_advantages.py (_create_value_estimation_requests:
# the cutpoints; _compute_token_advantages: the segment advantages and the probability mask) and
# src/treetune/trainers/utils.py (masked_whiten with the probability mask, unbiased variance). Ported to plain
# Python and torch, their variable names kept, comments and dead branches dropped.


def official_cutpoints(response_probs: list[float], cutpoint_interval: int) -> list[int]:
    low = [i for i, p in enumerate(response_probs) if p < 0.9]
    return [c - 1 for c in low][::cutpoint_interval]  # the state after token c (-1: the prompt)


def official_token_advantages(score, cutpoints, cutpoints_values, response_prob) -> list[float]:
    token_values = [None] * len(response_prob)
    advantages = [None] * len(response_prob)
    token_values[-1] = score
    base = None
    if len(cutpoints) == 0:
        return [0] * len(response_prob)
    if cutpoints[0] == -1:
        base = cutpoints_values[0]
        cutpoints = cutpoints[1:]
        cutpoints_values = cutpoints_values[1:]
    for idx, value in zip(cutpoints, cutpoints_values):
        token_values[idx] = value
    for i in range(len(token_values)):
        if token_values[i] is not None:
            advantages[i] = 0 if base is None else token_values[i] - base
            base = token_values[i]
    for i in range(len(token_values) - 1, -1, -1):
        if advantages[i] is None:
            advantages[i] = advantages[i + 1]
    for i in range(len(token_values)):
        if response_prob[i] > 0.9:
            advantages[i] = 0
    return advantages


def official_masked_whiten(values, mask, logprobs):
    mask = mask & (torch.exp(logprobs) < 0.9)
    mean = (values * mask).sum() / mask.sum()
    centered = values - mean
    variance = (centered**2 * mask).sum() / mask.sum() * (mask.sum() / (mask.sum() - 1))
    return (values - mean) * torch.rsqrt(variance + 1e-8)


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("interval", [1, 3, 5])
def test_segment_advantages_and_mask_match_the_official_code(seed, interval):
    gen = torch.Generator().manual_seed(seed)
    rows, T = 6, 24
    lengths = torch.randint(2, T + 1, (rows,), generator=gen).tolist()
    probs = torch.where(torch.rand(rows, T, generator=gen) < 0.4, torch.rand(rows, T, generator=gen) * 0.85,
                        0.92 + 0.08 * torch.rand(rows, T, generator=gen)).double()
    rewards = (torch.rand(rows, generator=gen) < 0.5).double()
    mask = torch.arange(T).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    official = torch.zeros(rows, T, dtype=torch.float64)
    segment_ids = torch.full((rows, T), -1)
    step_values = torch.zeros(rows, T, dtype=torch.float64)
    for n, length in enumerate(lengths):
        p = probs[n, :length].tolist()
        value = {c: float(torch.rand((), generator=gen)) for c in range(-1, length)}  # V(state after token c)
        cuts = official_cutpoints(p, interval)
        official[n, :length] = torch.tensor(official_token_advantages(float(rewards[n]), cuts, [value[c] for c in cuts], p))
        ours = boundaries(p, 0.9, interval, None, random)  # a segment starts at token c + 1
        assert ours == [c + 1 for c in cuts if c >= 0]
        segments, starts = segment_layout(length, ours, [value[-1]] + [value[c - 1] for c in ours])
        segment_ids[n, :length], step_values[n, :length] = torch.tensor(segments), torch.tensor(starts)
    batch = RolloutBatch(response_ids=torch.zeros(rows, T, dtype=torch.long), response_mask=mask,
                         group_id=torch.zeros(rows, dtype=torch.long), rewards=rewards,
                         old_logp=torch.where(mask, probs.log(), 0.0), segment_ids=segment_ids,
                         step_values=step_values, cutpoint_mask=mask & (probs < 0.9))
    raw, _ = SegmentAdvantage(whiten=False)(batch)
    assert torch.allclose(raw.advantages, official, atol=1e-12)
    whitened, _ = SegmentAdvantage()(batch)
    expected = official_masked_whiten(official, mask, batch.old_logp)
    assert torch.allclose(whitened.advantages[whitened.loss_mask], expected[whitened.loss_mask], atol=1e-9)
    assert torch.equal(whitened.loss_mask, mask & (torch.exp(batch.old_logp) < 0.9))  # the trainer's action mask


# --- intent ------------------------------------------------------------------------------------------------------


def credit_of(method, batch: RolloutBatch) -> tuple[RolloutBatch, torch.Tensor]:
    """The credited batch and each token's credit `-B dLoss/dlogp` on the first mini-batch (pi = pi_old)."""
    credited, _ = method.credit(batch)
    logp = batch.old_logp.detach().clone().requires_grad_()
    (grad,) = torch.autograd.grad(method.policy_loss(logp, credited).loss, logp, materialize_grads=True)
    return credited, -grad * batch.size


@pytest.mark.parametrize("seed", range(60))
def test_blame_falls_on_the_segment_whose_value_drops_and_only_on_cutpoints(seed):
    """On random batches: a token that is not a cutpoint gets no credit at all, and a failure's most blamed token
    lies in the segment across which its value drops the most (among the segments it trains)."""
    batch = random_batch(seed, dtype=torch.float64)
    method = get_method("spo_chain", estimator={"whiten": False})
    _, credit = credit_of(method, batch)
    assert credit[~batch.cutpoint_mask].eq(0).all()
    for b in failed_rows(batch).nonzero()[:, 0].tolist():
        trained = batch.cutpoint_mask[b] & batch.response_mask[b]
        if not trained.any():
            continue
        n = int(batch.response_mask[b].sum())
        segments = batch.segment_ids[b, :n]
        starts = [float(batch.step_values[b, (segments == s).nonzero()[0, 0]]) for s in range(int(segments.max()) + 1)]
        after = starts[1:] + [float(batch.rewards[b])]
        drops = {s: starts[s] - after[s] for s in set(segments[trained[:n]].tolist())}
        most = min(range(n), key=lambda t: float(credit[b, t]) if trained[t] else math.inf)
        assert drops[int(segments[most])] == max(drops.values())


# --- through the registry and the trainer ------------------------------------------------------------------------


def test_an_spo_chain_run_trains_through_the_registry(tmp_path):
    from credo.train import train

    method = get_method("spo_chain")
    assert set(method.sampler.records) == {"segment_ids", "step_values", "cutpoint_mask"} and not method.needs
    rollout = run(probed_policy({1: 1}), options(prompts=1, interval=1, k=2))
    credited, metrics = method.credit(rollout.batch())
    assert credited.advantages[1].min() < 0 and metrics["credit/negative_token_share"] > 0
    config = load_config(None, [*TINY, "method=spo_chain", "train.steps=2", "rollout.spo_chain={k: 2, interval: 2}"])
    summary = train(config, tmp_path / "run", show_progress=False)
    assert summary["method"] == "spo_chain" and summary["steps"] == 2 and summary["rollout_tokens"] > 0
