"""Step time of credo's GRPO trainer against TRL's `GRPOTrainer` on the same job, on CPU, in one process.

Both trainers run the same GRPO job in the same process (fp32 on CPU, the same torch threads), taking turns:

- the same starting weights, loaded by credo's `load_model` (a fresh copy per side, same attention
  implementation: eager for the testbed, the model's own choice otherwise) and the same tokenizer (pad, end);
- the same prompts: the problems of credo's seeded task stream, in stream order, rendered with the model's
  chat template (TRL gets conversational prompts and `shuffle_dataset=False`; the script checks that TRL's
  prompt token ids equal credo's `encode_prompts`);
- the same group size, max completion length, sampling (temperature 1, top-p 1, no top-k) and stop token
  (the tokenizer's end token only);
- the same reward: credo's task verifier, wrapped as a TRL reward function;
- the same update: one optimiser step per rollout batch (TRL: `per_device_train_batch_size` = prompts x group,
  `gradient_accumulation_steps=1`, `steps_per_generation=1`, `num_iterations=1`; credo: one mini-batch, one
  epoch), the same loss (GRPO's clipped ratio, epsilon 0.2, mean over tokens then rows; TRL
  `loss_type="grpo"`), torch AdamW with the same learning rate, betas, weight decay and eps, gradient clipping
  at the same norm, a constant learning rate, no KL term and no reference model (`beta=0`), no gradient
  checkpointing (TRL's default is on);
- nothing else in the timed part: no evaluation, checkpoint or logging service (TRL `report_to="none"`,
  no logging or saving; credo's evaluation and checkpoints happen outside its `time/step_s`).

Neither side scores the behaviour policy in a separate no-grad pass here: with one optimiser step per batch both
take the detached log-probs of the update's own forward pass (credo's `Trainer.on_policy`, TRL with
`num_iterations=1`). The breakdown keeps that pass as its own row, so a configuration that needs it shows it.
credo runs with its defaults, among them `optim.micro_batch_tokens` (length-sorted micro-batches).

Step time: TRL from a `TrainerCallback` (`on_step_begin` .. `on_step_end`, which encloses `training_step`,
whose `_prepare_inputs` generates and scores the rollout, and the clip + optimiser step; the script checks
that every generation call falls inside a timed step); credo from `time/step_s` of its step records. The
median is over the steps after the first (warm-up) on each side. The breakdown rows come from probes wrapped
around the same kinds of calls on both sides: sampling (credo `TransformersBackend.generate`, TRL
`_generate_single_turn`), the verifier, log-prob forward passes without and with grad (credo
`policy_logprobs`, TRL `_get_per_token_logps_and_entropies`), `Tensor.backward`, gradient clipping and the
AdamW step; "other" is the rest of the step (prompt encoding, decoding, advantages, the loss arithmetic).
Each trainer's own phases are printed too (credo: `time/generate_s`, `time/score_credit_s`, `time/update_s`).

The two trainers run in two threads of one process that take turns (`Baton`): by default their steps
alternate (TRL 1, credo 1, TRL 2, ...), so load from other processes on a shared machine hits both sides
alike; `--sequential` runs one whole trainer, then the other. On a machine whose cores other jobs are also
using, torch's default of one thread per core slows both sides by up to 10-30x in bursts (its threads wait
for each other); `--threads 1` measures far more steadily there.

    python benchmarks/vs_trl.py                              # the testbed: 16 prompts x 8, 48 tokens, 6 steps
    python benchmarks/vs_trl.py --model smollm2-135m         # SmolLM2-135M-Instruct: 4 x 4, 64 tokens, 4 steps
    python benchmarks/vs_trl.py --steps 4 --prompts 8 --group 4 --max-new-tokens 32
    python benchmarks/vs_trl.py --quick                      # smoke test in seconds (see QUICK)

Last line: `RESULT credo_over_trl_step_time=<credo median step time / TRL median step time>`, target <= 0.7.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).parent))

from _timing import synchronize

from credo.config import RunConfig, load_config
from credo.hf_compat import no_checkpointing
from credo.run_setup import uses_autocast

CONFIG = Path(__file__).parents[1] / "configs" / "testbed" / "grpo.yaml"

PRESETS: dict[str, dict[str, Any]] = {
    "testbed": {"steps": 6, "prompts": 16, "group": 8, "max_new_tokens": 48, "lr": 1e-4},
    "smollm2-135m": {"steps": 4, "prompts": 4, "group": 4, "max_new_tokens": 64, "lr": 1e-6},
}
"""Job shape per model (a model not named here gets the smollm2-135m shape): the testbed's is
configs/testbed/grpo.yaml's; SmolLM2's fits a laptop CPU in a few minutes."""

QUICK: dict[str, Any] = {"steps": 2, "prompts": 2, "group": 2, "max_new_tokens": 8, "lr": 1e-4}
"""Job shape of `--quick`, a smoke test in seconds on benchmarks/_quick.py's tiny untrained testbed model
(in place of `--model`): one warm-up step and one timed step per side."""

SECTIONS = ("sampling", "verify", "old log-probs", "forward", "backward", "clip + AdamW", "other")
"""Breakdown rows, in step order; "other" is the step time the probes did not cover."""

SECTION_HELP = {
    "sampling": "model.generate and its set-up (credo: shared-prompt static KV cache; TRL: per-row prompts)",
    "verify": "the task verifier on every response",
    "old log-probs": "no-grad log-prob pass over the batch (old log-probs and entropies, when a configuration needs them)",
    "forward": "log-prob forward with grad (decoder + LM head)",
    "backward": "Tensor.backward",
    "clip + AdamW": "gradient-norm clipping and the AdamW step",
    "other": "the rest: prompt encoding, decoding, padding, advantages, loss arithmetic, metrics",
}


# ------------------------------------------------------------------------------------------- pure helpers
def median_after_warmup(values: list[float]) -> float:
    """The median of `values` without the first (warm-up) one; the only value when there is just one."""
    if not values:
        raise ValueError("no values")
    return statistics.median(values[1:] if len(values) > 1 else values)


def breakdown_medians(parts: list[dict[str, float]], totals: list[float], names: tuple[str, ...]) -> dict[str, float]:
    """Median per part over the steps after the first, with a last part "other" (or the last of `names`):
    each step's total minus its other parts (absent parts count 0)."""
    rows = []
    for measured, total in zip(parts, totals):
        row = {name: measured.get(name, 0.0) for name in names[:-1]}
        row[names[-1]] = total - sum(row.values())
        rows.append(row)
    return {name: median_after_warmup([row[name] for row in rows]) for name in names}


