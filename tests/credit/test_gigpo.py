"""GiGPO, group-in-group policy optimisation (`gigpo`, `credo.credit.gigpo`, arXiv 2505.10978).

A loop reference written from the paper's equations (3, 5, 6, 7, 8) with credo's conventions; identities (one-turn
episodes give (1 + omega) x GRPO, omega = 0 gives the episode advantage alone); the public code (verl-agent's
`gigpo/core_gigpo.py`, ported below) on identical tensors laid out as its step rows; the places credo departs from it
(groups of equal values, a lone episode), shown apart; intent (within an anchor state a turn followed by success
outranks one followed by failure, whatever else differs; a lone state gives no step credit; no credit crosses
prompts; observations get none; a failure gains nothing without turn rewards); and the layout of real episodes
(`Episodes.token_fields`)."""

from __future__ import annotations

import math
import uuid
from collections import defaultdict

import numpy as np
import pytest
import torch
from episodes import episode_batch, turns_of

from credo.batch import RolloutBatch
from credo.credit import GroupAdvantage
from credo.credit.gigpo import GiGPOAdvantage
from credo.credit.turns import discounted_returns
from credo.losses import PPOClipLoss
from credo.rollout.episodes import Episodes
from credo.tasks.environment import TurnOutcome

MODES = ("mean_norm", "mean_std_norm")


# --------------------------------------------------------------------------------------------------------------------
# The loop reference: the paper's equations, episode by episode and turn by turn


def loop_gigpo(batch: RolloutBatch, *, step_weight=1.0, gamma=1.0, mode="mean_norm", episode_stats="steps",
               lone_episode="zero", std_ddof=1, eps=1e-6) -> torch.Tensor:
    episodes = turns_of(batch)
    rewards = {b: [turn["reward"] for turn in turns] for b, turns in enumerate(episodes)}
    for b, turns in enumerate(episodes):
        if turns:
            rewards[b][-1] += float(batch.rewards[b])  # the outcome on the last turn

    def normalised(value: float, pool: list[float], lone: float) -> float:
        if len(pool) == 1:
            return lone
        if max(pool) == min(pool):
            return 0.0
        mean = sum(pool) / len(pool)
        if mode == "mean_norm":
            return value - mean
        std = math.sqrt(sum((x - mean) ** 2 for x in pool) / (len(pool) - std_ddof))
        return (value - mean) / (std + eps)

    out = torch.zeros(batch.size, batch.width, dtype=torch.float64)
    for g in batch.group_id.unique().tolist():
        members = [b for b in range(batch.size) if int(batch.group_id[b]) == g and episodes[b]]
        total = {b: sum(rewards[b]) for b in members}  # R_i = sum_t r_{i,t}
        pool = [total[b] for b in members for _ in (episodes[b] if episode_stats == "steps" else [None])]
        episode = {}
        for b in members:  # Eq. 3
            lone = 0.0 if lone_episode == "zero" else total[b] / (1 + eps) if mode == "mean_std_norm" else total[b]
            episode[b] = normalised(total[b], pool, lone)
        returns = {(b, t): sum(gamma ** (k - t) * rewards[b][k] for k in range(t, len(rewards[b])))
                   for b in members for t in range(len(rewards[b]))}  # Eq. 5
        anchor_groups = defaultdict(list)  # Eq. 6: the turns of this prompt taken from one state
        for b in members:
            for t, turn in enumerate(episodes[b]):
                anchor_groups[turn["anchor"]].append((b, t))
        for b in members:
            for t, turn in enumerate(episodes[b]):
                pool_s = [returns[item] for item in anchor_groups[turn["anchor"]]]
                step = normalised(returns[(b, t)], pool_s, 0.0)  # Eq. 7
                for token in turn["tokens"]:
                    out[b, token] = episode[b] + step_weight * step  # Eq. 8
    return out


SWITCHES = [{}, {"mode": "mean_std_norm"}, {"gamma": 0.95}, {"gamma": 0.5, "mode": "mean_std_norm", "step_weight": 0.3},
            {"episode_stats": "episodes"}, {"episode_stats": "episodes", "mode": "mean_std_norm", "gamma": 0.9},
            {"lone_episode": "score"}, {"lone_episode": "score", "mode": "mean_std_norm", "episode_stats": "episodes"},
            {"std_ddof": 0, "mode": "mean_std_norm", "step_weight": 2.0}, {"step_weight": 0.0, "gamma": 0.0}]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("switches", SWITCHES)
