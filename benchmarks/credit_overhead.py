"""How much time credo's credit assignment adds to an RL step, against the work no method can avoid.

What is measured, for B in {64, 256} responses and T in {1024, 4096} padded tokens (float32, CPU, torch's
default thread count):

- Per method of `credo.METHODS`: the wall time of one credit + loss pass, forward and backward,
  `batch, _ = method.credit(batch)`, `method.policy_loss(logp, batch).loss.backward()`, on one random
  rollout batch per (B, T) that every method accepts (groups of 8 rows, lengths uniform in [T/2, T],
  binary rewards and verdicts, entropies, sums of squared probabilities, reference log-probs, reset
  prefixes, first wrong steps, revision success rates, edit masks). `logp` is a leaf tensor
  `old_logp + noise` built once, outside the timed region. Median of `--repeats` runs after one warm-up run.
- The reference: computing the sampled tokens' log-probs from the logits of a 49,152-word vocabulary,
  forward only (`log_softmax` over the vocabulary, then `gather`), for the same B*T tokens. B*T*V logits
  do not fit in memory (256 * 4096 * 49152 floats are 200 GB), so it is timed once per run on a few
  chunks of 1024 tokens (random logits made outside the timed region) and the median per-token rate is
  extrapolated linearly to B*T tokens: the computation is exactly linear in tokens, chunk by chunk.
  The log_softmax output buffer is allocated once and reused (as a trainer's allocator would): a fresh
  200 MB buffer per chunk costs page faults that roughly double the time on CPU, and a slower reference
  would make every ratio look better than it is.

Printed: each method's time (ms) and its ratio to the reference for every (B, T); each method's scaling
exponent, the least-squares slope of log(time) against log(B*T); and, last, the line
`RESULT worst_overhead_ratio=<x> worst_method=<name>`, the largest ratio over all methods and (B, T).

Target: every method at most 0.05 of the reference on CPU, with an exponent near 1 (linear in B*T).

Run from the repository root (the full grid takes about 15 s on 2 CPU cores, most of it the largest batch):

    PYTHONPATH=src python benchmarks/credit_overhead.py            # full grid
    PYTHONPATH=src python benchmarks/credit_overhead.py --quick    # smoke test in seconds (see QUICK_GRID)
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable

import torch

from credo import METHODS, Method, RolloutBatch
from credo.demo import thoughts_as_turns

GRID = ((64, 1024), (64, 4096), (256, 1024), (256, 4096))
QUICK_GRID = ((16, 256),)
GROUP_SIZE = 8
VOCAB = 49_152
REF_CHUNK_TOKENS = 1024
REF_CHUNKS = 4
QUICK_REF_CHUNK_TOKENS = 256
QUICK_REF_CHUNKS = 2
LOGP_NOISE = 0.01
TARGET_RATIO = 0.05

Config = tuple[int, int]
"""(B, T)."""
Times = dict[str, dict[Config, float]]
"""Seconds per method name, then per (B, T)."""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="smoke test in seconds: only B=16, T=256, one repeat, 2 reference chunks"
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per method and (B, T) (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random batches and logits")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    return args


def timed(fn: Callable[..., object], *args: object) -> float:
    """Seconds one call of `fn(*args)` takes."""
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def median_time(fn: Callable[[], object], repeats: int) -> float:
    """Median seconds of `repeats` calls of `fn`, after one warm-up call."""
    fn()
    return statistics.median(timed(fn) for _ in range(repeats))


def random_batch(B: int, T: int, generator: torch.Generator) -> RolloutBatch:
    """A (B, T) float32 rollout batch with every field some method of `METHODS` reads."""

    def uniform(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=generator)

    lengths = torch.randint(T // 2, T + 1, (B,), generator=generator)
    response_mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
    rewards = (uniform(B) < 0.5).float()
    correct = rewards >= 1.0
    success_levels = torch.randint(0, 4, (B,), generator=generator) / 3  # {0, 1/3, 2/3, 1}
    has_prefix = torch.randperm(B, generator=generator) < B // 2
    prefix_len = torch.where(has_prefix, 1 + (uniform(B) * (lengths // 4)).long(), 0)  # [1, n/4] or 0
    old_logp = -torch.empty(B, T).exponential_(generator=generator)
    ref_logp = -torch.empty(B, T).exponential_(generator=generator)
    blame_start = (uniform(B) * (lengths + 2)).long() - 1  # -1 (no wrong step located) .. length
    thought_starts = uniform(B, T) < 1 / 32  # vine's steps: thoughts of about 32 tokens
    segment_ids = torch.where(response_mask, thought_starts.long().cumsum(dim=1) - thought_starts[:, :1].long(), -1)
    step_values = uniform(B, T + 1).gather(1, segment_ids.clamp(min=0))  # one Monte-Carlo value per step
    thought_wrong = response_mask & (uniform(B, T + 1) < 0.3).gather(1, segment_ids.clamp(min=0))  # a checker's verdicts
    pi = old_logp.exp()  # the sampled token's probability: sum_v pi_v^2 lies in [pi^2, pi^2 + (1 - pi)^2]
    sum_pi_squared = pi.square() + uniform(B, T) * (1 - pi).square()
    info_gain = (uniform(B, T + 1) - 0.3).gather(1, segment_ids.clamp(min=0))  # IGPO: each turn's information gain
    return thoughts_as_turns(RolloutBatch(  # the turn-level methods read the thoughts as turns
        response_ids=torch.randint(VOCAB, (B, T), generator=generator),
        response_mask=response_mask,
        group_id=torch.arange(B) // GROUP_SIZE,
        rewards=rewards,
        old_logp=torch.where(response_mask, old_logp, 0.0),
        entropy=torch.where(response_mask, 4.0 * uniform(B, T), 0.0),
        ref_logp=torch.where(response_mask, ref_logp, 0.0),
        correct=correct,
        prefix_len=prefix_len,
        blame_start=blame_start.clamp(max=lengths),
        revision_success=torch.where(correct, 0.0, success_levels),
        edit_mask=response_mask & (uniform(B, T) < 0.1),
        segment_ids=segment_ids,
        thought_ids=segment_ids,
        thought_wrong=thought_wrong,
        step_values=torch.where(response_mask, step_values, 0.0),
        cutpoint_mask=response_mask & (pi < 0.9),  # SPO-chain's cutpoints: sampled below p 0.9
        branch_id=torch.arange(B) // (GROUP_SIZE * 5),  # FR3E: 5 states' groups continue one response
        edge_mask=response_mask & (uniform(B, T) < 0.4),  # SPO-tree: the tokens of the edges a row carries
        sum_pi_squared=torch.where(response_mask, sum_pi_squared, 0.0),
        info_gain=torch.where(response_mask, info_gain, 0.0),
        tree_id=torch.arange(B) // (GROUP_SIZE // 2),  # Tree-GRPO: two trees a prompt
    ))


def credit_and_loss(method: Method, batch: RolloutBatch, logp: torch.Tensor) -> None:
    """One rollout batch's credit pass, then the policy loss forward and backward."""
    credited, _ = method.credit(batch)
    logp.grad = None
    method.policy_loss(logp, credited).loss.backward()