def section_medians(steps: list[dict[str, float]], totals: list[float]) -> dict[str, float]:
    """Median per breakdown section over the steps after the first; "other" is each step's total minus the
    sections measured in it."""
    return breakdown_medians(steps, totals, SECTIONS)


def spread(values: list[float]) -> float:
    """max / min of the steps after the first: near 1 on a quiet machine."""
    kept = values[1:] if len(values) > 1 else values
    return max(kept) / min(kept)


def credo_overrides(model: str, steps: int, prompts: int, group: int, max_new_tokens: int, lr: float,
                    seed: int = 0, *, device: str = "cpu", micro_batch_size: int | None = None) -> list[str]:
    """Overrides of a config (configs/testbed/grpo.yaml here) for the benchmarked job: GRPO, one optimiser step
    per rollout batch, fp32 on CPU or bf16 autocast over fp32 weights on CUDA, the sampling settings TRL gets,
    micro-batches of `micro_batch_size` rows (None: credo's default token budget; TRL then takes the batch whole),
    evaluation and checkpoints only at the ends of the run (outside the timed steps) and as small as allowed."""
    micro = ([f"optim.micro_batch_size={micro_batch_size}", "optim.micro_batch_tokens=null"]
             if micro_batch_size is not None else [])
    return [
        "method=grpo", f"model.path={model}", "model.dtype=float32",
        f"model.autocast_bf16={'true' if device == 'cuda' else 'false'}",
        f"rollout.prompts_per_step={prompts}", f"rollout.group_size={group}",
        f"rollout.max_new_tokens={max_new_tokens}", "rollout.temperature=1.0", "rollout.top_p=1.0",
        f"optim.lr={lr}", "optim.minibatches=1", "optim.epochs=1", "optim.warmup_steps=0",
        "optim.schedule=constant", *micro,
        f"train.steps={steps}", f"train.eval_every={steps}", f"train.checkpoint_every={steps}",
        "train.keep_checkpoints=1", f"train.device={device}", "train.log_samples=0", f"train.seed={seed}",
        "eval.samples=0", "eval.max_problems=1",
    ]


