"""MT-GRPO (`mt_grpo`, `credo.credit.mt_grpo`, arXiv 2505.11821): turn-level credit from turn rewards.

A loop reference straight from the module's formulas (both forms, ragged random episodes); identities (no turn
coefficient, or one-turn episodes without turn rewards, give GRPO under the same conventions; one-turn episodes
under v1 give GRPO on outcome plus turn reward; the two forms' exact relation on two-turn episodes); the public code
(SiliangZeng/Multi-Turn-RL-Agent's `_assign_advantages` and its normalisation), ported and run on inputs built from
the same batches; the per-turn-index bias of verl #7244 measured on the tabular episode of test_turns.py (the
general form's expected gradient is the true one, the per-index normalisation's is not); and intent: a turn rewarded
above its peers is credited above them, turn rewards never reach another group, observations get nothing."""

from __future__ import annotations

import random
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
from test_turns import expected_gradients, per_index_advantages

from credo.batch import RolloutBatch
from credo.credit.groups import GroupAdvantage
from credo.credit.mt_grpo import MTGRPOAdvantage
from credo.losses import PPOClipLoss
from credo.methods import get_method

FORMS = ("first", "all")


# --------------------------------------------------------------------------------------------------- episodes
@dataclass
class Episode:
    """One episode as the episode sampler lays it out: each turn's policy tokens, then the observation answering it."""

    group: int
    turns: list[tuple[int, int]]  # (policy tokens, observation tokens after them) per turn
    turn_rewards: list[float]
    outcome: float


