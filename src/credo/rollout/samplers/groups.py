"""The group sampler: `group_size` i.i.d. responses per prompt, GRPO's rollouts.

Its options are `rollout:`'s general keys, DAPO's dynamic sampling and overlong penalty included
(`rollout.dynamic_sampling`, `rollout.overlong_buffer`); the drawing itself is `credo.rollout.groups.sample_groups`,
which the other samplers also start from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from credo.rollout.backend import GenerationBackend
from credo.rollout.groups import ProblemStream, Rollout, sample_groups
from credo.rollout.samplers.base import Sampler, registered
from credo.tasks import Task

if TYPE_CHECKING:
    from credo.rollout.samplers import RolloutConfig


@registered
@dataclass(frozen=True)
class GroupSampler(Sampler):
    name: ClassVar[str] = "groups"
    draws: ClassVar[str] = "i.i.d. groups of responses per prompt"
    episodes: ClassVar[bool] = True

    def sample(self, backend: GenerationBackend, task: Task, stream: ProblemStream, options: RolloutConfig) -> Rollout:
        return sample_groups(backend, task, stream, options)
