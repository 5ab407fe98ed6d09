"""FR3E (arXiv 2507.07017): its estimator against a slow loop and the public code, its identities and intent, its
sampler with a scripted policy whose entropies are known, and a run through the registry."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, defaultdict

import pytest
import torch
from batches import random_batch
from scripted import ScriptedPolicy, chain_of, wrong_at
from tiny import TINY

from credo.batch import RolloutBatch
from credo.config import load_config
from credo.credit.fr3e import FirstReturnAdvantage
from credo.credit.groups import GroupAdvantage
from credo.credit.resets import suffix_mask
from credo.methods import get_method
from credo.rollout.groups import ProblemStream
from credo.rollout.samplers.fr3e import branch_points, sample_fr3e
from credo.tasks import ArithTask
from credo.tasks.arith import ArithConfig, solution

TASK = ArithTask(ArithConfig(min_steps=3, max_steps=3))

# --- the estimator --------------------------------------------------------------------------------------------


def reference_advantages(batch: RolloutBatch, sharpen: bool) -> torch.Tensor:
    """A slow loop of the module docstring's formula."""
    B, T = batch.response_mask.shape
    rewards = batch.rewards.tolist()
    groups, states = defaultdict(list), defaultdict(list)
    for b in range(B):
        groups[int(batch.group_id[b])].append(rewards[b])
        states[(int(batch.branch_id[b]), int(batch.prefix_len[b]))].append(rewards[b])
    value = {state: sum(r) / len(r) for state, r in states.items()}
    delta = {}
    for branch in {s[0] for s in states}:
        chain = sorted(s for s in states if s[0] == branch)
        for j, state in enumerate(chain):
            delta[state] = 1.0 - value[state] if j == 0 else value[state] - value[chain[j - 1]]
        if sharpen:
            total = sum(abs(delta[s]) ** 1.5 for s in chain)
            for s in chain:
                delta[s] = math.copysign(abs(delta[s]) ** 1.5 / total, delta[s]) if total > 0 else 0.0
    out = torch.zeros(B, T, dtype=torch.float64)
    for b in range(B):
        group = groups[int(batch.group_id[b])]
        centred = rewards[b] - sum(group) / len(group)
        if max(group) == min(group):
            centred = 0.0
        factor = math.exp(-delta[(int(batch.branch_id[b]), int(batch.prefix_len[b]))])
        for t in range(T):
            if batch.response_mask[b, t] and t >= int(batch.prefix_len[b]):
                out[b, t] = centred * factor
    return out


@pytest.mark.parametrize("sharpen", [True, False])
@pytest.mark.parametrize("binary", [True, False])
def test_the_estimator_is_the_slow_loop(sharpen, binary):
    for seed in range(30):
        batch = random_batch(seed, dtype=torch.float64, binary_rewards=binary)
        credited, _ = FirstReturnAdvantage(sharpen=sharpen)(batch)
        assert torch.allclose(credited.advantages, reference_advantages(batch, sharpen), atol=1e-12), seed


def grpo(batch: RolloutBatch) -> torch.Tensor:
    """GRPO's centred advantages (no std, the code's `adv_no_use_std`) on the tokens after each row's prefix."""
    trained = batch.loss_mask & suffix_mask(batch.response_mask, batch.prefix_len)
    return GroupAdvantage(scale="none")(batch.replace(loss_mask=trained))[0].advantages


def states_batch(rewards: list[list[float]], prefixes: list[int], width: int = 8) -> RolloutBatch:
    """One kept response's states, one group each: `rewards[j]` the rewards of state j's continuations."""
    rows = [(j, r) for j, state in enumerate(rewards) for r in state]
    return RolloutBatch(
        response_ids=torch.zeros(len(rows), width, dtype=torch.long),
        response_mask=torch.ones(len(rows), width, dtype=torch.bool),
        group_id=torch.tensor([j for j, _ in rows]), rewards=torch.tensor([r for _, r in rows], dtype=torch.float64),
        old_logp=torch.zeros(len(rows), width, dtype=torch.float64),
        prefix_len=torch.tensor([prefixes[j] for j, _ in rows]), branch_id=torch.zeros(len(rows), dtype=torch.long),
    )


