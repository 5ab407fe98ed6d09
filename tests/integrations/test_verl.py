"""credo inside verl 0.9.1: registered names, numbers against verl's own GRPO and PPO loss, the agent loops.

verl must be importable (`pip install 'credo[verl]'`, or on a CPU machine `pip install --no-deps verl==0.9.1`
plus its light dependencies, see docs/guides/verl.md): without it every test here fails, none is skipped.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scripted import ScriptedPolicy, chain_of, wrong_at

from credo.batch import RolloutBatch
from credo.config import load_config
from credo.credit import GroupAdvantage, RevisionAdvantage, suffix_mask
from credo.losses import PPOClipLoss
from credo.methods import METHODS, get_method
from credo.rollout.groups import ProblemStream
from credo.rollout.revise import TESTBED_REVISE_PROMPT
from credo.rollout.samplers.resets import sample_resets
from credo.rollout.samplers.revisions import sample_revisions
from credo.tasks import ArithTask
from credo.tasks.arith import solution

try:
    import verl
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.trainer.ppo import core_algos
    from verl.workers.config import ActorConfig
    from verl.workers.rollout.replica import TokenOutput
except ImportError as error:  # fail loudly: this file tests the integration, it has nothing to skip to
    pytest.fail(f"verl is not importable ({error}); install it: pip install 'credo[verl]' (docs/guides/verl.md)",
                pytrace=False)

from credo.integrations import verl as cv
from credo.integrations.verl_agent import ResetAgentLoop, RevisionAgentLoop

GROUP_NAMES = ["credo_grpo", "credo_dr_grpo", "credo_dapo", "credo_gspo", "credo_reinforce", "credo_grpo_lambda",
               "credo_p_trace"]
AGG = {"token_mean": "token-mean", "seq_mean_token_mean": "seq-mean-token-mean",
       "seq_mean_token_sum_norm": "seq-mean-token-sum-norm"}
TASK = ArithTask()


@pytest.fixture(scope="module", autouse=True)
def registered():
    return cv.register()


def test_verl_is_the_pinned_release():
    assert verl.__version__ == cv.VERL_VERSION == "0.9.1"


def test_every_name_resolves_through_verls_own_getters_and_register_is_idempotent(registered):
    assert cv.register() == registered == list(cv.verl_names())  # a second call changes nothing
    for name, method in cv.verl_names().items():
        assert core_algos.get_adv_estimator_fn(name).credo_method == method
        assert core_algos.get_policy_loss_fn(name).credo_method == method
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    assert _agent_loop_registry["credo_srpo"] == {"_target_": "credo.integrations.verl_agent.ResetAgentLoop",
                                                  "method": "srpo"}
    assert _agent_loop_registry["credo_ibpo"]["_target_"].endswith("RevisionAgentLoop")
    assert "credo_grpo" not in _agent_loop_registry  # i.i.d. groups: verl's own single_turn_agent


def test_the_agent_loops_follow_what_each_sampler_declares_not_its_name(monkeypatch):
    """The adapter reads `Sampler.verl_agent_loop` only: every class a sampler names is one of credo's agent loops
    and runs that sampler, and a sampler renamed keeps its loop."""
    from credo.integrations import verl_agent
    from credo.rollout.samplers import SAMPLERS

    declared = {name: SAMPLERS.get(name).verl_agent_loop for name in SAMPLERS}
    assert {name for name, loop in declared.items() if loop} == {"resets", "revisions"}
    for loop in filter(None, declared.values()):
        assert issubclass(getattr(verl_agent, loop), verl_agent.CredoAgentLoop)
    method = get_method("srpo")
    monkeypatch.setattr(type(method.sampler), "name", "renamed")
    assert cv.refusal(method) is None  # carried by its agent loop, which a name-keyed adapter would not find
    assert f"{cv.AGENT_LOOP_MODULE}.ResetAgentLoop" in cv.agent_loop_targets()


def test_names_conflicts_and_unsupported_methods_are_errors():
    cv.register_method("credo_test_p90", "p_trace", loss={"decay": 0.9})
    cv.register_method("credo_test_p90", "p_trace", loss={"decay": 0.9})  # same: nothing happens
    with pytest.raises(ValueError, match="already registered"):
        cv.register_method("credo_test_p90", "p_trace", loss={"decay": 0.5})
    with pytest.raises(ValueError, match="entropies"):
        cv.register_method("credo_test_s", "s_trace")
    with pytest.raises(ValueError, match="step checker"):
        cv.register_method("credo_test_o", "oracle_blame")
    with pytest.raises(ValueError, match="use_kl_loss"):
        cv.register_method("credo_test_kl", "grpo", loss={"kl_beta": 0.1})
    with pytest.raises(ValueError, match="not credo's"):
        cv.register_method("grpo_vectorized", "grpo")


def test_registering_in_every_verl_process_via_verl_use_external_modules():
    code = ("import verl.trainer.ppo.core_algos as c; "
            "print(c.get_policy_loss_fn('credo_srpo').credo_method, c.get_adv_estimator_fn('credo_p_trace').credo_method)")
    env = dict(os.environ, VERL_USE_EXTERNAL_MODULES="credo.integrations.verl_plugin")
    out = subprocess.run([sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["srpo", "p_trace"]


# --------------------------------------------------------------------------------------------------
# Advantage estimators
def verl_inputs():
    """Groups of 4, 3 and 1 rows (uids in mixed order), responses of lengths 5, 3, ..., reward on the last token."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.0, 1.0, 1.0])
    index = np.array(["a", "b", "a", "a", "b", "a", "b", "c"], dtype=object)
    lengths = torch.tensor([5, 3, 6, 2, 4, 6, 1, 3])
    T = 6
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).float()  # (B, T)
    token_rewards = torch.zeros(8, T)
    token_rewards[torch.arange(8), lengths - 1] = rewards
    return token_rewards, mask, index, rewards


def credo_batch(rewards, mask, index):
    _, group = np.unique(index, return_inverse=True)
    B, T = mask.shape
    return RolloutBatch(response_ids=torch.zeros(B, T, dtype=torch.long), response_mask=mask.bool(),
                        group_id=torch.as_tensor(group, dtype=torch.long), rewards=rewards,
                        old_logp=torch.zeros(B, T))


