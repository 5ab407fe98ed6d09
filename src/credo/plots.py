"""Learning-curve plots of a run (matplotlib, written atomically as PNG)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from credo.io import default_mode


def learning_curve(records: list[dict], path: Path, *, title: str) -> Path:
    """Held-out greedy and sampled pass@1 against optimiser steps, with the training reward beside them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evals = [r for r in records if "eval" in r]
    steps = [r for r in records if "eval" not in r]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for key, label in (("greedy_pass@1", "greedy pass@1"), ("pass@1", "sampled pass@1")):
        points = [(r["step"], r["eval"][key]) for r in evals if key in r["eval"]]
        if points:
            left.plot(*zip(*points), marker="o", label=label)
    left.set(xlabel="step (rollout batches)", ylabel="held-out accuracy", ylim=(0, 1), title=title)
    left.grid(alpha=0.3)
    if left.lines:
        left.legend()
    if steps:
        right.plot([r["step"] for r in steps], [r["reward/mean"] for r in steps], alpha=0.4, label="reward")
        window = max(1, len(steps) // 20)
        smooth = [sum(r["reward/mean"] for r in steps[max(0, i - window + 1) : i + 1]) / min(window, i + 1)
                  for i in range(len(steps))]
        right.plot([r["step"] for r in steps], smooth, label=f"reward ({window}-step mean)")
    right.set(xlabel="step (rollout batches)", ylabel="training reward", title="training reward")
    right.grid(alpha=0.3)
    right.legend()
    return save_figure(fig, path, dpi=110)


def save_figure(fig, path: Path, *, dpi: int = 100) -> Path:
    """Write a matplotlib figure as PNG atomically (temp file, then rename) and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".png")
    os.fchmod(fd, default_mode())
    os.close(fd)
    fig.savefig(tmp, dpi=dpi)
    plt.close(fig)
    os.replace(tmp, path)
    return path
