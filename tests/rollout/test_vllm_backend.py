"""The vLLM backend's adapter code, against a stand-in engine (vLLM itself needs CUDA, absent here).

`FakeVllm` has the slice of vLLM's API the backend uses (`LLM`, `SamplingParams` with `stop_token_ids`, outputs
with `token_ids` / `finish_reason`, the in-process model's `load_weights`, `reset_prefix_cache`). Its engine
holds its own copy of the model, loaded from the model directory and updated only through `load_weights`,
and samples with credo's transformers generation under the request's seed: a sync that missed or misnamed
a weight shows up as different weights or different responses.
"""

from __future__ import annotations

import copy
import sys
import types

import pytest
import torch
from tiny import TINY, TINY_TESTBED

from credo.config import ConfigError, ModelConfig, load_config
from credo.models import load_model, resolve_model_path
from credo.rollout.generate import encode_prompts, generate
from credo.rollout.options import VllmConfig


class SamplingParams:
    def __init__(self, **kwargs) -> None:
        self.__dict__.update(kwargs)


class EngineModel:
    def __init__(self, model) -> None:
        self.model = model
        self.loads = 0

    def load_weights(self, weights) -> None:
        own = dict(self.model.named_parameters())
        for name, tensor in weights:
            own[name].data.copy_(tensor)  # a name vLLM does not know is a KeyError, as in vLLM
        self.loads += 1


class LLM:
    instances: list[LLM] = []

    def __init__(self, model: str, **kwargs) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.kwargs = kwargs
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        engine = EngineModel(AutoModelForCausalLM.from_pretrained(model, attn_implementation="eager"))
        worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(model=engine))
        self.llm_engine = types.SimpleNamespace(model_executor=types.SimpleNamespace(driver_worker=worker))
        self.engine_model = engine
        self.prefix_resets = 0
        LLM.instances.append(self)

    def generate(self, prompts, sampling_params, use_tqdm=True):
        p = sampling_params
        self.last_params = p
        torch.manual_seed(p.seed)
        ends = [self.tokenizer.eos_token_id, *(getattr(p, "stop_token_ids", None) or [])]  # as vLLM stops
        out = generate(self.engine_model.model, self.tokenizer, [x["prompt_token_ids"] for x in prompts],
                       max_new_tokens=p.max_tokens, temperature=p.temperature or 1.0, top_p=p.top_p,
                       greedy=p.temperature == 0.0, stop=p.stop, repeat=p.n, end_ids=ends)
        results = []
        for i in range(len(prompts)):
            samples = []
            for j in range(p.n):
                row = i * p.n + j
                ids = out.response_ids[row, out.response_mask[row]].tolist()
                samples.append(types.SimpleNamespace(token_ids=ids, finish_reason="length" if out.truncated[row] else "stop"))
            results.append(types.SimpleNamespace(outputs=samples))
        return results

    def reset_prefix_cache(self) -> None:
        self.prefix_resets += 1


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM, module.SamplingParams = LLM, SamplingParams
    LLM.instances = []
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setattr("credo.rollout.vllm_backend.cuda_available", lambda: True)
    return module


def tiny_policy(lora: bool = False):
    config = load_config(None, [f"model.testbed={TINY_TESTBED}"] + (["model.lora={r: 2, alpha: 4}"] if lora else []))
    model, tokenizer = load_model(config.model, torch.device("cpu"))
    return config, model, tokenizer, resolve_model_path(config.model)


def test_completions_match_the_transformers_backend(fake_vllm):
    from credo.rollout.transformers_backend import TransformersBackend
    from credo.rollout.vllm_backend import VllmBackend

    _, model, tokenizer, directory = tiny_policy()
    backend = VllmBackend(model, tokenizer, directory, VllmConfig(), seed=3)
    llm = LLM.instances[0]
    assert llm.kwargs["distributed_executor_backend"] == "external_launcher"
    assert llm.kwargs["gpu_memory_utilization"] == 0.3 and llm.kwargs["seed"] == 3
    prompts = encode_prompts(tokenizer, ["Compute 3+4.", "Compute 12-5."])

    torch.manual_seed(0)
    seed = int(torch.randint(2**31 - 1, ()))
    torch.manual_seed(seed)
    expected = TransformersBackend(model, tokenizer).generate(prompts, max_new_tokens=12, repeat=3)
    torch.manual_seed(0)
    got = backend.generate(prompts, max_new_tokens=12, repeat=3)
    assert torch.equal(got.response_ids, expected.response_ids)
    assert torch.equal(got.response_mask, expected.response_mask)
    assert torch.equal(got.prompt_ids, expected.prompt_ids)
    assert torch.equal(got.truncated, expected.truncated)
    assert got.texts == expected.texts
    greedy = backend.generate(prompts, max_new_tokens=12, greedy=True)
    assert greedy.texts == generate(model, tokenizer, prompts, max_new_tokens=12, greedy=True).texts


