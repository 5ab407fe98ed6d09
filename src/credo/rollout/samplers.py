"""The samplers a method can draw its rollout batches with, each one registered object.

A sampler owns what is particular to it: how it draws (`sample`), which `RolloutBatch` fields it records
besides the responses (`records`), whether its groups are i.i.d. samples of a prompt (`iid`, what engines
such as TRL's GRPOTrainer can carry), its options (its section of `rollout:`), their validation against
the task (`check`), and the switches it sets on the method's estimator (`estimator_switches`). A method
names its sampler in the registry (`credo.methods`); the trainer, the config's validation and the engine
adapters ask the sampler and never branch on its name.

- `GroupSampler` ("groups"): `group_size` i.i.d. responses per prompt, with DAPO's dynamic sampling and
  overlong penalty as options (`rollout.dynamic_sampling`, `rollout.overlong_buffer`).
- `ResetSampler` ("resets", RRPO/SRPO): groups from resets of failed rollouts to a localised first wrong
  thought (`rollout.resets`, `credo.rollout.resets`); the method names its localiser.
- `RevisionSampler` ("revisions", IBPO): i.i.d. groups plus the policy's revisions of each failure
  (`rollout.revisions`, `credo.rollout.revisions`).
- `VineSampler` ("vine", VinePPO): i.i.d. groups plus Monte-Carlo values of the states between their
  thoughts (`rollout.vine`, `credo.rollout.vine`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from credo.registry import Registry
from credo.rollout.backend import GenerationBackend
from credo.rollout.groups import ProblemStream, Rollout, sample_groups
from credo.rollout.options import LOCALISERS, RolloutConfig
from credo.rollout.reset_plan import SPLITS
from credo.rollout.resets import sample_resets
from credo.rollout.revisions import sample_revisions
from credo.rollout.vine import sample_vine
from credo.tasks import Task


@dataclass(frozen=True)
class Sampler:
    """The base of the samplers: i.i.d.-group defaults for every hook (see the module docstring)."""

    name: ClassVar[str]
    draws: ClassVar[str]
    """What the sampler draws, in one phrase (`credo methods`, engine refusals)."""
    records: ClassVar[frozenset[str]] = frozenset()
    """The optional `RolloutBatch` fields its rollouts fill (see `credo.batch.FIELD_SOURCES`)."""
    iid: ClassVar[bool] = True
    """Every row is an i.i.d. sample of its prompt under the current policy, and nothing else is drawn."""
    section: ClassVar[str | None] = None
    """The `rollout.<section>` of its own options (None: only `rollout:`'s general keys)."""
    dapo_options: ClassVar[bool] = True
    """It draws its groups with the group sampler, so DAPO's `dynamic_sampling` and `overlong_buffer` apply."""

    def sample(self, backend: GenerationBackend, task: Task, stream: ProblemStream, options: RolloutConfig) -> Rollout:
        """One rollout batch of `options.prompts_per_step` prompts."""
        raise NotImplementedError

    def check(self, options: RolloutConfig, checks_steps: bool) -> None:
        """A `ValueError` naming the key if `options` cannot run on a task (with a step checker or not)."""
        if not self.dapo_options:
            for key, off in (("dynamic_sampling", False), ("overlong_buffer", None)):
                if getattr(options, key) != off:
                    raise ValueError(f"rollout.{key} applies to the group sampler's groups; the {self.name} "
                                     f"sampler draws its own and would ignore it")

    def estimator_switches(self, options: RolloutConfig) -> dict[str, object]:
        """Estimator switches that `options` implies (applied over the method's own)."""
        return {}

    def describe(self, options: RolloutConfig | None = None) -> str:
        """The sampler and its choices, e.g. "resets (localiser: self)"."""
        choices = [f"{f.name}: {getattr(self, f.name)}" for f in dataclasses.fields(self)]
        return self.name + (f" ({', '.join(choices)})" if choices else "")


@dataclass(frozen=True)
class GroupSampler(Sampler):
    name: ClassVar[str] = "groups"
    draws: ClassVar[str] = "i.i.d. groups of responses per prompt"

    def sample(self, backend: GenerationBackend, task: Task, stream: ProblemStream, options: RolloutConfig) -> Rollout:
        return sample_groups(backend, task, stream, options)


@dataclass(frozen=True)
class ResetSampler(Sampler):
    name: ClassVar[str] = "resets"
    draws: ClassVar[str] = ("groups built from resets of failed rollouts to a localised first wrong thought "
                            "(base and suffix groups, continuations of a kept prefix)")
    records: ClassVar[frozenset[str]] = frozenset({"prefix_len", "segment_ids"})
    iid: ClassVar[bool] = False
    section: ClassVar[str | None] = "resets"
    dapo_options: ClassVar[bool] = False

    localiser: str = "random"
    """The first-wrong-thought localiser (random | self | oracle | sampled); `rollout.resets.localiser` overrides it."""

    def __post_init__(self) -> None:
        if self.localiser not in LOCALISERS:
            raise ValueError(f"ResetSampler.localiser must be one of {', '.join(LOCALISERS)}, got {self.localiser!r}")

    def localiser_for(self, options: RolloutConfig) -> str:
        """The localiser a run uses: `rollout.resets.localiser`, else the method's own."""
        return options.resets.localiser or self.localiser

    def sample(self, backend: GenerationBackend, task: Task, stream: ProblemStream, options: RolloutConfig) -> Rollout:
        return sample_resets(backend, task, stream, options, self.localiser_for(options))

    def check(self, options: RolloutConfig, checks_steps: bool) -> None:
        super().check(options, checks_steps)
        localiser = self.localiser_for(options)
        oracle = localiser == "oracle"
        if oracle and not checks_steps:
            raise ValueError("rollout.resets.localiser = 'oracle' needs a task with a step checker")
        if not oracle and options.resets.oracle_accuracy < 1.0:
            raise ValueError(f"rollout.resets.oracle_accuracy = {options.resets.oracle_accuracy} applies to the oracle "
                             f"localiser only; this run localises with {localiser!r}")
        if localiser != "sampled" and options.resets.localiser_threshold is not None:
            raise ValueError(f"rollout.resets.localiser_threshold = {options.resets.localiser_threshold} applies to the "
                             f"sampled localiser only; this run localises with {localiser!r}")

    def estimator_switches(self, options: RolloutConfig) -> dict[str, object]:
        """The `nomask` split trains suffix rows on their prefix too (`ResetAdvantage.train_prefix`)."""
        return {"train_prefix": True} if SPLITS[options.resets.split].train_prefix else {}


@dataclass(frozen=True)
class RevisionSampler(Sampler):
    name: ClassVar[str] = "revisions"
    draws: ClassVar[str] = "i.i.d. groups plus the policy's revisions of every failure (never trained on)"
    records: ClassVar[frozenset[str]] = frozenset({"revision_success", "edit_mask"})
    iid: ClassVar[bool] = False
    section: ClassVar[str | None] = "revisions"

    def sample(self, backend: GenerationBackend, task: Task, stream: ProblemStream, options: RolloutConfig) -> Rollout:
        return sample_revisions(backend, task, stream, options)


@dataclass(frozen=True)
class VineSampler(Sampler):
    name: ClassVar[str] = "vine"
    draws: ClassVar[str] = ("i.i.d. groups plus K continuations from each state between their thoughts "
                            "(Monte-Carlo step values, never trained on)")
    records: ClassVar[frozenset[str]] = frozenset({"segment_ids", "step_values"})
    iid: ClassVar[bool] = False
    section: ClassVar[str | None] = "vine"
    dapo_options: ClassVar[bool] = False

    def sample(self, backend: GenerationBackend, task: Task, stream: ProblemStream, options: RolloutConfig) -> Rollout:
        return sample_vine(backend, task, stream, options)


SAMPLERS: Registry[type[Sampler]] = Registry("sampler")
for _sampler in (GroupSampler, ResetSampler, RevisionSampler, VineSampler):
    SAMPLERS.add(_sampler.name, _sampler)
