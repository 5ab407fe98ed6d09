"""Decoding steps replayed from CUDA graphs give the tokens of plain forward passes (GPU only; on CPU a step is a
plain forward pass and every other sampling test covers it)."""

from __future__ import annotations

import pytest
import torch

from credo.rollout import generate as generation
from credo.rollout.decode_step import DecodeStep, can_replay
from credo.rollout.generate import generate, shared_prompt_cache

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")


def test_a_cpu_model_decodes_without_graphs(policy):
    model, _, prompts = policy
    ids = torch.tensor([prompts[1]])
    cache = shared_prompt_cache(model, ids, torch.ones_like(ids), 1, ids.shape[1] + 8)
    step = DecodeStep(model, cache, graphs=True)
    assert not can_replay(model, cache) and not step.graphs


@cuda
@pytest.mark.parametrize("greedy", [True, False])
def test_graph_replays_give_the_tokens_of_forward_passes(policy, monkeypatch, greedy):
    """With rows ending at different steps (finished rows dropped, so graphs are recorded again) and a cache that
    grows every 5 positions, the replayed steps pick the same tokens as plain forward passes."""
    model, tokenizer, prompts = policy
    model = model.to("cuda")

    def end_sometimes(module, args, kwargs, output):
        positions = kwargs["position_ids"][:, -1:]
        output.logits[:, -1:, tokenizer.eos_token_id] += 50.0 * (positions % 9 == 0)

    hook = model.register_forward_hook(end_sometimes, with_kwargs=True)
    recorded = []
    original = DecodeStep.record
    monkeypatch.setattr(DecodeStep, "record", lambda self, *a: (recorded.append(1), original(self, *a)))
    monkeypatch.setattr(generation, "GROW_TOKENS", 5)
    keys = torch.arange(len(prompts) * 4, dtype=torch.long)
    runs = [generate(model, tokenizer, prompts, max_new_tokens=24, greedy=greedy, repeat=4, cuda_graphs=graphs,
                     keys=None if greedy else keys) for graphs in (False, True)]
    hook.remove()
    model.to("cpu")
    eager, graphed = runs
    assert len(recorded) >= 3  # recorded again after the cache grew and after rows left
    assert len(set(eager.response_mask.sum(dim=1).tolist())) > 1
    assert torch.equal(eager.response_ids, graphed.response_ids)
    assert eager.texts == graphed.texts