def episode_batch(episodes: list[Episode], *, pad: int = 0, dtype=torch.float64, seed: int = 0) -> RolloutBatch:
    """The episodes as a RolloutBatch: one row each, observations in the response but off the loss mask, each token
    carrying its turn (an observation the turn it answers) and that turn's reward."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for e in episodes:
        policy, turn_of, reward = [], [], []
        for k, (n, m) in enumerate(e.turns):
            policy += [True] * n + [False] * m
            turn_of += [k] * (n + m)
            reward += [e.turn_rewards[k]] * (n + m)
        rows.append((policy, turn_of, reward))
    B, T = len(episodes), max(len(r[0]) for r in rows) + pad
    response = torch.zeros(B, T, dtype=torch.bool)
    loss = torch.zeros(B, T, dtype=torch.bool)
    thoughts = torch.full((B, T), -1, dtype=torch.long)
    turn_reward = torch.zeros(B, T, dtype=dtype)
    for i, (policy, turn_of, reward) in enumerate(rows):
        n = len(policy)
        response[i, :n] = True
        loss[i, :n] = torch.tensor(policy, dtype=torch.bool)
        thoughts[i, :n] = torch.tensor(turn_of)
        turn_reward[i, :n] = torch.tensor(reward, dtype=dtype)
    return RolloutBatch(
        response_ids=torch.randint(0, 50, (B, T), generator=gen), response_mask=response, loss_mask=loss,
        group_id=torch.tensor([e.group for e in episodes]),
        rewards=torch.tensor([e.outcome for e in episodes], dtype=dtype),
        old_logp=torch.where(response, -torch.rand(B, T, generator=gen, dtype=dtype) * 3, 0.0),
        thought_ids=thoughts, thought_wrong=torch.zeros(B, T, dtype=torch.bool), turn_reward=turn_reward,
    )


def random_episodes(seed: int, *, group_sizes=None, max_turns: int = 4, min_turns: int = 1, trailing: bool = True,
                    shuffle: bool = True) -> list[Episode]:
    """Ragged random episodes in groups of mixed sizes (ids not consecutive, rows interleaved unless `shuffle` is
    off): 1 to `max_turns` turns of 1-4 tokens, observations of 1-3 between them, sometimes one after the last turn
    (`trailing`: a budget that ran out), turn rewards drawn from the calculator-like {0, 0.2, 0.5, 1} and uniform."""
    rng = random.Random(seed)
    sizes = group_sizes or [rng.randint(1, 6) for _ in range(rng.randint(1, 4))]
    ids = rng.sample(range(3, 40), len(sizes))
    episodes = []
    for g, size in zip(ids, sizes):
        for _ in range(size):
            K = rng.randint(min_turns, max_turns)
            turns = [(rng.randint(1, 4), rng.randint(1, 3) if k < K - 1 else
                      (rng.randint(1, 2) if trailing and rng.random() < 0.2 else 0)) for k in range(K)]
            rewards = [rng.choice([0.0, 0.2, 0.5, 1.0, rng.uniform(-1, 1)]) for _ in range(K)]
            episodes.append(Episode(g, turns, rewards, rng.choice([0.0, 1.0, rng.random()])))
    if shuffle:
        rng.shuffle(episodes)
    return episodes


# ---------------------------------------------------------------------------------------------- loop reference
def loop_mt_grpo(batch: RolloutBatch, turns="first", turn_coef=1.0, std_ddof=1, eps=1e-4) -> torch.Tensor:
    """The module docstring's formulas, one row, turn and token at a time."""
    B, T = batch.response_mask.shape
    group = batch.group_id.tolist()
    count, reward = {}, {}
    for i in range(B):
        seen = [int(batch.thought_ids[i, t]) for t in range(T) if batch.response_mask[i, t]]
        count[i] = max(seen) + 1 if seen else 0
        reward[i] = {}
        for t in range(T):
            if batch.response_mask[i, t]:
                reward[i].setdefault(int(batch.thought_ids[i, t]), float(batch.turn_reward[i, t]))

    def norm(values, i):
        peers = [values[j] for j in range(B) if group[j] == group[i]]
        if max(peers) == min(peers):
            return 0.0
        mean = sum(peers) / len(peers)
        std = (sum((x - mean) ** 2 for x in peers) / max(len(peers) - std_ddof, 1)) ** 0.5
        return (values[i] - mean) / (std + eps)

    def to_go(j, s):
        return sum(reward[j].get(k, 0.0) for k in range(s, count[j]))

    outcome = {i: float(batch.rewards[i]) for i in range(B)}
    first = {i: reward[i].get(0, 0.0) for i in range(B)}
    combined = {i: outcome[i] + first[i] for i in range(B)}
    out = torch.zeros(B, T, dtype=torch.float64)
    for i in range(B):
        for t in range(T):
            if not batch.loss_mask[i, t]:
                continue
            k = int(batch.thought_ids[i, t])
            if turns == "first":
                if count[i] >= 2:
                    out[i, t] = norm(outcome, i) + (turn_coef * norm(first, i) if k == 0 else 0.0)
                else:
                    out[i, t] = norm(combined, i)
            else:
                others = [to_go(j, k) for j in range(B) if j != i and group[j] == group[i] and count[j] > k]
                baseline = sum(others) / len(others) if others else 0.0
                out[i, t] = norm(outcome, i) + turn_coef * (to_go(i, k) - baseline)
    return out


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("seed", range(25))
def test_the_advantages_equal_a_loop_reference_on_ragged_episodes(seed, form):
    rng = random.Random(seed)
    switches = {"turns": form, "turn_coef": rng.choice([1.0, 0.5, 2.0]), "std_ddof": rng.choice([0, 1]),
                "eps": rng.choice([1e-4, 1e-6])}
    batch = episode_batch(random_episodes(seed), pad=rng.randint(0, 3), seed=seed)
    credited, metrics = MTGRPOAdvantage(**switches)(batch)
    torch.testing.assert_close(credited.advantages, loop_mt_grpo(batch, **switches), rtol=1e-12, atol=1e-12)
    assert credited.loss_mask is batch.loss_mask
    assert set(metrics) >= {"credit/turn_adv_abs_mean", "credit/outcome_adv_abs_mean", "credit/adv_abs_mean"}


@pytest.mark.parametrize("form", FORMS)
def test_padding_and_float32_change_nothing(form):
    estimator = MTGRPOAdvantage(turns=form)
    episodes = random_episodes(3, group_sizes=[4, 3, 5])
    plain, metrics = estimator(episode_batch(episodes))
    padded, padded_metrics = estimator(episode_batch(episodes, pad=7))
    assert torch.equal(padded.advantages[:, : plain.width], plain.advantages)
    assert not padded.advantages[:, plain.width:].any()
    assert metrics == pytest.approx(padded_metrics)
    single, _ = estimator(episode_batch(episodes, dtype=torch.float32))
    assert single.advantages.dtype == torch.float32
    torch.testing.assert_close(single.advantages.double(), plain.advantages, rtol=1e-5, atol=1e-5)


