"""What a training run shows as it goes, on the terminal or in a log.

`TrainProgress` shows a rich progress bar (step, reward, accuracy, tokens/s, time left) when stdout is a
terminal, and prints one plain line per step and per evaluation when it is not (nohup, SLURM, CI), where a
live bar would show nothing until the end. `Trackers` sends the step metrics and the evaluations (flattened,
`eval/all/greedy_pass@1`, `eval/steps=2/pass@1`) to the trackers of `train.report_to` through accelerate's
tracker classes: TensorBoard, Weights & Biases, MLflow, trackio.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from credo.trackers import is_number


class TrainProgress:
    """The live view of a run: a rich bar on a terminal, plain lines elsewhere (`plain`); nothing if not `enabled`."""

    def __init__(self, total: int, done: int, *, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.stream = sys.stdout if stream is None else stream
        self.total = total
        self.plain = enabled and not _is_terminal(self.stream)
        """Whether a plain line is printed per step and per evaluation (stdout is not a terminal)."""
        self.started = time.perf_counter()
        self.progress = Progress(
            TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(), disable=not enabled or self.plain,
            console=None if stream is None else Console(file=stream),
        )
        self.task = self.progress.add_task("train", total=total, completed=done, status="")

    def __enter__(self) -> TrainProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def advance(self, record: dict) -> None:
        """One step done; `record` is its metrics record (`credo.train.step_record`)."""
        terms = "".join(f"  {key.split('/')[1]} {value:.3f}" for key, value in record.items()
                        if key.startswith("rewards/") and key.endswith("/mean"))  # each custom reward function's
        status = (
            f"reward {record['reward/mean']:.3f}  acc {record['reward/accuracy']:.3f}{terms}  "
            f"{record['tokens_per_s']:,.0f} tok/s"
        )
        if self.plain:
            self._line(f"step {record['step']}/{self.total}  {status}  elapsed {self._elapsed()}")
        self.progress.update(self.task, advance=1, status=status)

    def evaluated(self, step: int, result: dict) -> None:
        """An evaluation at `step` (`credo.evaluate.evaluate_policy`'s result): its overall metrics in one line."""
        overall = "  ".join(f"{key} {value:.3f}" for key, value in result.items() if is_number(value))
        line = f"eval step {step}/{self.total}  {overall}  elapsed {self._elapsed()}"
        if self.plain:
            self._line(line)
        elif not self.progress.disable:
            self.progress.console.print(line, highlight=False)

    def _line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def _elapsed(self) -> str:
        seconds = int(time.perf_counter() - self.started)
        return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
