"""Peak memory of token log-probs, forward + backward: chunked `credo.logprobs.token_logprobs` vs naive.

What is measured (CPU, float32): for `--tokens` flattened tokens (default 4096, e.g. 4 x 1024), hidden size
576 and a 49,152-word vocabulary (SmolLM's), the extra peak resident memory of one forward + backward of

- chunked: `token_logprobs(hidden, weight, targets, chunk_tokens=512)[0]` (no entropies),
- naive:   `torch.log_softmax(hidden @ weight.T, -1).gather(-1, targets[:, None])`, the full (N, V) logits,

each followed by `(logp * g).sum().backward()` with `hidden` and `weight` both requiring grad (a tied head
trained in full), so both variants also allocate `weight.grad` (V x H floats, 113 MB) and `hidden.grad`.

How: each variant runs in a fresh Python process (this script with `--child VARIANT`), so that neither sees
the other's freed memory or allocator state. The child allocates the inputs, runs the variant once on a
small problem (vocabulary 512, separate tensors, freed) so that one-time library buffers are not counted,
then takes the baseline: its current resident set size (RSS), with the kernel's RSS high-water mark reset
to it (`echo 5 > /proc/self/clear_refs`, Linux). After forward + backward, the peak is the high-water mark
(`VmHWM` in /proc/self/status) minus that baseline. Where /proc is unavailable the child falls back to
`resource.getrusage(RUSAGE_SELF).ru_maxrss` after minus before, which cannot see a peak below an earlier
one (e.g. during `import torch`) and is then only an upper bound of the ratio's error. torch's CPU
allocator does not cache: large buffers are mmap'ed and returned to the system when freed, so RSS follows
the live tensors. `tracemalloc` is of no use here: it does not see torch's allocations.

Printed: both peaks in MB (10^6 bytes), each variant's wall time (information only, not a target), and
last the line `RESULT logprob_peak_mem_ratio=<chunked/naive>` (4 significant digits). Target: <= 0.3.
Expected by arithmetic: naive holds >= 2 x N*V*4 bytes (logits and log-softmax, 805 MB each at defaults, and
their gradients in backward); chunked holds one chunk of logits (100 MB) + weight.grad (113 MB).

`measure_logprob_peak_memory(tokens, hidden, vocab, chunk) -> (chunked_mb, naive_mb)` is the reusable entry
point (e.g. `from logprob_memory import measure_logprob_peak_memory` with benchmarks/ on sys.path).

Run from the repository root (about 30 s on 2 CPU cores, most of it the four (N x H x V) matmuls of each):

    PYTHONPATH=src python benchmarks/logprob_memory.py
    PYTHONPATH=src python benchmarks/logprob_memory.py --tokens 1024 --chunk 256    # smaller
    PYTHONPATH=src python benchmarks/logprob_memory.py --quick    # smoke test in seconds (sizes of QUICK)
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

TARGET_RATIO = 0.3
QUICK = {"tokens": 512, "hidden": 64, "vocab": 8192, "chunk": 64}
"""Sizes of `--quick`, a smoke test in seconds: full logits of 17 MB against chunks of 2 MB."""
VARIANTS = ("chunked", "naive")
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


# --- measuring (in the child process) ----------------------------------------------------------------


def _rss_bytes() -> int | None:
    """Current resident set size and a reset of the high-water mark to it; None where /proc is missing."""
    try:
        _CLEAR_REFS.write_text("5")
        return _status_kb("VmRSS") * 1024
    except OSError:
        return None


def _status_kb(field: str) -> int:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise OSError(f"{field} not in {_STATUS}")


def _maxrss_bytes() -> int:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024  # bytes on macOS, KiB on Linux


def _run_variant(variant: str, hidden, weight, targets, grad, chunk: int) -> None:
    import torch

    from credo.logprobs import token_logprobs

    if variant == "chunked":
        logp = token_logprobs(hidden, weight, targets, chunk_tokens=chunk)[0]
    elif variant == "naive":
        logp = torch.log_softmax(hidden @ weight.T, dim=-1).gather(-1, targets[:, None]).squeeze(-1)
    else:
        raise ValueError(f"unknown variant {variant!r}; choose one of {VARIANTS}")
    (logp * grad).sum().backward()


def _child(variant: str, tokens: int, hidden_size: int, vocab: int, chunk: int) -> None:
    import torch

    def inputs(n: int, v: int, seed: int):
        gen = torch.Generator().manual_seed(seed)
        h = torch.randn(n, hidden_size, generator=gen).requires_grad_()
        w = (torch.randn(v, hidden_size, generator=gen) * hidden_size**-0.5).requires_grad_()
        y = torch.randint(0, v, (n,), generator=gen)
        g = torch.randn(n, generator=gen)
        return h, w, y, g

    _run_variant(variant, *inputs(min(tokens, 64), 512, seed=1), chunk=min(chunk, 16))  # warm-up, freed
    h, w, y, g = inputs(tokens, vocab, seed=0)
    gc.collect()
    before = _rss_bytes()
    before_max = _maxrss_bytes()
    start = time.perf_counter()
    _run_variant(variant, h, w, y, g, chunk)
    seconds = time.perf_counter() - start
    if before is not None:
        peak = _status_kb("VmHWM") * 1024 - before
    else:
        peak = _maxrss_bytes() - before_max
    assert h.grad is not None and w.grad is not None
    print(f"PEAK_BYTES {peak} SECONDS {seconds:.3f}", flush=True)


# --- driving (in the parent process) -----------------------------------------------------------------


def measure_variant(variant: str, tokens: int = 4096, hidden: int = 576, vocab: int = 49152, chunk: int = 512):
    """(peak MB, seconds) of one forward + backward of `variant`, measured in a fresh Python process."""
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root / "src"), env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", variant, "--tokens", str(tokens),
           "--hidden", str(hidden), "--vocab", str(vocab), "--chunk", str(chunk)]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{variant} child failed ({proc.returncode}):\n{proc.stderr}")
    for line in proc.stdout.splitlines():
        if line.startswith("PEAK_BYTES "):
            fields = line.split()
            return int(fields[1]) / 1e6, float(fields[3])
    raise RuntimeError(f"{variant} child printed no PEAK_BYTES line:\n{proc.stdout}\n{proc.stderr}")


def measure_logprob_peak_memory(
    tokens: int = 4096, hidden: int = 576, vocab: int = 49152, chunk: int = 512
) -> tuple[float, float]:
    """(chunked_mb, naive_mb): extra peak RSS of forward + backward of each variant, one fresh process each."""
    chunked_mb, _ = measure_variant("chunked", tokens, hidden, vocab, chunk)
    naive_mb, _ = measure_variant("naive", tokens, hidden, vocab, chunk)
    return chunked_mb, naive_mb


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=576)
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--chunk", type=int, default=512)
    parser.add_argument("--quick", action="store_true", help="smoke test in seconds: QUICK's sizes, for the four above")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.tokens, args.hidden, args.vocab, args.chunk)
        return
    if args.quick:
        vars(args).update(QUICK)
    n, h, v, c = args.tokens, args.hidden, args.vocab, args.chunk
    print(f"tokens={n} hidden={h} vocab={v} chunk={c} float32 CPU; full logits N*V*4 = {n * v * 4 / 1e6:.0f} MB, "
          f"one chunk = {min(c, n) * v * 4 / 1e6:.0f} MB, weight.grad = {v * h * 4 / 1e6:.0f} MB")  # fmt: skip
    peaks = {}
    for variant in VARIANTS:
        mb, seconds = measure_variant(variant, n, h, v, c)
        peaks[variant] = mb
        print(f"{variant:>8}: peak {mb:8.1f} MB   ({seconds:.2f} s forward + backward)")
    ratio = peaks["chunked"] / peaks["naive"]
    print(f"target: ratio <= {TARGET_RATIO} ({'met' if ratio <= TARGET_RATIO else 'NOT met'})")
    print(f"RESULT logprob_peak_mem_ratio={ratio:.4g}")


if __name__ == "__main__":
    main()
