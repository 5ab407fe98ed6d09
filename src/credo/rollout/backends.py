"""The generation backend a run samples with: transformers (the default, any device) or vLLM (CUDA)."""

from __future__ import annotations

from pathlib import Path

from credo.config import RolloutConfig
from credo.rollout.generate import TransformersBackend


def make_backend(rollout: RolloutConfig, model, tokenizer, model_dir: Path, *, seed: int = 0):
    """The backend `rollout.backend` names, serving `model` (vLLM loads `model_dir`, then the policy's weights)."""
    if rollout.backend == "vllm":
        from credo.rollout.vllm_backend import VllmBackend

        return VllmBackend(model, tokenizer, model_dir, rollout.vllm, stop=rollout.stop, seed=seed)
    return TransformersBackend(model, tokenizer, batch_size=rollout.generation_batch_size, stop=rollout.stop)