def test_a_batch_without_turn_fields_is_a_clear_error():
    batch = episode_batch(random_episodes(0))
    with pytest.raises(ValueError, match=r"^mt_grpo needs RolloutBatch.thought_ids and turn_reward .* but turn_reward "
                                         r"is None$"):
        MTGRPOAdvantage()(batch.replace(turn_reward=None))
    with pytest.raises(ValueError, match="but thought_ids and turn_reward are None"):
        MTGRPOAdvantage(turns="all")(batch.replace(turn_reward=None, thought_ids=None, thought_wrong=None))
    with pytest.raises(ValueError, match="turns"):
        MTGRPOAdvantage(turns="every")


def test_the_registered_method_is_the_public_code_s_settings():
    method = get_method("mt_grpo")
    assert method.estimator == MTGRPOAdvantage(turns="first", turn_coef=1.0, std_ddof=1, eps=1e-4)
    assert method.loss == PPOClipLoss(agg="token_mean")  # the trainer's compute_loss: a token mean, clip 0.2, no KL
    assert method.reads == {"thought_ids", "turn_reward"} and method.family == "turn"


# ---------------------------------------------------------------------------------------------------- identities
def grpo(batch, std_ddof=1, eps=1e-4):
    credited, _ = GroupAdvantage(std_ddof=std_ddof, eps=eps)(batch)
    return credited.advantages


@pytest.mark.parametrize("seed", range(10))
def test_without_a_turn_coefficient_the_general_form_is_grpo_and_v1_too_on_episodes_that_went_on(seed):
    batch = episode_batch(random_episodes(seed), seed=seed)
    for std_ddof, eps in ((1, 1e-4), (0, 1e-6)):  # the code's conventions, credo's GRPO's
        no_turns = MTGRPOAdvantage(turns="all", turn_coef=0.0, std_ddof=std_ddof, eps=eps)(batch)[0].advantages
        torch.testing.assert_close(no_turns, grpo(batch, std_ddof, eps), rtol=0, atol=1e-12)
    went_on = episode_batch(random_episodes(seed, min_turns=2), seed=seed)
    torch.testing.assert_close(MTGRPOAdvantage(turn_coef=0.0)(went_on)[0].advantages, grpo(went_on), rtol=0, atol=1e-12)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("seed", range(10))