def test_vllm_stops_at_the_end_of_turn_ids_the_policy_declares(fake_vllm, monkeypatch):
    from rollout.test_generate import emits_at

    from credo.rollout.vllm_backend import VllmBackend
    from credo.testbed import USER

    _, model, tokenizer, directory = tiny_policy()
    backend = VllmBackend(model, tokenizer, directory, VllmConfig())
    llm = LLM.instances[0]
    eos, turn = tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids(USER)
    prompt = encode_prompts(tokenizer, ["Compute 3+4."])[0]
    with emits_at(llm.engine_model.model, turn, len(prompt) - 1 + 3, held=[eos, turn]):
        out = backend.generate([prompt], max_new_tokens=8, repeat=2)
        assert llm.last_params.stop_token_ids == [eos]
        assert out.truncated.all() and out.response_mask.sum(dim=1).tolist() == [8, 8]
        monkeypatch.setattr(model.generation_config, "eos_token_id", [eos, turn])  # the policy's, not the engine's
        out = backend.generate([prompt], max_new_tokens=8, repeat=2)
        assert llm.last_params.stop_token_ids == [eos, turn]
        assert out.response_mask.sum(dim=1).tolist() == [4, 4] and not out.truncated.any()
        assert out.response_ids[:, 3].tolist() == [turn, turn]


def test_weight_sync_merges_lora_adapters_under_the_plain_names(fake_vllm):
    from credo.rollout.vllm_backend import VllmBackend, vllm_named_weights

    _, model, tokenizer, directory = tiny_policy(lora=True)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_()  # adapters that change the weights (peft starts B at 0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    backend = VllmBackend(model, tokenizer, directory, VllmConfig())
    engine = LLM.instances[0].engine_model
    merged = copy.deepcopy(model).merge_and_unload()
    names = {name for name, _ in vllm_named_weights(model)}
    assert names == {name for name, _ in merged.named_parameters()}
    for name, param in merged.named_parameters():
        assert torch.allclose(dict(engine.model.named_parameters())[name], param, atol=1e-6), name
    base, _ = load_model(ModelConfig(path=str(directory)), torch.device("cpu"))
    name = "model.layers.0.self_attn.q_proj.weight"  # an adapted layer: the engine got base + B A, not base
    assert not torch.allclose(dict(engine.model.named_parameters())[name], dict(base.named_parameters())[name])
    for name, param in model.named_parameters():  # adapters unmerged again: the policy is unchanged
        assert torch.allclose(param, before[name], atol=1e-6), name  # up to float rounding of W + BA - BA
    backend.sync_weights()
    assert engine.loads == 2 and LLM.instances[0].prefix_resets == 2


def test_training_keeps_the_engine_on_the_policys_weights(fake_vllm, tmp_path):
    from credo.train import train

    config = load_config(None, TINY + ["rollout.backend=vllm", "optim.lr=1e-2"])
    train(config, tmp_path / "run", show_progress=False)
    llm = LLM.instances[0]
    trained, _ = load_model(ModelConfig(path=str(tmp_path / "run" / "model")), torch.device("cpu"))
    for name, param in trained.named_parameters():
        assert torch.equal(dict(llm.engine_model.model.named_parameters())[name], param), name
    assert llm.engine_model.loads == 1 + config.train.steps  # at start, then after every update


def test_vllm_backend_on_cpu_is_a_config_error():
    with pytest.raises(ConfigError, match="rollout.backend = vllm needs a CUDA GPU"):
        load_config(None, ["rollout.backend=vllm", "train.device=cpu"])


def test_vllm_backend_without_a_gpu_says_so(monkeypatch):
    from credo.rollout.vllm_backend import VllmBackend

    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setattr("credo.rollout.vllm_backend.cuda_available", lambda: False)
    _, model, tokenizer, directory = tiny_policy()
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        VllmBackend(model, tokenizer, directory, VllmConfig())
