"""The general sampling options of a run (`rollout:` in a config): the backend, the batch's prompts and groups,
generation, the group sampler's DAPO options.

A sampler's own section (`rollout.resets`, `rollout.vine`, ...) lives in the sampler's module
(`credo.rollout.samplers`), which composes `RolloutConfig` from these options and every registered sampler's
section; the rollout layer needs nothing from `credo.config`, which only assembles the sections into a `RunConfig`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from credo.schema import Section


class VllmConfig(Section):
    """Options of the vLLM generation backend (`rollout.backend: vllm`; CUDA only, `pip install 'credo[vllm]'`).

    vLLM runs in the trainer's process on the same GPU (TRL's "colocate" mode) and receives the policy's
    weights after every optimiser step.
    """

    gpu_memory_utilization: float = Field(0.3, gt=0.0, le=1.0)
    """Share of the GPU's memory vLLM may take for its weights and KV cache (the trainer needs the rest)."""
    max_model_len: int | None = Field(None, ge=1)
    """Longest prompt + response (None: the model's own limit)."""
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "bfloat16"
    """Dtype of vLLM's copy of the weights ("auto": vLLM picks it from the model's own dtype)."""
    enable_sleep_mode: bool = False
    """Free vLLM's memory during the update (its weights and KV cache are offloaded and restored)."""


class RolloutOptions(Section):
    """The general keys of `rollout:` (every sampler reads them); `credo.rollout.samplers.RolloutConfig` adds
    each sampler's own section."""

    backend: Literal["transformers", "vllm"] = "transformers"
    """Generation engine: transformers' `generate` (everywhere) or vLLM (CUDA only, optional extra)."""
    vllm: VllmConfig = VllmConfig()
    """Options of the vLLM backend (read only when `backend` is "vllm")."""
    prompts_per_step: int = Field(16, ge=1)
    """Prompts per rollout batch (groups per optimiser step)."""
    group_size: int = Field(8, ge=2)
    """Responses sampled per prompt."""
    max_new_tokens: int = Field(48, ge=1)
    """Most tokens generated per response, in training and evaluation; a longer response is cut (truncated)."""
    temperature: float = Field(1.0, gt=0.0)
    """Sampling temperature of the rollouts; the update's log-probs use the same (logits / temperature)."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling: draw from the smallest set of tokens whose probability reaches top_p (1.0: off)."""
    common_random_numbers: bool = False
    """Key every sampling draw by (seed, step, call, row, token), so paired runs share their sampling noise.

    Common random numbers (`credo.rollout.crn`): two methods' runs on one seed draw the same uniforms for the same
    rows, a variance reduction for paired comparisons. Transformers backend only."""
    stop: list[str] = Field(default_factory=list)
    """Extra stop strings (the tokenizer's end-of-sequence token always stops)."""
    generation_batch_size: int = Field(256, ge=1)
    """Rows generated together (memory bound)."""
    cuda_graphs: bool = True
    """On a GPU, replay each decoding step from a CUDA graph; ignored on CPU.

    Decoding a small model on a GPU is bound by kernel launches; a graph replays a step's kernels with one launch
    (`credo.rollout.decode_step`). Off: a forward pass per step. Transformers backend."""
    dynamic_sampling: bool = False
    """DAPO: drop groups whose rewards are all equal and refill with new prompts."""
    max_refills: int = Field(3, ge=0)
    """Extra sampling rounds dynamic sampling may spend to fill the batch."""
    overlong_buffer: int | None = Field(None, ge=1)
    """DAPO's soft overlong penalty: the last `overlong_buffer` tokens before max_new_tokens cost up to -1."""
    reward_errors: Literal["raise", "zero"] = "raise"
    """A verifier that raises: stop the step showing the prompt ("raise"), or reward 0 with a warning."""
    @model_validator(mode="after")
    def _keyed_sampling_needs_transformers(self) -> RolloutOptions:
        if self.common_random_numbers and self.backend != "transformers":
            raise ValueError(f"rollout.common_random_numbers needs the transformers backend (rollout.backend is "
                             f"{self.backend!r}, which samples with its own generator)")
        return self
