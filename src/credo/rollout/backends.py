"""The generation backend a run samples with: transformers (the default, any device) or vLLM (CUDA)."""

from __future__ import annotations

from credo.config import ModelConfig, RolloutConfig
from credo.rollout.generate import TransformersBackend


def make_backend(rollout: RolloutConfig, model, tokenizer, model_config: ModelConfig, *, seed: int = 0):
    """The backend `rollout.backend` names, serving `model` (vLLM loads the directory `model_config` resolves
    to, then takes the policy's weights)."""
    if rollout.backend == "vllm":
        from credo.models import resolve_model_path
        from credo.rollout.vllm_backend import VllmBackend

        return VllmBackend(model, tokenizer, resolve_model_path(model_config), rollout.vllm, stop=rollout.stop,
                           seed=seed)
    return TransformersBackend(model, tokenizer, batch_size=rollout.generation_batch_size, stop=rollout.stop)
