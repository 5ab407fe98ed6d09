"""Every configuration field has a one-line doc a user can read.

Fields are documented with an attribute docstring (the string on the line after the field); the config
bases set pydantic's `use_attribute_docstrings`, so the docstring becomes the field's `description` (what
`model_json_schema()` shows). This test walks the run configuration, every registered task's config and the
testbed's config, nested sections included, and lists any field without one. A longer docstring starts
with a one-line summary that stands alone (a blank line before the details).
"""

from __future__ import annotations

import typing

from pydantic import BaseModel

from credo import testbed
from credo.config import RunConfig
from credo.tasks.base import TASKS


def nested_models(annotation: object) -> list[type[BaseModel]]:
    """The pydantic models an annotation names, directly or inside `X | None`, `list[X]`, `dict[str, X]`, ..."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in nested_models(arg)]


def walk(model: type[BaseModel], seen: dict[type[BaseModel], None]) -> None:
    if model in seen:
        return
    seen[model] = None
    for field in model.model_fields.values():
        for child in nested_models(field.annotation):
            walk(child, seen)


def config_models() -> list[type[BaseModel]]:
    roots: list[type[BaseModel]] = [RunConfig, testbed.TestbedConfig]  # module access: pytest must not collect it
    roots += [TASKS.get(name).Config for name in TASKS]
    seen: dict[type[BaseModel], None] = {}
    for root in roots:
        walk(root, seen)
    return list(seen)


def test_walk_reaches_every_section() -> None:
    names = {model.__name__ for model in config_models()}
    assert {
        "RunConfig", "LoraConfig", "ModelConfig", "OptimConfig", "TrainConfig", "EvalConfig", "RolloutConfig",
        "VllmConfig", "ResetConfig", "RevisionConfig", "ThoughtRules", "ArithConfig", "Noise", "JsonlConfig",
        "ReasoningGymConfig", "TestbedConfig", "TestbedModel", "LocalisationJob", "RevisionJob",
    } <= names


def test_every_config_field_has_a_description() -> None:
    undocumented = [
        f"{model.__name__}.{name}"
        for model in config_models()
        for name, field in model.model_fields.items()
        if not (isinstance(field.description, str) and field.description.strip())
    ]
    assert not undocumented, (
        f"{len(undocumented)} config fields have no description; document each with a docstring on the line "
        f"after the field (and keep `use_attribute_docstrings=True` on its model): {', '.join(undocumented)}"
    )


def test_each_description_starts_with_a_one_line_summary() -> None:
    run_on = []
    for model in config_models():
        for name, field in model.model_fields.items():
            lines = (field.description or "").splitlines()
            if lines and not (lines[0].rstrip().endswith(".") and (len(lines) == 1 or not lines[1].strip())):
                run_on.append(f"{model.__name__}.{name}")
    assert not run_on, (
        "these config fields' docstrings need a first line that is a whole sentence, then a blank line before "
        f"any details: {', '.join(run_on)}"
    )


def test_descriptions_reach_the_json_schema() -> None:
    properties = RunConfig.model_json_schema()["$defs"]["OptimConfig"]["properties"]
    assert properties["lr"]["description"].startswith("AdamW's learning rate")
