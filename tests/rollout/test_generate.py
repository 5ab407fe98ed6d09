"""Sampling: credo's decode loop against transformers' `generate`, compaction of finished rows, top-p, and
the end tokens a response stops at (the tokenizer's and the model's declared end-of-turn ids)."""

from __future__ import annotations

import contextlib

import pytest
import torch

from credo.rollout import generate as generation
from credo.rollout.generate import cut_response, end_token_ids, generate, pick_tokens
from credo.rollout.transformers_backend import TransformersBackend
from credo.testbed import USER


def test_greedy_decoding_equals_transformers_generate(policy):
    from credo.rollout.generate import left_pad

    model, tokenizer, prompts = policy
    ours = generate(model, tokenizer, prompts, max_new_tokens=20, greedy=True)
    for row, prompt in enumerate(prompts):  # one prompt at a time: no padding on the reference side
        reference = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                   max_new_tokens=20, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                                   eos_token_id=tokenizer.eos_token_id)[0, len(prompt):].tolist()
        if tokenizer.eos_token_id in reference:
            reference = reference[: reference.index(tokenizer.eos_token_id) + 1]
        assert ours.response_ids[row, ours.response_mask[row]].tolist() == reference
    ids, _ = left_pad(prompts, tokenizer.pad_token_id)
    assert ours.prompt_ids.tolist() == ids.tolist()


def test_token_probs_are_the_sampled_tokens_probabilities_at_the_temperature(policy):
    """`Completions.token_probs` holds each response token's probability under softmax(logits / temperature) of
    the prompt and the response so far (a plain forward pass per row), 0 off the response."""
    model, tokenizer, prompts = policy
    torch.manual_seed(0)
    out = generate(model, tokenizer, prompts[:2], max_new_tokens=8, temperature=0.7, repeat=2)
    for row in range(4):
        response = out.response_ids[row, out.response_mask[row]].tolist()
        prompt = out.prompt_ids[row, out.prompt_mask[row]].tolist()
        with torch.no_grad():
            logits = model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1].float()
        expected = torch.softmax(logits / 0.7, dim=-1).gather(-1, torch.tensor(response)[:, None])[:, 0]
        assert torch.allclose(out.token_probs[row, : len(response)], expected, atol=1e-4)
        assert out.token_probs[row, len(response):].eq(0).all()


def test_entropies_are_the_trainers_scored_entropies_of_the_sampling_distribution(policy):
    """`Completions.entropies` holds the entropy of softmax(logits / temperature) each response token was drawn
    from: what the trainer scores as `entropy` (`credo.policy.policy_logprobs`), 0 off the response."""
    from credo.policy import policy_logprobs

    model, tokenizer, prompts = policy
    torch.manual_seed(1)
    out = generate(model, tokenizer, prompts[:2], max_new_tokens=8, temperature=0.7, repeat=2)
    with torch.no_grad():
        _, scored = policy_logprobs(model, out.prompt_ids, out.prompt_mask, out.response_ids, out.response_mask,
                                    temperature=0.7, chunk_tokens=64, statistics=("entropy",))
    mask = out.response_mask
    assert torch.allclose(out.entropies[mask], scored["entropy"][mask], atol=1e-4)
    assert out.entropies[~mask].eq(0).all() and out.entropies[mask].gt(0).all()


@pytest.mark.parametrize("grow, rows_end", [(3, True), (7, False)])
def test_growing_the_cache_changes_no_logit(policy, monkeypatch, grow, rows_end):
    """A cache that starts at the prompt plus `grow` positions and grows as decoding fills it gives every step the
    logits of a cache that held the whole budget from the start (the empty positions are masked either way), also
    while finished rows leave the batch and the cache."""
    model, tokenizer, prompts = policy
    seen: dict[int, list[torch.Tensor]] = {}

    def keep_logits(module, args, kwargs, output):
        seen.setdefault(generation.GROW_TOKENS, []).append(output.logits[:, -1].detach().clone())

    def end_sometimes(module, args, kwargs, output):
        positions = kwargs["position_ids"][:, -1:]
        output.logits[:, -1:, tokenizer.eos_token_id] += 50.0 * (positions % 9 == 0)

    hooks = [model.register_forward_hook(end_sometimes, with_kwargs=True)] if rows_end else []
    hooks.append(model.register_forward_hook(keep_logits, with_kwargs=True))
    monkeypatch.setattr(generation, "COMPACT_AT", 1.0)
    runs = {}
    for grow_tokens in (grow, 1000):
        monkeypatch.setattr(generation, "GROW_TOKENS", grow_tokens)
        runs[grow_tokens] = generate(model, tokenizer, prompts, max_new_tokens=24, greedy=True, repeat=2)
    for hook in hooks:
        hook.remove()
    grown, whole = seen[grow], seen[1000]
    assert len(grown) == len(whole) > grow + 1  # decoding went past the first capacity: the cache grew
    for step, (a, b) in enumerate(zip(grown, whole)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=f"step {step}")
    assert torch.equal(runs[grow].response_ids, runs[1000].response_ids)