def test_matches_the_loop_reference(seed, switches):
    batch = episode_batch(seed, outcome=["binary", "uniform", "dyadic"][seed % 3], empty_rows=seed % 4 == 0,
                          sizes=(1, 1, 3) if seed % 5 == 0 else None)
    credited, metrics = GiGPOAdvantage(**switches)(batch)
    torch.testing.assert_close(credited.advantages, loop_gigpo(batch, **switches), rtol=1e-10, atol=1e-12)
    assert credited.loss_mask is batch.loss_mask and set(metrics) >= {"credit/anchor_group_size",
                                                                      "credit/anchor_singleton_frac"}


def test_discounted_returns_are_the_running_sums():
    rewards = torch.tensor([[1.0, 0.0, 2.0], [0.5, -1.0, 0.0]], dtype=torch.float64)
    for gamma in (0.0, 0.5, 0.95, 1.0):
        running, want = torch.zeros(2, dtype=torch.float64), torch.zeros_like(rewards)
        for t in reversed(range(3)):
            running = rewards[:, t] + gamma * running
            want[:, t] = running
        torch.testing.assert_close(discounted_returns(rewards, gamma), want)


def test_the_metrics_count_anchor_groups_and_lone_states():
    # One prompt: two episodes; turn 0 of both from state 0, turn 1 of the first from state 1, of the second from 2.
    batch = RolloutBatch(response_ids=torch.zeros(2, 4, dtype=torch.long),
                         response_mask=torch.ones(2, 4, dtype=torch.bool), group_id=torch.tensor([0, 0]),
                         rewards=torch.tensor([1.0, 0.0]), old_logp=torch.zeros(2, 4),
                         thought_ids=torch.tensor([[0, 0, 1, 1]] * 2),
                         thought_wrong=torch.zeros(2, 4, dtype=torch.bool),
                         turn_anchor=torch.tensor([[0, 0, 1, 1], [0, 0, 2, 2]]), turn_reward=torch.zeros(2, 4))
    credited, metrics = GiGPOAdvantage()(batch)
    assert metrics["credit/anchor_group_size"] == pytest.approx(4 / 3)
    assert metrics["credit/anchor_singleton_frac"] == pytest.approx(2 / 3)
    assert metrics["credit/turns_mean"] == 2.0
    # mean_norm: A_E = +-0.5 (mean 0.5 over 4 step rows), A_S = +-0.5 on the shared state, 0 on the lone ones
    assert credited.advantages.tolist() == [[1.0, 1.0, 0.5, 0.5], [-1.0, -1.0, -0.5, -0.5]]


def test_a_batch_without_turns_is_a_clear_error():
    batch = episode_batch(0)
    with pytest.raises(ValueError, match=r"^gigpo needs RolloutBatch.turn_anchor, turn_reward \(a task with an "
                                         r"environment: multi-turn episodes\), but the batch has none$"):
        GiGPOAdvantage()(batch.replace(turn_anchor=None, turn_reward=None))
    for bad in ({"mode": "std"}, {"episode_stats": "rows"}, {"gamma": 1.5}, {"lone_episode": "raw"}):
        with pytest.raises(ValueError, match="GiGPOAdvantage"):
            GiGPOAdvantage(**bad)


# --------------------------------------------------------------------------------------------------------------------
# Identities


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("omega", [0.0, 0.5, 1.0])
def test_one_turn_episodes_give_one_plus_omega_times_grpo(seed, mode, omega):
    """Every episode one turn, taken from its prompt's initial state: the anchor group is the episode group and the
    step return the episode's return, so A = (1 + omega) A_GRPO, with verl's GRPO conventions (unbiased std, eps 1e-6
    outside it) under mean_std_norm and Dr. GRPO's (`scale="none"`) under mean_norm; a group of one gets 0 in both
    (credo's `lone_episode="zero"`)."""
    batch = episode_batch(seed, one_turn=True, turn_rewards="none", outcome=["binary", "uniform"][seed % 2])
    grpo = GroupAdvantage(std_ddof=1, eps=1e-6) if mode == "mean_std_norm" else GroupAdvantage(scale="none")
    want = (1 + omega) * grpo(batch)[0].advantages
    for stats in ("steps", "episodes"):
        got = GiGPOAdvantage(mode=mode, step_weight=omega, episode_stats=stats, gamma=0.9)(batch)[0].advantages
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("mode", MODES)
def test_omega_zero_is_the_episode_advantage_alone(seed, mode):
    """omega = 0: every policy token of an episode gets its episode advantage, which under `episode_stats="episodes"`
    is GRPO's (verl's conventions) on the episode returns `R_i + sum_t turn_reward`, whatever the anchors."""
    batch = episode_batch(seed)
    returns = batch.rewards + torch.tensor([sum(turn["reward"] for turn in turns) for turns in turns_of(batch)],
                                           dtype=torch.float64)
    ended = torch.tensor([bool(turns) for turns in turns_of(batch)])
    grpo = GroupAdvantage(std_ddof=1, eps=1e-6) if mode == "mean_std_norm" else GroupAdvantage(scale="none")
    want = grpo(batch.replace(rewards=returns))[0].advantages * batch.loss_mask
    got = GiGPOAdvantage(mode=mode, step_weight=0.0, episode_stats="episodes")(batch)[0].advantages
    torch.testing.assert_close(got[ended], want[ended], rtol=1e-12, atol=1e-12)
    anchors = batch.replace(turn_anchor=torch.where(batch.response_mask, 7, -1))  # one state for every turn
    torch.testing.assert_close(GiGPOAdvantage(mode=mode, step_weight=0.0, episode_stats="episodes")(anchors)[0]
                               .advantages, got, rtol=0, atol=0)


