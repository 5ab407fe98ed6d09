"""Load a script of `examples/` (or any script of the repository) as a module, for the tests of its functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"


def load_script(path: str):
    """The script at `path` (relative to the repository) as a module, run without its `__main__` block."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, REPO / path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # where its dataclasses look their annotations up
    spec.loader.exec_module(module)
    return module


def load_example(name: str):
    """`examples/<name>.py` as a module (run without its `__main__` block)."""
    return load_script(f"examples/{name}.py")
