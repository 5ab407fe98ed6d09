"""Loading the policy: the built-in testbed model or any Hugging Face causal-LM directory, optionally LoRA."""

from __future__ import annotations

from pathlib import Path

import torch

from credo.config import ModelConfig


def resolve_model_path(config: ModelConfig) -> Path:
    """The model directory for `config.path` ("testbed": build or find the cached testbed model)."""
    if config.path == "testbed":
        from credo.testbed import TestbedConfig, build_testbed

        return build_testbed(TestbedConfig(**config.testbed))
    path = Path(config.path).expanduser()
    if not (path / "config.json").exists():
        raise FileNotFoundError(
            f"model.path = {config.path!r}: not a Hugging Face model directory (no config.json there); "
            "give a directory saved with save_pretrained, or 'testbed'"
        )
    return path


def load_tokenizer(path: Path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def load_model(config: ModelConfig, device: torch.device):
    """(model, tokenizer) on `device`, with LoRA adapters when configured (only they then train)."""
    from transformers import AutoModelForCausalLM

    path = resolve_model_path(config)
    kwargs = {"dtype": getattr(torch, config.dtype)}
    attention = config.attn_implementation or ("eager" if config.path == "testbed" else None)
    if attention is not None:
        kwargs["attn_implementation"] = attention
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs).to(device)
    if config.lora is not None:
        from peft import LoraConfig as PeftLoraConfig
        from peft import get_peft_model

        lora = config.lora
        model = get_peft_model(
            model,
            PeftLoraConfig(
                r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                target_modules=lora.target_modules, task_type="CAUSAL_LM",
            ),
        )
    return model, load_tokenizer(path)


def export_model(model, tokenizer, directory: Path) -> None:
    """Save a standard Hugging Face model directory (LoRA adapters merged into the weights)."""
    if hasattr(model, "merge_and_unload"):
        import copy

        model = copy.deepcopy(model).merge_and_unload()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
