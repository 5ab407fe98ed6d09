"""The live view of a training run (rich): step, reward, accuracy, tokens/s, time left."""

from __future__ import annotations

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class TrainProgress:
    def __init__(self, total: int, done: int, *, enabled: bool = True) -> None:
        self.progress = Progress(
            TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(), disable=not enabled,
        )
        self.task = self.progress.add_task("train", total=total, completed=done, status="")

    def __enter__(self) -> TrainProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def advance(self, record: dict) -> None:
        status = (
            f"reward {record['reward/mean']:.3f}  acc {record['reward/accuracy']:.3f}  "
            f"{record['tokens_per_s']:,.0f} tok/s"
        )
        self.progress.update(self.task, advance=1, status=status)
