"""The policy's log-prob pass: prompts shared by a group run once, and give what each row alone gives."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from credo.logprobs import STATISTICS
from credo.policy import policy_logprobs
from credo.rollout.generate import left_pad, right_pad


def tiny_llama(attention: str) -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=60, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, attn_implementation=attention))


def grouped_rows(seed: int = 1):
    """3 prompts of different lengths x 3 sampled responses of different lengths each."""
    gen = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(1, 60, (n,), generator=gen).tolist() for n in (5, 2, 7)]
    rows = [(p, torch.randint(1, 60, (int(torch.randint(1, 9, (), generator=gen)),), generator=gen).tolist())
            for p in prompts for _ in range(3)]
    prompt_ids, prompt_mask = left_pad([p for p, _ in rows], 0)
    response_ids, response_mask = right_pad([r for _, r in rows], 0)
    return rows, prompt_ids, prompt_mask, response_ids, response_mask


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_shared_prompts_give_each_rows_own_logprobs_and_gradients(attention):
    model = tiny_llama(attention)
    rows, prompt_ids, prompt_mask, response_ids, response_mask = grouped_rows()
    weights = torch.randn(response_ids.shape, generator=torch.Generator().manual_seed(2))
    logp, stats = policy_logprobs(model, prompt_ids, prompt_mask, response_ids, response_mask, temperature=0.7,
                                  chunk_tokens=5, statistics=STATISTICS)
    (logp * weights * response_mask).sum().backward()
    shared_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    for i, (prompt, response) in enumerate(rows):  # each row alone: no padding, no sharing
        alone, alone_stats = policy_logprobs(
            model, torch.tensor([prompt]), torch.ones(1, len(prompt), dtype=torch.bool), torch.tensor([response]),
            torch.ones(1, len(response), dtype=torch.bool), temperature=0.7, chunk_tokens=5, statistics=STATISTICS)
        assert torch.allclose(logp[i, : len(response)], alone[0], atol=1e-5)
        for name in STATISTICS:
            assert torch.allclose(stats[name][i, : len(response)], alone_stats[name][0], atol=1e-5), name
        (alone[0] * weights[i, : len(response)]).sum().backward()
    for name, param in model.named_parameters():
        assert torch.allclose(shared_grads[name], param.grad, atol=1e-5, rtol=1e-4), name


def test_distinct_prompts_take_the_single_pass():
    model = tiny_llama("eager")
    _, prompt_ids, prompt_mask, response_ids, response_mask = grouped_rows()
    rows = torch.tensor([0, 3, 6])  # one row per prompt
    calls = []
    handle = model.get_decoder().register_forward_hook(lambda module, args, kwargs_out: calls.append(1))
    policy_logprobs(model, prompt_ids[rows], prompt_mask[rows], response_ids[rows], response_mask[rows],
                    temperature=1.0, chunk_tokens=8)
    policy_logprobs(model, prompt_ids, prompt_mask, response_ids, response_mask, temperature=1.0, chunk_tokens=8)
    handle.remove()
    assert len(calls) == 3  # one pass without sharing, two (prompts, then responses over their cache) with it
