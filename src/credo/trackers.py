"""Experiment trackers: a run's step metrics and evaluations sent to TensorBoard, Weights & Biases, MLflow or
trackio (`train.report_to`) through accelerate's tracker classes, evaluations flattened
(`eval/all/greedy_pass@1`, `eval/steps=2/pass@1`), every local file under the run directory.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import secrets
from pathlib import Path
from typing import Any

from credo.extras import MissingExtra
from credo.io import write_json_atomic

TRACKERS = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow", "trackio": "trackio"}
"""The trackers `train.report_to` may name, each with the module it needs; the extra of `pyproject.toml` that
installs it has the tracker's name (`pip install 'credo[wandb]'`)."""

TRACKER_IDS = "trackers.json"
"""The run directory's record of its tracker runs (W&B run id, MLflow run id), so that `--resume` continues them."""


def installed_trackers() -> list[str]:
    """The trackers whose package is installed (what `report_to: all` means, as in transformers and TRL)."""
    return [name for name in TRACKERS if missing_tracker([name]) is None]


def missing_tracker(names: list[str]) -> str | None:
    """The one-line error for the first tracker of `names` whose package is not installed, or None."""
    for name in names:
        module = TRACKERS[name]
        if importlib.util.find_spec(module) is None:
            return (f"{name} needs the optional package {module!r}, which is not installed; install it with: "
                    f"pip install 'credo[{name}]'")
        if name == "trackio":
            import accelerate
            from accelerate import tracking

            if not hasattr(tracking, "TrackioTracker"):
                return (f"trackio needs an accelerate with its trackio tracker ({accelerate.__version__} has none); "
                        "install it with: pip install -U accelerate")
    return None


class Trackers:
    """The experiment trackers of one run (`train.report_to`), through `accelerate.tracking`.

    Everything a tracker writes locally goes under the run directory: TensorBoard's event files into
    `tensorboard/`, W&B's files into `wandb/` (offline with `WANDB_MODE=offline`; `wandb sync` uploads them
    later), MLflow's file store into `mlruns/` unless `MLFLOW_TRACKING_URI` names another store (MLflow 3.7
    and later want `MLFLOW_ALLOW_FILE_STORE=true` for a file store: set when unset; metric names lose the `@`
    and `=` MLflow refuses, `mlflow_names`). trackio keeps its local database where it always does
    (`TRACKIO_DIR`, by default the Hugging Face cache) and uploads nothing unless told to (`TRACKIO_SPACE_ID`).
    A resumed run continues the same tracker runs: TensorBoard drops the events after the checkpoint it
    resumes from (`purge_step`), W&B and MLflow reopen the run ids kept in `trackers.json`, trackio the run of
    the same name. A fresh run also stores its resolved config as the trackers' hyperparameters.
    """

    def __init__(self, names: list[str], root: Path, *, project: str, config: dict[str, Any],
                 resumed_step: int | None = None) -> None:
        problem = missing_tracker(names)
        if problem:
            raise MissingExtra(f"train.report_to: {problem}")
        self.root = Path(root)
        ids_file = self.root / TRACKER_IDS
        ids = json.loads(ids_file.read_text()) if resumed_step is not None and ids_file.exists() else {}
        run_name = self.root.resolve().name
        self.trackers = []
        if names:
            from accelerate import PartialState

            PartialState()  # accelerate's trackers and their logger read its process state (here: one process)
        try:
            for name in dict.fromkeys(names):
                tracker = _make_tracker(name, self.root, project, run_name, ids, resumed_step)
                tracker.start()
                self.trackers.append(tracker)
                if name == "mlflow":
                    ids["mlflow"] = tracker.active_run.info.run_id
        except BaseException:
            self.close()  # those already started
            raise
        if ids:
            write_json_atomic(ids_file, ids)
        if resumed_step is None:
            flat = flat_config(config)
            for tracker in self.trackers:
                tracker.store_init_configuration(flat)

    def log(self, values: dict[str, Any], step: int) -> None:
        """Log the numeric entries of a step record at `step` (`step` itself is the x axis, not a metric)."""
        self._send({key: float(value) for key, value in values.items() if key != "step" and is_number(value)}, step)

    def log_eval(self, result: dict, step: int) -> None:
        """Log an evaluation's result at `step`, flattened (`eval_scalars`)."""
        self._send(eval_scalars(result), step)

    def _send(self, scalars: dict[str, float], step: int) -> None:
        for tracker in self.trackers:
            tracker.log(mlflow_names(scalars) if tracker.name == "mlflow" else scalars, step=step)

    def close(self) -> None:
        for tracker in self.trackers:
            tracker.finish()
        self.trackers = []


def _make_tracker(name: str, root: Path, project: str, run_name: str, ids: dict, resumed_step: int | None):
    from accelerate import tracking

    if name == "tensorboard":
        purge = {} if resumed_step is None else {"purge_step": resumed_step + 1}
        return tracking.TensorBoardTracker("tensorboard", root, **purge)
    if name == "wandb":
        ids.setdefault("wandb", secrets.token_hex(4))  # a W&B run id (8 of [0-9a-f]), kept for --resume
        return tracking.WandBTracker(project, dir=str(root), name=run_name, id=ids["wandb"], resume="allow")
    if name == "mlflow":
        import mlflow

        if not os.environ.get("MLFLOW_TRACKING_URI"):
            # a file store in the run directory, which needs no server, database or network; MLflow >= 3.7 keeps
            # it behind this opt-in (in maintenance, not removed); a user's own setting is left as it is
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            mlflow.set_tracking_uri((root / "mlruns").resolve().as_uri())
        return tracking.MLflowTracker(experiment_name=project, run_id=ids.get("mlflow"), run_name=run_name)
    if name == "trackio":
        return tracking.TrackioTracker(project, name=run_name, resume="allow")
    raise ValueError(f"unknown tracker {name!r}; known: {', '.join(TRACKERS)}")


def mlflow_names(scalars: dict[str, float]) -> dict[str, float]:
    """Metric names as MLflow accepts them (alphanumerics, `_ - . : /` and spaces): `@` reads `_at_`, any other
    character becomes `_` (`eval/steps=2/pass@1` -> `eval/steps_2/pass_at_1`)."""
    return {re.sub(r"[^\w\-.:/ ]", "_", key.replace("@", "_at_")): value for key, value in scalars.items()}


def eval_scalars(result: dict) -> dict[str, float]:
    """An evaluation's result as flat scalars: `eval/all/<metric>` overall, `eval/<difficulty>/<metric>` per
    difficulty bucket (problem counts left out)."""
    scalars = {f"eval/all/{key}": float(value) for key, value in result.items() if is_number(value)}
    for bucket, metrics in result.get("by_difficulty", {}).items():
        scalars.update({f"eval/{bucket}/{key}": float(value) for key, value in metrics.items()
                        if key != "problems" and is_number(value)})
    return scalars


def flat_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A dumped run config as one level of `section.key` entries whose values trackers store as hyperparameters
    (numbers, booleans and strings; lists, mappings and None as their JSON text)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flat_config(value, f"{name}."))
        elif isinstance(value, (bool, int, float, str)):
            flat[name] = value
        else:
            flat[name] = json.dumps(value)
    return flat


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