def trl_config_kwargs(config: RunConfig, output_dir: str) -> dict[str, Any]:
    """`GRPOConfig` arguments (TRL 1.16) for the job that `config` describes in credo.

    credo's `optim.micro_batch_size` rows per forward/backward become TRL's `per_device_train_batch_size`, with
    as many gradient-accumulation steps (and `steps_per_generation`) as the batch has micro-batches, so that one
    generation batch is still one optimiser step; bf16 autocast on both sides or neither, fp32 master weights."""
    rollout, optim = config.rollout, config.optim
    rows = rollout.prompts_per_step * rollout.group_size
    if optim.minibatches != 1 or optim.epochs != 1:
        raise ValueError("the comparison needs one optimiser step per rollout batch")
    micro = optim.micro_batch_size or rows
    if rows % micro:
        raise ValueError(f"optim.micro_batch_size = {micro} must divide the batch's {rows} rows")
    if config.model.dtype != "float32":
        raise ValueError("the comparison keeps fp32 master weights (model.dtype = float32)")
    return {
        "output_dir": output_dir,
        "use_cpu": config.train.device == "cpu", "fp16": False,
        "bf16": uses_autocast(config.model.autocast_bf16, torch.device(config.train.device)),
        **no_checkpointing(),
        "seed": config.train.seed, "data_seed": config.train.seed, "shuffle_dataset": False,
        "max_steps": config.train.steps,
        # one generation batch = one optimiser step, over rows / micro micro-batches
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": rows // micro, "steps_per_generation": rows // micro, "num_iterations": 1,
        "num_generations": rollout.group_size, "max_completion_length": rollout.max_new_tokens,
        "temperature": rollout.temperature, "top_p": rollout.top_p, "top_k": 0,
        # GRPO without KL, clipped token ratio, mean over tokens then rows
        "beta": 0.0, "epsilon": 0.2, "loss_type": "grpo", "scale_rewards": "group",
        "mask_truncated_completions": False,
        "optim": "adamw_torch", "learning_rate": optim.lr, "adam_beta1": optim.betas[0],
        "adam_beta2": optim.betas[1], "adam_epsilon": 1e-8, "weight_decay": optim.weight_decay,
        "max_grad_norm": optim.grad_clip or 0.0, "lr_scheduler_type": "constant", "warmup_steps": 0,
        # nothing else in the timed steps
        "report_to": "none", "logging_strategy": "no", "save_strategy": "no", "eval_strategy": "no",
        "disable_tqdm": True, "log_completions": False, "dataloader_num_workers": 0,
    }


# ------------------------------------------------------------------------------------------- probes
@dataclass
class Probes:
    """Seconds per breakdown section, per step, of one side; calls outside its steps are only counted."""

    steps: list[dict[str, float]] = field(default_factory=list)
    active: bool = False
    outside: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    """Calls per section made outside the steps (set-up, evaluation)."""
    began: list[float] = field(default_factory=list)
    """perf_counter() at the start of each step."""
    forwarded: list[list[int]] = field(default_factory=list)
    """Per step, the length (prompt + response tokens) of each sequence a log-prob pass with grad forwarded."""

    def begin_step(self) -> None:
        synchronize()
        self.steps.append(defaultdict(float))
        self.forwarded.append([])
        self.began.append(time.perf_counter())
        self.active = True

    def end_step(self) -> None:
        synchronize()
        self.active = False

    def count_forwarded(self, lengths: torch.Tensor) -> None:
        if self.active and torch.is_grad_enabled():
            self.forwarded[-1].extend(int(n) for n in lengths.tolist())

    def add(self, section: str, seconds: float) -> None:
        if self.active:
            self.steps[-1][section] += seconds
        else:
            self.outside[section] += 1


_side = threading.local()
"""Each side runs in its own thread; `_side.probes` is that side's `Probes`."""


def record(section: str, seconds: float) -> None:
    probes = getattr(_side, "probes", None)
    if probes is not None:
        probes.add(section, seconds)


def timed(section, function):
    """`function`, its calls timed into the calling side's `section` (a callable picks the section per call)."""

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            record(section() if callable(section) else section, time.perf_counter() - start)

    return wrapper


def counted(lengths_of, function):
    """`function`, the sequence lengths of each call's batch (`lengths_of(*args, **kwargs)`) counted into the
    calling side's probes when grad is enabled (the update's forward passes)."""

    def wrapper(*args, **kwargs):
        probes = getattr(_side, "probes", None)
        if probes is not None:
            probes.count_forwarded(lengths_of(*args, **kwargs))
        return function(*args, **kwargs)

    return wrapper