def test_steps_and_episodes_statistics_differ_by_the_episodes_lengths():
    """The code's step-row statistics count a success of one turn once and a failure of three turns three times:
    mean 1/4, so A_E = +3/4 and -1/4; the paper's Eq. 3 counts each episode once: +-1/2."""
    batch = RolloutBatch(response_ids=torch.zeros(2, 3, dtype=torch.long),
                         response_mask=torch.tensor([[True, False, False], [True, True, True]]),
                         group_id=torch.tensor([0, 0]), rewards=torch.tensor([1.0, 0.0]), old_logp=torch.zeros(2, 3),
                         thought_ids=torch.tensor([[0, -1, -1], [0, 1, 2]]),
                         thought_wrong=torch.zeros(2, 3, dtype=torch.bool),
                         turn_anchor=torch.tensor([[0, -1, -1], [1, 2, 3]]), turn_reward=torch.zeros(2, 3))
    steps = GiGPOAdvantage(step_weight=0.0)(batch)[0].advantages
    episodes = GiGPOAdvantage(step_weight=0.0, episode_stats="episodes")(batch)[0].advantages
    assert steps.tolist() == [[0.75, 0.0, 0.0], [-0.25, -0.25, -0.25]]
    assert episodes.tolist() == [[0.5, 0.0, 0.0], [-0.5, -0.5, -0.5]]


# --------------------------------------------------------------------------------------------------------------------
# The public code: langfengQ/verl-agent `gigpo/core_gigpo.py`, read at its exact mirror vanzll/verl-agent, commit
# d0b97244c50f17fb43a6ef0a15bca0e95a044ff7 ("code adjustment & fix prompt agent bug (#183)", 2025-10-15). The
# functions below are that file's, verbatim but for: `DataProto` replaced by a stand-in with the two attributes
# `compute_step_discounted_returns` reads, `build_step_group`'s similarity branch and summary left out (off by
# default), its print dropped, and `compute_gigpo_outcome_advantage` passing `compute_mean_std_cross_steps` through
# to `episode_norm_reward` (where the code fixes it at its default, True) so that both statistics can be run.
# Apache License 2.0, Copyright 2025 Nanyang Technological University (NTU), Singapore and the verl-agent team.


class DataProto:
    def __init__(self, non_tensor_batch: dict, batch: dict):
        self.non_tensor_batch, self.batch = non_tensor_batch, batch


def to_hashable(x):
    """Convert an object into a hashable type (used for clustering/grouping)."""
    if isinstance(x, (int, float, str, bool)):
        return x
    elif isinstance(x, (np.integer, np.floating)):
        return x.item()
    elif isinstance(x, np.ndarray):
        return tuple(x.flatten())
    elif isinstance(x, (list, tuple)):
        return tuple(to_hashable(e) for e in x)
    elif isinstance(x, dict):
        return tuple(sorted((k, to_hashable(v)) for k, v in x.items()))
    else:
        raise TypeError(f"Unsupported type: {type(x)}")


