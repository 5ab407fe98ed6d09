"""reasoning-gym's dataset scorers, run in the sandbox worker (see `credo.tasks.scorers`)."""

from __future__ import annotations

from typing import Any

_DATASETS: dict[tuple, Any] = {}


def setup() -> None:
    """Import reasoning-gym (and the libraries its scorers use) before any call's limits."""
    import reasoning_gym  # noqa: F401


def score(dataset: str, options: dict[str, Any], size: int, seed: int, answer: str, entry: dict[str, Any]) -> float:
    """`dataset.score_answer(answer, entry)` for the dataset built with these options (built once, then cached)."""
    import reasoning_gym

    key = (dataset, repr(sorted(options.items())), size, seed)
    if key not in _DATASETS:
        _DATASETS[key] = reasoning_gym.create_dataset(dataset, size=size, seed=seed, **options)
    return float(_DATASETS[key].score_answer(answer, entry))
