"""Tree-GRPO's tree-group advantages (`tree_grpo`, `credo.credit.tree_grpo`, arXiv 2509.21240).

A loop reference written from the formula (every switch, ragged random leaves); identities (one tree per prompt gives
twice GRPO with the code's conventions, one leaf per tree adds each leaf's raw reward, the `inter` and `intra` terms
are GRPO over the prompt and over the tree); the public code (AMAP-ML/Tree-GRPO's `compute_grpo_outcome_advantage` and
the `grpo`, `tree` and `tree_inner` branches of `compute_advantage`, ported below) on identical tensors laid out as its
rows, and the one place credo departs from it (groups of equal values); intent (within a tree a better leaf outranks a
worse one; a tree whose leaves beat the prompt's other tree's lifts its shared turns; no credit crosses prompts, even
where tree numbers coincide; observations get nothing; a failure gains nothing)."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
import torch
from episodes import draw_outcomes

from credo.batch import RolloutBatch
from credo.credit import GroupAdvantage
from credo.credit.tree_grpo import TreeGroupAdvantage
from credo.losses import PPOClipLoss
from credo.methods import get_method

# --------------------------------------------------------------------------------------------------------------------
# Random trees: one row per leaf, its episode's turns of policy tokens each followed by an observation (not the last);
# the leaves of a tree share their first turn and its observation (the tree's first inner node)


def tree_batch(seed: int, *, trees: int | None = None, leaves: int | None = None, outcome: str = "binary",
               numbering: str = "batch", dtype: torch.dtype = torch.float64) -> tuple[RolloutBatch, torch.Tensor]:
    """A batch of 1-4 prompts of `trees` trees (random 1-3) of `leaves` leaves (random 1-4 per tree), rows shuffled,
    and (B,) each row's shared prefix length (its tree's first turn and observation, the same ids in every leaf).

    outcome: "binary" (0 or 1), "uniform" ([0, 1)) or "dyadic" ({0, 0.25, .., 1}).
    numbering: "batch" (tree ids 0 .. over the batch, as the sampler numbers them) or "prompt" (each prompt's trees
    0 .. M - 1: tree numbers coincide across prompts)."""
    gen = torch.Generator().manual_seed(seed)

    def draw(high: int, low: int = 0) -> int:
        return int(torch.randint(low, high, (1,), generator=gen))

    rows = []  # (group, tree, shared tokens, own spans [(policy, observation)])
    tree_number = 0
    for g in range(draw(5, 1)):
        for t in range(trees or draw(4, 1)):
            shared = (draw(4, 1), draw(3, 1))  # the first turn's policy tokens and its observation's
            for _ in range(leaves or draw(5, 1)):
                turns = draw(4, 1)  # after the shared one; the last without an observation
                own = [(draw(5, 1), draw(3) if k < turns - 1 else 0) for k in range(turns)]
                rows.append((g * 5 + 2, tree_number if numbering == "batch" else t, sum(shared), [shared, *own]))
            tree_number += 1
    B = len(rows)
    width = max(sum(p + o for p, o in spans) for *_, spans in rows) + draw(3)
    mask = torch.zeros(B, width, dtype=torch.bool)
    policy = torch.zeros(B, width, dtype=torch.bool)
    turn = torch.full((B, width), -1)
    response_ids = torch.randint(3, 50, (B, width), generator=gen)
    for b, (_, tree, _, spans) in enumerate(rows):
        at = 0
        for k, (p, o) in enumerate(spans):
            policy[b, at:at + p] = True
            mask[b, at:at + p + o] = True
            turn[b, at:at + p + o] = k
            if k == 0:
                response_ids[b, at:at + p + o] = torch.arange(p + o) + 100 * tree  # the shared turn: one text
            at += p + o
    rewards = draw_outcomes(outcome, B, gen, dtype)
    perm = torch.randperm(B, generator=gen)
    fields = dict(response_ids=response_ids, response_mask=mask, loss_mask=policy,
                  group_id=torch.tensor([r[0] for r in rows]), tree_id=torch.tensor([r[1] for r in rows]),
                  rewards=rewards, correct=rewards >= 1,
                  old_logp=torch.where(mask, -torch.rand(B, width, generator=gen, dtype=dtype), 0.0),
                  thought_ids=turn, thought_wrong=torch.zeros(B, width, dtype=torch.bool))
    shared = torch.tensor([r[2] for r in rows])
    return RolloutBatch(**{k: v[perm] for k, v in fields.items()}), shared[perm]


# --------------------------------------------------------------------------------------------------------------------
# The loop reference: the module docstring's formula, leaf by leaf


def loop_tree_grpo(batch: RolloutBatch, *, groups="both", lone="zero", std_ddof=1, eps=1e-6) -> torch.Tensor:
    def z(value: float, pool: list[float]) -> float:
        if len(pool) == 1:
            return value / (1 + eps) if lone == "score" else 0.0
        if max(pool) == min(pool):
            return 0.0
        mean = sum(pool) / len(pool)
        std = math.sqrt(sum((x - mean) ** 2 for x in pool) / (len(pool) - std_ddof))
        return (value - mean) / (std + eps)

    R = batch.rewards.tolist()
    prompt, tree = batch.group_id.tolist(), batch.tree_id.tolist()
    out = torch.zeros(batch.size, batch.width, dtype=torch.float64)
    for i in range(batch.size):
        inter = z(R[i], [R[j] for j in range(batch.size) if prompt[j] == prompt[i]])
        intra = z(R[i], [R[j] for j in range(batch.size) if prompt[j] == prompt[i] and tree[j] == tree[i]])
        value = (inter if groups != "intra" else 0.0) + (intra if groups != "inter" else 0.0)
        out[i, batch.loss_mask[i]] = value
    return out


SWITCHES = [{}, {"groups": "inter"}, {"groups": "intra"}, {"lone": "score"}, {"std_ddof": 0},
            {"eps": 0.0, "groups": "intra", "lone": "score"}, {"eps": 1e-4, "std_ddof": 0, "lone": "score"}]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("switches", SWITCHES)
def test_matches_the_loop_reference(seed, switches):
    batch, _ = tree_batch(seed, outcome=["binary", "uniform", "dyadic"][seed % 3],
                          numbering=["batch", "prompt"][seed % 2])
    credited, metrics = TreeGroupAdvantage(**switches)(batch)
    torch.testing.assert_close(credited.advantages, loop_tree_grpo(batch, **switches), rtol=1e-10, atol=1e-12)
    assert credited.loss_mask is batch.loss_mask
    assert set(metrics) == {"credit/adv_abs_mean", "credit/inter_adv_abs_mean", "credit/intra_adv_abs_mean",
                            "credit/tree_size"}


def test_a_batch_without_tree_ids_and_bad_switches_are_clear_errors():
    batch, _ = tree_batch(0)
    with pytest.raises(ValueError, match=r"^tree_grpo needs RolloutBatch.tree_id \(each leaf's tree\), which the "
                                         r"tree sampler records$"):
        TreeGroupAdvantage()(batch.replace(tree_id=None))
    for bad in ({"groups": "tree"}, {"lone": "raw"}, {"std_ddof": 2}, {"eps": -1.0}):
        with pytest.raises(ValueError, match="TreeGroupAdvantage"):
            TreeGroupAdvantage(**bad)


def test_the_registered_method_is_the_code_s_tree_estimator_with_a_token_mean_clip():
    method = get_method("tree_grpo")
    assert method.estimator == TreeGroupAdvantage(groups="both", lone="zero", std_ddof=1, eps=1e-6)
    assert method.loss == PPOClipLoss(agg="token_mean") and method.family == "turn" and method.paper == "2509.21240"
    assert method.sampler.name == "tree" and method.needs == frozenset()


# --------------------------------------------------------------------------------------------------------------------
# Identities


@pytest.mark.parametrize("seed", range(10))
def test_one_tree_per_prompt_gives_twice_grpo_with_the_code_s_conventions(seed):
    """M = 1: the tree group is the prompt group, so A = 2 GRPO (sample std, eps 1e-6 outside it), where every prompt
    has two leaves or more; with one leaf, GRPO gives 0 and the code's singleton rule twice the raw reward."""
    batch, _ = tree_batch(seed, trees=1, leaves=2 + seed % 3, outcome=["binary", "uniform"][seed % 2])
    grpo = GroupAdvantage(std_ddof=1, eps=1e-6)(batch)[0].advantages
    torch.testing.assert_close(TreeGroupAdvantage()(batch)[0].advantages, 2 * grpo, rtol=1e-12, atol=1e-12)
    lone, _ = tree_batch(seed, trees=1, leaves=1)
    raw = torch.where(lone.loss_mask, 2 * lone.rewards.unsqueeze(1) / (1 + 1e-6), 0.0)
    torch.testing.assert_close(TreeGroupAdvantage(lone="score")(lone)[0].advantages, raw, rtol=1e-12, atol=1e-12)
    assert not TreeGroupAdvantage()(lone)[0].advantages.any()


