"""A run's set-up: the `Trainer` built once from the config, and the run directory's records of how the run began.

`build_trainer` makes the `Trainer` once from the config: the device and precision (`pick_device`,
`uses_autocast`, `uses_tf32`), the seeded RNGs, the method, task, model and tokenizer, the reference policy of a
KL penalty, the optimiser and its schedule, and the generation backend. `check_reward_shapes` calls the custom
reward functions once before anything is sampled. Then, before the first step, the run directory's records:
`start_or_resume` starts a fresh run (writing its config.yaml) or continues a killed one from its last checkpoint,
`record_resumed_config` records the config a resumed run trains with, and `check_reference` keeps the reference
policy's fingerprint so that a resumed run measures its KL penalty against the same model. `reward_state` is the
reward functions' view of the run's progress.

What happens during the run, the steps and their records (metrics, samples, evaluations, checkpoints, the
summary), is the training loop's, `credo.train`. (The module is not called `trainer.py`, so that it cannot be
mistaken for the loop's `train.py`.)
"""

from __future__ import annotations

import json
import logging
import math
import random
from dataclasses import dataclass

import torch

from credo.checkpoint import RunDirectory, TrainState, load_latest_checkpoint
from credo.config import ConfigError, RunConfig, dump
from credo.io import write_json_atomic, write_text_atomic
from credo.methods import Method, get_method
from credo.microbatch import micro_batches
from credo.models import load_model, make_backend
from credo.policy import ReferencePolicy
from credo.rollout.crn import CommonRandomNumbers
from credo.schedules import lr_multiplier
from credo.tasks import Task, build_task
from credo.tasks.rewards import RewardState

log = logging.getLogger(__name__)


@dataclass
class Trainer:
    """Everything a step needs, built once from the config."""

    config: RunConfig
    run: RunDirectory
    method: Method
    task: Task
    model: torch.nn.Module
    tokenizer: object
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    device: torch.device
    autocast: bool
    backend: object
    """The generation backend (`credo.models.make_backend`)."""
    on_policy: bool
    """One optimiser step per rollout batch and a method that reads no behaviour statistics before its update
    (`Method.behaviour_statistics`): the policy being updated is the one that sampled, so the update's own forward
    pass gives the behaviour log-probs (`old_logp = logp.detach()`, TRL's on-policy convention) and entropies, and
    `behaviour_batch` skips its pass."""
    sampling_keys: CommonRandomNumbers | None = None
    """The backend's keyed sampling (`rollout.common_random_numbers`), scoped to each step's rollout and
    evaluation, else None (torch's global RNG)."""
    reference: ReferencePolicy | None = None
    """The frozen starting policy whose log-probs fill `ref_logp` (a method whose loss has `kl_beta > 0`), else None."""

    @property
    def scoring(self) -> dict[str, object]:
        """How every pass scores responses (`credo.policy.policy_logprobs`, `ReferencePolicy.logprobs`): at
        `rollout.temperature`, the LM head in chunks of `train.logprob_chunk` tokens, under the run's autocast."""
        return {"temperature": self.config.rollout.temperature, "chunk_tokens": self.config.train.logprob_chunk,
                "autocast": self.autocast}

    def micro_batches(self, prompt_mask: torch.Tensor, response_mask: torch.Tensor) -> list[torch.Tensor]:
        """The row indices of each micro-batch that a pass over these rows takes (behaviour, reference and update
        passes alike): at most `optim.micro_batch_size` rows and `optim.micro_batch_tokens` padded tokens each."""
        optim = self.config.optim
        return micro_batches(prompt_mask, response_mask, max_rows=optim.micro_batch_size,
                             max_tokens=optim.micro_batch_tokens)


def build_trainer(config: RunConfig, run: RunDirectory) -> Trainer:
    """The `Trainer` of `config` in `run`, its RNGs seeded with `train.seed`; nothing is written to the run directory."""
    device = pick_device(config.train.device)
    torch.manual_seed(config.train.seed)
    random.seed(config.train.seed)  # the random localiser's stream (checkpointed with torch's)
    method = get_method(config.method, estimator=config.credit, loss=config.loss).for_run(config.rollout)
    task = build_task(config.task)
    model, tokenizer = load_model(config.model, device)
    check_reward_shapes(task, config, tokenizer)
    # before any update or checkpoint touches the weights: the reference is the starting policy
    reference = ReferencePolicy(model, lora=config.model.lora is not None) if "ref_logp" in method.needs else None
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optim = config.optim
    optimizer = torch.optim.AdamW(params, lr=optim.lr, betas=optim.betas, weight_decay=optim.weight_decay)
    updates = config.train.steps * optim.minibatches * optim.epochs

    def multiplier(update: int) -> float:
        return lr_multiplier(optim.schedule, update, updates, optim.warmup_steps)

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, multiplier)
    autocast = uses_autocast(config.model.autocast_bf16, device)
    tf32 = uses_tf32(config.model.tf32, device, autocast)
    if tf32 is not None:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    keys = CommonRandomNumbers(config.train.seed) if config.rollout.common_random_numbers else None
    backend = make_backend(config.rollout, model, tokenizer, config.model, seed=config.train.seed,
                           common_random_numbers=keys)
    on_policy = optim.minibatches * optim.epochs == 1 and not method.behaviour_statistics
    return Trainer(config, run, method, task, model, tokenizer, optimizer, scheduler, device, autocast, backend,
                   on_policy, keys, reference)


