"""reasoning-gym's dataset scorers, run in the sandbox worker (see `credo.tasks.scorers`)."""

from __future__ import annotations

from typing import Any

_DATASETS: dict[tuple, Any] = {}

PREPARE = {"score": 4}
"""`score`'s first four arguments name the dataset (from the trainer's config, never from an answer): the
worker passes them to `prepare` before it forks each call's child, so the dataset is built once, not per call."""


def setup() -> None:
    """Import reasoning-gym (and the libraries its scorers use) before any call's limits."""
    import reasoning_gym  # noqa: F401


def prepare(dataset: str, options: dict[str, Any], size: int, seed: int) -> None:
    _dataset(dataset, options, size, seed)


def score(dataset: str, options: dict[str, Any], size: int, seed: int, answer: str, entry: dict[str, Any]) -> float:
    """`dataset.score_answer(answer, entry)` for the dataset built with these options."""
    return float(_dataset(dataset, options, size, seed).score_answer(answer, entry))


def _dataset(dataset: str, options: dict[str, Any], size: int, seed: int):
    """The dataset built with these options (built once per worker by `prepare`, then cached)."""
    import reasoning_gym

    key = (dataset, repr(sorted(options.items())), size, seed)
    if key not in _DATASETS:
        _DATASETS[key] = reasoning_gym.create_dataset(dataset, size=size, seed=seed, **options)
    return _DATASETS[key]
