"""Run directories and checkpoints, written atomically; a killed run resumes exactly where it stopped.

A run directory holds `config.yaml` (the resolved config), `metrics.jsonl` (one record per step, and eval
records), `samples.jsonl`, `checkpoints/step_NNNNNN/`, `model/` (the final weights, a Hugging Face
directory), `summary.json`, `plots/` and `.lock` (locked while a process trains in the directory). A
checkpoint holds the trainable weights (safetensors), `trainer.pt` (the optimiser and scheduler states and
the RNG states: tensors and plain types only, loaded with `torch.load(weights_only=True)`) and `state.json`
(step, data position, counters; read back strictly, `TrainState`). Its files are fsynced before the folder is renamed into place; resuming
passes over an unreadable newest checkpoint to the one before it. With `train.report_to`, the trackers' local
files go there too (`tensorboard/`, `wandb/`, `mlruns/`, and `trackers.json`, their run ids); with a KL
penalty, `reference.json` (the reference weights' fingerprint, `credo.run_setup.check_reference`).

A run directory may come from elsewhere, so nothing in it is trusted: no write, removal or lock follows a link
in it (`RunDirectory.lock`), `state.json` and the logs are read back with their types and ranges checked
(`TrainState`, `MetricsRecord`), and a `trainer.pt` is loaded only if it cannot inflate (`credo.io.check_torch_archive`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import logging
import os
import pickle
import random
import shutil
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from credo.io import (
    append_jsonl,
    atomic_directory,
    check_torch_archive,
    iter_jsonl,
    open_own_file,
    read_jsonl,
    recover_directories,
    refuse_links,
    validation_problem,
    write_json_atomic,
    write_jsonl_atomic,
)

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
"""The run directory's lock file (`RunDirectory.lock`)."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: none of the run's checkpoints is readable, or one holds objects other
    than tensors and plain types (never written by credo: loading it could run code)."""


class RunLockedError(OSError):
    """Another process holds the run directory's lock: it is training there."""


class UnreadableCheckpoint(Exception):
    """A checkpoint whose files are missing, truncated or corrupt (`load_latest_checkpoint` passes over it)."""


class TrainState(BaseModel):
    """A run's progress, a checkpoint's `state.json`: read back strictly (integers that are integers, a finite
    wall time, nothing negative, no unknown key) and, given the most problems a step takes
    (`context={"problems_per_step": n}`), with a `data_position` that `step` steps could reach, so that a forged
    state cannot send a resume skipping through billions of problems."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, use_attribute_docstrings=True)

    step: int = Field(0, ge=0)
    """Rollout batches completed."""
    data_position: int = Field(0, ge=0)
    """Training problems consumed from the task's stream."""
    rollout_tokens: int = Field(0, ge=0)
    """Every token generated so far (including discarded draws)."""
    wall_s: float = Field(0.0, ge=0.0)
    """Training wall time so far (across resumptions)."""
    nan_streak: int = Field(0, ge=0)
    """Consecutive steps with a skipped update (`credo.train.update`)."""
    skipped_steps: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _reachable(self, info: ValidationInfo) -> TrainState:
        per_step = (info.context or {}).get("problems_per_step")
        if per_step is not None and self.data_position > self.step * per_step:
            raise ValueError(f"data_position = {self.data_position} is more than the {self.step * per_step} training "
                             f"problems {self.step} steps can take ({per_step} a step)")
        return self


class StepRecord(BaseModel):
    """What every record of `samples.jsonl` holds (checked as it is read back): its step."""

    model_config = ConfigDict(extra="allow", strict=True)

    step: int = Field(ge=0)


class MetricsRecord(StepRecord):
    """A record of `metrics.jsonl` as it is read back: a step record (`rollout_tokens`, `wall_s` and numbers) or
    an evaluation record (`eval`, a mapping of metrics, and perhaps `token_checkpoint`); its model config is the
    step record's."""

    rollout_tokens: int | None = Field(None, ge=0)
    wall_s: float | None = Field(None, ge=0.0, allow_inf_nan=False)
    eval: dict[str, Any] | None = None
    token_checkpoint: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _numbers(self) -> MetricsRecord:
        for key, value in (self.model_extra or {}).items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ValueError(f"{key} is a {type(value).__name__}, not a number")
        return self