def time_methods(config: Config, repeats: int, generator: torch.Generator) -> dict[str, float]:
    """Median seconds of `credit_and_loss` for every method, on one random batch of shape `config`."""
    batch = random_batch(*config, generator)
    noise = LOGP_NOISE * torch.randn(batch.old_logp.shape, generator=generator)
    logp = (batch.old_logp + noise).requires_grad_()
    return {
        name: median_time(lambda: credit_and_loss(METHODS.get(name), batch, logp), repeats)
        for name in METHODS
    }


def reference_seconds_per_token(generator: torch.Generator, chunks: int, chunk_tokens: int) -> float:
    """Median per-token seconds of token log-probs from V-word logits (log_softmax + gather), forward only,
    over `chunks` chunks of `chunk_tokens` tokens."""
    logits = [torch.randn(chunk_tokens, VOCAB, generator=generator) for _ in range(chunks)]
    ids = [torch.randint(VOCAB, (chunk_tokens, 1), generator=generator) for _ in range(chunks)]

    log_probs = torch.empty(chunk_tokens, VOCAB)  # reused: time the arithmetic, not fresh 200 MB pages

    def token_logp(chunk: int) -> torch.Tensor:
        return torch.log_softmax(logits[chunk], dim=-1, out=log_probs).gather(-1, ids[chunk])

    token_logp(0)  # warm-up
    return statistics.median(timed(token_logp, c) for c in range(chunks)) / chunk_tokens


