"""The samplers a method can draw its rollout batches with: one module each, found here, listed nowhere by hand.

A sampler owns what is particular to it, in its own module: how it draws (`sample`, and the sampling function
behind it), which `RolloutBatch` fields it records besides the responses (`records`), whether its groups are
i.i.d. samples of a prompt (`iid`, what engines such as TRL's GRPOTrainer can carry), which of credo's verl agent
loops runs it (`verl_agent_loop`), its options (a `Section` under `rollout.<name>`), their validation against the
task (`check`), and the switches it sets on the method's estimator (`estimator_switches`). A method names its sampler in the registry (`credo.methods`); the
trainer, the config's validation and the engine adapters ask the sampler and never branch on its name.

Every module of this package but `base` is imported here, and each registers its sampler (`@registered`), so a
new sampler is one new module. `RolloutConfig` (the `rollout:` section of a run's config) is composed here from the
general options (`credo.rollout.options.RolloutOptions`) and each registered sampler's section.
"""

from __future__ import annotations

import importlib
import pkgutil

from pydantic import Field, create_model

from credo.rollout.options import RolloutOptions
from credo.rollout.samplers.base import SAMPLERS, Sampler, registered

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")


def _section_field(sampler: type[Sampler]) -> tuple[type, object]:
    summary = (sampler.options.__doc__ or "").strip().splitlines()[0]
    description = f"{summary.rstrip('.')}; read by `{sampler.__module__}.{sampler.__name__}`."
    return sampler.options, Field(default_factory=sampler.options, description=description)


RolloutConfig = create_model(
    "RolloutConfig",
    __base__=RolloutOptions,
    __module__=__name__,
    __doc__="`rollout:`: the general sampling options and every registered sampler's own section.",
    **{name: _section_field(SAMPLERS.get(name)) for name in SAMPLERS if SAMPLERS.get(name).options is not None},
)

__all__ = ["SAMPLERS", "RolloutConfig", "Sampler", "registered"]
