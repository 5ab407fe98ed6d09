"""Where a credo training step spends its time, and the memory of its log-prob pass.

Part 1, time shares. On the built-in testbed (the model is built or taken from the cache), a few RL steps
run phase by phase through the trainer's own functions, each phase timed on its own:

- generation: the method's sampler (sampling the groups and verifying them),
- old log-probs: `behaviour_batch` (the behaviour policy's log-probs and entropies, no grad, once per rollout batch),
- credit: the method's credit estimator,
- forward: the policy's log-probs with grad (decoder + chunked LM head) for every mini-batch,
- loss + backward: the method's loss and `backward()`,
- optimiser: gradient clipping and the AdamW step.

The share of each phase in the step's total is printed (median over steps after one warm-up step).

Part 2, memory. The peak memory of the log-prob pass (forward + backward) with credo's chunked
`token_logprobs` against a naive full `log_softmax` over a 49,152-word vocabulary, measured in fresh
processes (see benchmarks/logprob_memory.py). Last line: `RESULT logprob_peak_mem_ratio=<chunked/naive>`,
target <= 0.3.

    python benchmarks/step_profile.py                       # GRPO, 4 mini-batches
    python benchmarks/step_profile.py --method s_trace --steps 6
    python benchmarks/step_profile.py --quick               # smoke test in seconds (see QUICK_OVERRIDES)
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from _quick import tiny_testbed  # noqa: E402
from logprob_memory import QUICK, measure_logprob_peak_memory  # noqa: E402

from credo.checkpoint import RunDirectory  # noqa: E402
from credo.config import load_config  # noqa: E402
from credo.policy import policy_logprobs  # noqa: E402
from credo.rollout.groups import ProblemStream  # noqa: E402
from credo.train import behaviour_batch, build_trainer, sample_rollout  # noqa: E402

PHASES = ("generation", "old log-probs", "credit", "forward", "loss + backward", "optimiser")
MEMORY_SIZES = {"hidden": 576, "vocab": 49152, "chunk": 512}
"""The memory measurement's sizes besides its tokens (SmolLM's hidden size and vocabulary)."""
QUICK_OVERRIDES = ["rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=12"]
"""`--quick`, a smoke test in seconds: these overrides on benchmarks/_quick.py's tiny untrained model, one
profiled step, and the memory measurement at the sizes of logprob_memory.QUICK."""


def profile_step(trainer, stream) -> dict[str, float]:
    config = trainer.config
    times = dict.fromkeys(PHASES, 0.0)
    clock = time.perf_counter()

    def lap(phase: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        times[phase] += now - clock
        clock = now

    rollout = sample_rollout(trainer, stream)
    lap("generation")
    batch, _ = behaviour_batch(trainer, rollout)
    lap("old log-probs")
    batch, _ = trainer.method.credit(batch)
    lap("credit")
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    for rows in torch.randperm(batch.size).chunk(config.optim.minibatches):
        mini = batch.select(rows)
        denominators = trainer.method.loss.normalisers(mini.loss_mask)
        lap("credit")
        logp, _ = policy_logprobs(
            trainer.model, mini.prompt_ids, mini.prompt_mask, mini.response_ids, mini.response_mask,
            temperature=config.rollout.temperature, chunk_tokens=config.train.logprob_chunk,
        )
        lap("forward")
        trainer.method.policy_loss(logp, mini, **denominators).loss.backward()
        lap("loss + backward")
        torch.nn.utils.clip_grad_norm_(params, config.optim.grad_clip)
        trainer.optimizer.step()
        trainer.optimizer.zero_grad(set_to_none=True)
        lap("optimiser")
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", default="grpo")
    parser.add_argument("--steps", type=int, default=5, help="profiled steps (after one warm-up step)")
    parser.add_argument("--minibatches", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=4096, help="tokens of the memory measurement")
    parser.add_argument("--quick", action="store_true", help="smoke test in seconds (see QUICK_OVERRIDES)")
    args = parser.parse_args(argv)
    steps = 1 if args.quick else args.steps

    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    overrides = [f"method={args.method}", f"optim.minibatches={args.minibatches}"]
    with tiny_testbed() if args.quick else contextlib.nullcontext() as tiny:
        if tiny is not None:
            overrides += [f"model.path={tiny}", "model.attn_implementation=eager", *QUICK_OVERRIDES]
        config = load_config(None, overrides)
        trainer = build_trainer(config, RunDirectory(Path("/nonexistent")))
        stream = ProblemStream(trainer.task, seed=0)
        profile_step(trainer, stream)  # warm-up
        runs = [profile_step(trainer, stream) for _ in range(steps)]
        del trainer
    medians = {phase: statistics.median(r[phase] for r in runs) for phase in PHASES}
    total = sum(medians.values())
    model = "a tiny untrained testbed model" if args.quick else "the testbed"
    print(f"credo step profile: {args.method} on {model}, {config.rollout.prompts_per_step} prompts x "
          f"{config.rollout.group_size} samples, {args.minibatches} mini-batches, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; median of {steps} steps")
    print(f"{'phase':<18}{'ms':>10}{'share':>9}")
    for phase in PHASES:
        print(f"{phase:<18}{medians[phase] * 1e3:>10.1f}{medians[phase] / total:>9.1%}")
    print(f"{'step':<18}{total * 1e3:>10.1f}{1:>9.0%}")

    sizes = QUICK if args.quick else {"tokens": args.tokens, **MEMORY_SIZES}
    chunked, naive = measure_logprob_peak_memory(**sizes)
    print(f"\nlog-prob pass, forward + backward, {sizes['tokens']} tokens, vocabulary {sizes['vocab']:,}, "
          f"hidden {sizes['hidden']}:")
    print(f"  chunked token_logprobs peak {chunked:8.1f} MB\n  naive log_softmax peak      {naive:8.1f} MB")
    print(f"RESULT logprob_peak_mem_ratio={chunked / naive:.4g}")


if __name__ == "__main__":
    main()