def test_a_state_whose_value_did_not_change_keeps_grpos_advantages():
    batch = states_batch([[1.0, 0.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]], [0, 2, 5])
    credited, _ = FirstReturnAdvantage(sharpen=False)(batch)
    same = batch.group_id == 2  # V(S_2) = V(S_1) = 0.5: Delta_2 = 0
    assert torch.equal(credited.advantages[same], grpo(batch)[same])
    assert not torch.allclose(credited.advantages[~same], grpo(batch)[~same])


@pytest.mark.parametrize("sharpen, factor", [(True, lambda v: math.exp(-1.0)), (False, lambda v: math.exp(v - 1.0))])
def test_without_branch_points_it_is_grpo_damped_by_the_prompts_distance_from_solved(sharpen, factor):
    for seed in range(20):
        batch = random_batch(seed, dtype=torch.float64)
        batch = batch.replace(prefix_len=torch.zeros_like(batch.prefix_len), branch_id=batch.group_id)
        credited, _ = FirstReturnAdvantage(sharpen=sharpen)(batch)
        for g in batch.group_id.unique():
            rows = batch.group_id == g
            value = float(batch.rewards[rows].mean())
            assert torch.allclose(credited.advantages[rows], grpo(batch)[rows] * factor(value), atol=1e-12)


def test_intent_a_rise_in_value_damps_a_states_credit_and_a_fall_amplifies_it():
    """The reading: |A| shrinks below GRPO's where the state's value rose over its predecessor's, grows where it
    fell, and keeps GRPO's sign (a divisor exp(Delta), never a sign flip)."""
    rose = fell = 0
    for seed in range(60):
        batch = random_batch(seed, dtype=torch.float64, binary_rewards=seed % 2 == 0)
        credited, _ = FirstReturnAdvantage()(batch)
        base = grpo(batch)
        unsharpened = reference_delta(batch)
        for b in range(len(batch.rewards)):
            moved = base[b] != 0
            if not moved.any():
                continue
            ours, theirs = credited.advantages[b, moved], base[b, moved]
            assert torch.equal(ours.sign(), theirs.sign())
            if unsharpened[b] > 0:
                assert (ours.abs() < theirs.abs()).all()
                rose += 1
            elif unsharpened[b] < 0:
                assert (ours.abs() > theirs.abs()).all()
                fell += 1
    assert rose > 20 and fell > 20


def reference_delta(batch: RolloutBatch) -> list[float]:
    """Each row's unsharpened value change (a slow loop)."""
    values = defaultdict(list)
    for b in range(len(batch.rewards)):
        values[(int(batch.branch_id[b]), int(batch.prefix_len[b]))].append(float(batch.rewards[b]))
    out = []
    for b in range(len(batch.rewards)):
        state = (int(batch.branch_id[b]), int(batch.prefix_len[b]))
        earlier = [s for s in values if s[0] == state[0] and s[1] < state[1]]
        mean = sum(values[state]) / len(values[state])
        if not earlier:
            out.append(1.0 - mean)
        else:
            before = values[max(earlier)]
            out.append(mean - sum(before) / len(before))
    return out


