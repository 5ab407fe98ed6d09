"""Sampling: credo's decode loop against transformers' `generate`, compaction of finished rows, top-p."""

from __future__ import annotations

import pytest
import torch
from tiny import TINY_TESTBED

from credo.config import load_config
from credo.models import load_model
from credo.rollout import generate as generation
from credo.rollout.generate import encode_prompts, generate, pick_tokens


@pytest.fixture(scope="module")
def policy():
    config = load_config(None, [f"model.testbed={TINY_TESTBED}"])
    model, tokenizer = load_model(config.model, torch.device("cpu"))
    prompts = encode_prompts(tokenizer, ["07+5*3-4?", "1-2?", "33*4+1-9*2?"])
    return model.eval(), tokenizer, prompts


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
