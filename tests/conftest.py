"""Session set-up: a private model cache, so tests build their own tiny testbed models; and every test fails on a
deprecated call that credo's own code makes (`deprecations.py`)."""

from __future__ import annotations

import pytest
from deprecations import credo_deprecations_fail


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    patcher = pytest.MonkeyPatch()
    patcher.setenv("CREDO_CACHE", str(tmp_path_factory.mktemp("credo-cache")))
    patcher.setenv("TRANSFORMERS_VERBOSITY", "error")
    yield
    patcher.undo()


@pytest.fixture(autouse=True)
def no_deprecated_calls_from_credo():
    with credo_deprecations_fail():
        yield
