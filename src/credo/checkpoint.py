"""Run directories and checkpoints, written atomically; a killed run resumes exactly where it stopped.

A run directory holds `config.yaml` (the resolved config), `metrics.jsonl` (one record per step, and eval
records), `samples.jsonl`, `checkpoints/step_NNNNNN/`, `model/` (the final weights, a Hugging Face
directory), `summary.json` and `plots/`. A checkpoint holds the trainable weights (safetensors), the
optimiser and scheduler states, the RNG states and the trainer state (step, data position, counters).
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from credo.io import atomic_directory, read_jsonl, write_json_atomic, write_text_atomic


@dataclass
class TrainState:
    step: int = 0
    """Rollout batches completed."""
    data_position: int = 0
    """Training problems consumed from the task's stream."""
    rollout_tokens: int = 0
    """Every token generated so far (including discarded draws)."""
    wall_s: float = 0.0
    """Training wall time so far (across resumptions)."""
    nan_streak: int = 0
    """Consecutive optimiser steps skipped for a non-finite loss."""
    skipped_steps: int = 0


class RunDirectory:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.checkpoints = self.root / "checkpoints"
        self.metrics_file = self.root / "metrics.jsonl"
        self.samples_file = self.root / "samples.jsonl"
        self.model_dir = self.root / "model"
        self.plots = self.root / "plots"

    def latest_checkpoint(self) -> Path | None:
        found = sorted(self.checkpoints.glob("step_*")) if self.checkpoints.exists() else []
        return found[-1] if found else None

    def append(self, path: Path, record: dict) -> None:
        with path.open("a") as handle:
            handle.write(json.dumps(record) + "\n")

    def tensorboard(self):
        """A TensorBoard writer into `tensorboard/` when the tensorboard package is installed, else None."""
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            return None
        return SummaryWriter(str(self.root / "tensorboard"))

    def records(self, path: Path | None = None) -> list[dict]:
        return read_jsonl(path or self.metrics_file)

    def truncate(self, step: int) -> None:
        """Drop records after `step` (a killed run may have logged past its last checkpoint)."""
        for path in (self.metrics_file, self.samples_file):
            kept = [r for r in self.records(path) if r["step"] <= step]
            write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in kept))


def trainable_state(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().contiguous().cpu() for name, p in model.named_parameters() if p.requires_grad}


def save_checkpoint(run: RunDirectory, model, optimizer, scheduler, state: TrainState, keep: int) -> Path:
    target = run.checkpoints / f"step_{state.step:06d}"
    with atomic_directory(target) as tmp:
        save_file(trainable_state(model), tmp / "trainable.safetensors")
        torch.save(
            {
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                "python_rng": random.getstate(),
            },
            tmp / "trainer.pt",
        )
        write_json_atomic(tmp / "state.json", asdict(state))
    for old in sorted(run.checkpoints.glob("step_*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def load_checkpoint(path: Path, model, optimizer, scheduler) -> TrainState:
    weights = load_file(path / "trainable.safetensors")
    params = dict(model.named_parameters())
    missing = sorted(set(weights) ^ {n for n, p in params.items() if p.requires_grad})
    if missing:
        raise ValueError(f"checkpoint {path} does not match the model: parameters {missing[:5]} differ")
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value)
    extra = torch.load(path / "trainer.pt", weights_only=False)
    optimizer.load_state_dict(extra["optimizer"])
    scheduler.load_state_dict(extra["scheduler"])
    torch.set_rng_state(extra["torch_rng"])
    if extra["cuda_rng"]:
        torch.cuda.set_rng_state_all(extra["cuda_rng"])
    random.setstate(extra["python_rng"])
    return TrainState(**json.loads((path / "state.json").read_text()))