class RunDirectory:
    """The files of one run (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.checkpoints = self.root / "checkpoints"
        self.metrics_file = self.root / "metrics.jsonl"
        self.samples_file = self.root / "samples.jsonl"
        self.model_dir = self.root / "model"
        self.plots = self.root / "plots"

    def checkpoint_paths(self) -> list[Path]:
        """The run's checkpoints, oldest first."""
        return sorted(self.checkpoints.glob("step_*")) if self.checkpoints.exists() else []

    def latest_checkpoint(self) -> Path | None:
        found = self.checkpoint_paths()
        return found[-1] if found else None

    def append(self, path: Path, record: dict) -> None:
        """Append one record to a JSON-lines log, in a single write of the whole line."""
        append_jsonl(path, record)

    def trackers(self, config, *, resumed_step: int | None = None):
        """The experiment trackers of `config.train.report_to` (none by default), started, writing their local
        files under this directory (`credo.trackers.Trackers`; `resumed_step`: the checkpoint a resumed run
        continues from, None for a fresh start)."""
        from credo.trackers import Trackers

        return Trackers(config.train.report_to, self.root, project=config.train.tracker_project,
                        config=config.model_dump(mode="json"), resumed_step=resumed_step)

    def records(self) -> list[dict]:
        """metrics.jsonl's records, each checked (`MetricsRecord`; a ValueError names the line and the field)."""
        return read_jsonl(self.metrics_file, MetricsRecord)

    def truncate(self, step: int) -> None:
        """Drop records after `step` (a killed run may have logged past its last checkpoint) and a torn last
        line, streaming each log through a temporary file; each record is checked (`MetricsRecord`, `StepRecord`)."""
        for path, schema in ((self.metrics_file, MetricsRecord), (self.samples_file, StepRecord)):
            write_jsonl_atomic(path, (r for r in iter_jsonl(path, schema) if r["step"] <= step))

    def clear_logs(self) -> None:
        """Remove what a run killed before its first checkpoint logged, so that it can start again from step 0."""
        for path in (self.metrics_file, self.samples_file):
            path.unlink(missing_ok=True)
        shutil.rmtree(self.root / "tensorboard", ignore_errors=True)

    def remove_stale_temporaries(self) -> None:
        """Remove the temporary folders of checkpoints and of the exported model whose writing was killed
        (`checkpoints/.step_*`, `.model.*`)."""
        for parent, pattern in ((self.checkpoints, "step_*"), (self.root, self.model_dir.name)):
            for path in recover_directories(parent, pattern):
                log.info("removed %s, a folder whose writing was interrupted", path)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the directory's lock (`flock` on `.lock`, which holds the holder's pid) for the block.

        The kernel releases it when the process ends, killed or not. Raises RunLockedError, naming the
        directory, when another process holds it, and an OSError naming the link when `.lock` is not a regular
        file of the directory (`credo.io.open_own_file`) or a symbolic link or special file stands among the
        entries of the directory, `checkpoints/` or `plots/` (`refuse_links`): what credo writes, removes or
        locks there stays in the directory, and no read of a run's file blocks on a FIFO or a device.
        A directory the lock created that holds nothing but `.lock` when the block ends (a run that failed before
        it wrote anything: a missing dataset, a bad model path) is removed, so a failed start leaves no run behind.
        """
        created = not self.root.exists()
        self.root.mkdir(parents=True, exist_ok=True)
        fd = open_own_file(self.root / LOCK_FILE, os.O_RDWR | os.O_CREAT)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
                by = f"process {holder}" if holder.isdigit() else "another process"
                raise RunLockedError(f"{self.root} is in use: {by} is training in it (wait for it to end, "
                                     "or stop it first)") from None
            for folder in (self.root, self.checkpoints, self.plots):
                refuse_links(folder)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            try:
                yield
            finally:
                os.ftruncate(fd, 0)
                if created and [p.name for p in self.root.iterdir()] == [LOCK_FILE]:
                    with contextlib.suppress(OSError):  # never mask the error that ended the block
                        (self.root / LOCK_FILE).unlink()
                        self.root.rmdir()
        finally:
            os.close(fd)


def holding_run_lock(function: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate `function(config, run_dir, ...)` to hold `run_dir`'s lock (`RunDirectory.lock`) while it runs."""

    @functools.wraps(function)
    def locked(config: Any, run_dir: Path, *args: Any, **kwargs: Any) -> Any:
        with RunDirectory(run_dir).lock():
            return function(config, run_dir, *args, **kwargs)

    return locked


def trainable_state(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().contiguous().cpu() for name, p in model.named_parameters() if p.requires_grad}


