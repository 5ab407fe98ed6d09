"""Properties every registered method must have: padding invariance, zero gradient from equal rewards,
correct gradients (gradcheck in float64), and the registry's error messages."""

from __future__ import annotations

import dataclasses
import typing

import pytest
import torch
import torch.nn.functional as F
from batches import moved_logp, random_batch

from credo.batch import RECORDED, RolloutBatch
from credo.losses import PPOClipLoss, TraceLoss, trace_history
from credo.losses import traces as loss_traces
from credo.methods import METHODS, get_method
from credo.registry import Registry
from credo.rollout.samplers import SAMPLERS

ALL = list(METHODS)


def method_for_padding(name):
    # Dr. GRPO's default divisor is the padded width (verl's convention), so padding changes it by
    # design; with a fixed length (TRL's max_completion_length) it must not.
    return get_method(name, loss={"norm_len": 48}) if name == "dr_grpo" else get_method(name)


def pad_batch(batch: RolloutBatch, extra: int) -> RolloutBatch:
    fields = {}
    recorded = [name for name, field in RECORDED.items() if field.shape == "token" and getattr(batch, name) is not None]
    turns = [name for name in ("turn_anchor", "turn_reward") if getattr(batch, name) is not None]
    for name in ("response_ids", "old_logp", "entropy", "sum_pi_squared", "ref_logp", "response_mask", "loss_mask",
                 "thought_ids", "thought_wrong", *turns, *recorded):
        value = getattr(batch, name)
        off = name in ("segment_ids", "thought_ids", "turn_anchor")
        fill = False if value.dtype == torch.bool else -1 if off else 0
        fields[name] = F.pad(value, (0, extra), value=fill)
    return batch.replace(**fields)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("name", ALL)
def test_padding_never_changes_a_result(seed, name):
    method = method_for_padding(name)
    batch = random_batch(seed, dtype=torch.float64)
    padded = pad_batch(batch, 13)
    credited, metrics = method.credit(batch)
    credited_padded, metrics_padded = method.credit(padded)
    assert metrics == pytest.approx(metrics_padded)
    logp = moved_logp(batch, seed)
    logp_padded = F.pad(logp.detach(), (0, 13), value=-5.0).requires_grad_()
    out, out_padded = method.policy_loss(logp, credited), method.policy_loss(logp_padded, credited_padded)
    torch.testing.assert_close(out.loss, out_padded.loss, rtol=1e-12, atol=1e-14)
    (grad,) = torch.autograd.grad(out.loss, logp)
    (grad_padded,) = torch.autograd.grad(out_padded.loss, logp_padded)
    torch.testing.assert_close(grad_padded[:, : batch.width], grad, rtol=1e-12, atol=1e-14)
    assert not grad_padded[:, batch.width :].any()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("name", ALL)
def test_groups_with_equal_rewards_give_exactly_zero_gradient(seed, name):
    batch = random_batch(seed, dtype=torch.float64)
    level = torch.tensor([0.0, 1.0, 0.5, 0.0], dtype=torch.float64)
    _, group_index = torch.unique(batch.group_id, return_inverse=True)
    rewards = level[group_index % 4]  # every group constant, groups at different levels
    # Step values (vine) are what every state of such a group is worth: its outcome. With other values a step
    # still gains or loses value inside a group of equal outcomes, and vine credits it by design. Likewise the step
    # checker's verdicts (per-decision blame) agree within each group: every thought of a failure wrong.
    values = torch.where(batch.response_mask, rewards.unsqueeze(1), 0.0)
    # IGPO's turns gain no information in such a group (each turn's reward is otherwise its gain, by design).
    batch = batch.replace(rewards=rewards, correct=rewards >= 1, revision_success=torch.zeros_like(rewards),
                          step_values=values, thought_wrong=batch.response_mask & (rewards < 1).unsqueeze(1),
                          info_gain=torch.zeros_like(batch.info_gain))
    method = get_method(name)
    if name == "igpo":  # its paper's joint pool puts the outcomes beside the zero gains, and ranks the turns by it
        method = method.with_overrides(estimator={"norm": "separate"})  # (docs/methods.md sec. 15)
    credited, _ = method.credit(batch)
    logp = moved_logp(batch, seed)
    (grad,) = torch.autograd.grad(method.policy_loss(logp, credited).loss, logp, allow_unused=True, materialize_grads=True)
    assert torch.equal(grad, torch.zeros_like(grad))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", ALL)
def test_gradcheck_float64(seed, name, monkeypatch):
    method = get_method(name)
    batch = random_batch(seed, dtype=torch.float64, group_sizes=(3, 4), width=9)
    credited, _ = method.credit(batch)
    logp = moved_logp(credited, seed, drift=0.1)
    if isinstance(method.loss, TraceLoss):
        # The trace (and GSPO's sequence ratio) enters through a stop-gradient: hold it at its value at
        # `logp`, so the checked function is the surrogate whose gradient autograd computes.
        held = trace_history(
            logp.detach() - credited.old_logp, credited.trace_mask if credited.trace_mask is not None else credited.response_mask,
            decay=method.loss.decay, normalize=method.loss.normalize, kernel=method.loss.kernel,
        )
        monkeypatch.setattr(loss_traces, "trace_history", lambda *args, **kwargs: held)
    assert torch.autograd.gradcheck(lambda x: method.policy_loss(x, credited).loss, (logp,), eps=1e-6, atol=1e-7)


def test_every_method_is_documented():
    for name in ALL:
        m = METHODS.get(name)
        assert SAMPLERS.get(m.sampler.name) is type(m.sampler)
        assert (m.paper.count(".") == 1 or m.family == "oracle") and m.changes  # an arXiv id
        assert type(m.loss).__doc__ and type(m.estimator).__doc__


def test_a_method_is_checked_when_it_is_made():
    grpo = METHODS.get("grpo")
    with pytest.raises(ValueError, match="family 'critic' is not one of baseline, trace"):
        dataclasses.replace(grpo, family="critic")
    with pytest.raises(ValueError, match="its loss reads trace_mask, which nothing fills"):
        dataclasses.replace(grpo, loss=NeedsTraceMask())


@dataclasses.dataclass(frozen=True, kw_only=True)
class NeedsTraceMask(PPOClipLoss):
    reads: typing.ClassVar[frozenset[str]] = frozenset({"trace_mask"})


def test_unknown_names_and_switches_are_clear_errors():
    with pytest.raises(ValueError, match=r"unknown method 'grpo2'; valid names: .*dapo.*grpo"):
        get_method("grpo2")
    with pytest.raises(ValueError, match=r"unknown switch\(es\) lambda of p_trace's loss \(TraceLoss\); allowed: .*\bdecay\b"):
        get_method("p_trace", loss={"lambda": 0.9})
    with pytest.raises(ValueError, match=r"keep_frac"):
        get_method("s_trace", estimator={"keep_frac": 0.0})


def test_registry_rejects_duplicates():
    registry: Registry[int] = Registry("thing")
    registry.add("a", 1)
    with pytest.raises(ValueError, match="thing 'a' is already registered"):
        registry.add("a", 2)
    assert registry.get("a") == 1 and "a" in registry and len(registry) == 1


def test_overrides_keep_other_defaults():
    m = get_method("dapo", loss={"clip_high": 0.3})
    assert m.loss.clip_high == 0.3 and m.loss.agg == "token_mean" and m.loss.clip_low == 0.2
    assert METHODS.get("dapo").loss.clip_high == 0.28  # the registered method is untouched
