"""Common random numbers (`credo.rollout.crn`): keyed uniforms are uniform and independent, inversion draws from
the distribution it is given, a row's draws depend on its key alone (not on batching, other rows or the global
RNG), and the intent: two close policies sampled with common numbers agree far more often than independent draws."""

from __future__ import annotations

import pytest
import torch
from tiny import TINY

from credo.config import ConfigError, load_config
from credo.rollout.crn import EVAL, TRAIN, CommonRandomNumbers, mix, sample_by_inversion, uniforms
from credo.rollout.generate import generate, pick_tokens
from credo.rollout.transformers_backend import TransformersBackend


def test_keyed_uniforms_are_uniform_and_uncorrelated():
    keys = mix(torch.tensor(7), torch.arange(200_000))
    u = uniforms(keys, 0)
    assert 0.0 < u.min() and u.max() < 1.0
    assert torch.equal(u, uniforms(keys, 0))  # a function of (key, position) only
    counts = torch.histc(u.float(), bins=20, min=0.0, max=1.0)
    assert (counts / len(u) - 0.05).abs().max() < 0.003
    next_token = uniforms(keys, 1)
    neighbour_key = uniforms(keys.roll(1), 0)
    for other in (next_token, neighbour_key):
        assert abs(torch.corrcoef(torch.stack([u, other]))[0, 1]) < 0.01


def test_inversion_draws_from_the_distribution_and_never_a_zero_token():
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.15, 0.05, 0.0]]).repeat(100_000, 1)
    u = uniforms(mix(torch.tensor(3), torch.arange(len(probs))), 0)
    counts = torch.bincount(sample_by_inversion(probs, u)[:, 0], minlength=6).double() / len(probs)
    assert counts[1] == 0 and counts[5] == 0
    assert torch.allclose(counts, probs[0].double(), atol=0.005)
    nucleus = torch.bincount(pick_tokens(probs.log(), temperature=1.0, top_p=0.7, greedy=False, u=u)[:, 0], minlength=6)
    assert nucleus[[1, 3, 4, 5]].sum() == 0  # the nucleus is tokens 0 and 2, as with multinomial draws
    assert nucleus[0] / len(probs) == pytest.approx(0.5 / 0.8, abs=0.01)


def test_common_numbers_couple_close_policies():
    """The intent: two close policies (each token's probability off by up to 10%) drawing with the same uniforms
    pick the same token far more often than with independent draws (sum_i p_i q_i), and at least as often as
    inversion guarantees: they disagree only where U lies between F_p(i) and F_q(i) for some i."""
    generator = torch.Generator().manual_seed(0)
    p = torch.distributions.Dirichlet(torch.ones(50)).sample((4000,))
    q = p * (1 + 0.1 * (2 * torch.rand(p.shape, generator=generator) - 1))
    q = q / q.sum(dim=-1, keepdim=True)
    u = uniforms(mix(torch.tensor(11), torch.arange(len(p))), 0)
    common = (sample_by_inversion(p, u) == sample_by_inversion(q, u)).double().mean()
    other = uniforms(mix(torch.tensor(12), torch.arange(len(p))), 0)
    independent = (sample_by_inversion(p, u) == sample_by_inversion(q, other)).double().mean()
    bound = 1 - (p.double().cumsum(-1) - q.double().cumsum(-1)).abs().sum(-1).mean()
    assert independent == pytest.approx((p * q).sum(-1).mean().item(), abs=0.02)
    assert common >= bound - 0.02
    assert common > 0.8 > 0.2 > independent


def test_scopes_give_the_same_keys_again_and_calls_new_ones():
    crn = CommonRandomNumbers(seed=5)
    crn.begin(TRAIN, 3)
    first, second = crn.keys(8), crn.keys(8)
    crn.begin(TRAIN, 3)
    assert torch.equal(crn.keys(8), first)
    assert torch.equal(crn.keys(4), second[:4])  # a call's row r has the same key whatever the call's size
    assert not torch.equal(first, second)
    for other in (CommonRandomNumbers(seed=6), CommonRandomNumbers(seed=5)):
        other.begin(TRAIN, 4) if other.seed == 5 else other.begin(TRAIN, 3)
        assert not torch.equal(other.keys(8), first)
    crn.begin(EVAL, 3)
    assert not torch.equal(crn.keys(8), first)
    assert len(set(first.tolist())) == 8


def rows(completions) -> list[list[int]]:
    return [ids[mask].tolist() for ids, mask in zip(completions.response_ids, completions.response_mask)]


def test_a_rows_draws_depend_on_its_key_alone(policy):
    model, tokenizer, prompts = policy
    keys = mix(torch.tensor(1), torch.arange(12))
    torch.manual_seed(0)
    whole = rows(generate(model, tokenizer, prompts, max_new_tokens=16, repeat=4, keys=keys))
    torch.manual_seed(1)  # the global RNG plays no part
    one_by_one = rows(generate(model, tokenizer, prompts, max_new_tokens=16, repeat=4, keys=keys, batch_size=4))
    alone = rows(generate(model, tokenizer, prompts[1:2], max_new_tokens=16, repeat=4, keys=keys[4:8]))
    assert whole == one_by_one and whole[4:8] == alone
    assert len({tuple(r) for r in whole}) > 6  # distinct keys, distinct samples
    torch.manual_seed(0)
    unkeyed = rows(generate(model, tokenizer, prompts, max_new_tokens=16, repeat=4))
    assert unkeyed != whole


def test_the_backend_keys_sampled_calls_only(policy):
    model, tokenizer, prompts = policy
    crn = CommonRandomNumbers(seed=0)
    backend = TransformersBackend(model, tokenizer, common_random_numbers=crn)
    crn.begin(TRAIN, 0)
    backend.generate(prompts, max_new_tokens=8, greedy=True)
    first = rows(backend.generate(prompts, max_new_tokens=8, repeat=2))
    assert crn.calls == 1  # the greedy call took no keys
    crn.begin(TRAIN, 0)
    assert rows(backend.generate(prompts, max_new_tokens=8, repeat=2)) == first


def test_a_training_step_samples_the_same_batch_whatever_came_before(tmp_path):
    from credo.checkpoint import RunDirectory
    from credo.rollout.groups import ProblemStream
    from credo.train import sample_rollout
    from credo.run_setup import build_trainer

    def batch(keyed: bool, noise_seed: int) -> list[list[int]]:
        config = load_config(None, TINY + [f"rollout.common_random_numbers={str(keyed).lower()}"])
        trainer = build_trainer(config, RunDirectory(tmp_path / f"{keyed}-{noise_seed}"))
        torch.manual_seed(noise_seed)  # another history of global draws before step 5
        return rows(sample_rollout(trainer, ProblemStream(trainer.task, seed=0), step=5).completions)

    assert batch(True, 0) == batch(True, 1)
    assert batch(False, 0) != batch(False, 1)


def test_keyed_sampling_needs_the_transformers_backend():
    with pytest.raises(ConfigError, match="common_random_numbers needs the transformers backend"):
        load_config(None, ["rollout.common_random_numbers=true", "rollout.backend=vllm"])
