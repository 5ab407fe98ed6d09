"""The package's layers: every import (lazy ones inside functions too) runs down, never back up.

A unit is a top-level module or subpackage of `credo`. Units of one layer do not import each other; a
subpackage's own modules may import each other. `if TYPE_CHECKING:` imports are annotations, not arrows.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).parents[1] / "src" / "credo"

LAYERS: list[set[str]] = [
    {"registry", "checks", "io", "extras", "schema", "scan", "passk", "schedules", "hf_compat"},  # leaves
    {"batch", "tasks", "logprobs", "microbatch", "gguf", "trackers"},  # the container, tasks, tensor kernels
    {"credit", "losses", "diagnostics"},  # credit estimators and policy losses (pure torch)
    {"rollout"},  # generation and the samplers, with their options
    {"methods"},  # the registry of methods: sampler + estimator + loss
    {"config"},  # the run configuration
    {"testbed", "policy", "evaluate", "checkpoint", "plots", "progress", "demo"},
    {"models", "testbed_facts"},  # model sources (the testbed among them) and the generation backend; regime facts
    {"run_setup"},  # a run's set-up: the Trainer, device, start or resume, reference fingerprint
    {"train"},  # the training loop and its step
    {"study", "integrations", "gradient_variance"},  # studies; TRL and verl adapters; measurements over runs
    {"cli", "__init__"},  # the command line; the package's public names
    {"__main__"},  # `python -m credo`
]
LAYER = {unit: level for level, units in enumerate(LAYERS) for unit in units}


def unit_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported credo module) of every import in the file, outside `if TYPE_CHECKING:` blocks."""
    tree = ast.parse(path.read_text())
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
               for n in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "credo":
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "credo"]
    return found


FILES = sorted(SRC.rglob("*.py"))


def test_every_unit_has_a_layer():
    units = {unit_of(module_name(path)) for path in FILES} | {"__init__"}
    assert units - set(LAYER) == set(), "add the new module to LAYERS"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_only_run_down_the_layers(path):
    here = unit_of(module_name(path)) if path.name != "__init__.py" or path.parent != SRC else "__init__"
    upward = [
        f"{path.relative_to(SRC)}:{line} imports {target} (layer {LAYER[unit_of(target)]} >= {LAYER[here]})"
        for line, target in imports(path)
        if unit_of(target) != here and LAYER[unit_of(target)] >= LAYER[here]
    ]
    assert not upward, "\n".join(upward)