@pytest.mark.parametrize("seed", range(10))
def test_one_leaf_per_tree_adds_each_leaf_s_raw_reward(seed):
    """K = 1: every tree is a group of one, whose mean is 0 and std 1 in the code: A = GRPO(prompt) + R / (1 + eps)."""
    batch, _ = tree_batch(seed, trees=2 + seed % 3, leaves=1, outcome=["binary", "uniform", "dyadic"][seed % 3])
    grpo = GroupAdvantage(std_ddof=1, eps=1e-6)(batch)[0].advantages
    raw = torch.where(batch.loss_mask, batch.rewards.unsqueeze(1) / (1 + 1e-6), 0.0)
    torch.testing.assert_close(TreeGroupAdvantage(lone="score")(batch)[0].advantages, grpo + raw, rtol=1e-12,
                               atol=1e-12)
    torch.testing.assert_close(TreeGroupAdvantage()(batch)[0].advantages, grpo, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", range(10))
def test_the_terms_are_grpo_over_the_prompt_and_over_the_tree(seed):
    """`inter` is GRPO (the code's conventions) over the prompt's leaves, `intra` over the tree's, `both` their sum
    (with `lone: zero`, GRPO's rule for a group of one); tree ids are read within their prompt."""
    batch, _ = tree_batch(seed, outcome=["binary", "uniform"][seed % 2], numbering="prompt")
    grpo = GroupAdvantage(std_ddof=1, eps=1e-6)
    _, tree = torch.unique(torch.stack([batch.group_id, batch.tree_id], dim=1), dim=0, return_inverse=True)
    inter = grpo(batch)[0].advantages
    intra = grpo(batch.replace(group_id=tree))[0].advantages
    got = {groups: TreeGroupAdvantage(groups=groups)(batch)[0].advantages
           for groups in ("inter", "intra", "both")}
    torch.testing.assert_close(got["inter"], inter, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got["intra"], intra, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got["both"], inter + intra, rtol=1e-12, atol=1e-12)


def test_a_worked_prompt():
    """One prompt, two trees of three leaves: rewards (1, 1, 0) and (0, 0, 0). Inter: mean 1/3, sample std
    sqrt(4/15); intra: the first tree mean 2/3, std sqrt(1/3), the second tree all equal (0)."""
    batch = RolloutBatch(response_ids=torch.zeros(6, 1, dtype=torch.long),
                         response_mask=torch.ones(6, 1, dtype=torch.bool), group_id=torch.zeros(6, dtype=torch.long),
                         tree_id=torch.tensor([0, 0, 0, 1, 1, 1]),
                         rewards=torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64),
                         old_logp=torch.zeros(6, 1, dtype=torch.float64))
    s, t = math.sqrt(4 / 15) + 1e-6, math.sqrt(1 / 3) + 1e-6
    want = [(2 / 3) / s + (1 / 3) / t] * 2 + [(-1 / 3) / s - (2 / 3) / t] + [(-1 / 3) / s] * 3
    torch.testing.assert_close(TreeGroupAdvantage()(batch)[0].advantages[:, 0],
                               torch.tensor(want, dtype=torch.float64), rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------------------------------------------------
# The public code: AMAP-ML/Tree-GRPO at 90b170995d996d772d68117e0c7bd0b8fe00d393 ("upload logo", 2025-09-29).
# `compute_grpo_outcome_advantage` is `verl/trainer/ppo/core_algos.py`'s, verbatim; `compute_advantage` is
# `verl/trainer/ppo/ray_trainer_ts.py`'s, verbatim but for its other branches left out (gae, rloo, tree_2norm,
# tree_per_token), the `DataProto` replaced by a stand-in with its two dictionaries, `core_algos.` dropped and its
# long lines wrapped.
# Apache License 2.0, Copyright 2024 Bytedance Ltd. and/or its affiliates (verl), and the Tree-GRPO authors.


class DataProto:
    def __init__(self, batch: dict, non_tensor_batch: dict):
        self.batch, self.non_tensor_batch = batch, non_tensor_batch


# NOTE(sgm): this implementation only consider outcome supervision, where the reward is a scalar.
def compute_grpo_outcome_advantage(token_level_rewards: torch.Tensor,
                                   eos_mask: torch.Tensor,
                                   index: torch.Tensor,
                                   epsilon: float = 1e-6):
    """
    Compute advantage for GRPO, operating only on Outcome reward
    (with only one scalar reward for each response).
    Args:
        token_level_rewards: `(torch.Tensor)`
            shape: (bs, response_length)
        eos_mask: `(torch.Tensor)`
            shape: (bs, response_length)

    Returns:
        advantages: `(torch.Tensor)`
            shape: (bs, response_length)
        Returns: `(torch.Tensor)`
            shape: (bs, response_length)
    """
    response_length = token_level_rewards.shape[-1]
    non_zero_mask = (token_level_rewards != 0)
    scores = (token_level_rewards * non_zero_mask).sum(dim=-1)

    id2score = defaultdict(list)
    id2mean = {}
    id2std = {}

    with torch.no_grad():
        bsz = scores.shape[0]
        for i in range(bsz):
            id2score[index[i]].append(scores[i])
        for idx in id2score:
            if len(id2score[idx]) == 1:
                id2mean[idx] = torch.tensor(0.0)
                id2std[idx] = torch.tensor(1.0)
            elif len(id2score[idx]) > 1:
                id2mean[idx] = torch.mean(torch.tensor(id2score[idx]))
                id2std[idx] = torch.std(torch.tensor([id2score[idx]]))
            else:
                raise ValueError(f"no score in prompt index: {idx}")
        for i in range(bsz):
            scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
        scores = scores.unsqueeze(-1).tile([1, response_length]) * eos_mask

    return scores, scores


def compute_advantage(data: DataProto, adv_estimator, gamma=1.0, lam=1.0, num_repeat=1):
    # prepare response group
    # TODO: add other ways to estimate advantages
    if adv_estimator == 'grpo':
        token_level_rewards = data.batch['token_level_rewards']
        index = data.non_tensor_batch['uid']
        responses = data.batch['responses']
        response_length = responses.size(-1)
        attention_mask = data.batch['attention_mask']
        response_mask = attention_mask[:, -response_length:]
        advantages, returns = compute_grpo_outcome_advantage(token_level_rewards=token_level_rewards,
                                                             eos_mask=response_mask,
                                                             index=index)
        data.batch['advantages'] = advantages
        data.batch['returns'] = returns
    elif adv_estimator == 'tree':
        token_level_rewards = data.batch['token_level_rewards']
        index = data.non_tensor_batch['uid']
        tree_index = data.non_tensor_batch['tree_uid']
        responses = data.batch['responses']
        response_length = responses.size(-1)
        attention_mask = data.batch['attention_mask']
        response_mask = attention_mask[:, -response_length:]
        inter_tree_advantages, inter_tree_returns = compute_grpo_outcome_advantage(
            token_level_rewards=token_level_rewards, eos_mask=response_mask, index=index)
        inner_tree_advantages, inner_tree_returns = compute_grpo_outcome_advantage(
            token_level_rewards=token_level_rewards, eos_mask=response_mask, index=tree_index)

        data.batch['inter_tree_advantages'] = inter_tree_advantages
        data.batch['inter_tree_returns'] = inter_tree_returns
        data.batch['inner_tree_advantages'] = inner_tree_advantages
        data.batch['inner_tree_returns'] = inner_tree_returns

        data.batch['advantages'] = inter_tree_advantages + inner_tree_advantages
        data.batch['returns'] = inter_tree_returns + inner_tree_returns
    elif adv_estimator == 'tree_inner':
        token_level_rewards = data.batch['token_level_rewards']
        index = data.non_tensor_batch['uid']
        tree_index = data.non_tensor_batch['tree_uid']
        responses = data.batch['responses']
        response_length = responses.size(-1)
        attention_mask = data.batch['attention_mask']
        response_mask = attention_mask[:, -response_length:]
        inner_tree_advantages, inner_tree_returns = compute_grpo_outcome_advantage(
            token_level_rewards=token_level_rewards, eos_mask=response_mask, index=tree_index)
        data.batch['inner_tree_advantages'] = inner_tree_advantages
        data.batch['inner_tree_returns'] = inner_tree_returns

        data.batch['advantages'] = inner_tree_advantages
        data.batch['returns'] = inner_tree_returns
    return data


ESTIMATORS = {"both": "tree", "inter": "grpo", "intra": "tree_inner"}
"""credo's `groups` switch -> the code's `adv_estimator`."""


def code_advantages(batch: RolloutBatch, groups: str = "both") -> torch.Tensor:
    """(B, T) float64: the code's advantages on the batch's leaves laid out as its rows (the leaf's score on its last
    response token, `TreeNode.get_token_level_score_from_leaf` under `reward_mode=base`; `uid` the prompt, `tree_uid`
    a string naming the prompt and the tree, unique as its uuids), masked by the loss mask as its `state_masking`
    masks observations (`info_mask`) in the loss."""
    B, T = batch.response_mask.shape
    last = batch.response_mask.sum(dim=1) - 1
    token_level_rewards = torch.zeros(B, T, dtype=batch.rewards.dtype)
    token_level_rewards[torch.arange(B), last] = batch.rewards
    prompts = torch.ones(B, 3, dtype=torch.long)
    data = DataProto({"token_level_rewards": token_level_rewards, "responses": batch.response_ids,
                      "attention_mask": torch.cat([prompts, batch.response_mask.long()], dim=1)},
                     {"uid": np.array([str(int(g)) for g in batch.group_id], dtype=object),
                      "tree_uid": np.array([f"{int(g)}/{int(t)}" for g, t in zip(batch.group_id, batch.tree_id)],
                                           dtype=object)})
    advantages = compute_advantage(data, ESTIMATORS[groups]).batch["advantages"]
    return (advantages * batch.loss_mask).double()


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("groups", ["both", "inter", "intra"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_reproduces_the_public_code(seed, groups, dtype):
    """Ragged trees of 1-4 leaves (singleton trees and prompts included), binary, dyadic and uniform rewards, tree
    numbers coinciding across prompts: credo equals the code on every token, in float32 (the code's usual dtype) to
    its rounding, in float64 to the code's float32 singleton rule (its std of a group of one, `torch.tensor(1.0)` plus
    1e-6, is a float32: 1 + 9.5e-7)."""
    batch, _ = tree_batch(seed, outcome=["binary", "uniform", "dyadic"][seed % 3],
                          numbering=["batch", "prompt"][seed % 2], dtype=dtype)
    credo = TreeGroupAdvantage(groups=groups, lone="score")(batch)[0].advantages.double()
    code = code_advantages(batch, groups)
    torch.testing.assert_close(credo, code, rtol=0, atol=1e-7 if dtype == torch.float64 else 2e-6)


def test_the_public_code_s_largest_difference():
    """The largest difference over 200 random batches of the three estimators (reported in docs/methods.md sec. 16)."""
    worst = {torch.float32: 0.0, torch.float64: 0.0}
    for seed in range(200):
        for dtype in worst:
            batch, _ = tree_batch(1000 + seed, outcome=["binary", "uniform", "dyadic"][seed % 3], dtype=dtype,
                                  numbering=["batch", "prompt"][seed % 2])
            for groups in ESTIMATORS:
                ours = TreeGroupAdvantage(groups=groups, lone="score")(batch)[0].advantages.double()
                diff = ours - code_advantages(batch, groups)
                worst[dtype] = max(worst[dtype], float(diff.abs().max()))
    print(f"largest difference from the code: {worst}")
    assert worst[torch.float64] < 1e-7 and worst[torch.float32] < 2e-6, worst


def test_where_credo_differs_from_the_code_groups_of_equal_values():
    """Three leaves of a tree that each score 0.9, in float32: the code's mean of the three is 0.8999999, and that
    round-off divided by its round-off std plus 1e-6 gives each leaf a visible intra-tree advantage; credo gives a
    group whose rewards are all equal exactly 0."""
    batch = RolloutBatch(response_ids=torch.zeros(4, 2, dtype=torch.long),
                         response_mask=torch.ones(4, 2, dtype=torch.bool), group_id=torch.zeros(4, dtype=torch.long),
                         tree_id=torch.tensor([0, 0, 0, 1]),
                         rewards=torch.tensor([0.9, 0.9, 0.9, 0.0]), old_logp=torch.zeros(4, 2))
    credo = TreeGroupAdvantage(groups="intra")(batch)[0].advantages
    code = code_advantages(batch, "intra")
    assert not credo[:3].any() and code[:3].abs().min() > 1e-2
    both = TreeGroupAdvantage(lone="score")(batch)[0].advantages.double() - code_advantages(batch, "both")
    assert both[:3].abs().min() > 1e-2 and both[3].abs().max() < 1e-6  # the lone tree: its raw score in both


# --------------------------------------------------------------------------------------------------------------------
# Intent


def credit_of(batch: RolloutBatch, method=None) -> torch.Tensor:
    """(B, T) the credit `-B dLoss/dlogp` the method's update gives each token, on policy (every ratio 1)."""
    method = method or get_method("tree_grpo")
    credited, _ = method.credit(batch)
    logp = batch.old_logp.detach().clone().requires_grad_()
    (grad,) = torch.autograd.grad(method.policy_loss(logp, credited).loss, logp)
    return -grad * batch.size


@pytest.mark.parametrize("seed", range(30))
def test_within_a_tree_the_better_leaf_gets_the_higher_advantage(seed):
    batch, _ = tree_batch(seed, leaves=2 + seed % 3, outcome=["uniform", "dyadic", "binary"][seed % 3],
                          numbering="prompt")
    adv = TreeGroupAdvantage()(batch)[0].advantages
    first = batch.loss_mask.float().argmax(dim=1)
    row = adv[torch.arange(batch.size), first]
    compared = 0
    for a in range(batch.size):
        for b in range(batch.size):
            same = batch.group_id[a] == batch.group_id[b] and batch.tree_id[a] == batch.tree_id[b]
            if same and batch.rewards[a] > batch.rewards[b]:
                assert row[a] > row[b]
                compared += 1
    assert compared or seed % 3


@pytest.mark.parametrize("seed", range(30))
def test_a_tree_whose_leaves_do_better_gets_more_credit_for_its_shared_turn(seed):
    """Two or three trees per prompt of K leaves each (as the sampler draws them): the credit the update gives a
    tree's shared first turn, summed over the leaves that repeat it, orders the trees by their leaves' mean reward;
    it is above 0 for a tree that beats its prompt's mean and below for one that falls behind."""
    K = 2 + seed % 3
    batch, shared = tree_batch(seed, trees=2 + seed % 2, leaves=K, outcome=["uniform", "binary"][seed % 2])
    credit = credit_of(batch)
    positions = torch.arange(batch.width).unsqueeze(0) < shared.unsqueeze(1)  # (B, T) each row's shared turn
    per_tree, mean = {}, {}
    for g, t in {(int(g), int(t)) for g, t in zip(batch.group_id, batch.tree_id)}:
        rows = (batch.group_id == g) & (batch.tree_id == t)
        per_tree[g, t] = float(credit[rows][positions[rows]].sum())
        mean[g, t] = float(batch.rewards[rows].mean())
    compared = 0
    for (g, t), value in per_tree.items():
        prompt = float(batch.rewards[batch.group_id == g].mean())
        if mean[g, t] > prompt + 1e-9:
            assert value > 0
        elif mean[g, t] < prompt - 1e-9:
            assert value < 0
        for (h, u), other in per_tree.items():
            if h == g and mean[g, t] > mean[h, u] + 1e-9:
                assert value > other
                compared += 1
    assert compared or seed % 2


@pytest.mark.parametrize("seed", range(20))
def test_no_credit_crosses_prompts_even_where_tree_numbers_coincide(seed):
    """Each prompt's trees are numbered 0 .. M - 1: changing one prompt's rewards and trees changes no other
    prompt's advantages."""
    batch, _ = tree_batch(seed, leaves=2 + seed % 2, numbering="prompt", outcome="uniform")
    gen = torch.Generator().manual_seed(seed)
    for switches in ({}, {"groups": "intra"}, {"lone": "zero", "std_ddof": 0}):
        before = TreeGroupAdvantage(**switches)(batch)[0].advantages
        touched = batch.group_id == batch.group_id[0]
        changed = batch.replace(
            rewards=torch.where(touched, torch.rand(batch.size, generator=gen, dtype=torch.float64), batch.rewards),
            tree_id=torch.where(touched, torch.randint(0, 3, (batch.size,), generator=gen), batch.tree_id))
        after = TreeGroupAdvantage(**switches)(changed)[0].advantages
        assert torch.equal(after[~touched], before[~touched])
        assert not torch.equal(after[touched], before[touched])


@pytest.mark.parametrize("seed", range(10))
def test_observations_get_no_advantage_and_no_gradient(seed):
    batch, _ = tree_batch(seed, outcome="uniform")
    credited, _ = TreeGroupAdvantage()(batch)
    observation = batch.response_mask & ~batch.loss_mask
    assert observation.any() and (credited.advantages[observation] == 0).all()
    assert (credited.advantages[~batch.response_mask] == 0).all()
    logp = (batch.old_logp + 0.1).requires_grad_()
    (grad,) = torch.autograd.grad(PPOClipLoss(agg="token_mean")(logp, credited).loss, logp)
    assert (grad[observation] == 0).all() and (grad[batch.loss_mask] != 0).any()


@pytest.mark.parametrize("seed", range(20))
def test_a_failure_gains_nothing(seed):
    """Binary rewards: a failed leaf is at or below its prompt's and its tree's means (a lone one scores its raw 0),
    so no token of a failure gains; one beside a success in its prompt loses."""
    batch, _ = tree_batch(seed)
    credit = credit_of(batch)
    failed = (batch.rewards == 0).unsqueeze(1) & batch.loss_mask
    assert (credit[failed] <= 0).all()
    for b in range(batch.size):
        if batch.rewards[b] == 0 and (batch.rewards[batch.group_id == batch.group_id[b]] == 1).any():
            assert (credit[b][batch.loss_mask[b]] < 0).all()
