"""One decoding step: a forward pass of one token per row over a static KV cache, replayed from a CUDA graph on
a GPU.

Decoding a small model on a GPU is bound by kernel launches, not by arithmetic: profiled on an H200 (SmolLM2-135M,
512 rows, docs/results/gpu-time-profile.md), the GPU was busy 31% of decoding's wall time, with about 1,400
kernel launches per token. A CUDA graph (`torch.cuda.CUDAGraph`) records a step's kernels once and replays them
with one launch: the mechanism behind vLLM's decoding and transformers' `torch.compile(mode="reduce-overhead")`,
here without compiling anything.

A graph holds the addresses of its inputs and of the cache's tensors, so it is recorded for the batch's rows and
the cache's capacity, and recorded again when `credo.rollout.generate.decode` drops finished rows or grows the
cache (a few times per batch); before each replay the step's token and positions are copied into the graph's
input buffers, and the attention mask is written in place by `decode`. Recording runs the step once on a side
stream (lazy allocations and library handles happen outside the capture) and puts back the cache's filled length,
which that run advanced, so the replay that follows performs the step itself. Each graph has its own memory pool,
released with it when the next one is recorded.

Graphs need the forward pass to run without a host synchronisation: transformers' static cache must keep its
filled length on the device (`StaticLayer.cumulative_length`, transformers 5.x); where it does not, or on CPU,
or with `graphs=False` (`rollout.cuda_graphs`), every step runs the forward pass directly. A recording that fails
stops decoding with an error naming that switch: a failed capture leaves CUDA's state (its random generator's
capture flag, the allocator's pools) unusable for the rest of the process, so there is no silent fallback.
"""

from __future__ import annotations

import torch
from torch import Tensor

from credo.hf_compat import cache_keyword


class DecodeStep:
    """`step(token, attention, positions)`: the float32 logits (n, V) of the next token of each of n rows, given
    each row's last token (n, 1), its attention mask over the cache's capacity (n, L) and its position (n, 1)."""

    def __init__(self, model, cache, *, graphs: bool = True) -> None:
        self.model, self.cache, self.keyword = model, cache, cache_keyword(model)
        self.graphs = graphs and can_replay(model, cache)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.recorded_for: tuple | None = None
        self.inputs: tuple[Tensor, Tensor, Tensor] | None = None
        self.logits: Tensor | None = None

    def forward(self, token: Tensor, attention: Tensor, positions: Tensor) -> Tensor:
        return self.model(input_ids=token, attention_mask=attention, position_ids=positions,
                          **{self.keyword: self.cache}, use_cache=True, logits_to_keep=1).logits[:, -1].float()

    def __call__(self, token: Tensor, attention: Tensor, positions: Tensor) -> Tensor:
        if not self.graphs or not all(layer.is_initialized for layer in self.cache.layers):
            return self.forward(token, attention, positions)  # the first step allocates an empty cache's tensors
        shape = (attention.data_ptr(), tuple(attention.shape), self.cache.layers[0].keys.data_ptr())
        if shape != self.recorded_for:
            try:
                self.record(token, attention, positions)
            except RuntimeError as error:  # a failed capture leaves CUDA's state unusable: no fallback in-process
                raise RuntimeError(f"recording a CUDA graph of a decoding step failed ({error}); decode without "
                                   f"graphs: rollout.cuda_graphs=false") from error
            self.recorded_for = shape
        graph_token, _, graph_positions = self.inputs
        graph_token.copy_(token)
        graph_positions.copy_(positions)
        self.graph.replay()
        return self.logits

    def record(self, token: Tensor, attention: Tensor, positions: Tensor) -> None:
        """Record the step for these rows, mask and cache; the cache's filled length is left as it was."""
        self.graph = self.logits = None  # the old graph and its memory pool go first
        self.inputs = (token.clone(), attention, positions.clone())
        filled = [layer.cumulative_length.clone() for layer in self.cache.layers]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.forward(*self.inputs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            logits = self.forward(*self.inputs)
        for layer, length in zip(self.cache.layers, filled):
            layer.cumulative_length.copy_(length)
        self.graph, self.logits = graph, logits


def can_replay(model, cache) -> bool:
    """Whether a decoding step over `cache` can be recorded as a CUDA graph: the model is on a CUDA device and
    every layer of the static cache keeps its filled length as a tensor (no host synchronisation per step)."""
    device = next(model.parameters()).device
    return device.type == "cuda" and all(isinstance(getattr(layer, "cumulative_length", None), Tensor)
                                         for layer in cache.layers)