@pytest.mark.parametrize("name", GROUP_NAMES)
def test_registered_estimators_give_credos_advantages(name):
    token_rewards, mask, index, rewards = verl_inputs()
    adv, returns = core_algos.get_adv_estimator_fn(name)(
        token_level_rewards=token_rewards, response_mask=mask, index=index, config=None)
    expected, _ = get_method(cv.verl_names()[name]).credit(credo_batch(rewards, mask, index))
    torch.testing.assert_close(adv, expected.advantages, rtol=0, atol=1e-7)
    assert torch.equal(adv, returns)
    # group "a" = rows 0, 2, 3, 5 with rewards 1, 0, 1, 0: mean 1/2, population std 1/2 -> +-1 (up to eps);
    # Dr. GRPO subtracts the mean only -> +-1/2; the single-row group "c" gets 0.
    scale = 0.5 if name == "credo_dr_grpo" else 1.0
    torch.testing.assert_close(adv[[0, 2, 3, 5], 0], scale * torch.tensor([1.0, -1.0, 1.0, -1.0]), atol=1e-5, rtol=0)
    assert adv[7].abs().sum() == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_advantages_keep_the_dtype_of_verls_rewards(dtype):
    token_rewards, mask, index, _ = verl_inputs()
    token_rewards = token_rewards.to(dtype) * (1 / 3)  # rewards 1/3, 1/6, ...: not exact in float32
    verl_adv, _ = core_algos.compute_grpo_outcome_advantage(token_rewards, mask, index)
    cv.register(conventions="verl")
    adv, returns = core_algos.get_adv_estimator_fn("credo_grpo_verl")(
        token_level_rewards=token_rewards, response_mask=mask, index=index)
    assert adv.dtype == returns.dtype == dtype
    torch.testing.assert_close(adv, verl_adv, rtol=0, atol=1e-12 if dtype == torch.float64 else 1e-6)


def test_verls_grpo_and_credos_grpo_agree_with_verls_conventions():
    token_rewards, mask, index, rewards = verl_inputs()
    verl_adv, _ = core_algos.compute_grpo_outcome_advantage(token_rewards, mask, index, epsilon=1e-6)
    verl_conventions = GroupAdvantage(std_ddof=1, eps=1e-6)
    credo_adv = verl_conventions(credo_batch(rewards, mask, index))[0].advantages
    multi = torch.tensor([True] * 7 + [False])  # rows of groups with at least two rows
    torch.testing.assert_close(credo_adv[multi], verl_adv[multi], rtol=0, atol=1e-6)
    # credo's default is the population std (ddof 0): on group "a" (4 rows) its advantages are verl's times
    # sample std / population std = sqrt(4 / 3)
    default = GroupAdvantage()(credo_batch(rewards, mask, index))[0].advantages
    torch.testing.assert_close(default[0, 0] / verl_adv[0, 0], torch.tensor((4 / 3) ** 0.5), rtol=1e-5, atol=0)
    # a group of one row: verl gives A = r (mean 0, std 1), credo 0 (a zero-variance group)
    assert verl_adv[7, 0] == pytest.approx(1.0 / (1.0 + 1e-6)) and credo_adv[7].abs().sum() == 0
    # the same through the registry with verl's conventions, the group of one row included
    cv.register_method("credo_test_grpo_verl", "grpo", conventions="verl")
    adv, _ = core_algos.get_adv_estimator_fn("credo_test_grpo_verl")(
        token_level_rewards=token_rewards, response_mask=mask, index=index)
    torch.testing.assert_close(adv, verl_adv, rtol=0, atol=1e-6)
    # verl's norm_adv_by_std_in_grpo=False (Dr. GRPO) switches credo's std scaling off too
    verl_dr, _ = core_algos.compute_grpo_outcome_advantage(token_rewards, mask, index, norm_adv_by_std_in_grpo=False)
    config = OmegaConf.create({"norm_adv_by_std_in_grpo": False})
    adv, _ = core_algos.get_adv_estimator_fn("credo_grpo")(token_level_rewards=token_rewards, response_mask=mask,
                                                           index=index, config=config)
    torch.testing.assert_close(adv[multi], verl_dr[multi], rtol=0, atol=1e-7)


# --------------------------------------------------------------------------------------------------
# Policy losses
def loss_inputs(seed=0, B=6, T=7):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([7, 3, 5, 1, 6, 4])[:B]
    mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)  # (B, T)
    old = -torch.rand(B, T, generator=g) * 3
    logp = old + 1.2 * torch.randn(B, T, generator=g)  # ratios from ~0.1 to ~10: both clips and the dual clip
    adv = torch.tensor([1.5, -2.0, 0.7, -0.3, -1.1, 0.0])[:B].unsqueeze(1) * mask
    return torch.where(mask, old, 0.0), torch.where(mask, logp, 0.0), adv, mask


