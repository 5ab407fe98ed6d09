"""Fewer key/value heads against one per head: decoding the long regime's rollouts with grouped-query attention.

A long-regime run spends about half its time decoding, which on a CPU is bound by reading the float32 key/value
cache, not by FLOPs (docs/testbed.md, "Regime knobs"; a 128 x 320 batch reads up to ~160 MB a step). Testbed models
may share key/value heads between query heads (`model.num_kv_heads`, as modern LLMs do), which shrinks the cache in
proportion and keeps the physics. This benchmark decodes the same prompts with credo's sampler on untrained copies
of the long regime's architecture (4 layers, hidden 128, 4 query heads, 640 positions, sdpa) with 4, 2 and 1
key/value heads, taking turns, the weights of each drawn from one seed (timing does not depend on training).

    python benchmarks/kv_heads.py               # 16 prompts x 8 samples x 320 new tokens, 3 alternating repeats
    python benchmarks/kv_heads.py --quick       # smoke test in seconds (2 x 2 x 8 on a tiny model)

Result lines: `RESULT kv_heads_speedup_<k>=<time with 4 key/value heads / time with k>` for k = 2 and 1.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

LONG = {"hidden_size": 128, "num_layers": 4, "num_heads": 4, "intermediate_size": 384, "max_positions": 640,
        "attn_implementation": "sdpa"}
"""The long regime's testbed architecture (configs/testbed/long/regime.yaml)."""
TINY = {"hidden_size": 32, "num_layers": 1, "num_heads": 4, "intermediate_size": 64, "max_positions": 64,
        "attn_implementation": "sdpa"}
"""`--quick`'s architecture."""


def model_with(kv_heads: int, architecture: dict):
    from credo.testbed import TestbedModel, build_tokenizer, new_model

    torch.manual_seed(0)
    tokenizer = build_tokenizer()
    model = new_model(TestbedModel(**architecture, num_kv_heads=kv_heads), tokenizer)
    return model.eval(), tokenizer


def decode(model, tokenizer, prompts: list[list[int]], group: int, new_tokens: int) -> int:
    """credo's sampling of every prompt's group, no early stop; returns the tokens generated."""
    from credo.rollout.generate import generate

    with torch.no_grad():
        out = generate(model, tokenizer, prompts, max_new_tokens=new_tokens, temperature=1.0, top_p=1.0,
                       repeat=group, batch_size=len(prompts) * group, end_ids=[])
    return out.tokens


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per model (median), after a warm-up")
    parser.add_argument("--quick", action="store_true", help="smoke test on a tiny model")
    args = parser.parse_args(argv)
    prompts_n, group, new_tokens, architecture = (2, 2, 8, TINY) if args.quick else (16, 8, 320, LONG)
    repeats = 1 if args.quick else args.repeats
    models = {k: model_with(k, architecture) for k in (4, 2, 1)}
    _, tokenizer = models[4]
    rng = torch.Generator().manual_seed(1)
    prompts = [torch.randint(10, 60, (24,), generator=rng).tolist() for _ in range(prompts_n)]  # labelled chains' length
    times: dict[int, list[float]] = {k: [] for k in models}
    expected = prompts_n * group * new_tokens
    for model, tok in models.values():  # warm-up
        decode(model, tok, prompts, group, new_tokens)
    for _ in range(repeats):  # alternating, so load from elsewhere hits every model alike
        for k, (model, tok) in models.items():
            started = time.perf_counter()
            tokens = decode(model, tok, prompts, group, new_tokens)
            times[k].append(time.perf_counter() - started)
            if tokens != expected:
                raise RuntimeError(f"{k} key/value heads generated {tokens} tokens, not {expected}")
    median = {k: statistics.median(t) for k, t in times.items()}
    print(f"{prompts_n * group} rows x {new_tokens} new tokens, {torch.get_num_threads()} threads; "
          + "; ".join(f"{k} key/value heads {' '.join(f'{t:.2f}' for t in times[k])} s" for k in models), flush=True)
    for k in (2, 1):
        print(f"RESULT kv_heads_speedup_{k}={median[4] / median[k]:.2f}")


if __name__ == "__main__":
    main()