def save_checkpoint(run: RunDirectory, model, optimizer, scheduler, state: TrainState, keep: int) -> Path:
    """Write `checkpoints/step_NNNNNN/` (files fsynced, then one rename) and keep the newest `keep`.

    A full disk is an OSError "disk full while writing checkpoint <path>"; nothing of that checkpoint stays.
    """
    target = run.checkpoints / f"step_{state.step:06d}"
    try:
        with atomic_directory(target) as tmp:
            save_file(trainable_state(model), tmp / "trainable.safetensors")
            torch.save(
                {
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "torch_rng": torch.get_rng_state(),
                    "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                    "python_rng": random.getstate(),  # a tuple of ints: a plain type
                },
                tmp / "trainer.pt",
            )
            write_json_atomic(tmp / "state.json", state.model_dump())
    except (OSError, RuntimeError, SafetensorError) as error:
        if disk_full(error):
            raise OSError(f"disk full while writing checkpoint {target}") from error
        raise
    for old in run.checkpoint_paths()[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def disk_full(error: BaseException) -> bool:
    """Whether a write failed for want of space: ENOSPC or EDQUOT, as an OSError or in the message of the
    error that torch's zip writer (`enforce fail at inline_container.cc`) or safetensors raise instead."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(error)
    return any(sign in text for sign in ("inline_container.cc", os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT),
                                         "StorageFull"))


def read_checkpoint(path: Path, problems_per_step: int | None = None) -> tuple[dict[str, torch.Tensor], dict, TrainState]:
    """A checkpoint's weights, trainer state (`trainer.pt`, loaded with `weights_only=True`) and TrainState.

    Raises UnreadableCheckpoint for missing, truncated or corrupt files and for a `state.json` that `TrainState`
    refuses (given `problems_per_step`, the most a step takes), CheckpointError for a `trainer.pt` that holds
    anything but tensors and plain types (torch's weights-only unpickler met a GLOBAL it refuses) or that could
    inflate on load (`credo.io.check_torch_archive`).
    """
    try:
        refuse_links(path)  # a FIFO or a link to /dev/zero among its files would hang or never end the read
        state = TrainState.model_validate_json((path / "state.json").read_bytes(),
                                               context={"problems_per_step": problems_per_step})
    except ValidationError as error:
        raise UnreadableCheckpoint(f"state.json: {validation_problem(error)}") from None
    except OSError as error:
        raise UnreadableCheckpoint(_reason(error)) from error
    try:
        weights = load_file(path / "trainable.safetensors")
        check_torch_archive(path / "trainer.pt", CheckpointError)
        extra = torch.load(path / "trainer.pt", weights_only=True)
        missing = {"optimizer", "scheduler", "torch_rng", "cuda_rng", "python_rng"} - set(extra)
        if missing:
            raise KeyError(f"trainer.pt lacks {sorted(missing)}")
    except CheckpointError:
        raise
    except pickle.UnpicklingError as error:
        reason = _unpickler_reason(error)
        if "GLOBAL" not in reason:  # bytes that are no pickle torch reads: damage, not an object to refuse
            raise UnreadableCheckpoint(f"trainer.pt is no torch checkpoint: {reason}") from error
        raise CheckpointError(
            f"refusing to load {path / 'trainer.pt'}: it holds objects other than tensors and plain types "
            f"({reason}); credo's checkpoints never do, so it was not written by credo"
        ) from None
    except (OSError, RuntimeError, EOFError, ValueError, KeyError, TypeError, AttributeError, SafetensorError,
            zipfile.BadZipFile) as error:
        raise UnreadableCheckpoint(_reason(error)) from error
    return weights, extra, state


def load_checkpoint(path: Path, model, optimizer, scheduler, problems_per_step: int | None = None) -> TrainState:
    """Restore the model, optimiser, scheduler and RNG states from one checkpoint; returns its TrainState
    (`read_checkpoint`)."""
    weights, extra, state = read_checkpoint(path, problems_per_step)
    params = dict(model.named_parameters())
    missing = sorted(set(weights) ^ {n for n, p in params.items() if p.requires_grad})
    if missing:
        raise ValueError(f"checkpoint {path} does not match the model: parameters {missing[:5]} differ")
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value)
    optimizer.load_state_dict(extra["optimizer"])
    scheduler.load_state_dict(extra["scheduler"])
    torch.set_rng_state(extra["torch_rng"])
    if extra["cuda_rng"]:
        torch.cuda.set_rng_state_all(extra["cuda_rng"])
    random.setstate(extra["python_rng"])
    return state


def load_latest_checkpoint(run: RunDirectory, model, optimizer, scheduler,
                           problems_per_step: int | None = None) -> TrainState | None:
    """Restore the newest readable checkpoint; None when the run has no checkpoint.

    An unreadable one (truncated or corrupt files, a `state.json` out of type or range: `read_checkpoint`) is
    passed over for the one before it, with a warning
    naming both; CheckpointError when none is readable, or when one holds more than tensors and plain types.
    """
    unreadable: list[tuple[Path, str]] = []
    for path in reversed(run.checkpoint_paths()):
        try:
            state = load_checkpoint(path, model, optimizer, scheduler, problems_per_step)
        except UnreadableCheckpoint as error:
            unreadable.append((path, str(error)))
            continue
        for bad, reason in unreadable:
            log.warning("checkpoint %s is unreadable (%s); resuming from %s instead", bad, reason, path)
        return state
    if unreadable:
        raise CheckpointError(f"no readable checkpoint in {run.checkpoints}: "
                              + "; ".join(f"{bad.name}: {reason}" for bad, reason in unreadable))
    return None


def _reason(error: BaseException) -> str:
    """An error's message as one short line (its first sentence), or its type when it has none."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text.split('. ')[0]}" if text else type(error).__name__


def _unpickler_reason(error: pickle.UnpicklingError) -> str:
    """What torch's weights-only unpickler refused, from its multi-line message."""
    lines = [line.strip() for line in str(error).splitlines()]
    return next((line.rstrip(".") for line in lines if "unsupported" in line.lower()), _reason(error))