@pytest.mark.parametrize("greedy", [True, False])
def test_dropping_finished_rows_changes_no_greedy_token(policy, monkeypatch, greedy):
    model, tokenizer, prompts = policy

    def end_sometimes(module, args, kwargs, output):  # the untrained model never ends: make rows end
        positions = kwargs["position_ids"][:, -1:]  # (n, 1): the row's own, wherever compaction moved it
        output.logits[:, -1:, tokenizer.eos_token_id] += 50.0 * (positions % 9 == 0)

    hook = model.register_forward_hook(end_sometimes, with_kwargs=True)
    runs = []
    for compact_at in (0.0, 1.0):  # never / at every step a row finishes
        monkeypatch.setattr(generation, "COMPACT_AT", compact_at)
        torch.manual_seed(0)
        runs.append(generate(model, tokenizer, prompts, max_new_tokens=24, greedy=greedy, repeat=4))
    hook.remove()
    never, always = runs
    assert len(set(never.response_mask.sum(dim=1).tolist())) > 1  # rows finished at different steps
    if greedy:
        assert torch.equal(never.response_ids * never.response_mask, always.response_ids * always.response_mask)
        assert never.texts == always.texts
    assert torch.equal(never.truncated, never.response_mask.sum(dim=1).eq(24) & never.truncated)


def test_top_p_samples_only_from_the_nucleus():
    torch.manual_seed(0)
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).repeat(4000, 1)
    counts = torch.bincount(pick_tokens(logits, temperature=1.0, top_p=0.7, greedy=False)[:, 0], minlength=4)
    assert counts[2:].sum() == 0  # 0.5 < 0.7 <= 0.5 + 0.3: the nucleus is the first two tokens
    assert counts[0] / counts[:2].sum() == pytest.approx(0.5 / 0.8, abs=0.03)
    counts = torch.bincount(pick_tokens(logits, temperature=1.0, top_p=0.4, greedy=False)[:, 0], minlength=4)
    assert counts.tolist() == [4000, 0, 0, 0]  # the most likely token alone already reaches p
    hot = torch.bincount(pick_tokens(logits, temperature=2.0, top_p=1.0, greedy=False)[:, 0], minlength=4)
    assert hot[3] / 4000 == pytest.approx(0.05**0.5 / sum(p**0.5 for p in (0.5, 0.3, 0.15, 0.05)), abs=0.02)


@contextlib.contextmanager
def emits_at(model, token: int, position: int, held: list[int]):
    """The model emits `token` at every step from the one fed `position` on (its logit raised by 100, an
    lm_head bias), and none of `held` before it (lowered by 100)."""

    def bias(module, args, kwargs, output):
        late = (kwargs["position_ids"] >= position).float().unsqueeze(-1)  # (n, L, 1)
        output.logits[..., held] -= 100.0 * (1.0 - late)
        output.logits[..., token] += 100.0 * late[..., 0]

    hook = model.register_forward_hook(bias, with_kwargs=True)
    try:
        yield
    finally:
        hook.remove()