def compute_step_discounted_returns(batch: DataProto, gamma: float):
    rewards = batch.non_tensor_batch['rewards'].astype(np.float32)
    traj_uids = batch.non_tensor_batch['traj_uid']
    active_masks = batch.non_tensor_batch['active_masks'].astype(np.float32)
    returns_by_traj = {}
    unique_traj_uids = np.unique(traj_uids)
    for uid in unique_traj_uids:
        # Get indices for this trajectory
        traj_indices = np.where(traj_uids == uid)[0]

        # Extract rewards and masks for this trajectory
        traj_rewards = rewards[traj_indices]
        traj_active_masks = active_masks[traj_indices]
        assert traj_active_masks.all(), "active_masks should be all 1s for the same trajectory"

        # Calculate returns
        traj_returns = np.zeros_like(traj_rewards)
        running_return = 0

        # Calculate returns from the end to the start
        for t in reversed(range(len(traj_rewards))):
            running_return = traj_rewards[t] + gamma * running_return
            traj_returns[t] = running_return

        # Store the results
        returns_by_traj[uid] = traj_returns

    # Recombine the returns into the original batch order
    all_returns = np.zeros_like(rewards)
    for i, uid in enumerate(traj_uids):
        traj_indices = np.where(traj_uids == uid)[0]
        idx_in_traj = np.where(traj_indices == i)[0][0]  # Find position of i in its trajectory
        all_returns[i] = returns_by_traj[uid][idx_in_traj]

    all_returns = torch.tensor(all_returns, dtype=torch.float32, device=batch.batch['input_ids'].device)
    return all_returns


def compute_gigpo_outcome_advantage(token_level_rewards: torch.Tensor,
                                    step_rewards: torch.Tensor,
                                    response_mask: torch.Tensor,
                                    anchor_obs: np.array,
                                    index: np.array,
                                    traj_index: np.array,
                                    epsilon: float = 1e-6,
                                    step_advantage_w: float = 1.0,
                                    mode: str = "mean_norm",
                                    compute_mean_std_cross_steps: bool = True,  # credo's test: passed through
                                    ):
    if mode == "mean_std_norm":
        remove_std = False
    elif mode == "mean_norm":
        remove_std = True
    else:
        raise ValueError(f"Unknown mode: {mode}")

    # Compute episode relative advantages (Eq. 3 in the paper).
    episode_advantages = episode_norm_reward(token_level_rewards, response_mask, index, traj_index, epsilon, remove_std,
                                             compute_mean_std_cross_steps)

    # Anchor state grouping (Eq. 6 in the paper).
    step_group_uids = build_step_group(anchor_obs, index)

    # Compute step relative advantages (Eq. 7 in the paper).
    step_advantages = step_norm_reward(step_rewards, response_mask, step_group_uids, epsilon, remove_std)

    # Compute joint advantages (Eq. 8 in the paper).
    scores = episode_advantages + step_advantage_w * step_advantages
    return scores, scores


def episode_norm_reward(token_level_rewards: torch.Tensor,
                        response_mask: torch.Tensor,
                        index: np.array,
                        traj_index: np.array,
                        epsilon: float = 1e-6,
                        remove_std: bool = True,
                        compute_mean_std_cross_steps: bool = True,
                        ):
    response_length = token_level_rewards.shape[-1]
    scores = token_level_rewards.sum(dim=-1)

    id2score = defaultdict(list)
    id2mean = {}
    id2std = {}
    seen_pairs = set()
    with torch.no_grad():
        bsz = scores.shape[0]
        for i in range(bsz):
            if (index[i], traj_index[i]) in seen_pairs:
                continue
            id2score[index[i]].append(scores[i])
            if not compute_mean_std_cross_steps:
                seen_pairs.add((index[i], traj_index[i]))

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
            if remove_std:
                scores[i] = scores[i] - id2mean[index[i]]
            else:
                scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
        episode_advantages = scores.unsqueeze(-1).tile([1, response_length]) * response_mask

    return episode_advantages


def build_step_group(anchor_obs: np.array, index: np.array):
    # Initialize the result array with placeholder values
    step_group_uids = np.empty(len(anchor_obs), dtype=object)

    # Get unique indices
    unique_indices = np.unique(index)

    # Process each unique index
    for idx in unique_indices:
        # Get all observations for this index using np.where
        indices = np.where(index == idx)[0]
        obs_group = anchor_obs[indices]

        # Create clusters for identical observations
        clusters = defaultdict(list)
        for i, obs in enumerate(obs_group):
            clusters[to_hashable(obs)].append(indices[i])  # Store the original index position

        # Assign unique step_group_uid to each cluster
        for obs, original_indices in clusters.items():
            # Generate a UUID for this cluster
            uid = str(uuid.uuid4())

            # Assign the same step_group_uid to all elements in this cluster
            for original_idx in original_indices:
                step_group_uids[original_idx] = uid

    # Validate that all elements have been assigned a uid
    if None in step_group_uids or np.any(step_group_uids == None):  # noqa: E711 (the code's)
        missing_indices = np.where(step_group_uids == None)[0]  # noqa: E711
        raise ValueError(f"Failed to assign UIDs to all observations. Missing at indices: {missing_indices}")
    return step_group_uids


