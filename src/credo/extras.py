"""Optional packages: import them by name, or fail with the `pip install 'credo[<extra>]'` that brings them.

credo's core needs torch and transformers only; GGUF files, LoRA, reasoning-gym tasks, math grading, vLLM
and the engine plug-ins each live behind an extra. `require("peft", "lora", "LoRA adapters")` returns the
module, or raises `MissingExtra`, whose message says what needed it and what to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

EXTRAS = {
    "gguf": "GGUF model files (model.path: *.gguf or the smollm2-135m preset)",
    "lora": "LoRA adapters (model.lora)",
    "tasks": "reasoning-gym tasks and math-verify grading",
    "data": "local Hugging Face datasets files (task: dataset; parquet, json, jsonl, arrow)",
    "vllm": "the vLLM generation backend (rollout.backend: vllm; CUDA only)",
    "trl": "the TRL GRPOTrainer integration (credo.integrations.trl) and benchmarks/vs_trl.py",
    "verl": "the verl integration (credo.integrations.verl)",
    "tensorboard": "TensorBoard logging (train.report_to: [tensorboard])",
    "wandb": "Weights & Biases logging (train.report_to: [wandb])",
    "mlflow": "MLflow logging (train.report_to: [mlflow])",
    "trackio": "trackio logging (train.report_to: [trackio])",
}
"""Each extra of `pyproject.toml` and what it enables."""


class MissingExtra(ImportError):
    """An optional package credo needs for the requested feature is not installed."""


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """`import module`, or a `MissingExtra` naming `purpose` and the extra to install."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; known: {', '.join(EXTRAS)}")
    try:
        return importlib.import_module(module)
    except ImportError as error:
        if error.name is not None and error.name.split(".")[0] != module.split(".")[0]:
            raise  # the package is there but broken: its own error says more than ours would
        raise MissingExtra(
            f"{purpose} needs the optional package {module.split('.')[0]!r}, which is not installed; "
            f"install it with: pip install 'credo[{extra}]'"
        ) from None