def scaling_exponent(configs: tuple[Config, ...], seconds: list[float]) -> float | None:
    """Least-squares slope of log(seconds) against log(B*T); None with fewer than two distinct sizes."""
    xs = [math.log(B * T) for B, T in configs]
    ys = [math.log(s) for s in seconds]
    x_mean, y_mean = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - x_mean) ** 2 for x in xs)
    if spread == 0:
        return None
    return sum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ys)) / spread


def print_header(repeats: int, chunks: int, chunk_tokens: int, seconds_per_token: float) -> None:
    print(f"credo credit + loss overhead: torch {torch.__version__}, {torch.get_num_threads()} threads, float32")
    print(f"methods: credit + policy loss forward + backward, median of {repeats} run(s) after 1 warm-up")
    print(
        f"reference: token log-probs from logits over a {VOCAB:,}-word vocabulary (log_softmax + gather), "
        "forward only;"
    )
    print(
        f"  timed once per run on {chunks} chunks of {chunk_tokens} tokens, median "
        f"{seconds_per_token * 1e9:.1f} ns/token, extrapolated linearly to B*T tokens"
    )
    print("  (B*T*V logits do not fit in memory; the computation is exactly linear in tokens, chunk by chunk;")
    print("  the log_softmax output buffer is reused across chunks, so allocation page faults are not counted)")
    print()


def print_table(configs: tuple[Config, ...], times: Times, reference: dict[Config, float]) -> None:
    name_width = max(len("reference"), *(len(name) for name in times))
    cell = 20
    print(f"{'':<{name_width}}" + "".join(f"{f'B={B} T={T}':>{cell}}" for B, T in configs))
    print(f"{'method':<{name_width}}" + f"{'ms':>12}{'ratio':>8}" * len(configs))
    print(f"{'reference':<{name_width}}" + "".join(f"{reference[c] * 1e3:>12.1f}{1.0:>8.3f}" for c in configs))
    for name, by_config in times.items():
        row = "".join(f"{by_config[c] * 1e3:>12.2f}{by_config[c] / reference[c]:>8.4f}" for c in configs)
        print(f"{name:<{name_width}}{row}")
    print()


def print_scaling(configs: tuple[Config, ...], times: Times, reference: dict[Config, float]) -> None:
    name_width = max(len(name) for name in times)
    print(f"scaling in B*T (target: exponent ~1) and worst ratio (target: <= {TARGET_RATIO})")
    print(f"{'method':<{name_width}}{'exponent':>10}{'max ratio':>11}{'target':>8}")
    for name, by_config in times.items():
        exponent = scaling_exponent(configs, [by_config[c] for c in configs])
        worst = max(by_config[c] / reference[c] for c in configs)
        shown = "n/a" if exponent is None else f"{exponent:.2f}"
        print(f"{name:<{name_width}}{shown:>10}{worst:>11.4f}{'met' if worst <= TARGET_RATIO else 'MISSED':>8}")
    print()


def main() -> None:
    args = parse_args()
    configs = QUICK_GRID if args.quick else GRID
    repeats = 1 if args.quick else args.repeats
    chunks, chunk_tokens = (QUICK_REF_CHUNKS, QUICK_REF_CHUNK_TOKENS) if args.quick else (REF_CHUNKS, REF_CHUNK_TOKENS)
    generator = torch.Generator().manual_seed(args.seed)

    seconds_per_token = reference_seconds_per_token(generator, chunks, chunk_tokens)
    reference = {(B, T): seconds_per_token * B * T for B, T in configs}
    times: Times = {name: {} for name in METHODS}
    for config in configs:
        print(f"timing B={config[0]} T={config[1]} ...", file=sys.stderr, flush=True)
        for name, seconds in time_methods(config, repeats, generator).items():
            times[name][config] = seconds

    print_header(repeats, chunks, chunk_tokens, seconds_per_token)
    print_table(configs, times, reference)
    print_scaling(configs, times, reference)
    worst_method, worst_config = max(
        ((name, c) for name in times for c in configs), key=lambda nc: times[nc[0]][nc[1]] / reference[nc[1]]
    )
    worst = times[worst_method][worst_config] / reference[worst_config]
    print(f"RESULT worst_overhead_ratio={worst:.4g} worst_method={worst_method}")


if __name__ == "__main__":
    main()
