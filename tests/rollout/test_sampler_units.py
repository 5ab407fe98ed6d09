"""A sampler is one module of `credo.rollout.samplers`: found by the package, its options composed into
`rollout:`, its recorded fields declared once and read by the batch, the method table and the demo."""

from __future__ import annotations

import pkgutil

from credo.batch import FIELD_SOURCES, RECORDED
from credo.demo import toy_batch
from credo.methods import METHODS
from credo.rollout import samplers
from credo.rollout.samplers import SAMPLERS, RolloutConfig


def test_every_module_of_the_package_registers_its_sampler_and_nothing_else_does():
    modules = {m.name for m in pkgutil.iter_modules(samplers.__path__)} - {"base"}
    owners = {SAMPLERS.get(name).__module__.rsplit(".", 1)[-1] for name in SAMPLERS}
    assert owners == modules


def test_rollout_config_has_a_section_per_sampler_with_options():
    for name in SAMPLERS:
        sampler = SAMPLERS.get(name)
        if sampler.options is None:
            assert name not in RolloutConfig.model_fields
        else:
            assert isinstance(getattr(RolloutConfig(), name), sampler.options)
            assert RolloutConfig.model_fields[name].description.endswith(f"{sampler.__name__}`.")
    assert RolloutConfig(resets={"split": "2x4"}).resets.split == "2x4"


def test_recorded_fields_are_declared_with_a_source_and_fill_the_demo_batch():
    for name in SAMPLERS:
        for field, declared in SAMPLERS.get(name).records.items():
            assert RECORDED[field].shape == declared.shape and name in FIELD_SOURCES[field]
    for method_name in METHODS:
        method = METHODS.get(method_name)
        batch = toy_batch(method)
        assert set(batch.recorded) == set(method.sampler.records)  # its own sampler's fields, no others