def credo_lengths(model, prompt_ids, prompt_mask, response_ids, response_mask, **_) -> torch.Tensor:
    """Sequence lengths of a `credo.logprobs.policy_logprobs` call's batch."""
    return prompt_mask.sum(1) + response_mask.sum(1)


def trl_lengths(model, input_ids, attention_mask, *_, **__) -> torch.Tensor:
    """Sequence lengths of a `GRPOTrainer._get_per_token_logps_and_entropies` call's batch."""
    return attention_mask.sum(1)


def grad_section() -> str:
    return "forward" if torch.is_grad_enabled() else "old log-probs"


@contextlib.contextmanager
def patched(*patches: tuple[Any, str, Any]):
    """Set attributes for the duration of the block: (object, name, value) triples."""
    saved = [(obj, name, obj.__dict__.get(name, getattr(obj, name))) for obj, name, _ in patches]
    try:
        for obj, name, value in patches:
            setattr(obj, name, value)
        yield
    finally:
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)


@contextlib.contextmanager
def shared_probes():
    """Probes of calls both sides make into torch: backward, gradient clipping, every optimiser step."""
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    started = threading.local()
    hooks = [
        register_optimizer_step_pre_hook(lambda *_: setattr(started, "t", time.perf_counter())),
        register_optimizer_step_post_hook(lambda *_: record("clip + AdamW", time.perf_counter() - started.t)),
    ]
    try:
        with patched((torch.Tensor, "backward", timed("backward", torch.Tensor.backward)),
                     (torch.nn.utils, "clip_grad_norm_", timed("clip + AdamW", torch.nn.utils.clip_grad_norm_))):
            yield
    finally:
        for hook in hooks:
            hook.remove()


class Baton:
    """The two trainers run in two threads but never at the same time: only the holder of the baton runs.

    Interleaved, a side hands the baton over at the start of each of its steps, so the steps alternate
    (TRL 1, credo 1, TRL 2, ...) and a burst of load from another process hits both sides alike; everything
    between two steps of a side (its logging, evaluation, checkpoints) happens while it holds the baton, outside
    its timed steps. Sequential, a side keeps the baton until its run is over.
    """

    def __init__(self, order: list[str], interleave: bool) -> None:
        self.order, self.interleave = order, interleave
        self.holder, self.finished = order[0], set()
        self.condition = threading.Condition()

    def _other(self, name: str) -> str:
        return next(n for n in self.order if n != name)

    def wait(self, name: str) -> None:
        with self.condition:
            self.condition.wait_for(lambda: self.holder == name)

    def step(self, name: str) -> None:
        """Called by side `name` before each of its steps."""
        if not self.interleave:
            return
        with self.condition:
            if self._other(name) not in self.finished:
                self.holder = self._other(name)
                self.condition.notify_all()
            self.condition.wait_for(lambda: self.holder == name)

    def done(self, name: str) -> None:
        with self.condition:
            self.finished.add(name)
            self.holder = self._other(name)
            self.condition.notify_all()


# ------------------------------------------------------------------------------------------- the two sides
@dataclass
class SideResult:
    name: str
    step_s: list[float]
    tokens: list[int]
    rewards: list[float]
    probes: Probes
    phases: dict[str, list[float]] = field(default_factory=dict)
    """The trainer's own phases per step (credo: its step records' `time/*`; TRL: around `_prepare_inputs`)."""
    notes: list[str] = field(default_factory=list)
    rollout_s: list[float] = field(default_factory=list)
    """Per step, the seconds of its rollout phase (generation, rewards, advantages): credo `time/generate_s`
    + `time/score_credit_s`, TRL `_prepare_inputs`; the rest of the step is its update."""
    peak_bytes: int | None = None
    """The most CUDA memory allocated while this side ran (None on CPU)."""

    @property
    def median_step(self) -> float:
        return median_after_warmup(self.step_s)