# Ported from github.com/Zheng0428/FR3E, verl/trainer/ppo/core_algos.py (compute_srpo_outcome_advantage and
# sharpening_coeff), commit 509da704b66595016f512b6f822d9b582e52d6af; only the prints and the eos-mask broadcast
# are left out. `index` is a state's uid, `group_index` its kept response's, rows in state order.
def public_code_advantages(scores, index, group_index, rollout_n, sharpen, adv_no_use_std=True, epsilon=1e-6):
    def sharpening_coeff(v, alpha=1.5):
        v_alpha = torch.pow(torch.abs(v), alpha)
        sum_v_alpha = torch.sum(v_alpha)
        v_tilde = v_alpha / sum_v_alpha
        return torch.sign(v) * v_tilde

    scores = scores.clone()
    id2score, id2mean, id2std, group2score = defaultdict(list), {}, {}, defaultdict(list)
    bsz = scores.shape[0]
    for i in range(bsz):
        id2score[index[i]].append(scores[i])
    for idx in id2score:
        id2mean[idx] = torch.mean(torch.tensor(id2score[idx]))
        id2std[idx] = torch.std(torch.tensor([id2score[idx]]))
    for i in range(bsz):
        if adv_no_use_std:
            scores[i] = scores[i] - id2mean[index[i]]
        else:
            scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
    for i in range(bsz):
        group2score[group_index[i]].append((i, scores[i]))
    advantages = torch.zeros_like(scores)
    for group_idx in group2score:
        group_scores = group2score[group_idx]
        sorted_scores = torch.tensor([x[1] for x in group_scores])
        idx_group_score = [x[0] for x in group_scores]
        v_state_pos = (sorted_scores.view(-1, rollout_n) > 0).float().mean(dim=1)
        delta_pos_list = []
        for i in range(len(v_state_pos)):
            delta_pos_list.append(1 - v_state_pos[0] if i == 0 else v_state_pos[i] - v_state_pos[i - 1])
        delta_pos_list = torch.stack(delta_pos_list)
        if sharpen:
            delta_pos_list = sharpening_coeff(delta_pos_list)
        delta_pos_list = torch.exp(delta_pos_list)
        group_advs = []
        for i in range(0, len(sorted_scores), rollout_n):
            group_advs.extend(sorted_scores[i : i + rollout_n] / delta_pos_list[i // rollout_n])
        for i, adv in zip(idx_group_score, group_advs):
            advantages[i] = adv
    return advantages


@pytest.mark.parametrize("sharpen", [True, False])
def test_the_modulation_is_the_public_codes_on_identical_tensors(sharpen):
    """Binary rewards and every state group mixed: the code's dynamic sampling drops nothing, and its value (the
    share of positive centred rewards) is the mean reward."""
    gen = torch.Generator().manual_seed(0)
    n, responses, states = 4, 3, 5
    scores = torch.tensor([[1.0, 0.0] + (torch.rand(n - 2, generator=gen) < 0.5).float().tolist()
                           for _ in range(responses * states)]).flatten()
    scores = scores.view(-1, n)[:, torch.randperm(n, generator=gen)].flatten()
    state = torch.arange(responses * states).repeat_interleave(n)
    width = 12
    batch = RolloutBatch(
        response_ids=torch.zeros(len(scores), width, dtype=torch.long),
        response_mask=torch.ones(len(scores), width, dtype=torch.bool),
        group_id=state, rewards=scores.double(), old_logp=torch.zeros(len(scores), width, dtype=torch.float64),
        prefix_len=(state % states) * 2, branch_id=state // states,
    )
    credited, _ = FirstReturnAdvantage(sharpen=sharpen)(batch)
    theirs = public_code_advantages(scores, [f"s{int(s)}" for s in state], [f"r{int(s) // states}" for s in state],
                                    n, sharpen)
    first = credited.advantages.gather(1, batch.prefix_len.unsqueeze(1))[:, 0]  # the first trained token
    assert torch.allclose(first.float(), theirs, atol=1e-6)
    trained = credited.advantages != 0
    assert torch.equal(credited.advantages[trained], first.unsqueeze(1).expand(-1, width)[trained])


# --- the sampler ----------------------------------------------------------------------------------------------


class EntropyScripted(ScriptedPolicy):
    """A scripted policy whose every token's sampling entropy is `entropy(t)` of its position."""

    def __init__(self, draw, continue_, entropy):
        super().__init__(draw, continue_)
        self.entropy = entropy

    def generate(self, prompts, **kwargs):
        out = super().generate(prompts, **kwargs)
        positions = torch.arange(out.response_ids.shape[1], dtype=torch.float32).expand_as(out.response_ids)
        table = torch.where(out.response_mask, positions.clone().apply_(self.entropy), 0.0)
        return dataclasses.replace(out, entropies=table)


def spiky(t: float) -> float:
    """Entropies with a unique order: highest at positions 11, 4, 17 and 8 (then 2)."""
    return {11: 3.0, 4: 2.5, 17: 2.0, 8: 1.5, 2: 1.0}.get(int(t), 0.01 * t)


def scripted(wrong_draws=(1, 3)):
    """Draw i of every 4 is right, or wrong at step 1 for i in `wrong_draws`; a continuation finishes the right
    solution where its prefix is one, else the wrong one."""
    draws = Counter()

    def draw(prompt):
        draws[prompt] += 1
        chain = chain_of(prompt)
        return wrong_at(chain, 1) if (draws[prompt] - 1) % 4 in wrong_draws else solution(chain)

    def continue_(prompt, after):
        chain = chain_of(prompt)
        for text in (solution(chain), wrong_at(chain, 1)):
            if text.startswith(after):
                return text[len(after):]
        raise AssertionError(f"unexpected prefix {after!r}")

    return EntropyScripted(draw, continue_, spiky)


def options(prompts=2, group=3, **fr3e):
    return load_config(None, [f"rollout.prompts_per_step={prompts}", f"rollout.group_size={group}",
                              "rollout.max_new_tokens=48", f"rollout.fr3e={fr3e}", "method=fr3e"]).rollout


def test_branch_points_are_the_highest_entropy_tokens_after_the_first():
    assert branch_points([5.0, 1.0, 3.0, 2.0, 3.0], 2) == [2, 4]  # position 0 is the prompt's state
    assert branch_points([0.0, 1.0, 2.0], 4) == [1, 2]  # a short response branches everywhere it can
    assert branch_points([spiky(t) for t in range(22)], 4) == [4, 8, 11, 17]


def test_the_sampler_branches_a_right_and_a_wrong_response_at_their_highest_entropy_tokens():
    policy = scripted()
    rollout = sample_fr3e(policy, TASK, ProblemStream(TASK, seed=3), options(prompts=2, group=3))
    # one call draws 4 responses per prompt; then continuations of the 2 prompts x 2 kept responses x 5 states
    assert policy.calls[0] == (2, 4, False) and sum(c[0] for c in policy.calls[1:]) == 20
    assert all(c[1] == 3 for c in policy.calls[1:])
    prefix, branch = rollout.records["prefix_len"], rollout.records["branch_id"]
    assert len(prefix) == 2 * 2 * 5 * 3 and branch.tolist() == [b for b in range(4) for _ in range(15)]
    assert prefix.view(4, 5, 3)[:, :, 0].tolist() == [[0, 4, 8, 11, 17]] * 4  # the prompt, then the spikes
    assert rollout.group_id.tolist() == [g for g in range(20) for _ in range(3)]
    # kept: draw 0 (right) and draw 1 (wrong at step 1's result, tokens 9-10) of each prompt; a state past the
    # wrong digits only finishes wrong, an earlier one right (the prompt's continuations are fresh draws)
    rewards = rollout.rewards.view(4, 5, 3)
    assert rewards[0, 1:].eq(1.0).all() and rewards[1, 1:].mean(dim=1).tolist() == [1.0, 1.0, 0.0, 0.0]
    continued = rollout.completions.response_mask.sum(dim=1) - prefix  # every continuation token is counted
    assert rollout.metrics["fr3e/tokens_branches"] == float(continued.sum())
    assert rollout.generated_tokens == rollout.metrics["fr3e/tokens_base"] + rollout.metrics["fr3e/tokens_branches"]
    assert rollout.metrics["fr3e/tokens_base"] == 2 * 4 * 23  # 4 draws per prompt, 23 tokens with the end, untrained
    assert rollout.metrics["fr3e/states_per_response"] == 5.0 and rollout.metrics["fr3e/kept_per_prompt"] == 2.0
    assert rollout.metrics["fr3e/branch_entropy_mean"] == pytest.approx((3.0 + 2.5 + 2.0 + 1.5) / 4)


def test_a_prompt_without_failures_branches_one_response():
    rollout = sample_fr3e(scripted(wrong_draws=()), TASK, ProblemStream(TASK, seed=3), options(prompts=1, group=2))
    assert rollout.records["branch_id"].unique().tolist() == [0] and rollout.metrics["fr3e/kept_per_prompt"] == 1.0


def test_a_backend_without_entropies_is_refused_with_the_reason():
    plain = ScriptedPolicy(lambda prompt: solution(chain_of(prompt)))
    with pytest.raises(ValueError, match="sampling entropies of its base responses"):
        sample_fr3e(plain, TASK, ProblemStream(TASK, seed=3), options(prompts=1))
    with pytest.raises(ValueError, match="rollout.backend = vllm does not record"):
        load_config(None, ["method=fr3e", "rollout.backend=vllm"])


# --- through the registry and the trainer ---------------------------------------------------------------------


def test_an_fr3e_run_trains_through_the_registry(tmp_path):
    from credo.train import train

    method = get_method("fr3e")
    assert set(method.sampler.records) == {"prefix_len", "branch_id"} and not method.needs
    assert not method.sampler.iid
    rollout = sample_fr3e(scripted(), TASK, ProblemStream(TASK, seed=3), options(prompts=1, group=3))
    credited, metrics = method.credit(rollout.batch())
    prefix = rollout.records["prefix_len"]
    assert not credited.loss_mask[torch.arange(len(prefix)), (prefix - 1).clamp(min=0)][prefix > 0].any()
    assert credited.advantages.abs().sum() > 0 and 0 < metrics["credit/fr3e_factor_mean"]
    config = load_config(None, [*TINY, "method=fr3e", "train.steps=2", "rollout.fr3e={base: 2, branches: 2}"])
    summary = train(config, tmp_path / "run", show_progress=False)
    assert summary["method"] == "fr3e" and summary["steps"] == 2 and summary["rollout_tokens"] > 0


def test_a_continuation_that_loses_its_prefixs_last_thought_keeps_a_prefix_within_its_episode():
    """A branch point inside a thought: when the continuation runs that thought past the token budget, the episode
    rules drop the thought, prefix included; the row's kept prefix is then its whole (shorter) episode, never more
    (found by a hard-regime run: `RolloutBatch.prefix_len` above the response length)."""
    from credo.rollout.generate import Completions
    from credo.rollout.rows import make_rows
    from credo.rollout.thoughts import ThoughtRules
    from credo.testbed import build_tokenizer

    tokenizer = build_tokenizer()
    thought = tokenizer("+5=12</thought>", add_special_tokens=False)["input_ids"]
    prefix = thought + thought[:3]  # one whole thought, then the branch point inside the second
    generated = thought[3:-1] * 3  # the second thought runs on without closing
    prompt = tokenizer("1+2?", add_special_tokens=False)["input_ids"]
    out = Completions.from_lists([prompt + prefix], [generated], [""], [True], tokenizer.pad_token_id)
    rules = ThoughtRules(budget_tokens=len(thought) + 4)
    [problem] = ProblemStream(TASK, seed=3).take(1)
    [row] = make_rows(tokenizer, TASK, [problem], out, rules, "zero", prefixes=[prefix])
    assert row.episode.ids == thought and row.prefix_len == len(thought) <= len(prefix)
