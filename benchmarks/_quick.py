"""The model of the benchmarks' `--quick` mode: a tiny randomly initialised testbed Llama.

Quick mode only checks that a benchmark still runs, in seconds, so it must neither build the testbed model
(a 5-minute SFT when it is not cached) nor load a real one. This module saves a testbed Llama of
tests/tiny.py's size, untrained, with the testbed's own tokenizer and chat template, into a temporary
model directory; a benchmark points `model.path` at it and runs its usual code. Not a benchmark itself
(the leading underscore keeps it out of tests/test_benchmarks.py).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch

TINY_MODEL = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64}
"""Architecture of the quick-mode model (`credo.testbed.TestbedModel` fields), tests/tiny.py's testbed."""


@contextlib.contextmanager
def tiny_testbed() -> Iterator[Path]:
    """A temporary model directory holding a randomly initialised tiny testbed model (seed 0), removed on exit.

    Load it with `model.path=<directory>` and `model.attn_implementation=eager` (the testbed's attention)."""
    from credo.testbed import TestbedModel, build_tokenizer, new_model

    tokenizer = build_tokenizer()
    with torch.random.fork_rng(devices=[]):  # the caller's RNG stream stays as it was
        torch.manual_seed(0)
        model = new_model(TestbedModel(**TINY_MODEL), tokenizer)
    with tempfile.TemporaryDirectory(prefix="credo_quick_") as directory:
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
        yield Path(directory)
