"""KTAE key-token advantages (`ktae`, `credo.credit.key_tokens`).

Loop reference (with exact Fisher p-values) and scipy's Fisher test; identities (key_scale 0 is GRPO, groups of
equal outcomes and tokens every response has carry no value); intent (credit moves towards the tokens that go
with success and away from those that go with failure, and a token's credit changes sign only against its row's
outcome); and a reproduction of the public code's statistic and advantages on identical tensors."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
import torch
from batches import random_batch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from references import exact_fisher_association, loop_key_token_values
from scipy.stats import fisher_exact as scipy_fisher_exact

from credo.batch import RolloutBatch
from credo.credit.key_tokens import BM25_B, BM25_K1, KeyTokenAdvantage, fisher_exact
from credo.integrations import trl as trl_adapter
from credo.integrations import verl as verl_adapter
from credo.methods import get_method

SHAPES = st.one_of(st.none(), st.lists(st.integers(1, 10), min_size=1, max_size=4).map(tuple))
SETTINGS = [{}, {"ig_weight": 0.0}, {"fisher_weight": 0.0, "key_scale": 0.5}, {"term_frequency": False},
            {"fisher_weight": 2.0, "ig_weight": 0.5, "key_scale": 3.0}]


def key_values(batch: RolloutBatch, **switches) -> tuple[torch.Tensor, torch.Tensor]:
    """(ktae's advantages, GRPO's advantages) of the same batch."""
    grpo, _ = get_method("grpo").credit(batch)
    credited, _ = get_method("ktae", estimator=switches).credit(batch)
    return credited.advantages, grpo.advantages


@pytest.mark.parametrize("seed", range(24))
@pytest.mark.parametrize("switches", SETTINGS)
def test_matches_the_loop_reference(seed, switches):
    shape = None if seed % 3 else (8, 3, 12)
    batch = random_batch(seed, group_sizes=shape, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    if seed % 2:  # some response tokens untrained: they count in the tables but get no value
        kept = torch.rand(batch.response_mask.shape, generator=gen) > 0.3
        batch = batch.replace(loss_mask=batch.response_mask & kept)
    if seed % 4 == 0:  # partial rewards for failures: the classes are the verdicts, not reward > 0
        partial = torch.rand(batch.size, generator=gen, dtype=torch.float64) * 0.9
        batch = batch.replace(rewards=torch.where(batch.correct, 1.0, partial))
    adv, grpo = key_values(batch, **switches)
    expected = loop_key_token_values(batch, batch.correct.tolist(), **switches) * batch.loss_mask
    torch.testing.assert_close(adv - grpo, expected, rtol=1e-9, atol=1e-12)


def test_fisher_p_values_are_scipys_and_p_one_is_the_modal_table():
    tables = torch.tensor([(a, b, n_true - a, n_false - b) for n_true in range(13) for n_false in range(13)
                           for a in range(n_true + 1) for b in range(n_false + 1)], dtype=torch.float64)
    p, modal = fisher_exact(*tables.T)
    expected = torch.tensor([scipy_fisher_exact([[a, c], [b, d]]).pvalue for a, b, c, d in tables.tolist()],
                            dtype=torch.float64)
    torch.testing.assert_close(p, expected, rtol=1e-12, atol=1e-14)
    assert torch.equal(modal, expected >= 1 - 1e-12)


@pytest.mark.parametrize("seed", range(12))
def test_key_scale_zero_is_grpo_and_groups_of_one_outcome_get_grpos_zero(seed):
    batch = random_batch(seed, dtype=torch.float64)
    adv, grpo = key_values(batch, key_scale=0.0)
    torch.testing.assert_close(adv, grpo, rtol=0, atol=0)
    _, group = torch.unique(batch.group_id, return_inverse=True)
    rewards = (group % 2).to(torch.float64)  # every group all correct or all failed
    same = batch.replace(rewards=rewards, correct=rewards >= 1)
    adv, grpo = key_values(same)
    assert torch.equal(adv, torch.zeros_like(adv)) and torch.equal(grpo, adv)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("switches", SETTINGS)
def test_a_token_every_response_has_carries_no_value(seed, switches):
    drawn = random_batch(seed, group_sizes=(5, 7), width=20, dtype=torch.float64)
    ids = drawn.response_ids.clone()
    ids[:, 0] = 1000  # every response starts with the same token
    ids[:, -1] = 1001  # and the full-length ones end with another
    mask = drawn.response_mask.clone()
    mask[:, 0] = True
    batch = RolloutBatch(response_ids=ids, response_mask=mask, group_id=drawn.group_id, rewards=drawn.rewards,
                         old_logp=torch.zeros_like(drawn.old_logp), correct=drawn.correct)
    adv, grpo = key_values(batch, **switches)
    assert torch.equal(adv[:, 0], grpo[:, 0])


def presence_and_frequency(batch: RolloutBatch, row: int, token: int) -> tuple[float, float] | None:
    """For a token of `row`: (presence rate among the group's successes minus among its failures, the same for the
    length-discounted occurrence shares `f_c / (L_c K_c)` of the BM25 term), or None in a group of one outcome."""
    rows = (batch.group_id == batch.group_id[row]).nonzero().flatten().tolist()
    stats = {}
    for cls in (True, False):
        members = [r for r in rows if bool(batch.correct[r]) == cls]
        if not members:
            return None
        tokens = [batch.response_ids[r][batch.response_mask[r]].tolist() for r in members]
        stats[cls] = (sum(token in t for t in tokens) / len(members), sum(t.count(token) for t in tokens),
                      sum(len(t) for t in tokens))
    mean_length = (stats[True][2] + stats[False][2]) / 2
    discounted = {cls: f / (length * BM25_K1 * (1 - BM25_B + BM25_B * length / mean_length)) if length else 0.0
                  for cls, (_, f, length) in stats.items()}
    return stats[True][0] - stats[False][0], discounted[True] - discounted[False]


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**16), shape=SHAPES, switches=st.sampled_from(SETTINGS))
@example(seed=5487, shape=(5, 6, 1, 3), switches={"fisher_weight": 2.0, "ig_weight": 0.5, "key_scale": 3.0})  # mixed
def test_credit_moves_towards_success_tokens_and_flips_only_against_its_rows_outcome(seed, shape, switches):
    batch = random_batch(seed, group_sizes=shape, dtype=torch.float64)
    adv, grpo = key_values(batch, **switches)
    tf = switches.get("term_frequency", True)
    informed = switches.get("ig_weight", 1.0) > 0
    for row, t in batch.loss_mask.nonzero().tolist():
        leaning = presence_and_frequency(batch, row, int(batch.response_ids[row, t]))
        moved = float(adv[row, t] - grpo[row, t])
        if leaning is None:
            assert moved == 0.0
            continue
        presence, frequency = leaning
        signs = {math.copysign(1, x) for x in ((presence, frequency) if tf else (presence,)) if x != 0}
        strict = presence != 0 and informed  # IG > 0 wherever the presence rates differ (Fisher alone: not modal)
        if signs == {1.0}:  # more present and no less frequent among successes: credit moves up
            assert moved > 0 if strict else moved >= 0, (row, t)
        if signs == {-1.0}:
            assert moved < 0 if strict else moved <= 0, (row, t)
        if adv[row, t] * grpo[row, t] < 0:  # a flip: the token leans, by one statistic at least, to the other outcome
            up, down = presence > 0 or (tf and frequency > 0), presence < 0 or (tf and frequency < 0)
            assert (up if grpo[row, t] < 0 else down) and abs(moved) > abs(grpo[row, t]), (row, t)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), shape=SHAPES)
def test_no_flip_when_the_scale_is_below_every_rows_advantage(seed, shape):
    batch = random_batch(seed, group_sizes=shape, dtype=torch.float64)
    _, grpo = key_values(batch)
    nonzero = grpo[batch.loss_mask & (grpo != 0)].abs()
    if nonzero.numel() == 0:
        return
    adv, _ = key_values(batch, key_scale=float(nonzero.min()))
    assert (adv * grpo >= 0).all()


def test_bad_switches_are_one_line_errors_and_the_engines_say_what_they_run():
    with pytest.raises(ValueError, match="ig_weight"):
        KeyTokenAdvantage(ig_weight=-1.0)
    with pytest.raises(ValueError, match="fisher_weight \\+ ig_weight must be > 0"):
        KeyTokenAdvantage(fisher_weight=0.0, ig_weight=0.0)
    with pytest.raises(ValueError, match="key_scale"):
        get_method("ktae", estimator={"key_scale": -0.1})
    method = get_method("ktae")
    assert trl_adapter.refusal(method) is None  # TRL hands over its completion ids
    assert "token ids" in verl_adapter.refusal(method)  # verl's estimator gets no responses


# --------------------------------------------------------------------------------------------------
# The public code, ported: github.com/xiaolizh1/KTAE at commit ea9fb77f366216d754e2368653911724e73a7376,
# verl/workers/actor/compute_key_tokens.py (compute_Cohen, fisher_exact_test, calculate_ig, compute_tf,
# ComputeKeyTokens) and verl/trainer/ppo/core_algos.py (compute_ktae_outcome_advantage_and_keytokens). Verbatim but
# for the dropped imports, the unused `average_weight_by_mask_tensor`, `bottom` and `config`, and formatting.
def compute_Cohen(a, b):
    a = torch.clamp(a, min=0, max=1)
    b = torch.clamp(b, min=0, max=1)
    h = torch.asin(torch.sqrt(a)) - torch.asin(torch.sqrt(b))
    return h


def fisher_exact_test(input_tensor):
    a, b, c, d = torch.unbind(input_tensor, dim=1)
    R1 = a + b
    R2 = c + d
    C1 = a + c
    n = R1 + R2
    k_min = torch.max(torch.tensor(0, dtype=torch.float32), R1 + C1 - n)
    k_max = torch.min(R1, C1)
    max_k = torch.max(k_max)
    k_values = torch.arange(max_k + 1, dtype=torch.float32, device=input_tensor.device)
    k_grid = torch.tile(k_values, (input_tensor.size(0), 1))
    mask = (k_grid >= k_min.unsqueeze(1)) & (k_grid <= k_max.unsqueeze(1))
    C1_grid = C1.unsqueeze(1).expand_as(k_grid)
    R1_grid = R1.unsqueeze(1).expand_as(k_grid)
    n_grid = n.unsqueeze(1).expand_as(k_grid)
    k = k_grid

    def log_comb(n, k):
        return torch.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma(n - k + 1)

    log_p_k = log_comb(C1_grid, k) + log_comb(n_grid - C1_grid, R1_grid - k) - log_comb(n_grid, R1_grid)
    p_k = torch.exp(log_p_k) * mask.float()
    log_p_obs = log_comb(C1, a) + log_comb(n - C1, R1 - a) - log_comb(n, R1)
    p_obs = torch.exp(log_p_obs)
    p_values = torch.sum(torch.where((p_k <= p_obs.unsqueeze(1)) & mask, p_k, 0.), dim=1)
    return p_values


def calculate_ig(table_tensor):
    t_a = table_tensor[:, 0]
    t_b = table_tensor[:, 1]
    t_c = table_tensor[:, 2]
    t_d = table_tensor[:, 3]
    t_n = t_a + t_b + t_c + t_d

    def safe_log(x):
        return torch.where(x > 0, torch.log2(x), torch.tensor(0.0, dtype=torch.float32, device=x.device))

    def entropy(p):
        return -p * safe_log(p)

    p_correct = (t_a + t_c) / t_n
    p_error = (t_b + t_d) / t_n
    h_y = entropy(p_correct) + entropy(p_error)

    def conditional_entropy(x1, x2):
        total = x1 + x2
        return torch.where(total > 0, entropy(x1 / total) + entropy(x2 / total),
                           torch.tensor(0.0, dtype=torch.float32, device=x1.device))

    h_y_x = ((t_a + t_b) / t_n) * conditional_entropy(t_a, t_b) + ((t_c + t_d) / t_n) * conditional_entropy(t_c, t_d)
    ig = h_y - h_y_x
    ig[t_n == 0] = 0
    return ig


def compute_tf(correct_tensor, correct_mask, wrong_tensor, wrong_mask, appear_table_tensor):
    k1 = 2.0
    b = 0.5
    correct_tensor_unmasked = correct_tensor[correct_mask == 1]
    wrong_tensor_unmasked = wrong_tensor[wrong_mask == 1]
    total_correct = correct_tensor_unmasked.numel()
    total_wrong = wrong_tensor_unmasked.numel()
    avg_len = (total_correct + total_wrong) / 2
    corrcet_k = k1 * (1 - b + b * (total_correct / avg_len))
    wrong_k = k1 * (1 - b + b * (total_wrong / avg_len))
    correct_hist = torch.bincount(correct_tensor_unmasked, minlength=appear_table_tensor.size(0))
    wrong_hist = torch.bincount(wrong_tensor_unmasked, minlength=appear_table_tensor.size(0))
    tf_tensor = torch.stack(
        [(correct_hist.float() / total_correct) * (k1 + 1) / ((correct_hist.float() / total_correct) + corrcet_k),
         (wrong_hist.float() / total_wrong) * (k1 + 1) / ((wrong_hist.float() / total_wrong) + wrong_k)],
        dim=1).to(dtype=torch.float32, device=appear_table_tensor.device)
    return tf_tensor


class ComputeKeyTokens:
    def __init__(self, alpha, beta_ig, gamma_tf, top, responses_ids, mask, rewards, max_token_num):
        self.top = top
        self.alpha = alpha
        self.beta_ig = beta_ig
        self.gamma_tf = gamma_tf
        self.responses_ids = responses_ids
        self.mask = mask
        self.rewards = rewards
        self.max_token_num = max_token_num

    def get_distribution(self, tensor, mask):
        appear_distribution = {}
        m, n = tensor.shape
        device = tensor.device
        row_indices = torch.arange(m)[:, None].expand(m, n)
        row_indices = row_indices.to(device)
        flat_values = tensor.flatten()
        flat_rows = row_indices.flatten()
        flat_mask = mask.flatten().to(device)
        masked_values = flat_values[flat_mask == 1]
        masked_rows = flat_rows[flat_mask == 1]
        unique_values, inverse_indices = torch.unique(masked_values, return_inverse=True)
        for i, val in enumerate(unique_values.tolist()):
            current_rows = masked_rows[inverse_indices == i]
            unique_rows = torch.unique(current_rows)
            appear_distribution[val] = len(unique_rows)
        return appear_distribution

    def compute_key_tokens(self, correct_tensor, wrong_tensor, correct_mask, wrong_mask):
        key_token_result = torch.zeros(self.max_token_num + 1, dtype=torch.float32)
        if correct_tensor.size(0) == 0 or wrong_tensor.size(0) == 0:
            return key_token_result
        correct_dist = self.get_distribution(correct_tensor, correct_mask)
        wrong_dist = self.get_distribution(wrong_tensor, wrong_mask)
        appear_table_tensor = torch.zeros((self.max_token_num + 1, 4), dtype=torch.float32,
                                          device=correct_tensor.device)
        tokenid_set = set(self.responses_ids.flatten().tolist())
        for tokenid in tokenid_set:
            correct_count = correct_dist.get(tokenid, 0)
            wrong_count = wrong_dist.get(tokenid, 0)
            total_correct = correct_tensor.size(0)
            total_wrong = wrong_tensor.size(0)
            if correct_count + wrong_count != 0:
                appear_table_tensor[tokenid] = torch.tensor(
                    [correct_count, wrong_count, total_correct - correct_count, total_wrong - wrong_count],
                    dtype=torch.float32, device=correct_tensor.device)
        ig_val = calculate_ig(appear_table_tensor) if self.beta_ig else torch.zeros(
            self.max_token_num + 1, dtype=torch.float32, device=appear_table_tensor.device)
        if self.alpha:
            fisher_pvalue = fisher_exact_test(appear_table_tensor)
            format_fisher_pvalue = torch.where(
                fisher_pvalue != 1.0, torch.exp(-2 * fisher_pvalue),
                torch.tensor(0.0, dtype=torch.float32, device=appear_table_tensor.device))
        else:
            format_fisher_pvalue = torch.zeros(self.max_token_num + 1, dtype=torch.float32,
                                               device=appear_table_tensor.device)
        x = compute_Cohen(appear_table_tensor[:, 0] / (appear_table_tensor[:, 0] + appear_table_tensor[:, 2] + 1e-10),
                          appear_table_tensor[:, 1] / (appear_table_tensor[:, 1] + appear_table_tensor[:, 3] + 1e-10))
        if self.gamma_tf:
            tf_tensor = compute_tf(correct_tensor, correct_mask, wrong_tensor, wrong_mask, appear_table_tensor)
            x += tf_tensor[:, 0] / (tf_tensor[:, 1] + 1e-5) - tf_tensor[:, 1] / (tf_tensor[:, 0] + 1e-5)
        key_token_result = (((self.alpha * format_fisher_pvalue + self.beta_ig * ig_val) * x)
                            / (self.alpha + self.beta_ig))
        key_token_result = (torch.sigmoid(key_token_result) - 0.5) * 2 * self.top
        key_token_result[151643] = 0.
        return key_token_result

    def get_key_tokens(self):
        correct_outputs = self.responses_ids[self.rewards > 0.0]
        correct_outputs_mask = self.mask[self.rewards > 0.0]
        wrong_outputs = self.responses_ids[self.rewards <= 0.0]
        wrong_outputs_mask = self.mask[self.rewards <= 0.0]
        return self.compute_key_tokens(correct_outputs, wrong_outputs, correct_outputs_mask, wrong_outputs_mask)


def compute_ktae_outcome_advantage_and_keytokens(token_level_rewards, responses, eos_mask, index, epsilon=1e-6):
    response_length = token_level_rewards.shape[-1]
    id2score = defaultdict(list)
    id2reponses = {}
    id2mask = {}
    id2mean = {}
    id2std = {}
    scores = token_level_rewards.sum(dim=-1)
    with torch.no_grad():
        bsz = token_level_rewards.shape[0]
        for i in range(bsz):
            id2score[index[i]].append(scores[i])
            if index[i] in id2reponses:
                id2reponses[index[i]] = torch.cat((id2reponses[index[i]], responses[i].unsqueeze(0)), dim=0)
            else:
                id2reponses[index[i]] = responses[i].unsqueeze(0)
            if index[i] in id2mask:
                id2mask[index[i]] = torch.cat((id2mask[index[i]], eos_mask[i].unsqueeze(0)), dim=0)
            else:
                id2mask[index[i]] = eos_mask[i].unsqueeze(0)
        id2key_token = {}
        for idx in id2score:
            reponses_per_q = id2reponses[idx]
            mask_per_q = id2mask[idx]
            score_per_q = id2score[idx]
            if len(id2score[idx]) == 1:
                id2mean[idx] = torch.tensor(0.0)
                id2std[idx] = torch.tensor(1.0)
                id2key_token[idx] = torch.zeros([responses.max().item()], device=responses.device)
            elif len(id2score[idx]) > 1:
                format_score_per_q = torch.tensor(score_per_q)
                id2mean[idx] = torch.mean(format_score_per_q)
                id2std[idx] = torch.std(format_score_per_q)
                computer = ComputeKeyTokens(alpha=1.0, beta_ig=1.0, gamma_tf=1.0, top=1.0,
                                            responses_ids=reponses_per_q, mask=mask_per_q,
                                            rewards=format_score_per_q, max_token_num=responses.max().item())
                key_tokens = computer.get_key_tokens().to(reponses_per_q.device)
                id2key_token[idx] = key_tokens
            else:
                raise ValueError(f"no score in prompt index: {idx}")
        means = torch.tensor([id2mean[index[i]] for i in range(bsz)], device=scores.device)
        stds = torch.tensor([id2std[index[i]] for i in range(bsz)], device=scores.device)
        scores = (scores - means) / (stds + epsilon)
        format_weights = [id2key_token[index[i]][responses[i]].unsqueeze(0) for i in range(bsz)]
        all_weight = torch.cat(format_weights, dim=0)
        scores = scores.unsqueeze(-1).tile([1, response_length]) * eos_mask + all_weight * eos_mask
    return scores, scores
# --------------------------------------------------------------------------------------------------


QWEN_PAD = 151643
"""Qwen2.5's pad and end-of-text id, which the public code's padding holds (its max_token_num relies on it)."""


def verl_rollouts(seed: int):
    """verl-shaped inputs of groups of 2-16 responses (the scripts: 16) over a 24-token vocabulary, right-padded
    with QWEN_PAD, 0/1 rewards on the last token; and the same rollouts as a credo batch."""
    gen = torch.Generator().manual_seed(seed)
    sizes = [int(torch.randint(2, 17, (1,), generator=gen)) for _ in range(4)]
    B, T = sum(sizes), 24
    uids = np.array([f"q{g}" for g, size in enumerate(sizes) for _ in range(size)], dtype=object)
    order = torch.randperm(B, generator=gen)
    uids = uids[order.numpy()]
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    lengths[0] = T - 1  # some padding, so the public code's max_token_num reaches QWEN_PAD
    mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
    vocabulary = torch.randint(0, 24, (B, T), generator=gen) ** 2 // 12  # skewed: a few ids are common
    responses = torch.where(mask, vocabulary, QWEN_PAD)
    rewards = (torch.rand(B, generator=gen) < torch.rand(1, generator=gen)).float()
    token_rewards = torch.zeros(B, T)
    token_rewards[torch.arange(B), lengths - 1] = rewards
    _, group = np.unique(uids, return_inverse=True)
    batch = RolloutBatch(response_ids=responses, response_mask=mask, group_id=torch.as_tensor(group, dtype=torch.long),
                         rewards=rewards.double(), old_logp=torch.zeros(B, T, dtype=torch.float64),
                         correct=rewards > 0)
    return (token_rewards, responses, mask.float(), uids), batch


def test_reproduces_the_public_codes_statistic_and_advantages(monkeypatch):
    """The ported public code against credo on identical tensors. Its p-values are float32 sums: where they miss
    p = 1 on a modal table (credo: F = 0, it: exp(-2p) ~ e^-2) or break a tie by rounding, F differs; given its own
    F, credo's formula gives its advantages to float32 rounding, and wherever F agrees credo gives them outright."""
    recorded, public_fisher = [], fisher_exact_test

    def recording_fisher(table):
        p = public_fisher(table)
        recorded.append({tuple(int(x) for x in row): float(q) for row, q in zip(table.tolist(), p.tolist())
                         if any(row)})
        return p

    monkeypatch.setitem(globals(), "fisher_exact_test", recording_fisher)
    differ, tables = 0, 0
    for seed in range(6):
        recorded.clear()
        inputs, batch = verl_rollouts(seed)
        public, _ = compute_ktae_outcome_advantage_and_keytokens(*inputs)
        public_p = {}
        for call in recorded:
            for table, p in call.items():
                assert public_p.setdefault(table, p) == p  # one table, one float32 p-value, whatever the group
        grpo, _ = get_method("grpo", estimator={"std_ddof": 1}).credit(batch)
        public_f = {table: (math.exp(-2 * p) if p != 1.0 else 0.0) for table, p in public_p.items()}
        given_its_f = loop_key_token_values(batch, batch.correct.tolist(), association=lambda *t, f=public_f: f[t])
        torch.testing.assert_close(public.double(), grpo.advantages + given_its_f * batch.response_mask,
                                   rtol=1e-5, atol=2e-5)
        exact_f = {table: exact_fisher_association(*table) for table in public_f}
        misses = {table for table in public_f if abs(public_f[table] - exact_f[table]) > 1e-6}
        for a, b, c, d in misses:  # each a float32 artefact: a modal table or a tie within rounding
            pvalue = scipy_fisher_exact([[a, c], [b, d]]).pvalue
            assert pvalue == pytest.approx(1.0) or abs(public_p[(a, b, c, d)] - pvalue) > 1e-3
        credited, _ = get_method("ktae", estimator={"std_ddof": 1}).credit(batch)
        exact = loop_key_token_values(batch, batch.correct.tolist())
        torch.testing.assert_close(credited.advantages, grpo.advantages + exact * batch.response_mask,
                                   rtol=1e-9, atol=1e-12)
        same = torch.tensor([[(a, b, c, d) not in misses for a, b, c, d in row_tables(batch, row)]
                             for row in range(batch.size)])
        torch.testing.assert_close(credited.advantages[same], public.double()[same], rtol=1e-5, atol=2e-5)
        differ += len(misses)
        tables += len(public_f)
    assert 0 < differ < tables  # the float32 misses are real (about half the distinct tables of these rollouts)


def row_tables(batch: RolloutBatch, row: int) -> list[tuple[int, int, int, int]]:
    """The presence table of each position of `row` (zeros off the response)."""
    rows = (batch.group_id == batch.group_id[row]).nonzero().flatten().tolist()
    sets = {r: set(batch.response_ids[r][batch.response_mask[r]].tolist()) for r in rows}
    n_true = sum(bool(batch.correct[r]) for r in rows)
    n_false = len(rows) - n_true
    out = []
    for t in range(batch.width):
        if not batch.response_mask[row, t]:
            out.append((0, 0, 0, 0))
            continue
        v = int(batch.response_ids[row, t])
        a = sum(v in sets[r] for r in rows if batch.correct[r])
        b = sum(v in sets[r] for r in rows if not batch.correct[r])
        out.append((a, b, n_true - a, n_false - b))
    return out