@pytest.mark.parametrize("greedy", [True, False])
def test_generation_stops_at_every_end_of_turn_id_the_model_declares(policy, monkeypatch, greedy):
    model, tokenizer, prompts = policy
    eos, pad, turn = tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.convert_tokens_to_ids(USER)
    assert len({eos, pad, turn}) == 3  # an end of turn that is neither the end token nor padding
    prompt = prompts[0]
    fourth = len(prompt) - 1 + 3  # fed at step 3: the step that samples the 4th response token

    def sample(**kwargs):
        torch.manual_seed(0)
        return generate(model, tokenizer, [prompt], max_new_tokens=8, greedy=greedy, repeat=3, **kwargs)

    def sample_with_backend():
        torch.manual_seed(0)
        return TransformersBackend(model, tokenizer).generate([prompt], max_new_tokens=8, greedy=greedy, repeat=3)

    with emits_at(model, turn, fourth, held=[eos, turn]):
        assert end_token_ids(model, tokenizer) == [eos]
        undeclared = sample()  # the model emits the end of turn, but nothing says it ends the response
        assert undeclared.truncated.all() and undeclared.response_mask.sum(dim=1).tolist() == [8, 8, 8]
        assert undeclared.response_ids[:, 3].tolist() == [turn] * 3
        for declared in ([eos, turn], turn, (turn,)):  # a list, an int (then it replaces eos there), a tuple
            monkeypatch.setattr(model.generation_config, "eos_token_id", declared)
            assert end_token_ids(model, tokenizer) == [eos, turn]
            for out in (sample(), sample_with_backend()):
                assert out.response_mask.sum(dim=1).tolist() == [4, 4, 4]  # cut at the end of turn, counted
                assert out.response_ids[:, 3].tolist() == [turn] * 3
                assert not out.truncated.any()
                assert out.tokens == 12 and all(USER not in text for text in out.texts)
                assert torch.equal(out.response_ids[:, :3], undeclared.response_ids[:, :3])
        assert sample(end_ids=[eos]).truncated.all()  # an explicit list overrides the declared ids
    with emits_at(model, eos, fourth, held=[eos, turn]):
        out = sample()  # the end token still ends a response when the model declares others
        assert out.response_mask.sum(dim=1).tolist() == [4, 4, 4] and not out.truncated.any()
        assert out.response_ids[:, 3].tolist() == [eos] * 3


def test_cut_response_ends_at_the_first_end_token(policy):
    _, tokenizer, _ = policy
    eos, pad, turn = tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.convert_tokens_to_ids(USER)
    body = tokenizer("+5=12", add_special_tokens=False)["input_ids"]
    assert cut_response(body + [turn, 9, eos], [eos, turn], pad, tokenizer, []) == (body + [turn], True)
    assert cut_response(body + [eos, turn], [eos, turn], pad, tokenizer, []) == (body + [eos], True)
    assert cut_response(body + [turn, eos], eos, pad, tokenizer, []) == (body + [turn, eos], True)  # one id
    assert cut_response(body + [pad, pad], [eos, turn], pad, tokenizer, []) == (body, False)
    assert cut_response(body + [turn], [eos, turn], pad, tokenizer, ["=1"]) == (body[:4], True)  # the earlier
    assert cut_response(body[:2] + [turn] + body[2:], [eos, turn], pad, tokenizer, ["=1"]) == (body[:2] + [turn], True)


def test_decoding_and_the_update_pass_the_kv_cache_by_the_installed_transformers_name(policy):
    """No deprecation warning per decoding step: the cache goes in under the keyword the installed transformers
    takes (`credo.hf_compat.cache_keyword`; transformers 5.x warns on `past_key_values` at every call)."""
    import warnings

    from credo.hf_compat import cache_keyword
    from credo.policy import policy_logprobs

    model, tokenizer, prompts = policy
    assert cache_keyword(model) in ("cache", "past_key_values")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        out = generate(model, tokenizer, prompts * 2, max_new_tokens=6, repeat=2)
        policy_logprobs(model, out.prompt_ids, out.prompt_mask, out.response_ids, out.response_mask, temperature=1.0,
                        chunk_tokens=1024)


def test_decode_stops_each_row_at_its_own_limit_and_without_compaction_keeps_every_row(policy):
    from credo.rollout.generate import GROW_TOKENS, decode, left_pad, shared_prompt_cache

    model, tokenizer, prompts = policy
    ids, mask = left_pad(prompts, tokenizer.pad_token_id)
    limits = [3, 9, 5]
    runs = {}
    for compact in (True, False):
        cache = shared_prompt_cache(model, ids, mask.long(), 1, ids.shape[1] + GROW_TOKENS)
        with torch.no_grad():
            runs[compact] = decode(model, tokenizer, ids, mask.long(), cache, max_new_tokens=9, temperature=1.0,
                                   top_p=1.0, greedy=True, stop=[], end_ids=[], limits=limits, compact=compact)
        assert all(layer.keys.shape[0] == (1 if compact else 3) for layer in cache.layers)  # one row ran to the end
        assert int(cache.layers[0].cumulative_length) == ids.shape[1] - 1 + max(limits)
    for compact, rows in runs.items():
        assert [len(tokens) for tokens, *_ in rows] == limits and not any(ended for *_, ended in rows)
    assert [tokens for tokens, *_ in runs[True]] == [tokens for tokens, *_ in runs[False]]