def test_one_turn_episodes_without_turn_rewards_are_grpo(seed, form):
    episodes = random_episodes(seed, max_turns=1)
    for e in episodes:
        e.turn_rewards = [0.0]
    batch = episode_batch(episodes, seed=seed)
    torch.testing.assert_close(MTGRPOAdvantage(turns=form, turn_coef=1.7)(batch)[0].advantages, grpo(batch),
                               rtol=0, atol=1e-12)
    # Multi-turn episodes without turn rewards too: the turn term vanishes in both forms.
    episodes = random_episodes(seed)
    for e in episodes:
        e.turn_rewards = [0.0] * len(e.turns)
    batch = episode_batch(episodes, seed=seed)
    torch.testing.assert_close(MTGRPOAdvantage(turns=form)(batch)[0].advantages, grpo(batch), rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", range(10))
def test_v1_gives_one_turn_episodes_grpo_on_outcome_plus_turn_reward(seed):
    """The code's `combined_advantages` (its GRPO-MR): an episode the environment never answered."""
    batch = episode_batch(random_episodes(seed, max_turns=1), seed=seed)
    summed = batch.replace(rewards=batch.rewards + batch.turn_reward[:, 0])
    torch.testing.assert_close(MTGRPOAdvantage()(batch)[0].advantages, grpo(summed), rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", range(10))
def test_on_two_turn_episodes_the_general_form_is_v1_rescaled_per_group(seed):
    """Turn rewards on the first turn only: the general form's turn-0 term is v1's `A^T` times
    `n/(n-1) (std_g + eps)`, its turn-1 term 0; the outcome term is shared. An episode alone in its group keeps its
    whole turn reward (no other episode gives a baseline: 0), where v1 gives it nothing."""
    episodes = random_episodes(seed, min_turns=2, max_turns=2, trailing=False)
    for e in episodes:
        e.turn_rewards[1] = 0.0
    batch = episode_batch(episodes, seed=seed)
    outcome = grpo(batch)
    v1 = MTGRPOAdvantage(turn_coef=1.0)(batch)[0].advantages - outcome
    general = MTGRPOAdvantage(turns="all", turn_coef=1.0)(batch)[0].advantages - outcome
    first = batch.turn_reward[:, 0]
    for i in range(batch.size):
        peers = first[batch.group_id == batch.group_id[i]]
        n = peers.numel()
        scale = n / (n - 1) * (peers.std() + 1e-4) if n > 1 and peers.max() > peers.min() else 0.0
        turn0 = batch.loss_mask[i] & (batch.thought_ids[i] == 0)
        if n == 1:
            assert not v1[i].any() and torch.equal(general[i][turn0], first[i].expand(int(turn0.sum())))
            continue
        torch.testing.assert_close(general[i][turn0], scale * v1[i][turn0], rtol=1e-10, atol=1e-12)
        if peers.max() == peers.min():  # v1 gives no turn credit; the general form's centred term is 0 too
            assert not general[i].any()
        assert not general[i][batch.thought_ids[i] == 1].any() and not v1[i][batch.thought_ids[i] == 1].any()


# ------------------------------------------------------------------------------------------------- public code
# The public code, ported: github.com/SiliangZeng/Multi-Turn-RL-Agent at commit
# 7dbdd08bdb27810019bc1511dbd0af3c7cfaac7a (2025-06-12), verifiers/trainers/mt_grpo_env_trainer.py
# (MTGRPOEnvTrainer._find_result_positions, _assign_advantages, and the reward and advantage lines of
# _generate_and_score_completions) and verifiers/trainers/grpo_env_trainer.py (GRPOEnvTrainer.__init__'s combined
# reward functions and weights, _compute_normalized_advantages). Verbatim but for `self`, a stand-in holding the
# attributes they read (one process on the CPU), the reward functions' values passed in (the combined functions are
# the turn functions followed by the outcome functions, so their values are the two concatenated), and the dropped
# metrics and logging, and long lines wrapped.
class PortedMTGRPOTrainer:
    def __init__(self, num_generations, turn_reward_weights, outcome_reward_weights, turn_advantage_coef=1.0):
        self.num_generations = num_generations
        self.accelerator = SimpleNamespace(device=torch.device("cpu"), process_index=0)
        self.turn_reward_weights = torch.tensor(turn_reward_weights)
        self.outcome_reward_weights = torch.tensor(outcome_reward_weights)
        self.combined_reward_weights = torch.cat([self.turn_reward_weights, self.outcome_reward_weights], dim=0)
        self.turn_advantage_coef = turn_advantage_coef

    def advantages(self, prompts, completion_ids, completion_messages, completion_mask, turn_rewards_per_func,
                   outcome_rewards_per_func):
        device = self.accelerator.device
        combined_rewards_per_func = torch.cat([turn_rewards_per_func, outcome_rewards_per_func], dim=1)

        turn_rewards = (turn_rewards_per_func * self.turn_reward_weights.to(device).unsqueeze(0)).sum(dim=1)
        outcome_rewards = (outcome_rewards_per_func * self.outcome_reward_weights.to(device).unsqueeze(0)).sum(dim=1)
        combined_rewards = (combined_rewards_per_func * self.combined_reward_weights.to(device).unsqueeze(0)).sum(dim=1)

        turn_mean_grouped_rewards, turn_std_grouped_rewards, turn_advantages = \
            self._compute_normalized_advantages(turn_rewards, len(prompts))
        outcome_mean_grouped_rewards, outcome_std_grouped_rewards, outcome_advantages = \
            self._compute_normalized_advantages(outcome_rewards, len(prompts))
        combined_mean_grouped_rewards, combined_std_grouped_rewards, combined_advantages = \
            self._compute_normalized_advantages(combined_rewards, len(prompts))

        result_segment_indices = self._find_result_positions(completion_ids, completion_messages)

        advantages = self._assign_advantages(
            completion_mask, turn_advantages, outcome_advantages, combined_advantages, result_segment_indices
        )
        return advantages, turn_rewards, outcome_rewards

    def _compute_normalized_advantages(self, rewards, slice_length=None):
        mean_grouped_rewards = rewards.view(-1, self.num_generations).mean(dim=1)
        std_grouped_rewards = rewards.view(-1, self.num_generations).std(dim=1)

        mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(self.num_generations, dim=0)
        std_grouped_rewards = std_grouped_rewards.repeat_interleave(self.num_generations, dim=0)
        advantages = (rewards - mean_grouped_rewards) / (std_grouped_rewards + 1e-4)

        process_slice = slice(
            self.accelerator.process_index * slice_length,
            (self.accelerator.process_index + 1) * slice_length,
        )
        advantages = advantages[process_slice]

        return mean_grouped_rewards, std_grouped_rewards, advantages

    def _find_result_positions(self, completion_ids, completion_messages):
        result_segment_indices = []

        for i, messages in enumerate(completion_messages):
            result_segment = -1

            if isinstance(messages, list):
                for j, msg in enumerate(messages):
                    if msg.get('role') == 'assistant':
                        if j + 1 < len(messages) and messages[j + 1].get('role') == 'user':
                            user_msg = messages[j + 1].get('content', '')
                            if '<result>' in user_msg:
                                result_segment = j + 1
                                break
            elif isinstance(messages, str):
                raise ValueError("Completion is a string, which is not supported.")

            result_segment_indices.append(result_segment)

        return result_segment_indices

    def _assign_advantages(self, completion_mask, turn_advantages, outcome_advantages, combined_advantages,
                           result_segment_indices):
        device = self.accelerator.device
        batch_size, seq_len = completion_mask.shape
        assigned_advantages = torch.zeros_like(completion_mask, dtype=torch.float32)

        def get_segment_boundaries(mask_row):
            boundaries = [0]
            for j in range(1, seq_len):
                if mask_row[j] != mask_row[j - 1]:
                    boundaries.append(j)
            boundaries.append(seq_len)
            return boundaries

        for i in range(batch_size):
            result_segment = result_segment_indices[i]
            mask_row = completion_mask[i]

            outcome_adv  = outcome_advantages[i]
            turn_adv = turn_advantages[i]
            combined_adv = combined_advantages[i]

            outcome_adv_expanded = outcome_adv * torch.ones_like(mask_row, dtype=torch.float32)
            turn_adv_expanded = turn_adv * torch.ones_like(mask_row, dtype=torch.float32)
            combined_adv_expanded = combined_adv * torch.ones_like(mask_row, dtype=torch.float32)

            if result_segment > 0:
                segment_boundaries = get_segment_boundaries(mask_row)
                if result_segment < len(segment_boundaries):
                    split_point = segment_boundaries[result_segment]
                    before_result_mask = (torch.arange(seq_len, device=device) < split_point).float() * mask_row
                    assigned_advantages[i] = (outcome_adv_expanded
                                              + self.turn_advantage_coef * turn_adv_expanded * before_result_mask)
                else:
                    raise ValueError(f"Not enough segments found in completion {i}")
            else:
                assigned_advantages[i] = combined_adv_expanded

        return assigned_advantages
# ----------------------------------------------------------------------------------------- end of the ported code


def code_inputs(batch: RolloutBatch):
    """The code's completion mask and messages from a credo batch: its policy tokens are the assistant's (mask 1),
    each observation a user message holding a tool `<result>` (mask 0, the code's `env_mask` with
    `mask_env_response=True`), padding 0; message k is mask segment k, as the code's environment makes them."""
    completion_mask = batch.loss_mask.long()
    messages = []
    for i in range(batch.size):
        n = int(batch.response_mask[i].sum())
        row, previous = [], None
        for t in range(n):
            policy = bool(batch.loss_mask[i, t])
            if policy != previous:
                row.append({"role": "assistant", "content": f"<tool>call {t}</tool>"} if policy else
                           {"role": "user", "content": f"<result>\nvalue {t}\n</result>"})
            previous = policy
        messages.append(row)
    return completion_mask, messages


@pytest.mark.parametrize("turn_coef", [1.0, 0.5])
@pytest.mark.parametrize("seed", range(12))
def test_the_public_code_gives_v1_s_advantages_on_the_same_episodes(seed, turn_coef):
    """Groups of equal size in contiguous blocks (the code's `view(-1, num_generations)`); per-trajectory turn and
    outcome rewards as the code's weighted reward functions give them (two turn functions, three outcome ones). credo's
    batch carries the turn scalar as its first turn's reward (later turns carry other rewards, which v1 must not
    read) and the outcome scalar as its reward. Episodes of one turn (no tool result) take the code's combined
    branch; on even seeds the first group has no turn reward at all (no tool succeeded: the code's 0 / (0 + 1e-4))."""
    rng = random.Random(seed)
    G, groups = rng.randint(2, 6), rng.randint(1, 4)
    episodes = []
    for g in rng.sample(range(3, 40), groups):
        episodes += random_episodes(rng.randrange(10**6), group_sizes=[G], trailing=False, shuffle=False)
        for e in episodes[-G:]:
            e.group = g
    episodes[-1].turns, episodes[-1].turn_rewards = episodes[-1].turns[:1], episodes[-1].turn_rewards[:1]  # no tool
    episodes[-1].turns[0] = (episodes[-1].turns[0][0], 0)
    B = len(episodes)
    gen = torch.Generator().manual_seed(seed)
    turn_per_func = torch.rand(B, 2, generator=gen, dtype=torch.float64) * torch.tensor([0.2, 0.5], dtype=torch.float64)
    turn_per_func[:G] = torch.where(torch.rand(G, 2, generator=gen) < 0.5, 0.0, turn_per_func[:G]) * (seed % 2)
    outcome_per_func = (torch.rand(B, 3, generator=gen, dtype=torch.float64) < 0.5).double()
    code = PortedMTGRPOTrainer(G, [1.0, 1.0], [0.5, 1.0, 0.2], turn_advantage_coef=turn_coef)
    turn_scalar = (turn_per_func * code.turn_reward_weights.unsqueeze(0)).sum(dim=1)
    outcome_scalar = (outcome_per_func * code.outcome_reward_weights.unsqueeze(0)).sum(dim=1)
    for e, r_turn, r_out in zip(episodes, turn_scalar.tolist(), outcome_scalar.tolist()):
        e.turn_rewards[0], e.outcome = r_turn, r_out
    batch = episode_batch(episodes, pad=rng.randint(0, 2), seed=seed)

    completion_mask, messages = code_inputs(batch)
    theirs, turn_rewards, outcome_rewards = code.advantages(
        [None] * B, batch.response_ids, messages, completion_mask, turn_per_func, outcome_per_func)
    assert torch.equal(turn_rewards, turn_scalar) and torch.equal(outcome_rewards, outcome_scalar)
    ours, _ = get_method("mt_grpo", estimator={"turn_coef": turn_coef}).credit(batch)
    # The code gives observation tokens a value that its completion mask zeroes in the loss; credo gives them 0.
    torch.testing.assert_close(ours.advantages, (theirs * completion_mask).double(), rtol=0, atol=1e-6)


# ------------------------------------------------------------------------------------- the per-turn-index bias
def mt_grpo_turn_credit(estimator):
    """`advantages(turn_rewards, turns)` for test_turns' exact expected gradient: the episodes as a batch (each turn
    one policy token, an observation token after every turn but the last; outcome 0, so the outcome term vanishes
    and the turn rewards carry the whole objective), credited by `estimator`, read back per turn."""

    def advantages(turn_rewards, turns):
        episodes = [Episode(0, [(1, 1 if k < n - 1 else 0) for k in range(n)], turn_rewards[i, :n].tolist(), 0.0)
                    for i, n in enumerate(turns.tolist())]
        credited, _ = estimator(episode_batch(episodes))
        out = torch.zeros(turn_rewards.shape, dtype=credited.advantages.dtype)
        for i, n in enumerate(turns.tolist()):
            out[i, :n] = credited.advantages[i, 0 : 2 * n : 2]  # turn k's token sits at 2k
        return out

    return advantages


@pytest.mark.parametrize("theta", [[0.0, 0.0, 0.0], [1.0, -0.5, 0.0], [-1.5, 2.0, 0.0]])
def test_the_general_form_is_unbiased_where_the_per_turn_index_normalisation_is_not(theta):
    """test_turns.py's tabular episode (at turn k the policy calls a tool, reward 0.2, or answers, reward 0.3, 0.6 or
    0.7; groups of 3): the exact expected gradient of `mt_grpo` with `turns="all"` is `turn_coef` times the true
    gradient of the expected total reward. verl #7244's construction, which credits each turn with
    `sum_{k >= t}^{T_i} (r_{i,k} - mu_k)` over the turn-index means, put in its place, misses it: this test fails if
    the estimator's turn baseline is the per-index one."""
    theta = torch.tensor(theta, requires_grad=True)
    true, ours = expected_gradients(theta, mt_grpo_turn_credit(MTGRPOAdvantage(turns="all", turn_coef=0.5)))
    torch.testing.assert_close(ours.double(), 0.5 * true.double(), rtol=0, atol=1e-6)
    _, per_index = expected_gradients(theta, lambda r, t: 0.5 * per_index_advantages(r, t))
    assert (per_index - 0.5 * true).abs().max() > 0.005


# -------------------------------------------------------------------------------------------------------- intent
def credit_of(method, batch):
    """(B, T) the credit `-B dLoss/dlogp` of the method's update on policy (`logp = old_logp`)."""
    credited, _ = method.credit(batch)
    logp = credited.old_logp.clone().requires_grad_()
    (grad,) = torch.autograd.grad(method.policy_loss(logp, credited).loss, logp, allow_unused=True,
                                  materialize_grads=True)
    return -grad * batch.size


def turn_credit(credit, batch, row, turn):
    """The credit of one turn's trained tokens (all equal: every token of a turn has its turn's advantage)."""
    tokens = credit[row][batch.loss_mask[row] & (batch.thought_ids[row] == turn)]
    assert tokens.numel() and torch.allclose(tokens, tokens[0].expand_as(tokens), rtol=1e-12, atol=1e-12)
    return float(tokens[0])


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("seed", range(20))
def test_a_turn_rewarded_above_its_peers_is_credited_above_them(seed, form):
    """In a group of episodes alike but for turn t's reward (same turns, outcome and other turn rewards), turn t's
    credit rises with its reward, strictly (v1 reads the first turn only: t = 0 there, later turns tie); the
    general form's earlier turns rise with it (their return-to-go holds it), its later ones tie. Other groups are
    random."""
    rng = random.Random(seed)
    template = random_episodes(seed, group_sizes=[1], min_turns=1 if form == "first" else 2)[0]
    t = 0 if form == "first" else rng.randrange(len(template.turns))
    size = rng.randint(2, 6)
    rewards = sorted(rng.sample(range(-20, 21), size))
    alike = [Episode(template.group, template.turns, [r / 10 if k == t else x for k, x in
                                                       enumerate(template.turn_rewards)], template.outcome)
             for r in rewards]
    others = [e for e in random_episodes(seed + 1000) if e.group != template.group]
    batch = episode_batch(alike + others, seed=seed)
    credit = credit_of(get_method("mt_grpo", estimator={"turns": form, "turn_coef": rng.choice([0.5, 1.0])}), batch)
    for k in range(len(template.turns)):
        per_row = [turn_credit(credit, batch, i, k) for i in range(size)]
        if k <= t:  # the turn itself, and (general form) the turns whose return-to-go holds its reward
            assert all(a < b for a, b in zip(per_row, per_row[1:])), (k, per_row)
        else:
            assert max(per_row) - min(per_row) < 1e-12, (k, per_row)
    if form == "first" and len(template.turns) > 1:  # v1 ignores a later turn's reward
        later = [Episode(e.group, e.turns, [x if k != 1 else rng.uniform(-1, 1) for k, x in enumerate(e.turn_rewards)],
                         e.outcome) for e in alike]
        assert torch.equal(credit_of(get_method("mt_grpo"), episode_batch(later + others, seed=seed)),
                           credit_of(get_method("mt_grpo"), batch))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("seed", range(20))
def test_turn_rewards_never_reach_another_group(seed, form):
    batch = episode_batch(random_episodes(seed), seed=seed)
    method = get_method("mt_grpo", estimator={"turns": form})
    group = batch.group_id[random.Random(seed).randrange(batch.size)]
    inside = (batch.group_id == group).unsqueeze(1)
    per_turn = torch.randn(batch.size, batch.width, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    changed = per_turn.gather(1, batch.thought_ids.clamp(min=0))  # new rewards, one per turn, for the group's episodes
    moved = batch.replace(turn_reward=torch.where(inside & batch.response_mask, changed, batch.turn_reward))
    assert not torch.equal(moved.turn_reward, batch.turn_reward)
    a, b = method.credit(batch)[0].advantages, method.credit(moved)[0].advantages
    outside = ~inside.squeeze(1)
    assert torch.equal(a[outside], b[outside])
    # The credit of another group's tokens moves only through the loss's token mean, which turn rewards leave alone.
    assert torch.equal(credit_of(method, batch)[outside], credit_of(method, moved)[outside])


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("seed", range(20))
def test_observation_tokens_get_nothing(seed, form):
    batch = episode_batch(random_episodes(seed), pad=2, seed=seed)
    method = get_method("mt_grpo", estimator={"turns": form})
    credited, _ = method.credit(batch)
    observations = batch.response_mask & ~batch.loss_mask
    assert observations.any() or batch.size < 3
    assert not credited.advantages[~batch.loss_mask].any()
    assert not credit_of(method, batch)[~batch.loss_mask].any()