def run_credo(config: RunConfig, workdir: Path, baton: Baton) -> SideResult:
    """credo's own trainer (`credo.train.train`) with probes; step times from its metrics.jsonl (`time/step_s`)."""
    import credo.train as credo_train
    from credo.rollout import groups
    from credo.rollout.transformers_backend import TransformersBackend

    probes = _side.probes

    class Turns(credo_train.TrainProgress):
        """The progress display is entered right before the first step and advanced after each step (after
        its evaluation and checkpoint), before the next step's clock starts: there the baton changes hands."""

        def __enter__(self):
            baton.step("credo")
            return super().__enter__()

        def advance(self, record: dict) -> None:
            super().advance(record)
            print(f"credo step {record['step']}: {record['time/step_s']:.2f}s", flush=True)
            baton.step("credo")

    def sample_rollout(trainer, stream, step=0):  # a step starts with its rollout ...
        probes.begin_step()
        return original_sample(trainer, stream, step)

    def update(*args, **kwargs):  # ... and its probed part ends with the update
        try:
            return original_update(*args, **kwargs)
        finally:
            probes.end_step()

    original_sample, original_update = credo_train.sample_rollout, credo_train.update
    patches = [
        (credo_train, "TrainProgress", Turns),
        (credo_train, "sample_rollout", sample_rollout),
        (credo_train, "update", update),
        (credo_train, "policy_logprobs", timed(grad_section, counted(credo_lengths, credo_train.policy_logprobs))),
        (groups, "verify_all", timed("verify", groups.verify_all)),
        (TransformersBackend, "generate", timed("sampling", TransformersBackend.generate)),
    ]
    run_dir = workdir / "credo"
    with patched(*patches):
        credo_train.train(config, run_dir, show_progress=False)
    records = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "eval" not in r]
    if len(probes.steps) != len(records):
        raise RuntimeError(f"credo: {len(probes.steps)} probed steps for {len(records)} step records")
    phases = {
        "rollout (time/generate_s)": [r["time/generate_s"] for r in records],
        "score + credit (time/score_credit_s)": [r["time/score_credit_s"] for r in records],
        "update (time/update_s)": [r["time/update_s"] for r in records],
    }
    return SideResult(
        "credo", [r["time/step_s"] for r in records], [int(r["rollout/tokens"]) for r in records],
        [r["reward/mean"] for r in records], probes, phases,
        rollout_s=[r["time/generate_s"] + r["time/score_credit_s"] for r in records],
    )


class TaskReward:
    """credo's task verifier as a TRL reward function; also counts the completion tokens of each call."""

    __name__ = "credo_verifier"

    def __init__(self, task, problems) -> None:
        self.task, self.problems = task, problems
        self.tokens: list[int] = []
        self.means: list[float] = []

    def __call__(self, prompts, completions, completion_ids, problem_index, **_) -> list[float]:
        start = time.perf_counter()
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        rewards = [self.task.verify(self.problems[i], text).reward for i, text in zip(problem_index, texts)]
        self.tokens.append(sum(len(ids) for ids in completion_ids))
        self.means.append(sum(rewards) / len(rewards))
        record("verify", time.perf_counter() - start)
        return rewards


