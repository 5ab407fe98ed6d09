"""MFU of credo's update on CPU: the share of this machine's matrix-product rate that its GRPO update reaches.

One rollout batch of the benchmarked job (`vs_trl.py`'s shape and overrides: GRPO, fp32, one optimiser step per
batch, credo's default micro-batch token budget) is sampled once; then, alternating, `--repeats` times each:

- **credo's update**: `credo.train.accumulate_gradient` over the batch (length-sorted micro-batches, each distinct
  prompt through the decoder once per micro-batch, the LM head on response positions only, in chunks), gradient
  clipping and the AdamW step: what `time/update_s` holds for this job (the credit is computed once, outside);
- **plain transformers**, the reference: the same rows right-padded to one batch, `model(input_ids,
  attention_mask, labels=...)` with labels on the response tokens, `loss.backward()`, clipping and AdamW: the
  forward and backward that TRL's CPU path runs;
- **the machine's rate**: an n x n x n float32 matrix product (`_timing.matmul_rate`, n = `--matmul-size`) on the
  same threads, between the timed updates.

FLOPs per token are TRL's (`trl.trainer.utils.compute_flops_per_token`: 6 x the dense forward, the attention
scores at the batch's token-weighted mean sequence length, the LM head on every token). Two counts of the work:

- **job FLOPs** (TRL's convention, what TRL and verl would report for the same job): every row's prompt and
  response tokens at the full per-token cost;
- **executed FLOPs** (what credo actually computes): each micro-batch's distinct prompts once, without the LM
  head, and every row's response tokens at the full cost.

MFU = FLOPs / update seconds / the matrix rate. The job MFU can exceed the executed one (credo skips work the job
formula counts); the executed MFU says how well the update uses the arithmetic it does.

    python benchmarks/update_mfu.py                        # SmolLM2-135M-Instruct, 4 prompts x 4, 64 tokens
    python benchmarks/update_mfu.py --model testbed        # the testbed: 16 x 8, 48 tokens
    python benchmarks/update_mfu.py --threads 2            # both cores (default: one thread)
    python benchmarks/update_mfu.py --quick                # smoke test in seconds on a tiny untrained model

Last lines: `RESULT credo_update_mfu=<executed FLOPs / s / matrix rate>` (goal >= 0.6),
`RESULT credo_update_job_mfu=...`, `RESULT transformers_fwd_bwd_mfu=...` (the reference's job MFU) and
`RESULT credo_over_transformers_update_time=<credo's median update / the reference's>`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).parent))

from _timing import matmul_rate, seconds
from vs_trl import CONFIG, PRESETS, QUICK, credo_overrides

from credo.config import load_config
from credo.microbatch import micro_batches


def job_flops(flops_per_token: int, prompt_mask: torch.Tensor, response_mask: torch.Tensor) -> int:
    """TRL's count: every row's prompt and response tokens at the full per-token cost."""
    return flops_per_token * int(prompt_mask.sum() + response_mask.sum())


def executed_flops(flops_per_token: int, head_flops_per_token: int, prompt_ids: torch.Tensor,
                   prompt_mask: torch.Tensor, response_mask: torch.Tensor, parts: list[torch.Tensor]) -> int:
    """What credo computes: per micro-batch, each distinct prompt once without the LM head, and every response
    token at the full cost (`credo.policy.decoder_states` shares a prompt among the rows of a pass).

    >>> ids = torch.tensor([[1, 2], [1, 2], [3, 4]]); mask = torch.ones(3, 2, dtype=torch.bool)
    >>> executed_flops(10, 4, ids, mask, torch.ones(3, 1, dtype=torch.bool), [torch.arange(3)])
    54
    """
    total = flops_per_token * int(response_mask.sum())
    for rows in parts:
        key = torch.where(prompt_mask[rows], prompt_ids[rows], -1)
        distinct = torch.unique(key, dim=0)
        total += (flops_per_token - head_flops_per_token) * int((distinct >= 0).sum())
    return total


def padded_rows(batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The batch as plain transformers takes it: prompt and response right-packed per row, right-padded;
    labels on the response tokens (-100 elsewhere)."""
    rows = []
    for b in range(batch.size):
        prompt = batch.prompt_ids[b][batch.prompt_mask[b]]
        response = batch.response_ids[b][batch.response_mask[b]]
        rows.append((prompt, response))
    width = max(len(p) + len(r) for p, r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, (prompt, response) in enumerate(rows):
        n = len(prompt) + len(response)
        ids[i, :n] = torch.cat([prompt, response])
        mask[i, :n] = 1
        labels[i, len(prompt):n] = response
    return ids, mask, labels


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="testbed, smollm2-135m or a model directory")
    parser.add_argument("--prompts", type=int, help="prompts in the batch")
    parser.add_argument("--group", type=int, help="samples per prompt")
    parser.add_argument("--max-new-tokens", type=int)
    parser.add_argument("--repeats", type=int, default=5, help="timed updates per side (after one warm-up each)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--matmul-size", type=int, default=1024, help="n of the n x n x n reference product")
    parser.add_argument("--quick", action="store_true", help="smoke test in seconds on a tiny untrained model")
    args = parser.parse_args(argv)
    shape = dict(QUICK if args.quick else PRESETS.get(args.model, PRESETS["smollm2-135m"]))
    for key in ("prompts", "group", "max_new_tokens"):
        if getattr(args, key) is not None:
            shape[key] = getattr(args, key)
    repeats = 1 if args.quick else args.repeats
    torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from _quick import tiny_testbed
    from trl.trainer.utils import compute_flops_per_token

    from credo.checkpoint import RunDirectory
    from credo.rollout.groups import ProblemStream
    from credo.train import accumulate_gradient, behaviour_batch, sample_rollout
    from credo.run_setup import build_trainer

    with (tiny_testbed() if args.quick else contextlib.nullcontext()) as tiny, \
            tempfile.TemporaryDirectory(prefix="credo_mfu_") as workdir:
        overrides = credo_overrides(args.model if tiny is None else str(tiny), **{**shape, "steps": 2})
        if tiny is not None:
            overrides.append("model.attn_implementation=eager")
        config = load_config(CONFIG, overrides)
        trainer = build_trainer(config, RunDirectory(Path(workdir)))
        torch.manual_seed(0)
        rollout = sample_rollout(trainer, ProblemStream(trainer.task, config.train.seed))
        batch, _ = behaviour_batch(trainer, rollout)
        batch, _ = trainer.method.credit(batch)
        model = trainer.model
        params = [p for p in model.parameters() if p.requires_grad]

        def credo_update() -> None:
            accumulate_gradient(trainer, batch)
            torch.nn.utils.clip_grad_norm_(params, config.optim.grad_clip)
            trainer.optimizer.step()
            trainer.optimizer.zero_grad(set_to_none=True)

        ids, mask, labels = padded_rows(batch)

        def transformers_update() -> None:
            model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
            torch.nn.utils.clip_grad_norm_(params, config.optim.grad_clip)
            trainer.optimizer.step()
            trainer.optimizer.zero_grad(set_to_none=True)

        times: dict[str, list[float]] = {"credo": [], "transformers": [], "matmul": []}
        credo_update(), transformers_update()  # warm-up
        for _ in range(repeats):
            times["credo"].append(seconds(credo_update))
            times["transformers"].append(seconds(transformers_update))
            times["matmul"].append(matmul_rate(torch.device("cpu"), torch.float32, args.matmul_size, repeats=3))

        lengths = (batch.prompt_mask.sum(dim=1) + batch.response_mask.sum(dim=1)).float()
        mean_len = int(float((lengths * lengths).sum() / lengths.sum()))
        per_token = compute_flops_per_token(model.config, mean_len)
        head = 3 * 2 * model.config.vocab_size * model.config.hidden_size
        parts = micro_batches(batch.prompt_mask, batch.response_mask, max_rows=config.optim.micro_batch_size,
                              max_tokens=config.optim.micro_batch_tokens)
        job = job_flops(per_token, batch.prompt_mask, batch.response_mask)
        executed = executed_flops(per_token, head, batch.prompt_ids, batch.prompt_mask, batch.response_mask, parts)

    credo_s, reference_s = statistics.median(times["credo"]), statistics.median(times["transformers"])
    rate = statistics.median(times["matmul"])
    print(f"model: {'a tiny untrained testbed model' if args.quick else args.model}; {batch.size} rows, "
          f"{int(batch.prompt_mask.sum())} prompt + {int(batch.response_mask.sum())} response tokens, token-weighted "
          f"mean length {mean_len}; {len(parts)} micro-batches; {args.threads} thread(s); "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"matrix rate (float32, n={args.matmul_size}): {rate / 1e9:.1f} GFLOP/s (median of {repeats}; "
          f"spread {max(times['matmul']) / min(times['matmul']):.2f}x)")
    print(f"FLOPs per token (TRL) {per_token / 1e6:.1f}M, LM head {head / 1e6:.1f}M of them; job {job / 1e9:.2f} "
          f"GFLOP, credo executes {executed / 1e9:.2f} GFLOP")
    for name, s, flops in (("credo update", credo_s, executed), ("transformers fwd+bwd", reference_s, job)):
        spread = max(times[name.split()[0]]) / min(times[name.split()[0]])
        print(f"{name}: median {s:.3f} s over {repeats} (spread {spread:.2f}x), {flops / s / 1e9:.1f} GFLOP/s")
    print(f"RESULT credo_update_mfu={executed / credo_s / rate:.4f}")
    print(f"RESULT credo_update_job_mfu={job / credo_s / rate:.4f}")
    print(f"RESULT transformers_fwd_bwd_mfu={job / reference_s / rate:.4f}")
    print(f"RESULT credo_over_transformers_update_time={credo_s / reference_s:.4f}")


if __name__ == "__main__":
    main()