def step_norm_reward(step_rewards: torch.Tensor,
                     response_mask: torch.Tensor,
                     index: np.array,
                     epsilon: float = 1e-6,
                     remove_std: bool = True,
                     ):
    response_length = response_mask.shape[-1]
    scores = step_rewards.clone()

    id2score = defaultdict(list)
    id2mean = {}
    id2std = {}

    with torch.no_grad():
        bsz = scores.shape[0]
        for i in range(bsz):
            id2score[index[i]].append(scores[i])

        for idx in id2score:
            if len(id2score[idx]) == 1:
                id2mean[idx] = torch.mean(torch.tensor(id2score[idx]))
                id2std[idx] = torch.tensor(1.0)
            elif len(id2score[idx]) > 1:
                id2mean[idx] = torch.mean(torch.tensor(id2score[idx]))
                id2std[idx] = torch.std(torch.tensor([id2score[idx]]))
            else:
                raise ValueError(f"no score in prompt index: {idx}")
        for i in range(bsz):
            if remove_std:
                scores[i] = scores[i] - id2mean[index[i]]
            else:
                scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
        step_advantages = scores.unsqueeze(-1).tile([1, response_length]) * response_mask

    return step_advantages


# --- end of the ported code -------------------------------------------------------------------------------------------


def code_advantages(batch: RolloutBatch, *, step_weight=1.0, gamma=1.0, mode="mean_norm", episode_stats="steps",
                    eps=1e-6) -> torch.Tensor:
    """(B, T) the code's advantages of `batch`, laid out as verl-agent's step rows: one row per (episode, turn), in
    trajectory order, its response the turn's policy tokens; `index` the prompt's uid, `traj_uid` the episode's,
    `anchor_obs` the turn's state, `rewards` the environment's step reward (the turn's, plus the episode's outcome on
    its last), the episode's reward (their sum, `episode_rewards`) on each step row's last response token
    (`EpisodeRewardManager`). Each step row's advantage goes back onto that turn's tokens."""
    rows, step_rewards, anchors, index, traj = [], [], [], [], []
    masks, scores = [], []
    for b, turns in enumerate(turns_of(batch)):
        own = [turn["reward"] for turn in turns]
        if turns:
            own[-1] += float(batch.rewards[b])
        for turn, reward in zip(turns, own):
            mask = torch.zeros(batch.width, dtype=torch.float32)
            mask[turn["tokens"]] = 1.0
            score = torch.zeros(batch.width, dtype=torch.float32)
            score[max(turn["tokens"])] = float(np.float32(sum(np.float32(r) for r in own)))
            rows.append(b), step_rewards.append(reward), anchors.append(turn["anchor"])
            index.append(f"uid-{int(batch.group_id[b])}"), traj.append(f"traj-{b}")
            masks.append(mask), scores.append(score)
    proto = DataProto({"rewards": np.array(step_rewards), "traj_uid": np.array(traj, dtype=object),
                       "active_masks": np.ones(len(rows), dtype=bool)}, {"input_ids": torch.zeros(1)})
    returns = compute_step_discounted_returns(proto, gamma)
    advantages, _ = compute_gigpo_outcome_advantage(
        torch.stack(scores), returns, torch.stack(masks), np.array(anchors, dtype=object),
        np.array(index, dtype=object), np.array(traj, dtype=object), epsilon=eps, step_advantage_w=step_weight,
        mode=mode, compute_mean_std_cross_steps=episode_stats == "steps")
    out = torch.zeros(batch.size, batch.width, dtype=torch.float64)
    out.index_add_(0, torch.tensor(rows), advantages.double())
    return out


def equal_value_groups(batch: RolloutBatch, gamma: float, episode_stats: str) -> torch.Tensor:
    """(B, T) bool: the policy tokens whose episode group (two or more counted items) or anchor group (two or more
    turns) holds values that are all equal, where credo gives exactly 0 and the code its float32 round-off."""
    turns, out = turns_of(batch), torch.zeros(batch.size, batch.width, dtype=torch.bool)
    own = {b: [turn["reward"] for turn in t] for b, t in enumerate(turns)}
    for b in own:
        if own[b]:
            own[b][-1] += float(batch.rewards[b])
    for g in batch.group_id.unique().tolist():
        members = [b for b in range(batch.size) if int(batch.group_id[b]) == g and turns[b]]
        totals = [sum(own[b]) for b in members for _ in (turns[b] if episode_stats == "steps" else [None])]
        flat = len(totals) > 1 and max(totals) - min(totals) < 1e-12
        states = defaultdict(list)
        for b in members:
            for t, turn in enumerate(turns[b]):
                states[turn["anchor"]].append(sum(gamma ** (k - t) * own[b][k] for k in range(t, len(own[b]))))
        for b in members:
            for turn in turns[b]:
                pool = states[turn["anchor"]]
                if flat or (len(pool) > 1 and max(pool) - min(pool) < 1e-12):
                    out[b, turn["tokens"]] = True
    return out


