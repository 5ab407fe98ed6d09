"""The vLLM generation backend: vLLM in the trainer's process on the same GPU, fed the policy's weights.

Optional (`pip install 'credo[vllm]'`, CUDA only); transformers' `generate` stays the default everywhere.
It follows TRL's "colocate" mode: `vllm.LLM(..., distributed_executor_backend="external_launcher")` keeps
the engine in this process, so after every optimiser step the policy's weights are copied in place into
vLLM's model (`load_weights`, LoRA adapters merged first) and its prefix cache is dropped. Responses come
back as the same `Completions` the transformers backend gives: token ids cut by the same rule (the first end
token, the tokenizer's or an end-of-turn id the policy's generation config declares, or stop string kept; the
end ids go to vLLM as `stop_token_ids`), texts decoded by the policy's tokenizer, `truncated` when vLLM hit
`max_tokens`.
Sampling seeds are drawn from torch's RNG, so a seeded run samples the same responses again.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator

import torch

from credo.extras import require
from credo.rollout.generate import Completions, cut_response, end_token_ids
from credo.rollout.options import VllmConfig


class VllmBackend:
    """`generate(prompts, ...)` like `TransformersBackend`, served by a colocated vLLM engine."""

    def __init__(self, model, tokenizer, model_dir, options: VllmConfig, *, stop: list[str] | None = None,
                 seed: int = 0) -> None:
        vllm = require("vllm", "vllm", "rollout.backend = vllm")
        if not cuda_available():
            raise RuntimeError("rollout.backend = vllm needs a CUDA GPU; use rollout.backend = transformers on CPU")
        for name, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "localhost")):
            os.environ.setdefault(name, value)
        os.environ.setdefault("MASTER_PORT", str(free_port()))
        self.vllm, self.model, self.tokenizer, self.stop = vllm, model, tokenizer, list(stop or [])
        self.options = options
        self.llm = vllm.LLM(
            model=str(model_dir), dtype=options.dtype, gpu_memory_utilization=options.gpu_memory_utilization,
            max_model_len=options.max_model_len, enable_sleep_mode=options.enable_sleep_mode, seed=seed,
            distributed_executor_backend="external_launcher", trust_remote_code=False,
        )
        self.sync_weights()
        if options.enable_sleep_mode:
            self.llm.sleep(level=1)

    def generate(self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, greedy: bool = False, repeat: int = 1,
                 stop: list[str] | None = None) -> Completions:
        """`repeat` responses per prompt (prompt 0's first), as `credo.rollout.generate.generate` gives them."""
        ends = end_token_ids(self.model, self.tokenizer)
        stop = [*(self.stop or []), *(stop or [])]
        params = self.vllm.SamplingParams(
            n=repeat, temperature=0.0 if greedy else temperature, top_p=1.0 if greedy else top_p,
            max_tokens=max_new_tokens, stop=stop or None, include_stop_str_in_output=True,
            stop_token_ids=ends, seed=int(torch.randint(2**31 - 1, ())),
        )
        if self.options.enable_sleep_mode:
            self.llm.wake_up()
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in prompts], sampling_params=params,
                                    use_tqdm=False)
        if self.options.enable_sleep_mode:
            self.llm.sleep(level=1)
        pad = self.tokenizer.pad_token_id
        responses, truncated = [], []
        for output in outputs:
            for sample in output.outputs:
                response, done = cut_response(list(sample.token_ids), ends, pad, self.tokenizer, stop)
                responses.append(response)
                truncated.append(not done and sample.finish_reason == "length")
        texts = self.tokenizer.batch_decode(responses, skip_special_tokens=True)
        return Completions.from_lists([p for p in prompts for _ in range(repeat)], responses, texts, truncated, pad)

    def sync_weights(self) -> None:
        """Copy the policy's current weights into vLLM's model and drop its prefix cache."""
        if self.options.enable_sleep_mode:
            self.llm.wake_up(tags=["weights"])
        engine_model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
        with merged_adapters(self.model):
            engine_model.load_weights(vllm_named_weights(self.model))
        self.llm.reset_prefix_cache()
        if self.options.enable_sleep_mode:
            self.llm.sleep(level=1)


@contextlib.contextmanager
def merged_adapters(model) -> Iterator[None]:
    """LoRA adapters merged into the base weights (peft models) inside the block, unmerged after it."""
    peft = hasattr(model, "merge_adapter")
    if peft:
        model.merge_adapter()
    try:
        yield
    finally:
        if peft:
            model.unmerge_adapter()


def vllm_named_weights(model) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's parameters under the names of the plain Hugging Face model (what vLLM's `load_weights`
    reads): peft's `base_model.model.` prefix and `.base_layer` removed, adapter tensors left out (they are
    merged already), as TRL's colocate sync does."""
    adapter_prefix = getattr(model, "prefix", None) if hasattr(model, "merge_adapter") else None
    for name, param in model.named_parameters():
        name = name.removeprefix("base_model.model.").replace(".base_layer", "")
        if adapter_prefix and adapter_prefix in name:
            continue
        if "original_module" in name:
            continue
        yield name.replace("modules_to_save.default.", ""), param.data


def cuda_available() -> bool:
    return torch.cuda.is_available()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]
