"""Session set-up: a private model cache, so tests build their own tiny testbed models."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    patcher = pytest.MonkeyPatch()
    patcher.setenv("CREDO_CACHE", str(tmp_path_factory.mktemp("credo-cache")))
    patcher.setenv("TRANSFORMERS_VERBOSITY", "error")
    yield
    patcher.undo()
