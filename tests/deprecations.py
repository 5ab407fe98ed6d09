"""A deprecated call made by credo's own code fails the test that makes it.

A `FutureWarning` or `DeprecationWarning` is credo's when the first frame outside the package that issued it (where
the library says its API is going away) lies in credo's source: credo called the deprecated API itself. One that a
library raises on its own behalf (PEFT reading transformers' renamed property, TRL's default of a renamed argument)
is the library's: left to pytest's summary. `tests/conftest.py` installs the check around every test.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from pathlib import Path

import credo

CREDO = Path(credo.__file__).resolve().parent
DEPRECATIONS = (FutureWarning, DeprecationWarning)


def package_root(filename: str) -> Path | None:
    """The top-level package folder holding `filename` (the folder below `site-packages`, or credo's), or None for
    a file in no installed package (the standard library, a test, generated code)."""
    path = Path(filename).resolve()
    if path.is_relative_to(CREDO):
        return CREDO
    parts = path.parts
    if "site-packages" in parts:
        index = parts.index("site-packages")
        return Path(*parts[: index + 2]) if len(parts) > index + 1 else None
    return None


def responsible(filename: str, lineno: int, frame) -> str | None:
    """Where credo made the call that the warning attributed to `filename:lineno` is about ("path:line"), or None if
    the call is not credo's. From the warning's frame (found walking out from `frame`), past the frames of the
    package it lies in: the first frame beyond, or the warning's own where that is credo's, decides."""
    issuer = package_root(filename)
    if issuer == CREDO:
        return f"{filename}:{lineno}"
    target = Path(filename).resolve()
    while frame is not None and Path(frame.f_code.co_filename).resolve() != target:
        frame = frame.f_back
    if issuer is None:
        return None
    while frame is not None and package_root(frame.f_code.co_filename) == issuer:
        frame = frame.f_back
    if frame is not None and package_root(frame.f_code.co_filename) == CREDO:
        return f"{frame.f_code.co_filename}:{frame.f_lineno}"
    return None


@contextlib.contextmanager
def credo_deprecations_fail():
    """Within: a deprecation warning that credo's own call triggers raises `AssertionError` at that call. Every
    warning passes through `warnings._showwarnmsg` (CPython's hook between a warning and its display or record);
    the check runs there, with the warning's call stack still live, then hands the warning on unchanged."""
    hand_on = warnings._showwarnmsg

    def check(message: warnings.WarningMessage) -> None:
        if issubclass(message.category, DEPRECATIONS):
            caller = responsible(message.filename, message.lineno, sys._getframe(1))
            if caller is not None:
                raise AssertionError(f"credo's code at {caller} makes a deprecated call: "
                                     f"{message.category.__name__}: {message.message}")
        hand_on(message)

    with warnings.catch_warnings():
        for category in DEPRECATIONS:
            warnings.simplefilter("always", category)
        warnings._showwarnmsg = check
        try:
            yield
        finally:
            warnings._showwarnmsg = hand_on
