"""Continuations of a shared prefix: one KV cache expanded across them vs re-encoding the prefix per row.

RRPO/SRPO sample `c = 4` continuations from each seed's `prompt + prefix`. credo's `generate(..., repeat=c)`
computes each prefix's KV cache once and expands it across its continuations; the reference re-encodes
the prefix for every continuation (the prompt repeated `c` times). Both run here, one after the other, on
the same random-initialised Llama (no weights needed: the cost does not depend on them; default hidden 512
x 8 layers, 25M parameters), with a prefix of 3/4 of the response budget and greedy decoding (both paths
must give the same tokens, checked). The saving is the prefill of `c - 1` prefix copies; on a CPU the
decoding steps cost about the same on both paths, so the ratio grows with the model's size (prefill is
compute, decoding is mostly per-step overhead at these sizes): hidden 256 x 4 layers gives about 1.25.

Last line: `RESULT prefix_reuse_speedup=<reference time / shared-cache time>` (target >= 1.5).

    python benchmarks/reset_prefix_reuse.py                 # budget 1024: prefix 768, 256 new tokens (~4 min)
    python benchmarks/reset_prefix_reuse.py --hidden 256 --layers 4
    python benchmarks/reset_prefix_reuse.py --quick         # smoke test in seconds (sizes of QUICK)
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

QUICK = {"budget": 32, "seeds": 2, "continuations": 2, "hidden": 64, "layers": 2, "repeats": 1}
"""Sizes of `--quick`, a smoke test in seconds (the ratio means little at these sizes)."""


def build(hidden: int, layers: int, positions: int, vocab: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=8,
                         num_key_value_heads=8, intermediate_size=4 * hidden, max_position_embeddings=positions,
                         pad_token_id=0, eos_token_id=1)
    return LlamaForCausalLM(config).eval()


class _Tokenizer:
    pad_token_id, eos_token_id = 0, 1

    def batch_decode(self, rows, skip_special_tokens=True):
        return [" ".join(map(str, r)) for r in rows]


def main(argv: list[str] | None = None) -> None:
    from credo.rollout.generate import generate

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=int, default=1024, help="response budget; the prefix is 3/4 of it")
    parser.add_argument("--seeds", type=int, default=8, help="prefixes (seeds) generated together")
    parser.add_argument("--continuations", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="smoke test in seconds: the sizes of QUICK, for the above")
    args = parser.parse_args(argv)
    if args.quick:
        vars(args).update(QUICK)
    prefix_len = 3 * args.budget // 4
    new_tokens = args.budget - prefix_len
    model = build(args.hidden, args.layers, args.budget + 64, vocab=4096)
    gen = torch.Generator().manual_seed(1)
    prefixes = [torch.randint(2, 4096, (prefix_len,), generator=gen).tolist() for _ in range(args.seeds)]
    tokenizer = _Tokenizer()
    c = args.continuations
    options = dict(max_new_tokens=new_tokens, greedy=True, batch_size=args.seeds * c)

    def shared():
        return generate(model, tokenizer, prefixes, repeat=c, **options)

    def reencoded():
        return generate(model, tokenizer, [p for p in prefixes for _ in range(c)], **options)

    a, b = shared(), reencoded()  # warm-up, and the two paths must agree
    same = torch.equal(a.response_ids, b.response_ids)
    times = {"shared cache": [], "re-encoded": []}
    for _ in range(args.repeats):
        for name, fn in (("re-encoded", reencoded), ("shared cache", shared)):
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"reset continuations: {args.seeds} prefixes x {c} continuations, prefix {prefix_len} tokens, "
          f"{new_tokens} new tokens (greedy), Llama hidden {args.hidden} x {args.layers} layers, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads; median of {args.repeats}")
    for name, seconds in med.items():
        print(f"  {name:<13} {seconds:8.2f} s")
    print(f"  identical tokens: {same}")
    print(f"RESULT prefix_reuse_speedup={med['re-encoded'] / med['shared cache']:.3g}")


if __name__ == "__main__":
    main()
