"""The base of the samplers and their registry (`credo.rollout.samplers` finds the samplers' modules).

A sampler owns what is particular to it: how it draws (`sample`), which `RolloutBatch` fields it records
besides the responses (`records`), whether its groups are i.i.d. samples of a prompt (`iid`, what engines
such as TRL's GRPOTrainer can carry), which of credo's verl agent loops runs it (`verl_agent_loop`), its options
(its section of `rollout:`), their validation against the task (`check`), and the switches it sets on the method's
estimator (`estimator_switches`). A method names its sampler in the registry (`credo.methods`); the trainer, the
config's validation and the engine adapters ask the sampler and never branch on its name.

A sampler is one module of `credo.rollout.samplers`: its class (registered with `@registered`), its options
section (`options`, under `rollout.<name>`) and its sampling function.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, TypeVar

from credo.batch import RecordedField, declare_recorded
from credo.registry import Registry
from credo.rollout.backend import GenerationBackend
from credo.schema import Section
from credo.tasks import Task

if TYPE_CHECKING:
    from credo.rollout.groups import ProblemStream, Rollout
    from credo.rollout.samplers import RolloutConfig


@dataclass(frozen=True)
class Sampler:
    """The base of the samplers: i.i.d.-group defaults for every hook (see the module docstring)."""

    name: ClassVar[str]
    draws: ClassVar[str]
    """What the sampler draws, in one phrase (`credo methods`, engine refusals)."""
    records: ClassVar[Mapping[str, RecordedField]] = {}
    """The `RolloutBatch` fields its rollouts fill besides the responses, each declared once here (shape, dtype,
    meaning, rule, demo value): `credo.batch` validates them, `credo methods` and the demo read them."""
    iid: ClassVar[bool] = True
    """Every row is an i.i.d. sample of its prompt under the current policy, and nothing else is drawn."""
    verl_agent_loop: ClassVar[str | None] = None
    """The class of `credo.integrations.verl_agent` that runs this sampler inside verl (one group per prompt, each
    row's advantage handed to verl as its score), or None: none does (verl runs an i.i.d. sampler's groups itself,
    with its single-turn agent loop, and cannot run the others)."""
    options: ClassVar[type[Section] | None] = None
    """The class of its own options, the section `rollout.<name>` (None: only `rollout:`'s general keys)."""
    dapo_options: ClassVar[bool] = True
    """It draws its groups with the group sampler, so DAPO's `dynamic_sampling` and `overlong_buffer` apply."""
    episodes: ClassVar[bool] = False
    """It draws multi-turn episodes where the task has an environment (`credo.rollout.episodes`), branching or
    resetting at turn boundaries; else it draws single responses only and refuses a multi-turn task."""
    needs_environment: ClassVar[bool] = False
    """It draws multi-turn episodes only, and refuses a task without an environment (what it reads is per turn)."""

    def sample(self, backend: GenerationBackend, task: Task, stream: ProblemStream, options: RolloutConfig) -> Rollout:
        """One rollout batch of `options.prompts_per_step` prompts."""
        raise NotImplementedError

    def check(self, options: RolloutConfig, checks_steps: bool, multi_turn: bool = False) -> None:
        """A `ValueError` naming the key if `options` cannot run on a task (with a step checker or not, multi-turn
        or not)."""
        if multi_turn and not self.episodes:
            raise ValueError(f"the {self.name} sampler draws single responses, not multi-turn episodes")
        if self.needs_environment and not multi_turn:
            raise ValueError(f"the {self.name} sampler draws multi-turn episodes only: the task needs an environment "
                             "(a task with `multi_turn`, such as calculator)")
        if not self.dapo_options:
            for key, off in (("dynamic_sampling", False), ("overlong_buffer", None)):
                if getattr(options, key) != off:
                    raise ValueError(f"rollout.{key} applies to the group sampler's groups; the {self.name} "
                                     f"sampler draws its own and would ignore it")

    def estimator_switches(self, options: RolloutConfig) -> dict[str, object]:
        """Estimator switches that `options` implies (applied over the method's own)."""
        return {}

    def describe(self) -> str:
        """The sampler and its choices, e.g. "resets (localiser: self)"."""
        choices = [f"{f.name}: {getattr(self, f.name)}" for f in dataclasses.fields(self)]
        return self.name + (f" ({', '.join(choices)})" if choices else "")


SAMPLERS: Registry[type[Sampler]] = Registry("sampler")

S = TypeVar("S", bound=type[Sampler])


def registered(sampler: S) -> S:
    """Class decorator: register a sampler under its `name` (its options, if any, are `rollout.<name>`) and the
    fields it records (`credo.batch.declare_recorded`)."""
    SAMPLERS.add(sampler.name, sampler)
    declare_recorded(sampler.name, sampler.records)
    return sampler
