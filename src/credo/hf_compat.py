"""transformers' calling conventions that moved between the versions credo supports (`transformers>=4.56,<6`).

transformers 5.x renamed the forward passes' `past_key_values` to `cache` and warns (FutureWarning, removal in
5.40) on every call that uses the old name: once per decoding step, in the middle of a training run's output.
`cache_keyword(model)` names the keyword the installed version takes, so one call works on both. It also renamed
the training arguments' `gradient_checkpointing` to `activation_checkpointing` (FutureWarning, removal in v6);
`no_checkpointing()` turns it off under the name the installed `TrainingArguments` takes.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect


def cache_keyword(model) -> str:
    """The keyword of the KV cache in `model`'s forward: "cache" where it takes one (transformers 5.x), else
    "past_key_values". A PEFT wrapper is looked through to the model it wraps (its forward takes **kwargs)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return _keyword(type(base))


@functools.cache
def _keyword(model_class: type) -> str:
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def no_checkpointing() -> dict[str, bool]:
    """`TrainingArguments` keywords (TRL's `GRPOConfig` takes them too) that turn activation checkpointing off:
    `activation_checkpointing=False` where transformers has that name (5.x), else `gradient_checkpointing=False`.
    TRL's GRPOConfig turns it on by default; the old name, set, warns on transformers 5.x."""
    from transformers import TrainingArguments

    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    return {"activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing": False}
