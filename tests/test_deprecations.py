"""The suite's guard against deprecated calls from credo's own code (`tests/deprecations.py`): a deprecated API
that credo calls fails the test; one that a library calls on its own behalf, or a test calls, does not."""

from __future__ import annotations

import warnings

import pytest
from deprecations import CREDO, credo_deprecations_fail

LIBRARY = "/venv/lib/python3.11/site-packages/somelib/api.py"


def compiled(path: str, source: str) -> dict:
    """Run `source` as if it were the file `path` (its frames carry that file name) and return its namespace."""
    namespace: dict = {"warnings": warnings}
    exec(compile(source, path, "exec"), namespace)  # noqa: S102 - a fixed test source under a chosen file name
    return namespace


def library():
    """A library function that warns about itself (stacklevel 1: the warning points into the library)."""
    return compiled(LIBRARY, "def old_api():\n    warnings.warn('old_api is deprecated', FutureWarning)\n")["old_api"]


def test_a_deprecated_call_from_credo_fails():
    old_api = library()
    caller = compiled(str(CREDO / "fake_caller.py"), "def use(f):\n    return f()\n")["use"]
    with credo_deprecations_fail(), pytest.raises(AssertionError, match=r"fake_caller.py:2 makes a deprecated call"):
        caller(old_api)


def test_credos_own_deprecation_warning_fails():
    warn = compiled(str(CREDO / "fake_module.py"),
                    "def f():\n    warnings.warn('x', DeprecationWarning, stacklevel=1)\n")["f"]
    with credo_deprecations_fail(), pytest.raises(AssertionError, match="fake_module.py:2"):
        warn()


def test_a_library_calling_a_deprecated_api_for_itself_does_not_fail():
    old_api = library()
    other = compiled("/venv/lib/python3.11/site-packages/otherlib/wrap.py", "def wrap(f):\n    return f()\n")["wrap"]
    via_credo = compiled(str(CREDO / "fake_caller.py"), "def use(g, f):\n    return g(f)\n")["use"]
    with pytest.warns(FutureWarning, match="old_api"), credo_deprecations_fail():
        via_credo(other, old_api)  # credo -> otherlib -> somelib's deprecated API: otherlib's call


def test_a_test_calling_a_deprecated_api_does_not_fail():
    with pytest.warns(FutureWarning), credo_deprecations_fail():
        library()()