CODE_SETTINGS = [{"mode": mode, "step_weight": omega, "gamma": gamma, "episode_stats": stats}
                 for mode in MODES for omega, gamma in ((1.0, 1.0), (0.5, 0.95), (2.0, 0.5), (0.0, 0.9))
                 for stats in ("steps", "episodes")]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("switches", CODE_SETTINGS, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_reproduces_verl_agents_gigpo_on_dyadic_values_everywhere(seed, switches):
    """Values exact in float32 (rewards in quarters, gamma 1 or 0.5 where the returns must stay exact): the code's
    float32 means of equal values are exact, so it agrees with credo on every token, groups of equal values, lone
    anchor states and lone episodes (the code's raw score: `lone_episode="score"`) included."""
    exact = switches["gamma"] in (1.0, 0.5)
    batch = episode_batch(seed, outcome="dyadic", turn_rewards="dyadic" if exact else "none",
                          sizes=(1, 4, 2, 1, 5) if seed % 2 else None, dtype=torch.float32)
    if not exact:
        batch = batch.replace(rewards=(batch.rewards > 0.5).float())  # binary outcomes: equal returns stay equal
    credo = GiGPOAdvantage(lone_episode="score", **switches)(batch)[0].advantages.double()
    code = code_advantages(batch, **switches)
    if not exact:  # gamma^k in float32: only where no group's values are all equal
        code = torch.where(equal_value_groups(batch, switches["gamma"], switches["episode_stats"]), credo, code)
    torch.testing.assert_close(credo, code, rtol=0, atol=2e-6)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("switches", CODE_SETTINGS, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_reproduces_verl_agents_gigpo_on_random_episodes(seed, switches):
    """Random turn rewards and outcomes, ragged turns, lone states and lone episodes: credo (`lone_episode="score"`)
    equals the code on every token, except under mean_std_norm in groups whose values are all equal, where credo gives
    exactly 0 and the code its float32 round-off divided by its round-off std plus eps."""
    batch = episode_batch(100 + seed, outcome=["uniform", "binary"][seed % 2], dtype=torch.float32,
                          sizes=(1, 3, 6) if seed % 3 == 0 else None)
    credo = GiGPOAdvantage(lone_episode="score", **switches)(batch)[0].advantages.double()
    code = code_advantages(batch, **switches)
    flat = equal_value_groups(batch, switches["gamma"], switches["episode_stats"])
    if switches["mode"] == "mean_norm":  # round-off undivided: within float32 rounding everywhere
        flat = torch.zeros_like(flat)
    torch.testing.assert_close(credo[~flat], code[~flat], rtol=0, atol=2e-6)


def test_where_credo_differs_from_the_code():
    """(1) A lone one-turn episode: the code gives its raw reward (mean 0, std 1), credo 0 unless
    `lone_episode="score"`. (2) A state whose turns all return the same non-dyadic value (three successes one turn
    before the end, gamma 0.9): the code's float32 mean misses the value, and under mean_std_norm that round-off is
    divided by its own round-off std plus 1e-6; credo gives exactly 0."""
    lone = RolloutBatch(response_ids=torch.zeros(1, 2, dtype=torch.long),
                        response_mask=torch.ones(1, 2, dtype=torch.bool), group_id=torch.tensor([0]),
                        rewards=torch.tensor([1.0]), old_logp=torch.zeros(1, 2),
                        thought_ids=torch.zeros(1, 2, dtype=torch.long),
                        thought_wrong=torch.zeros(1, 2, dtype=torch.bool),
                        turn_anchor=torch.zeros(1, 2, dtype=torch.long), turn_reward=torch.zeros(1, 2))
    assert code_advantages(lone).tolist() == [[1.0, 1.0]]
    assert GiGPOAdvantage()(lone)[0].advantages.tolist() == [[0.0, 0.0]]
    assert GiGPOAdvantage(lone_episode="score")(lone)[0].advantages.tolist() == [[1.0, 1.0]]

    n = 3  # three successes of two turns from the same states, and a failure from other states
    batch = RolloutBatch(response_ids=torch.zeros(n + 1, 2, dtype=torch.long),
                         response_mask=torch.ones(n + 1, 2, dtype=torch.bool),
                         group_id=torch.zeros(n + 1, dtype=torch.long),
                         rewards=torch.tensor([1.0] * n + [0.0]), old_logp=torch.zeros(n + 1, 2),
                         thought_ids=torch.tensor([[0, 1]] * (n + 1)),
                         thought_wrong=torch.zeros(n + 1, 2, dtype=torch.bool),
                         turn_anchor=torch.tensor([[0, 1]] * n + [[3, 4]]), turn_reward=torch.zeros(n + 1, 2))
    switches = {"mode": "mean_std_norm", "gamma": 0.9, "step_weight": 1.0}
    credo = GiGPOAdvantage(**switches)(batch)[0].advantages.double()
    code = code_advantages(batch, **switches)
    episode = credo[0, 0]  # the successes' episode advantage: their step advantages are 0 in credo
    assert torch.equal(credo[:n], torch.full((n, 2), float(episode), dtype=torch.float64))
    residue = (code[:n] - credo[:n]).abs()
    assert residue[:, 0].min() > 1e-2  # the first state: 0.9 three times, whose float32 mean is 0.8999999
    assert residue[:, 1].max() < 1e-6  # the second: the value 1, exact


# --------------------------------------------------------------------------------------------------------------------
# Intent


def step_credit(batch: RolloutBatch, **switches) -> torch.Tensor:
    """(B, T) the step term `omega A_S` of every token (GiGPO's advantages less those at omega = 0)."""
    return (GiGPOAdvantage(**switches)(batch)[0].advantages
            - GiGPOAdvantage(**{**switches, "step_weight": 0.0})(batch)[0].advantages)


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("mode", MODES)
def test_within_a_state_the_turn_followed_by_success_outranks_the_one_followed_by_failure(seed, mode):
    """Binary outcomes, no turn rewards: two turns taken from one state of one prompt, the first in an episode that
    succeeds and the second in one that fails, whatever their turn indices, episode lengths or other turns: the first
    gets the higher step advantage (strictly), and the higher total advantage wherever the episodes' lengths do not
    move the episode baseline (`episode_stats="episodes"`)."""
    batch = episode_batch(seed, sizes=(4, 5, 3), turn_rewards="none", states=3)
    gamma = [1.0, 0.95, 0.5][seed % 3]
    step = step_credit(batch, mode=mode, gamma=gamma)
    total = GiGPOAdvantage(mode=mode, gamma=gamma, episode_stats="episodes")(batch)[0].advantages
    turns, compared = turns_of(batch), 0
    for a in range(batch.size):
        for b in range(batch.size):
            if batch.group_id[a] != batch.group_id[b] or not (batch.rewards[a] == 1 and batch.rewards[b] == 0):
                continue
            for ta in turns[a]:
                for tb in turns[b]:
                    if ta["anchor"] == tb["anchor"]:
                        assert step[a, ta["tokens"][0]] > step[b, tb["tokens"][0]]
                        assert total[a, ta["tokens"][0]] > total[b, tb["tokens"][0]]
                        compared += 1
    assert compared


@pytest.mark.parametrize("seed", range(20))
def test_a_turn_from_a_state_no_other_turn_of_its_prompt_met_gets_no_step_credit(seed):
    batch = episode_batch(seed, states=12)
    step = step_credit(batch, mode=["mean_norm", "mean_std_norm"][seed % 2], gamma=0.9)
    lone = torch.zeros_like(batch.loss_mask)
    for b in range(batch.size):
        same_group = batch.group_id == batch.group_id[b]
        for t in batch.thought_ids[b][batch.response_mask[b]].unique().tolist():
            tokens = batch.loss_mask[b] & (batch.thought_ids[b] == t)
            state = batch.turn_anchor[b][tokens][0]
            others = (batch.turn_anchor[same_group] == state).sum() - (batch.turn_anchor[b] == state).sum()
            turns_here = batch.thought_ids[b][batch.turn_anchor[b] == state].unique().numel()
            if others == 0 and turns_here == 1:
                lone[b] |= tokens
    assert lone.any()
    assert (step[lone] == 0).all()


@pytest.mark.parametrize("seed", range(20))
def test_no_credit_crosses_prompts_even_where_their_anchor_numbers_coincide(seed):
    """Anchor numbers are shared between prompts (state 0 of every prompt is number 0): changing one prompt's
    rewards, turn rewards and anchors changes no other prompt's advantages."""
    batch = episode_batch(seed, sizes=(3, 4, 2), states=3)
    gen = torch.Generator().manual_seed(seed)
    for switches in ({}, {"mode": "mean_std_norm", "gamma": 0.9}, {"episode_stats": "episodes"}):
        before = GiGPOAdvantage(**switches)(batch)[0].advantages
        touched = batch.group_id == batch.group_id[0]
        changed = batch.replace(
            rewards=torch.where(touched, torch.rand(batch.size, generator=gen, dtype=torch.float64), batch.rewards),
            turn_reward=torch.where(touched.unsqueeze(1) & batch.response_mask,
                                    torch.rand(batch.turn_reward.shape, generator=gen, dtype=torch.float64),
                                    batch.turn_reward),
            turn_anchor=torch.where(touched.unsqueeze(1) & batch.response_mask, 0, batch.turn_anchor))
        after = GiGPOAdvantage(**switches)(changed)[0].advantages
        assert torch.equal(after[~touched], before[~touched])
        assert not torch.equal(after[touched], before[touched])


@pytest.mark.parametrize("seed", range(10))
def test_observations_get_no_advantage_and_no_gradient(seed):
    batch = episode_batch(seed)
    credited, _ = GiGPOAdvantage(mode="mean_std_norm", gamma=0.95)(batch)
    observation = batch.response_mask & ~batch.loss_mask
    assert observation.any() and (credited.advantages[observation] == 0).all()
    assert (credited.advantages[~batch.response_mask] == 0).all()
    logp = (batch.old_logp + 0.1).requires_grad_()
    (grad,) = torch.autograd.grad(PPOClipLoss(agg="token_mean")(logp, credited).loss, logp)  # the method's loss
    assert (grad[observation] == 0).all() and (grad[batch.loss_mask] != 0).any()


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("switches", [{}, {"mode": "mean_std_norm", "gamma": 0.95}, {"episode_stats": "episodes"}])
def test_without_turn_rewards_a_failure_gains_nothing(seed, switches):
    """Binary outcomes, no turn rewards: a failed episode's return and every step return are the least of their
    groups, so no token of a failure gets a positive advantage, and one with a success in its group loses."""
    batch = episode_batch(seed, turn_rewards="none")
    adv = GiGPOAdvantage(**switches)(batch)[0].advantages
    failed = (batch.rewards == 0).unsqueeze(1) & batch.loss_mask
    assert (adv[failed] <= 0).all()
    for b in range(batch.size):
        if batch.rewards[b] == 0 and (batch.rewards[batch.group_id == batch.group_id[b]] == 1).any():
            assert (adv[b][batch.loss_mask[b]] < 0).all()


# --------------------------------------------------------------------------------------------------------------------
# Real episodes' layout


def test_on_an_episodes_token_fields_each_turn_gets_its_state_s_credit():
    """Two calculator-like episodes of one prompt, built as the episode sampler builds them: both open from state
    "0:12"; the first then calls right ("1:17") and succeeds, the second calls wrong ("1:20"), checks (same state)
    and fails. Its opening turn is credited against the first's; its check and wrong call states are its own."""
    policy_first, policy_second = [10, 11, 12], [20, 21]
    episodes = Episodes(
        prompts=[[1], [1]],
        tokens=[policy_first + [90, 91] + [13, 14], policy_second + [92] + [22] + [93] + [23]],
        policy=[[True] * 3 + [False] * 2 + [True] * 2, [True] * 2 + [False] + [True] + [False] + [True]],
        turns=[[0, 0, 0, -1, -1, 1, 1], [0, 0, -1, 1, -1, 2]],
        outcomes=[[TurnOutcome("obs", False, {}), TurnOutcome("", True, {}, reward=1.0)],
                  [TurnOutcome("obs", False, {}), TurnOutcome("obs", False, {}),
                   TurnOutcome("", True, {}, reward=0.0)]],
        anchors=[["0:12", "1:17"], ["0:12", "1:20", "1:20"]], rewards=[1.0, 0.0], truncated=[False, False])
    fields = episodes.token_fields(7)
    mask = torch.tensor([[True] * 7, [True] * 6 + [False]])
    batch = RolloutBatch(response_ids=torch.zeros(2, 7, dtype=torch.long), response_mask=mask,
                         group_id=torch.tensor([0, 0]), rewards=torch.tensor(episodes.rewards),
                         old_logp=torch.zeros(2, 7), **{k: v for k, v in fields.items() if k != "thought_judged"})
    adv = GiGPOAdvantage()(batch)[0].advantages
    # Episode: mean over 5 step rows = 2/5, A_E = 3/5 and -2/5. Step: the opening state's returns 1 and 0 (+-1/2);
    # state "1:17" alone (0); state "1:20" holds the second episode's call and check, both returning 0 (0).
    want = torch.tensor([[1.1, 1.1, 1.1, 0, 0, 0.6, 0.6], [-0.9, -0.9, 0, -0.4, 0, -0.4, 0]])
    torch.testing.assert_close(adv, want)
