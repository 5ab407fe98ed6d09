"""A study's finished runs as the report reads them: their evaluations, gradient norms and summaries.

`load_runs` reads a study directory written by `credo compare` (`<difficulty>/<method>/seed<k>/metrics.jsonl`,
`summary.json` and `config.yaml`), streaming the logs line by line; a run without `summary.json` is not finished
and is left out. A `Run` gives its curve of a metric against a cost axis (`credo.study.curves.Curve`: rollout tokens, optimiser
updates, rollout batches or wall time) and whether it was unstable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from credo.checkpoint import MetricsRecord
from credo.config import read_yaml_mapping
from credo.io import check_regular_file, iter_jsonl
from credo.study.curves import Curve
from credo.study.grid import STUDY_FILE, run_path

EXPLODED = 10.0
"""A run's gradient norm *explodes* at a step whose norm exceeds this multiple of the run's median norm."""


class NoFinishedRuns(ValueError):
    """A study directory without a single finished run: nothing to report (an existing report is kept)."""


@dataclass(frozen=True)
class Run:
    method: str
    seed: int
    path: Path
    evals: list[dict]
    """Eval records: `step`, `rollout_tokens`, `wall_s`, `eval` (the metrics), and `token_checkpoint` where the
    evaluation served one."""
    summary: dict
    grad_norms: tuple[float, ...] = ()
    """Each optimiser step's gradient norm before clipping (`grad_norm` of the step records that have one)."""
    eval_every_tokens: int | None = None
    """The run's `train.eval_every_tokens` (None: no token checkpoints)."""
    updates_per_batch: int = 1
    """Optimiser updates per rollout batch: the run's `optim.minibatches * optim.epochs`."""

    def unstable(self, metric: str) -> bool:
        """Whether the run collapsed (its last evaluation of `metric` below its first) or its gradient norm exploded
        (a step above `EXPLODED` times the run's median)."""
        curve = self.curve(metric, "step")
        norms = sorted(self.grad_norms)
        exploded = bool(norms) and norms[-1] > EXPLODED * norms[len(norms) // 2]
        return curve.y[-1] < curve.y[0] or exploded

    def curve(self, metric: str, axis: str) -> Curve:
        """`metric` at each evaluation against `axis`: `rollout_tokens`, `step` (rollout batches), `updates`
        (optimiser updates: batches x `updates_per_batch`) or `wall_s`."""
        points = [(r["step"] * self.updates_per_batch if axis == "updates" else r[axis], r["eval"][metric])
                  for r in self.evals if metric in r["eval"]]
        if not points:
            raise ValueError(f"{self.path}: no evaluation holds the metric {metric!r}; it has {sorted(self.evals[0]['eval'])}")
        return Curve(tuple(float(x) for x, _ in points), tuple(float(y) for _, y in points))

    def has_curve(self, metric: str) -> bool:
        """Whether the run evaluated `metric` at least twice (not only at its end, `eval.final_samples`)."""
        return sum(metric in e["eval"] for e in self.evals) >= 2


def load_runs(directory: Path) -> tuple[dict, dict[str, dict[str, list[Run]]]]:
    """The study file and its finished runs: `{difficulty: {method: [runs by seed]}}` in the study's order."""
    study_file = directory / STUDY_FILE
    if not study_file.exists():
        raise FileNotFoundError(f"{directory} is not a study directory (no {STUDY_FILE}); run `credo compare` first")
    check_regular_file(study_file)
    study = read_yaml_mapping(study_file, "a resolved study")
    out: dict[str, dict[str, list[Run]]] = {}
    for difficulty in study["difficulties"]:
        out[difficulty] = {}
        for method in study["methods"]:
            runs = []
            for seed in seeds_of(study, method):
                path = run_path(directory, difficulty, method, seed)
                if (path / "summary.json").exists():
                    runs.append(read_run(path, method, seed))
            out[difficulty][method] = runs
    return study, out


def read_run(path: Path, method: str, seed: int) -> Run:
    """One finished run's folder (its files regular files, `credo.io.check_regular_file`: the folder may be shared)."""
    for name in ("metrics.jsonl", "summary.json", "config.yaml"):
        if (path / name).exists() or (path / name).is_symlink():
            check_regular_file(path / name)
    evals, norms = [], []
    for record in iter_jsonl(path / "metrics.jsonl", MetricsRecord):
        if "eval" in record:
            evals.append(record)
        elif "grad_norm" in record:
            norms.append(float(record["grad_norm"]))
    config = path / "config.yaml"
    resolved = read_yaml_mapping(config, "a run config") if config.exists() else {}
    optim = resolved.get("optim", {})
    return Run(method, seed, path, evals, json.loads((path / "summary.json").read_text()), tuple(norms),
               resolved.get("train", {}).get("eval_every_tokens"), optim.get("minibatches", 1) * optim.get("epochs", 1))


def seeds_of(study: dict, method: str) -> list[int]:
    """A method's seeds in a resolved study file: its own, else the study's."""
    return study["methods"][method].get("seeds") or study["seeds"]


def final_metrics(runs: list[Run]) -> list[str]:
    """The eval metrics every run reports (greedy_pass@1, pass@k, avg@n), in the runs' order."""
    keys = [k for k in runs[0].summary["eval_end"] if k != "by_difficulty"]
    return [k for k in keys if all(k in r.summary["eval_end"] for r in runs)]