def uses_autocast(setting: bool | None, device: torch.device) -> bool:
    """Whether forward passes run under bf16 autocast (`model.autocast_bf16`): the setting, where unset on CUDA
    with bf16 support."""
    return setting if setting is not None else device.type == "cuda" and torch.cuda.is_bf16_supported()


def uses_tf32(setting: bool | None, device: torch.device, autocast: bool) -> bool | None:
    """Whether float32 matrix products run on TF32 tensor cores (`model.tf32`): the setting on CUDA, where unset
    on where bf16 autocast is; None: leave torch's setting (off CUDA, or unset without autocast)."""
    if device.type != "cuda":
        return None
    return setting if setting is not None else (True if autocast else None)


def pick_device(name: str) -> torch.device:
    """The device `train.device` names ("auto": CUDA where there is one, else the CPU); "cuda" without one is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("train.device = 'cuda' but no CUDA device is available; use 'auto' or 'cpu'")
    return torch.device(name)


def device_name(device: torch.device) -> str:
    """The device a run trained on, as its summary records it: `cuda: NVIDIA H200`, or `cpu (2 threads)`."""
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    if device.type == "cpu":
        threads = torch.get_num_threads()
        return f"cpu ({threads} thread{'s' if threads != 1 else ''})"
    return str(device)


def start_or_resume(trainer: Trainer, resume: bool) -> TrainState:
    """The state to train from: the last readable checkpoint's when resuming (logs truncated to it), else step 0.

    Resuming a run that stopped before its first checkpoint starts it again from step 0, its partial logs
    cleared; a fresh start refuses a directory that already holds a run.
    """
    run = trainer.run
    run.remove_stale_temporaries()
    if resume:
        rollout = trainer.config.rollout  # a step takes prompts_per_step problems, and as many for each refill
        state = load_latest_checkpoint(run, trainer.model, trainer.optimizer, trainer.scheduler,
                                       problems_per_step=rollout.prompts_per_step * (1 + rollout.max_refills))
        if state is not None:
            trainer.backend.sync_weights()
            run.truncate(state.step)
            return state
        log.warning("%s has no checkpoint (it stopped before its first): starting it again from step 0", run.root)
        run.clear_logs()
    elif run.metrics_file.exists() or run.latest_checkpoint() is not None:
        raise FileExistsError(f"{run.root} already holds a run; use --resume to continue it or pick a new --output")
    run.root.mkdir(parents=True, exist_ok=True)
    write_text_atomic(run.root / "config.yaml", dump(trainer.config))
    return TrainState()


REFERENCE_FILE = "reference.json"
"""The run directory's fingerprint of its reference policy's weights (`check_reference`)."""


def check_reference(trainer: Trainer, state: TrainState) -> None:
    """Record the reference policy's fingerprint at step 0; on a resumed run, check that `model.path` still gives it.

    The reference is not stored: it is the starting model, rebuilt from `model.path` when a run resumes (the
    checkpoint overwrites only the policy's trainable weights). If `model.path` now holds other weights, the
    KL penalty would measure against another model: a ValueError naming it, rather than a silent change.
    """
    path = trainer.run.root / REFERENCE_FILE
    found = trainer.reference.fingerprint()
    if state.step == 0 or not path.exists():
        write_json_atomic(path, found)
        return
    recorded = json.loads(path.read_text())
    same = recorded.get("tensors") == found["tensors"] and all(
        math.isclose(recorded.get(key, math.nan), found[key], rel_tol=1e-6, abs_tol=1e-6) for key in ("sum", "abs_sum"))
    if not same:
        raise ValueError(
            f"model.path = {trainer.config.model.path!r} no longer holds the weights this run started from "
            f"({path.name}: {recorded}; now {found}): the KL penalty's reference is the starting model, rebuilt "
            "from model.path on --resume; restore those weights or start a new run"
        )


def record_resumed_config(trainer: Trainer, state: TrainState) -> None:
    """Record a resumed run's config (with the changes `check_resume` allowed) in config.yaml, atomically."""
    if trainer.config.train.steps < state.step:
        raise ConfigError(f"--resume: train.steps = {trainer.config.train.steps} is below the {state.step} steps "
                          f"{trainer.run.root} has already trained")
    recorded = trainer.run.root / "config.yaml"
    text = dump(trainer.config)
    if not recorded.exists() or recorded.read_text() != text:
        write_text_atomic(recorded, text)


def check_reward_shapes(task: Task, config: RunConfig, tokenizer) -> None:
    """The custom reward functions of `task.reward` called once on the first training row, before any sampling
    (`CustomReward.check_shapes`): one that cannot score the dataset's rows stops the run here."""
    custom = task.custom_reward
    if custom is None:
        return
    custom.state = reward_state(config, 0)
    problem = next(iter(task.train_problems(config.train.seed)))
    ids = tokenizer(problem.answer, add_special_tokens=False)["input_ids"]
    custom.check_shapes(task, problem, ids, config.rollout.reward_errors)


def reward_state(config: RunConfig, step: int) -> RewardState:
    """TRL's `trainer_state` for the reward functions before step `step`'s sampling: as TRL counts them, in
    optimiser steps (`optim.minibatches x optim.epochs` per training step), those done and the run's."""
    updates = config.optim.minibatches * config.optim.epochs
    return RewardState(global_step=step * updates, max_steps=config.train.steps * updates)