def run_trl(config: RunConfig, workdir: Path, baton: Baton) -> SideResult:
    """TRL's GRPOTrainer on the same job, timed by a TrainerCallback, with the same probes."""
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from credo.models import load_model
    from credo.rollout.generate import encode_prompts
    from credo.rollout.groups import ProblemStream
    from credo.tasks import build_task

    rollout = config.rollout
    task = build_task(config.task)
    problems = ProblemStream(task, config.train.seed).take(rollout.prompts_per_step * config.train.steps)
    model, tokenizer = load_model(config.model, torch.device("cpu"))
    model.train()
    # credo stops at the tokenizer's end token only; TRL also stops at the generation config's
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    chat = tokenizer.chat_template is not None
    prompts = [[{"role": "user", "content": p.prompt}] if chat else p.prompt for p in problems]
    dataset = Dataset.from_dict({"prompt": prompts, "problem_index": list(range(len(problems)))})
    reward = TaskReward(task, problems)
    probes = _side.probes
    step_s: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            baton.step("TRL")
            probes.begin_step()
            self.started = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            probes.end_step()
            step_s.append(time.perf_counter() - self.started)
            print(f"TRL step {len(step_s)}: {step_s[-1]:.2f}s", flush=True)

    args = GRPOConfig(**trl_config_kwargs(config, str(workdir / "trl")))
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[StepClock()])
    trainer.remove_callback(PrinterCallback)  # it prints the final log; nothing is logged during the steps
    first = rollout.prompts_per_step
    same = [list(ids) for ids in trainer._tokenize_prompts(prompts[:first])[0]] == encode_prompts(
        tokenizer, [p.prompt for p in problems[:first]])
    notes = [f"TRL's prompt token ids equal credo's encode_prompts: {'yes' if same else 'NO'}"]
    rollout_s: list[float] = []  # per step: _prepare_inputs (generation, rewards, advantages)
    training_s: list[float] = []  # per step: training_step, which calls _prepare_inputs

    def add(values: list[float], seconds: float) -> None:
        """Add to the current step's value (a step of several gradient-accumulation calls sums them)."""
        values.extend([0.0] * (len(probes.steps) - len(values)))
        values[-1] += seconds

    def training_step(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original_step(*args, **kwargs)
        finally:
            add(training_s, time.perf_counter() - start)

    def prepare_inputs(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original_prepare(*args, **kwargs)
        finally:
            add(rollout_s, time.perf_counter() - start)

    original_step, original_prepare = trainer.training_step, trainer._prepare_inputs
    trainer.training_step, trainer._prepare_inputs = training_step, prepare_inputs
    trainer._generate_single_turn = timed("sampling", trainer._generate_single_turn)
    trainer._get_per_token_logps_and_entropies = timed(grad_section, counted(
        trl_lengths, trainer._get_per_token_logps_and_entropies))
    trainer.train()
    add(rollout_s, 0.0)
    phases = {"rollout (_prepare_inputs)": rollout_s,
              "loss + backward (rest of training_step)": [t - r for t, r in zip(training_s, rollout_s)]}
    inside = sum(1 for step in probes.steps if step.get("sampling", 0.0) > 0)
    notes.append(f"TRL generation inside the timed steps: {inside} of {len(step_s)} steps generated inside "
                 f"on_step_begin..on_step_end, {probes.outside['sampling']} generation calls outside")
    if not (len(step_s) == len(reward.tokens) == len(probes.steps)):
        raise RuntimeError(f"TRL: {len(step_s)} timed steps, {len(reward.tokens)} reward calls, {len(probes.steps)} probed")
    return SideResult("TRL", step_s, reward.tokens, reward.means, probes, phases, notes,
                      rollout_s=rollout_s)


def run_both(config: RunConfig, order: list[str], interleave: bool) -> list[SideResult]:
    """Both sides, each in its own thread, taking turns (see `Baton`)."""
    runners = {"credo": run_credo, "TRL": run_trl}
    baton = Baton(order, interleave)
    results: dict[str, SideResult] = {}
    errors: dict[str, BaseException] = {}

    def side(name: str, workdir: Path) -> None:
        _side.probes = Probes()
        baton.wait(name)
        started = time.perf_counter()
        cuda = torch.cuda.is_available() and config.train.device.startswith("cuda")
        if cuda:
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        try:
            results[name] = runners[name](config, workdir, baton)
            results[name].notes.append(f"{name} ran with {torch.get_num_threads()} torch threads")
            if cuda:
                results[name].peak_bytes = torch.cuda.max_memory_allocated()
            print(f"{name}: done in {time.perf_counter() - started:.1f}s", flush=True)
        except BaseException as error:  # noqa: BLE001 (reported by the main thread)
            errors[name] = error
        finally:
            baton.done(name)

    with tempfile.TemporaryDirectory(prefix="vs_trl_") as tmp, shared_probes():
        threads = [threading.Thread(target=side, args=(name, Path(tmp)), name=name) for name in order]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for name, error in errors.items():
        raise RuntimeError(f"the {name} side failed") from error
    timeline = "".join(name for _, name in sorted((t, {"credo": "C", "TRL": "T"}[name]) for name in order for t in results[name].probes.began))
    results[order[0]].notes.append(f"order of the steps: {timeline} (C credo, T TRL)")
    return [results[name] for name in order]


# ------------------------------------------------------------------------------------------- report
def report(config: RunConfig, model: str, results: list[SideResult]) -> float:
    credo, trl = (next(r for r in results if r.name == name) for name in ("credo", "TRL"))
    sides = (credo, trl)
    rollout = config.rollout
    print(f"\nGRPO on {model}: {rollout.prompts_per_step} prompts x {rollout.group_size}, max {rollout.max_new_tokens} "
          f"new tokens, {config.train.steps} steps (median over the last {config.train.steps - 1}), lr {config.optim.lr}, "
          f"fp32 CPU, torch {torch.__version__}, {torch.get_num_threads()} torch thread(s)")
    for side in sides:
        print(f"  {side.name:>5} step times (s): " + " ".join(f"{t:.2f}" for t in side.step_s))
    medians = {side.name: section_medians(side.probes.steps, side.step_s) for side in sides}
    width = 28
    print(f"\n{'':<{width}}{'credo':>10}{'TRL':>10}{'credo-TRL':>11}")
    print(f"{'median step (s)':<{width}}{credo.median_step:>10.3f}{trl.median_step:>10.3f}"
          f"{credo.median_step - trl.median_step:>+11.3f}")
    tokens = {s.name: median_after_warmup([float(t) for t in s.tokens]) for s in sides}
    print(f"{'generated tokens / step':<{width}}{tokens['credo']:>10.0f}{tokens['TRL']:>10.0f}")
    print(f"{'generated tokens / s':<{width}}{tokens['credo'] / credo.median_step:>10.0f}"
          f"{tokens['TRL'] / trl.median_step:>10.0f}")
    print(f"{'reward mean (all steps)':<{width}}{statistics.mean(credo.rewards):>10.3f}{statistics.mean(trl.rewards):>10.3f}")
    print("breakdown, median s per step:")
    for name in SECTIONS:
        a, b = medians["credo"][name], medians["TRL"][name]
        print(f"  {name:<{width - 2}}{a:>10.3f}{b:>10.3f}{a - b:>+11.3f}   {SECTION_HELP[name]}")
    for side in sides:
        steps = [{name: values[i] for name, values in side.phases.items()} for i in range(len(side.step_s))]
        known = breakdown_medians(steps, side.step_s, (*side.phases, "rest"))
        print(f"{side.name} phases, median s: " + ", ".join(f"{name} {v:.3f}" for name, v in known.items()))
    for side in sides:
        for note in side.notes:
            print(f"note: {note}")
    for side in sides:
        if spread(side.step_s) > 1.5:
            print(f"note: {side.name}'s step times vary {spread(side.step_s):.1f}x after the warm-up: other load on the "
                  "machine? (with torch's default threads a busy machine slows steps 10x and more; --threads 1 is "
                  "steadier there)")
    gaps = sorted(SECTIONS, key=lambda n: -abs(medians["credo"][n] - medians["TRL"][n]))
    print("largest differences (credo - TRL): " + ", ".join(
        f"{n} {medians['credo'][n] - medians['TRL'][n]:+.3f}s" for n in gaps[:3]))
    return credo.median_step / trl.median_step


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="testbed", help="testbed, smollm2-135m or a model directory")
    parser.add_argument("--steps", type=int, help="steps per side, the first one a warm-up")
    parser.add_argument("--prompts", type=int, help="prompts per step")
    parser.add_argument("--group", type=int, help="samples per prompt")
    parser.add_argument("--max-new-tokens", type=int)
    parser.add_argument("--lr", type=float)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--order", choices=("trl-first", "credo-first"), default="trl-first")
    parser.add_argument("--sequential", action="store_true",
                        help="run one whole trainer, then the other (default: their steps alternate)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's own choice)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test in seconds: the shape of QUICK on a tiny untrained testbed model")
    args = parser.parse_args(argv)
    if args.steps is not None and args.steps < 2:
        parser.error("--steps must be at least 2 (the first step is a warm-up)")
    shape = dict(QUICK if args.quick else PRESETS.get(args.model, PRESETS["smollm2-135m"]))
    for key in shape:
        if getattr(args, key) is not None:
            shape[key] = getattr(args, key)

    if args.threads:
        torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from _quick import tiny_testbed

    from credo.models import resolve_model_path

    with tiny_testbed() if args.quick else contextlib.nullcontext() as tiny:
        model = args.model if tiny is None else str(tiny)
        overrides = credo_overrides(model, seed=args.seed, **shape)
        if tiny is not None:
            overrides.append("model.attn_implementation=eager")  # the testbed's, as `load_model` gives it
        config = load_config(CONFIG, overrides)
        print(f"model directory: {resolve_model_path(config.model)}; load average before: {os.getloadavg()[0]:.2f}")
        order = ["TRL", "credo"] if args.order == "trl-first" else ["credo", "TRL"]
        results = run_both(config, order, interleave=not args.sequential)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    ratio = report(config, "a tiny untrained testbed model" if args.quick else args.model, results)
    print(f"RESULT credo_over_trl_step_time={ratio:.4f}")


if __name__ == "__main__":
    main()
