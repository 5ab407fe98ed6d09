"""Loading the policy: the testbed, a bundled preset, a GGUF file or a Hugging Face directory; optionally LoRA.

`model.path` is one of
- "testbed": the built-in testbed model (built and cached on first use, `credo.testbed`);
- a preset name such as "smollm2-135m" (`credo.gguf.PRESETS`): weights shipped in a pip package;
- a `.gguf` file, dequantised once into a cached model directory (`credo.gguf`);
- a Hugging Face causal-LM directory (saved with `save_pretrained`).
`make_backend` serves the loaded policy to the rollout samplers (transformers or vLLM generation).
"""

from __future__ import annotations

from pathlib import Path

import torch

from credo.config import ModelConfig
from credo.extras import require
from credo.gguf import PRESETS, converted_directory, preset_file
from credo.io import check_torch_archive
from credo.rollout.crn import CommonRandomNumbers
from credo.rollout.options import RolloutOptions
from credo.rollout.transformers_backend import TransformersBackend
from credo.tasks.base import short_repr


def check_model_path(config: ModelConfig) -> None:
    """That `config.path` names a model, checked without loading anything (`credo compare` checks every cell so
    before its first run): 'testbed', an installed preset, an existing .gguf file or a directory holding a
    config.json; a FileNotFoundError naming `model.path` otherwise."""
    if config.path == "testbed":
        return
    if config.path in PRESETS:
        preset_file(config.path)
        return
    path = Path(config.path).expanduser()
    accepted = (f"give a directory saved with save_pretrained, a .gguf file, 'testbed' or a preset "
                f"({', '.join(PRESETS)})")
    try:
        exists, is_file, has_config = path.exists(), path.is_file(), (path / "config.json").exists()
    except OSError as error:  # e.g. a name longer than the file system allows
        raise FileNotFoundError(f"model.path = {short_repr(config.path, 80)}: not a path this system can open "
                                f"({error.strerror}); {accepted}") from None
    if path.suffix == ".gguf" and not is_file:
        raise FileNotFoundError(f"model.path = {config.path!r}: no such GGUF file")
    if path.suffix != ".gguf" and not exists:
        raise FileNotFoundError(f"model.path = {config.path!r} does not exist; {accepted}")
    if path.suffix != ".gguf" and not has_config:
        raise FileNotFoundError(
            f"model.path = {config.path!r}: not a Hugging Face model directory (no config.json there); {accepted}")


def resolve_model_path(config: ModelConfig) -> Path:
    """The model directory for `config.path` (`check_model_path`), building or converting (once, cached) where
    needed."""
    check_model_path(config)
    if config.path == "testbed":
        from credo.testbed import TestbedConfig, build_testbed

        return build_testbed(TestbedConfig(**config.testbed))
    if config.path in PRESETS:
        return converted_directory(preset_file(config.path))
    path = Path(config.path).expanduser()
    return converted_directory(path) if path.suffix == ".gguf" else path


def load_tokenizer(path: Path):
    """The tokenizer of a model directory, padding on the left; code the directory names (`auto_map`) never runs."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def load_model(config: ModelConfig, device: torch.device):
    """(model, tokenizer) on `device`, with LoRA adapters when configured (only they then train).

    Code a model directory names for itself (`auto_map`) is never run (`trust_remote_code=False`: transformers
    would otherwise ask on stdin): a model that needs it is a ValueError. Weights saved by torch (`*.bin`) load
    only if they cannot inflate (`credo.io.check_torch_archive`); safetensors files bound themselves. A directory
    transformers cannot load (no weights, a broken config.json, no tokenizer) is a ValueError naming `model.path`."""
    from transformers import AutoModelForCausalLM

    path = resolve_model_path(config)
    for weights in sorted(path.glob("*.bin")):  # torch-pickled weights: refused if they would inflate on load
        check_torch_archive(weights)
    kwargs = {"dtype": getattr(torch, config.dtype), "trust_remote_code": False}
    attention = config.attn_implementation or ("eager" if config.path == "testbed" else None)
    if attention is not None:
        kwargs["attn_implementation"] = attention
    try:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs).to(device)
        tokenizer = load_tokenizer(path)
    except (OSError, ValueError) as error:  # transformers' own words for what the directory lacks
        raise ValueError(f"model.path = {config.path!r}: cannot load a causal LM and its tokenizer from {path}: "
                         f"{error}") from error
    if config.lora is not None:
        peft = require("peft", "lora", "model.lora (LoRA adapters)")
        lora = config.lora
        model = peft.get_peft_model(
            model,
            peft.LoraConfig(
                r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                target_modules=lora.target_modules, task_type="CAUSAL_LM",
            ),
        )
    return model, tokenizer


def make_backend(rollout: RolloutOptions, model, tokenizer, model_config: ModelConfig, *, seed: int = 0,
                 common_random_numbers: CommonRandomNumbers | None = None):
    """The generation backend `rollout.backend` names, serving `model`: transformers (the default, any device;
    keyed sampling with `common_random_numbers`) or vLLM (CUDA; it loads the directory `model_config` resolves
    to, then takes the policy's weights). A `rollout.max_new_tokens` of the model's positions or more, which leaves
    no room for a prompt, is a ValueError naming both."""
    positions = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if isinstance(positions, int) and rollout.max_new_tokens >= positions:
        raise ValueError(f"rollout.max_new_tokens = {rollout.max_new_tokens} leaves no room for a prompt: the model "
                         f"at model.path = {model_config.path!r} has {positions} positions (max_position_embeddings)")
    if rollout.backend == "vllm":
        from credo.rollout.vllm_backend import VllmBackend

        return VllmBackend(model, tokenizer, resolve_model_path(model_config), rollout.vllm, stop=rollout.stop,
                           seed=seed)
    return TransformersBackend(model, tokenizer, batch_size=rollout.generation_batch_size, stop=rollout.stop,
                               common_random_numbers=common_random_numbers, cuda_graphs=rollout.cuda_graphs)


def export_model(model, tokenizer, directory: Path) -> None:
    """Save a standard Hugging Face model directory (LoRA adapters merged into the weights)."""
    if hasattr(model, "merge_and_unload"):
        import copy

        model = copy.deepcopy(model).merge_and_unload()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