def actor_config(agg="token-mean", clip=(0.2, 0.2), **info):
    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, loss_agg_mode=agg,
                         clip_ratio_low=clip[0], clip_ratio_high=clip[1])
    config.global_batch_info.update(info)
    return config


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("info", [{}, {"dp_size": 2, "batch_num_tokens": 61, "global_batch_size": 16}])
@pytest.mark.parametrize("weighted", [False, True])
def test_verls_vanilla_loss_and_credos_clip_loss_agree_with_verls_switches(agg, info, weighted):
    old, logp, adv, mask = loss_inputs()
    weights = torch.rand(mask.shape, generator=torch.Generator().manual_seed(1)) * 2 if weighted else None
    x = logp.clone().requires_grad_()
    verl_loss, verl_metrics = core_algos.compute_policy_loss_vanilla(
        old, x, adv, mask, agg, actor_config(agg, **info), rollout_is_weights=weights)
    verl_loss.backward()
    name = f"credo_test_clip_verl_{agg}"
    cv.register_method(name, "grpo", conventions="verl", loss={"agg": cv.AGG_MODES[agg]})
    y = logp.clone().requires_grad_()
    credo_loss, metrics = core_algos.get_policy_loss_fn(name)(
        old_log_prob=old, log_prob=y, advantages=adv, response_mask=mask, loss_agg_mode=agg,
        config=actor_config(agg, **info), rollout_is_weights=weights)
    credo_loss.backward()
    torch.testing.assert_close(credo_loss, verl_loss, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(y.grad, x.grad, rtol=1e-6, atol=1e-8)
    assert metrics["credo/clip/dual_frac"] > 0 and metrics["credo/clip/low_frac"] > 0  # the clips did bite
    assert verl_metrics["actor/pg_clipfrac_lower"] > 0
    if not info and not weighted:  # credo's default has no dual clip: verl's bound -3A caps some A < 0 tokens
        plain = PPOClipLoss(agg=cv.AGG_MODES[agg])(logp, cv.loss_batch(old, adv, mask)).loss
        assert plain > verl_loss + 1e-4


def test_verls_gspo_loss_and_credos_gspo_agree():
    old, logp, adv, mask = loss_inputs(seed=2)
    logp = old + 0.1 * (logp - old)  # sequence ratios near 1: GSPO's clip range is 3e-4 / 4e-4
    config = actor_config("seq-mean-token-mean", clip=(3e-4, 4e-4))
    x, y = logp.clone().requires_grad_(), logp.clone().requires_grad_()
    verl_loss, _ = core_algos.compute_policy_loss_gspo(old, x, adv, mask, "seq-mean-token-mean", config)
    credo_loss, _ = core_algos.get_policy_loss_fn("credo_gspo")(old, y, adv, mask, "seq-mean-token-mean", config)
    (verl_loss + credo_loss).backward()
    torch.testing.assert_close(credo_loss, verl_loss, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(y.grad, x.grad, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("name", [n for n in cv.verl_names()])
def test_registered_losses_give_credos_loss_and_gradient(name):
    method = get_method(cv.verl_names()[name])
    old, logp, adv, mask = loss_inputs(seed=3)
    batch = RolloutBatch(response_ids=torch.zeros(mask.shape, dtype=torch.long), response_mask=mask,
                         group_id=torch.zeros(6, dtype=torch.long), rewards=torch.zeros(6), old_logp=old,
                         advantages=adv)
    x, y = logp.clone().requires_grad_(), logp.clone().requires_grad_()
    expected = method.policy_loss(x, batch)
    expected.loss.backward()
    agg = AGG[method.loss.agg]
    loss, metrics = core_algos.get_policy_loss_fn(name)(old, y, adv, mask.float(), agg, actor_config(agg))
    loss.backward()
    torch.testing.assert_close(loss, expected.loss, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(y.grad, x.grad, rtol=1e-6, atol=1e-9)
    assert metrics["credo/loss/policy"] == pytest.approx(expected.loss.item())
    assert x.grad.abs().sum() > 0


def test_a_loss_agg_mode_other_than_the_methods_is_an_error_naming_the_override():
    old, logp, adv, mask = loss_inputs()
    with pytest.raises(ValueError, match="loss_agg_mode=seq-mean-token-mean"):
        core_algos.get_policy_loss_fn("credo_grpo")(old, logp, adv, mask, "token-mean", actor_config())


def test_global_normalisers_make_micro_batches_add_up_to_the_mini_batch():
    old, logp, adv, mask = loss_inputs(seed=4)
    fn = core_algos.get_policy_loss_fn("credo_dapo")  # token-mean
    whole, _ = fn(old, logp, adv, mask, "token-mean", actor_config())
    info = {"dp_size": 1, "batch_num_tokens": int(mask.sum()), "global_batch_size": 6}
    parts = [fn(old[s], logp[s], adv[s], mask[s], "token-mean", actor_config(**info))[0]
             for s in (slice(0, 2), slice(2, 6))]
    torch.testing.assert_close(parts[0] + parts[1], whole, rtol=1e-6, atol=1e-7)


# --------------------------------------------------------------------------------------------------
# verl's conventions: credo's methods registered with conventions="verl" reproduce verl's own GRPO, Dr. GRPO
# and DAPO (the `grpo` estimator and the `vanilla` loss), through the functions verl's trainer calls
VERL_CASES = {
    # credo name: verl's algorithm.norm_adv_by_std_in_grpo, actor.loss_agg_mode, actor.clip_ratio_high
    "credo_grpo_verl": (True, "seq-mean-token-mean", 0.2),
    "credo_dapo_verl": (True, "token-mean", 0.28),
    "credo_dr_grpo_verl": (False, "seq-mean-token-sum-norm", 0.2),
}


def ragged_batch(seed, T=9):
    """float64 rows in groups of 5, 4, 3, 2, 1 and 1 (uids shuffled) with responses of 1..T tokens, one of them
    without a loss token and one with a hole in its mask; random rewards on the last response token (group p2
    all 0.5); log-ratios out to e^+-4, a few beyond the +-20 clamp."""
    g = torch.Generator().manual_seed(seed)
    uids = [f"p{i}" for i, size in enumerate([5, 4, 3, 2, 1, 1]) for _ in range(size)]
    index = np.array([uids[i] for i in torch.randperm(len(uids), generator=g)], dtype=object)
    B = len(index)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[1] = T
    responses = torch.arange(T) < lengths.unsqueeze(1)  # (B, T)
    mask = responses.clone()
    mask[0] = False  # no loss token (e.g. an over-long response masked out): verl's trainer counts the row
    mask[1, 2] = False  # a hole (a tool output in a multi-turn response)
    rewards = torch.rand(B, generator=g, dtype=torch.float64)
    rewards[torch.from_numpy(index == "p2")] = 0.5
    token_rewards = torch.zeros(B, T, dtype=torch.float64)
    token_rewards[torch.arange(B), lengths - 1] = rewards
    old = -3 * torch.rand(B, T, generator=g, dtype=torch.float64)
    logp = old + 1.5 * torch.randn(B, T, generator=g, dtype=torch.float64)
    logp[2:B:3, 0] += 25 * torch.sign(torch.randn(len(range(2, B, 3)), generator=g, dtype=torch.float64))
    weights = 2 * torch.rand(B, T, generator=g, dtype=torch.float64)
    return index, responses, mask, token_rewards, old, logp, weights


def verl_ppo_loss(mode, agg, clip_high, loss_scale_factor, rows, responses, mask, old, logp, adv, weights, info,
                  ref=None, kl_coef=0.0):
    """verl's actor loss (`verl.workers.utils.losses.ppo_loss`, what its engine workers call per micro-batch) on
    `rows`, padded to their longest response as verl's engine pads a micro-batch; `logp` reaches it as the
    model's flat per-token output (prompt of 2 tokens, the response's log-probs one position to the left).
    `ref`: the reference log-probs of verl's KL loss (`use_kl_loss`, `kl_loss_type="low_var_kl"`, `kl_coef`)."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.config import PolicyLossConfig
    from verl.workers.utils.losses import ppo_loss

    lengths = responses[rows].sum(dim=1)
    width = int(lengths.max())
    B = len(rows)
    flat = []
    for b, n in zip(rows, lengths.tolist()):
        flat += [torch.zeros(1, dtype=logp.dtype), logp[b, :n], torch.zeros(1, dtype=logp.dtype)]
    fields = {
        "prompts": torch.zeros(B, 2, dtype=torch.long), "responses": torch.zeros(B, width, dtype=torch.long),
        "attention_mask": torch.cat([torch.ones(B, 2, dtype=torch.long), responses[rows, :width].long()], dim=1),
        "response_mask": mask[rows, :width].long(), "old_log_probs": old[rows, :width],
        "advantages": adv[rows, :width],
    }
    if weights is not None:
        fields["rollout_is_weights"] = weights[rows, :width]
    kl = {}
    if ref is not None:
        fields["ref_log_prob"] = ref[rows, :width]
        kl = {"use_kl_loss": True, "kl_loss_coef": kl_coef, "kl_loss_type": "low_var_kl"}
    data = TensorDict(fields, batch_size=[B])
    tu.assign_non_tensor(data, **info)
    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, loss_agg_mode=agg,
                         clip_ratio_low=0.2, clip_ratio_high=clip_high, loss_scale_factor=loss_scale_factor,
                         policy_loss=PolicyLossConfig(loss_mode=mode), **kl)
    loss, _ = ppo_loss(config, {"log_probs": torch.cat(flat)}, data)
    return loss


@pytest.mark.parametrize("name", list(VERL_CASES))
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("dp_size, weighted", [(1, False), (2, True)])
def test_verl_conventions_reproduce_verls_grpo_dr_grpo_and_dapo(name, seed, dp_size, weighted):
    from verl.trainer.config import AlgoConfig

    cv.register(conventions="verl")
    norm_by_std, agg, clip_high = VERL_CASES[name]
    index, responses, mask, token_rewards, old, logp, weights = ragged_batch(seed)
    B = len(index)

    # advantages, as verl's `compute_advantage` calls its own GRPO and a registered estimator
    verl_adv, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=token_rewards, response_mask=mask.long(), index=index,
        norm_adv_by_std_in_grpo=norm_by_std)
    credo_adv, _ = core_algos.get_adv_estimator_fn(name)(
        token_level_rewards=token_rewards, response_mask=mask.long(),
        config=AlgoConfig(norm_adv_by_std_in_grpo=norm_by_std), index=index)
    assert credo_adv.dtype == torch.float64
    torch.testing.assert_close(credo_adv, verl_adv, rtol=0, atol=1e-12)
    single = torch.from_numpy(np.isin(index, ["p4", "p5"]))  # the groups of one row: A = r / (1 + eps) or r
    assert (verl_adv[single].abs().sum(dim=1) > 0).all()
    assert verl_adv[torch.from_numpy(index == "p2")].abs().sum() == 0  # rewards all 0.5

    # losses and gradients: two micro-batches, normalised by the whole mini-batch as verl's engine does
    info = {"dp_size": dp_size, "batch_num_tokens": int(mask.sum()), "global_batch_size": B}
    halves = [list(range(B // 2)), list(range(B // 2, B))]
    for loss_scale_factor in [None, 12] if agg == "seq-mean-token-sum-norm" else [None]:
        results = []
        for mode, adv in (("vanilla", verl_adv), (name, credo_adv)):
            x = logp.clone().requires_grad_()
            losses = [verl_ppo_loss(mode, agg, clip_high, loss_scale_factor, rows, responses, mask, old, x, adv,
                                    weights if weighted else None, info) for rows in halves]
            sum(losses).backward()
            results.append((torch.stack(losses).detach(), x.grad))
        (verl_losses, verl_grad), (credo_losses, credo_grad) = results
        assert verl_losses.abs().min() > 1e-5 and verl_grad.abs().sum() > 0  # real losses, not 0 = 0
        torch.testing.assert_close(credo_losses, verl_losses, rtol=0, atol=1e-12)
        torch.testing.assert_close(credo_grad, verl_grad, rtol=0, atol=1e-12)


@pytest.mark.parametrize("agg", ["seq-mean-token-mean", "token-mean"])
@pytest.mark.parametrize("seed", [0, 1])
def test_verls_kl_loss_is_credos_kl_penalty_with_its_clamp(agg, seed):
    """verl's `use_kl_loss` (k3 as `low_var_kl`, aggregated like the policy loss, times `kl_loss_coef`) is credo's
    `kl_beta` penalty with verl's conventions, whose `kl_clamp = 10` is verl's clamp; unclamped, credo is TRL's."""
    from credo.integrations.conventions import convention_switches

    index, responses, mask, _, old, logp, _ = ragged_batch(seed)
    B = len(index)
    g = torch.Generator().manual_seed(100 + seed)
    ref = old + 0.5 * torch.randn(old.shape, generator=g, dtype=torch.float64)  # with logp's +-25 outliers: clamped
    adv = torch.randn(B, 1, generator=g, dtype=torch.float64) * mask
    info = {"dp_size": 1, "batch_num_tokens": int(mask.sum()), "global_batch_size": B}
    x = logp.clone().requires_grad_()
    verl_loss = verl_ppo_loss("vanilla", agg, 0.2, None, list(range(B)), responses, mask, old, x, adv, None, info,
                              ref=ref, kl_coef=0.05)
    verl_loss.backward()
    method = get_method("grpo")
    batch = RolloutBatch(response_ids=torch.zeros(responses.shape, dtype=torch.long), response_mask=responses,
                         group_id=torch.from_numpy(np.unique(index, return_inverse=True)[1]),
                         rewards=torch.zeros(B, dtype=torch.float64), old_logp=old * responses, loss_mask=mask,
                         ref_logp=ref * responses, advantages=adv)
    results = {}
    for clamp in (10.0, None):
        loss = method.with_overrides(loss=convention_switches(method, "verl")[1] | {
            "agg": cv.AGG_MODES[agg], "kl_beta": 0.05, "kl_clamp": clamp}).loss
        y = logp.clone().requires_grad_()
        out = loss(y, batch)
        out.loss.backward()
        results[clamp] = (out.loss.detach(), y.grad, out.metrics["kl/ref"])
    credo_loss, credo_grad, kl = results[10.0]
    assert convention_switches(method, "verl")[1]["kl_clamp"] == 10.0 and 0 < kl < 10
    torch.testing.assert_close(credo_loss, verl_loss.detach(), rtol=0, atol=1e-12)
    torch.testing.assert_close(credo_grad, x.grad, rtol=0, atol=1e-12)
    assert abs(float(results[None][0] - verl_loss.detach())) > 1e-3  # the clamp binds on this batch: unclamped differs


def test_verl_conventions_are_switches_of_the_methods():
    names = cv.register(conventions="verl")
    assert names == [f"{name}_verl" for name in cv.verl_names()]
    grpo = core_algos.get_policy_loss_fn("credo_grpo_verl").credo_method
    assert grpo == "grpo"
    method = cv.register_method("credo_grpo_verl", "grpo", conventions="verl")  # the same: nothing happens
    assert (method.estimator.std_ddof, method.estimator.eps) == (1, 1e-6)
    assert (method.loss.dual_clip, method.loss.log_ratio_clamp, method.loss.empty_rows) == (3.0, 20.0, "count")
    gspo = cv.register_method("credo_gspo_verl", "gspo", conventions="verl")
    assert gspo.loss.dual_clip is None  # verl's GSPO loss has no dual clip
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    entry = _agent_loop_registry["credo_srpo_verl"]  # the agent loop runs credo's estimator: with the same switches
    assert entry["estimator"] == {"std_ddof": 1, "eps": 1e-6} and entry["loss"]["empty_rows"] == "count"
    override = cv.register_method("credo_test_grpo_verl_c2", "grpo", conventions="verl", loss={"dual_clip": 2.0})
    assert override.loss.dual_clip == 2.0  # overrides apply after the conventions
    with pytest.raises(ValueError, match="conventions"):
        cv.register_method("credo_test_grpo_trl", "grpo", conventions="trl")
    with pytest.raises(ValueError, match="already registered"):
        cv.register_method("credo_grpo_verl", "grpo")


# --------------------------------------------------------------------------------------------------
# Agent loops: reset groups and revision groups against credo's own samplers
class Server:
    """verl's server manager over a scripted policy: one request, one reply."""

    def __init__(self, policy):
        self.policy, self.requests = policy, []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.requests.append((request_id, sampling_params))
        budget = sampling_params.get("max_tokens", 48)  # verl's servers default to rollout.response_length
        out = self.policy.generate([prompt_ids], max_new_tokens=budget,
                                   greedy=sampling_params["temperature"] == 0)
        return TokenOutput(token_ids=out.response_ids[0][out.response_mask[0]].tolist())


def reset_script():
    """Per prompt: draws correct, wrong at step 2 (the seed), wrong at step 1, correct, correct; the localiser
    answers step 2; continuations after the kept first thought alternate correct and wrong."""
    draws, continuations = {}, {}

    def draw(prompt):
        n = draws[prompt] = draws.get(prompt, 0) + 1
        chain = chain_of(prompt)
        return {2: wrong_at(chain, 1), 3: wrong_at(chain, 0)}.get(n, solution(chain))

    def continue_(prompt, after):
        n = continuations[prompt] = continuations.get(prompt, 0) + 1
        chain = chain_of(prompt)
        full = solution(chain) if n % 2 else wrong_at(chain, 1)
        assert full.startswith(after)
        return full[len(after):]

    return ScriptedPolicy(draw, continue_, localise=lambda user: "the first error: \\boxed{2}")


def trainer_config(n, response_length=48):
    return OmegaConf.create({"actor_rollout_ref": {"rollout": {
        "prompt_length": 64, "response_length": response_length, "n": n, "temperature": 1.0, "top_p": 1.0,
        "calculate_log_probs": False}}, "data": {}, "reward": {}})


def run_agent_loop(cls, policy, problem, n, sampling=None, **options):
    class Loop(cls):
        def problem_and_task(self, kwargs):
            return problem, TASK

    async def main():
        config = trainer_config(n)
        loop = Loop(trainer_config=DictConfigWrap(config), server_manager=Server(policy), tokenizer=policy.tokenizer,
                    processor=None, dataset_cls=None, data_config=DictConfigWrap(config.data), **options)
        row = {"raw_prompt": [{"role": "user", "content": problem.prompt}], "uid": "prompt-0", "global_steps": 3}
        params = sampling or {"temperature": 1.0, "top_p": 1.0}
        return await asyncio.gather(*[loop.run(dict(params), **row) for _ in range(n)]), loop

    return asyncio.run(main())


def verl_tensors(outputs):
    """The padded (B, T) tensors verl's trainer builds from agent-loop outputs (via verl's own `as_dict`)."""
    rows = [o.as_dict() for o in outputs]
    pad = torch.nn.utils.rnn.pad_sequence
    return (pad([r["responses"] for r in rows], batch_first=True), pad([r["response_mask"] for r in rows], batch_first=True),
            pad([r["rm_scores"] for r in rows], batch_first=True))


def test_reset_agent_loop_gives_credos_reset_groups_suffix_masks_and_advantages():
    problem = ProblemStream(TASK, seed=3).take(1)[0]
    outputs, loop = run_agent_loop(ResetAgentLoop, reset_script(), problem, 8, method="srpo")
    responses, mask, scores = verl_tensors(outputs)
    adv, _ = core_algos.get_adv_estimator_fn("credo_srpo")(
        token_level_rewards=scores, response_mask=mask, index=np.array(["prompt-0"] * 8, dtype=object))

    # credo's own sampler and estimator with the same script
    random.seed(0)
    config = load_config(None, ["rollout.prompts_per_step=1", "rollout.max_new_tokens=48", "method=srpo"]).rollout
    rollout = sample_resets(reset_script(), TASK, ProblemStream(TASK, seed=3), config, "self")
    c = rollout.completions
    batch = RolloutBatch(response_ids=c.response_ids, response_mask=c.response_mask, group_id=rollout.group_id,
                         rewards=rollout.rewards, old_logp=torch.zeros(c.response_ids.shape),
                         prefix_len=rollout.records["prefix_len"])
    credited, _ = get_method("srpo").credit(batch)

    assert torch.equal(responses, c.response_ids * c.response_mask)  # same rows, the prefix kept in the response
    assert torch.equal(mask.bool(), suffix_mask(c.response_mask, rollout.records["prefix_len"]))
    assert rollout.records["prefix_len"].tolist() == [0] * 4 + [6] * 4  # the kept first thought: 6 tokens
    torch.testing.assert_close(adv, credited.advantages, rtol=0, atol=1e-6)
    # by hand: base group (draws 1, 3, 4, 5) rewards 1, 0, 1, 1: mean 3/4, population std sqrt(3)/4 ->
    # 1/sqrt(3) and -sqrt(3); suffix group 1, 0, 1, 0 -> +-1 (SRPO: no eps)
    row_adv = adv.sum(dim=1) / mask.sum(dim=1)
    s = 3 ** 0.5
    torch.testing.assert_close(row_adv, torch.tensor([1 / s, -s, 1 / s, 1 / s, 1, -1, 1, -1]), rtol=0, atol=1e-5)
    info = [o.extra_fields["reward_extra_info"] for o in outputs]
    assert [i["credo_reward"] for i in info] == [1, 0, 1, 1, 1, 0, 1, 0]
    assert {r for r, _ in loop.server_manager.requests} == {"credo-prompt-0"}  # sticky: one server, shared prefix

    # the loss sees credo's loss mask: REINFORCE over the suffix only
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(mask.shape, generator=g)
    logp = old + 0.1 * torch.randn(mask.shape, generator=g)
    x, y = logp.clone().requires_grad_(), logp.clone().requires_grad_()
    verl_loss, _ = core_algos.get_policy_loss_fn("credo_srpo")(old, x, adv, mask, "seq-mean-token-mean",
                                                              actor_config("seq-mean-token-mean"))
    credo_loss = get_method("srpo").policy_loss(y, credited.replace(old_logp=old)).loss
    (verl_loss + credo_loss).backward()
    torch.testing.assert_close(verl_loss, credo_loss, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(x.grad, y.grad, rtol=1e-6, atol=1e-9)
    assert x.grad[4, :6].abs().sum() == 0 and x.grad[4, 6:].abs().sum() > 0  # no gradient on the kept prefix


def test_reset_estimators_refuse_rows_that_are_not_from_credos_agent_loop():
    token_rewards, mask, index, _ = verl_inputs()  # plain rewards: prompt "a" adds up to 2
    with pytest.raises(ValueError, match="default_agent_loop=credo_srpo"):
        core_algos.get_adv_estimator_fn("credo_srpo")(token_level_rewards=token_rewards, response_mask=mask, index=index)


def test_reset_agent_loop_needs_n_equal_to_the_splits_rows_and_no_oracle():
    problem = ProblemStream(TASK, seed=3).take(1)[0]
    with pytest.raises(ValueError, match="rollout.n=8"):
        run_agent_loop(ResetAgentLoop, reset_script(), problem, 4, method="srpo")
    with pytest.raises(ValueError, match="step checker"):
        run_agent_loop(ResetAgentLoop, reset_script(), problem, 8, method="srpo", resets={"localiser": "oracle"})
    with pytest.raises(ValueError, match="does not run the revisions sampler of credo method 'ibpo'"):
        run_agent_loop(ResetAgentLoop, reset_script(), problem, 8, method="ibpo")


def test_a_greedy_request_is_a_plain_rollout_without_resets():
    problem = ProblemStream(TASK, seed=3).take(1)[0]
    policy = reset_script()
    outputs, loop = run_agent_loop(ResetAgentLoop, policy, problem, 8, sampling={"temperature": 0.0, "top_p": 1.0},
                                   method="rrpo")
    assert len(loop.server_manager.requests) == 8 and all(o.reward_score is None for o in outputs)
    assert all(set(o.response_mask) == {1} for o in outputs)


@pytest.mark.parametrize("edit", ["off", "trained"])
def test_revision_agent_loop_gives_ibpos_shaped_advantages_and_edit_masks(edit):
    problem = ProblemStream(TASK, seed=3).take(1)[0]

    def script():
        counts, revisions = {}, []

        def draw(prompt):  # correct, wrong at step 2, wrong at step 1, correct
            n = counts[prompt] = counts.get(prompt, 0) + 1
            chain = chain_of(prompt)
            return {2: wrong_at(chain, 1), 3: wrong_at(chain, 0)}.get(n, solution(chain))

        def revise(user):  # the first revision repairs its failure, the second does not
            revisions.append(user)
            chain = chain_of(user.split("\n")[-1])
            return solution(chain) if len(revisions) == 1 else wrong_at(chain, 0)

        return ScriptedPolicy(draw, revise=revise)

    random.seed(0)
    outputs, _ = run_agent_loop(RevisionAgentLoop, script(), problem, 4, method="ibpo",
                                revisions={"k": 2, "prompt": TESTBED_REVISE_PROMPT}, edit_mask=edit)
    responses, mask, scores = verl_tensors(outputs)
    adv, _ = core_algos.get_adv_estimator_fn("credo_ibpo")(
        token_level_rewards=scores, response_mask=mask, index=np.array(["prompt-0"] * 4, dtype=object))

    random.seed(0)
    config = load_config(None, ["rollout.prompts_per_step=1", "rollout.group_size=4", "rollout.max_new_tokens=48",
                                "method=ibpo", "rollout.revisions.k=2"]).rollout
    config = config.model_copy(update={"revisions": config.revisions.model_copy(update={"prompt": TESTBED_REVISE_PROMPT})})
    rollout = sample_revisions(script(), TASK, ProblemStream(TASK, seed=3), config)
    c = rollout.completions
    batch = RolloutBatch(response_ids=c.response_ids, response_mask=c.response_mask, group_id=rollout.group_id,
                         rewards=rollout.rewards, old_logp=torch.zeros(c.response_ids.shape),
                         revision_success=rollout.records["revision_success"], edit_mask=rollout.records["edit_mask"])
    estimator = RevisionAdvantage(norm="trained") if edit == "trained" else RevisionAdvantage(use_edit_mask=False)
    credited, _ = estimator(batch)

    assert torch.equal(responses, c.response_ids * c.response_mask)
    assert torch.equal(mask.bool(), credited.loss_mask)
    if edit == "trained":  # the repaired failure (row 1) trains on the tokens its revision changed only
        assert 0 < mask[1].sum() < c.response_mask[1].sum() and torch.equal(mask[1].bool(), rollout.records["edit_mask"][1])
    else:
        assert torch.equal(mask.bool(), c.response_mask)
    assert rollout.records["revision_success"].tolist() == [0, 1, 0, 0]
    torch.testing.assert_close(adv, credited.advantages, rtol=0, atol=1e-6)
    # by hand: shaped rewards 1, 0 + 0.6 * 1, 0, 1: mean 0.65, population std sqrt(0.1675)
    shaped = torch.tensor([1.0, 0.6, 0.0, 1.0])
    expected = (shaped - 0.65) / (0.1675 ** 0.5 + 1e-6)
    torch.testing.assert_close(adv.sum(dim=1) / mask.sum(dim=1), expected, rtol=0, atol=1e-5)
    assert [o.extra_fields["reward_extra_info"]["credo_revision_success"] for o in outputs] == [0, 1, 0, 0]


# --------------------------------------------------------------------------------------------------
# The example launch: its overrides compose with verl's own config, its agent loops build like verl builds them
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "verl")


def example_overrides():
    script = Path(EXAMPLE, "credo_srpo.sh").read_text()
    body = script.split("overrides=(\n", 1)[1].split("\n)", 1)[0]
    values = {"$model": "Qwen/Qwen2.5-1.5B-Instruct", "$data": "/data", "$here": EXAMPLE, "$gpus": "8"}
    lines = []
    for line in body.split("\n"):
        line = line.strip().replace('"', "")
        for var, value in values.items():
            line = line.replace(var, value)
        lines.append(line)
    return lines


def compose_verl(*overrides):
    """verl's own `ppo_trainer` config with `overrides`, composed by Hydra as `verl.trainer.main_ppo` composes it."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"),
                               version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def test_the_example_launch_composes_with_verls_config_and_matches_the_method():
    config = compose_verl(*example_overrides())
    cv.validate_config(config)  # its agent loop from agent_loops.yaml: credo's SRPO loop, split 1x4, n 8
    actor, rollout = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout
    assert config.trainer.use_v1  # the agent loops rely on the v1 trainer (one worker per prompt's sessions)
    assert core_algos.get_adv_estimator_fn(config.algorithm.adv_estimator).credo_method == "srpo"
    assert core_algos.get_policy_loss_fn(actor.policy_loss.loss_mode).credo_method == "srpo"
    assert cv.AGG_MODES[actor.loss_agg_mode] == get_method("srpo").loss.agg
    assert config.data.train_batch_size // actor.ppo_mini_batch_size == 4  # 4 optimiser steps per rollout batch
    assert rollout.val_kwargs.temperature == 0  # validation: plain greedy rollouts, no resets


def test_the_example_agent_loops_build_as_verls_worker_builds_them():
    import hydra

    policy = reset_script()
    entries = OmegaConf.load(os.path.join(EXAMPLE, "agent_loops.yaml"))
    assert [e.name for e in entries] == ["credo_srpo", "credo_rrpo", "credo_ibpo"]

    async def build(entry):
        config = trainer_config(8, response_length=40)
        return hydra.utils.instantiate(config=entry, trainer_config=DictConfigWrap(config), server_manager=Server(policy),
                                       tokenizer=policy.tokenizer, processor=None, dataset_cls=None,
                                       data_config=DictConfigWrap(config.data))

    srpo, rrpo, ibpo = (asyncio.run(build(e)) for e in entries)
    assert isinstance(srpo, ResetAgentLoop) and srpo.method.sampler.localiser == "self" and rrpo.method.sampler.localiser == "random"
    assert srpo.resets.thoughts.delimiter == "\n\n" and srpo.resets.thoughts.answer_marker == "####"
    assert srpo.resets.thoughts.budget_tokens == 40  # capped at rollout.response_length
    assert isinstance(ibpo, RevisionAgentLoop) and ibpo.revisions.k == 4 and not ibpo.method.estimator.use_edit_mask


# --------------------------------------------------------------------------------------------------
# verl's config check: every credo name composed with verl's own config, checked before verl starts
ESTIMATOR, LOSS, AGG_KEY, LOOP = cv.ESTIMATOR_KEY, cv.LOSS_KEY, cv.AGG_KEY, cv.AGENT_LOOP_KEY
REFUSED = {f"credo_{name}": name for name in METHODS if cv.refusal(METHODS.get(name)) is not None}


def documented_overrides(name, agg=None):
    """The overrides credo documents for a registered name (module docstring of credo.integrations.verl): the
    estimator, the loss, the method's aggregation (or `agg`), for a reset or revision method its agent loop
    with 8 sessions per prompt (a reset split's rows; a revision group's), for a turn-level one the episode loop."""
    method = get_method(cv.verl_names()[name])
    overrides = [f"{ESTIMATOR}={name}", f"{LOSS}={name}", f"{AGG_KEY}={agg or AGG[method.loss.agg]}"]
    if method.sampler.verl_agent_loop is not None:
        overrides += [f"{LOOP}={name}", "actor_rollout_ref.rollout.n=8"]
    if cv.reads_turns(method):  # a turn-level method: credo's episode agent loop
        overrides += [f"{LOOP}={cv.EPISODE_LOOP}"]
    return overrides


def fails_with(message, *overrides):
    with pytest.raises(ValueError, match=re.escape(message)) as error:
        cv.validate_config(compose_verl(*overrides))
    assert "\n" not in str(error.value)  # one line
    return str(error.value)


def test_names_cover_every_credo_method():
    assert set(cv.verl_names().values()) | set(REFUSED.values()) == set(METHODS)
    assert {"credo_s_trace", "credo_otb", "credo_ktae", "credo_oracle_blame"} <= set(REFUSED)


@pytest.mark.parametrize("name", list(cv.verl_names()))
def test_every_registered_name_passes_with_its_overrides_and_fails_with_another_aggregation(name):
    cv.validate_config(compose_verl(*documented_overrides(name)))
    wanted = AGG[get_method(cv.verl_names()[name]).loss.agg]
    other = "token-mean" if wanted != "token-mean" else "seq-mean-token-mean"
    fails_with(f"{AGG_KEY}={other}: credo method {cv.verl_names()[name]!r} aggregates its loss as "
               f"{get_method(cv.verl_names()[name]).loss.agg}; set {AGG_KEY}={wanted}",
               *documented_overrides(name, agg=other))


@pytest.mark.parametrize("key", [ESTIMATOR, LOSS])
@pytest.mark.parametrize("name", list(REFUSED))
def test_a_refused_name_fails_with_credos_reason(name, key):
    why = cv.refusal(METHODS.get(REFUSED[name]))
    fails_with(f"{key}={name}: credo method {REFUSED[name]!r} has no verl adapter: {why}", f"{key}={name}")


@pytest.mark.parametrize("overrides, message", [
    ([f"{ESTIMATOR}=credo_spro"], f"{ESTIMATOR}=credo_spro: no credo method is registered"),
    ([f"{LOSS}=credo_grpo", f"{AGG_KEY}=token-sum"], f"{AGG_KEY}=token-sum: credo method 'grpo'"),
    ([f"{ESTIMATOR}=credo_srpo"], (f"{LOOP}=single_turn_agent: credo estimator 'credo_srpo' reads each row's "
                                   f"advantage from credo's srpo agent loop; set {LOOP}=credo_srpo")),
    ([f"{ESTIMATOR}=credo_srpo", f"{LOOP}=credo_rrpo", "actor_rollout_ref.rollout.n=8"],
     f"{LOOP}=credo_rrpo: credo estimator 'credo_srpo'"),
    ([f"{LOOP}=credo_ibpo", "actor_rollout_ref.rollout.n=8"],
     f"{ESTIMATOR}=gae: credo's agent loop 'credo_ibpo' scores each row with its ibpo advantage"),
    ([f"{ESTIMATOR}=credo_grpo", f"{LOOP}=credo_srpo", "actor_rollout_ref.rollout.n=8"],
     f"{ESTIMATOR}=credo_grpo: credo's agent loop 'credo_srpo'"),
    (documented_overrides("credo_srpo") + ["algorithm.use_kl_in_reward=True"], "algorithm.use_kl_in_reward=True: "),
    (documented_overrides("credo_rrpo") + ["trainer.use_v1=False"], "trainer.use_v1=False: "),
    (documented_overrides("credo_srpo") + ["actor_rollout_ref.rollout.n=4"],
     "actor_rollout_ref.rollout.n=4: reset split 1x4 trains 8 rows per prompt; set actor_rollout_ref.rollout.n=8"),
    (documented_overrides("credo_ibpo") + ["actor_rollout_ref.rollout.n=1"], "actor_rollout_ref.rollout.n=1: IBPO"),
])
def test_credo_choices_that_cannot_run_together_fail_naming_the_key(overrides, message):
    fails_with(message, *overrides)


def test_choices_that_are_not_credos_are_left_to_verl():
    cv.validate_config(compose_verl())  # verl's defaults: gae, vanilla, single_turn_agent
    cv.validate_config(compose_verl(f"{ESTIMATOR}=grpo", f"{LOSS}=credo_dapo", f"{AGG_KEY}=token-mean"))
    cv.validate_config(compose_verl(f"{ESTIMATOR}=credo_grpo", f"{LOSS}=gspo", f"{AGG_KEY}=token-sum"))


def test_a_refused_name_looked_up_by_verl_raises_credos_reason():
    token_rewards, mask, index, _ = verl_inputs()
    with pytest.raises(ValueError, match=re.escape(f"{ESTIMATOR}=credo_s_trace: credo method 's_trace'")):
        core_algos.get_adv_estimator_fn("credo_s_trace")(token_level_rewards=token_rewards, response_mask=mask,
                                                         index=index)
    old, logp, adv, mask = loss_inputs()
    with pytest.raises(ValueError, match=re.escape(f"{LOSS}=credo_otb: credo method 'otb'")):
        core_algos.get_policy_loss_fn("credo_otb")(old, logp, adv, mask, "token-mean", actor_config())


def test_verls_config_check_runs_credos_first():
    from verl.utils import config as verl_config

    cv.hook_validate_config()
    cv.hook_validate_config()  # idempotent: one wrapper
    verls = verl_config.validate_config.__wrapped__
    assert not hasattr(verls, "credo_checks")
    assert list(inspect.signature(verls).parameters) == ["config", "use_reference_policy", "use_critic"]
    with pytest.raises(ValueError, match=re.escape(f"{ESTIMATOR}=credo_gtpo: credo method 'gtpo'")):
        verl_config.validate_config(config=compose_verl(f"{ESTIMATOR}=credo_gtpo"), use_reference_policy=False,
                                    use_critic=False)


def test_verls_main_ppo_stops_with_credos_reason_before_ray(tmp_path):
    # data.train_batch_size=1 fails verl's own check (not a multiple of its 8 default GPUs): without credo's
    # check first the run still stops before Ray, with verl's message instead of credo's
    overrides = [f"{ESTIMATOR}=credo_s_trace", "data.train_batch_size=1", f"hydra.run.dir={tmp_path}",
                 "hydra.output_subdir=null"]
    env = dict(os.environ, VERL_USE_EXTERNAL_MODULES="credo.integrations.verl_plugin")
    out = subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", *overrides], check=False, env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    reason = f"ValueError: {ESTIMATOR}=credo_s_trace: credo method 's_trace' has no verl adapter"
    assert reason in out.stderr, out.stderr[-2000:]
    assert "real_train_batch_size" not in out.stderr + out.stdout and "ray init" not in out.stdout
