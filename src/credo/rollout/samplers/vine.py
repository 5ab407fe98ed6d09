"""The vine sampler: i.i.d. groups whose steps carry Monte-Carlo values (VinePPO, arXiv 2410.01679).

For every prompt of a step, batched across prompts:
1. Sample `group_size` responses (as GRPO does) and cut each into thoughts (`rollout.vine.thoughts`).
2. Choose the states whose value is estimated: the boundaries between a response's thoughts (the state after
   thoughts `1..j`, `j = 1..n-1`), all of them or `max_boundaries` drawn at random, only for failures with
   `failures_only`.
3. Estimate each chosen state's value from `k` continuations (`credo.rollout.values`), all in one batched
   generation call. The value of the prompt itself is the mean reward of the row's `group_size - 1` siblings:
   they are i.i.d. samples from that state, so they are its Monte-Carlo estimate at no cost (VinePPO samples
   `k` fresh continuations of the prompt; the estimate is the same in distribution).
The chosen boundaries cut a response into steps. The sampler records, per response token, its step
(`segment_ids`, 0-based) and the estimated value of the state its step starts from (`step_values`); the credit
estimator (`credo.credit.vine`) turns them into step advantages. Every continuation token counts in the
rollout's tokens, split in the step record as `vine/tokens_base` and `vine/tokens_values`.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
from pydantic import Field

from credo.batch import RecordedField
from credo.rollout.backend import GenerationBackend
from credo.rollout.generate import encode_prompts, per_token
from credo.rollout.groups import ProblemStream, Rollout
from credo.rollout.rows import SEGMENT_IDS, Row, assemble, make_rows
from credo.rollout.samplers.base import Sampler, registered
from credo.rollout.thoughts import ThoughtRules
from credo.rollout.values import STEP_VALUES, boundary_values, largest_drop
from credo.schema import Section
from credo.tasks import Task, sandbox_failures

if TYPE_CHECKING:
    from credo.rollout.samplers import RolloutConfig


class VineConfig(Section):
    """Options of the vine sampler (`rollout.vine`): Monte-Carlo step values (VinePPO, arXiv 2410.01679)."""

    k: int = Field(9, ge=1)
    """Continuations sampled from each state between two thoughts to estimate its value (the paper's K = 9)."""
    failures_only: bool = False
    """Estimate step values for failed responses only; a correct response is one step from the prompt."""
    max_boundaries: int | None = Field(None, ge=1)
    """Estimate at most this many states per response, drawn at random among its thought boundaries (None: all).

    The thoughts between two estimated states form one step and share its advantage; this bounds the cost
    (`k` continuations per state) on long responses."""
    thoughts: ThoughtRules = ThoughtRules()
    """How a response is cut into thoughts (its steps) and when its episode ends, as for resets."""


def sample_vine(backend: GenerationBackend, task: Task, stream: ProblemStream, options: RolloutConfig, rng=random) -> Rollout:
    """`prompts_per_step` groups with the step segments and values of their responses (module docstring).
    `rng` draws the subsampled boundaries (Python's global RNG: seeded and checkpointed by the trainer)."""
    vine: VineConfig = options.vine
    size = options.group_size
    problems = stream.take(options.prompts_per_step)
    out = backend.generate(encode_prompts(backend.tokenizer, [p.prompt for p in problems]),
                           max_new_tokens=options.max_new_tokens, temperature=options.temperature,
                           top_p=options.top_p, repeat=size)
    rows = make_rows(backend.tokenizer, task, [p for p in problems for _ in range(size)], out, vine.thoughts,
                     options.reward_errors)
    boundaries = [chosen_boundaries(row, vine, rng) for row in rows]
    values, value_tokens = boundary_values(backend, task, list(zip(rows, boundaries)), vine.k, options,
                                           vine.thoughts)
    roots = sibling_values([r.verdict.reward for r in rows], size)
    state_values = [[root] + estimates for root, estimates in zip(roots, values)]  # before each step, the prompt first
    base_tokens = sum(r.tokens for r in rows)
    groups = [rows[start : start + size] for start in range(0, len(rows), size)]
    rollout = assemble(groups, backend.tokenizer.pad_token_id, base_tokens + value_tokens)
    width = rollout.completions.response_ids.shape[1]
    steps = [step_layout(row, cuts, states) for row, cuts, states in zip(rows, boundaries, state_values)]
    rollout.records = {"segment_ids": per_token([s for s, _ in steps], width, -1, torch.long),
                       "step_values": per_token([v for _, v in steps], width, 0.0, torch.float32)}
    rollout.metrics = vine_metrics(rows, boundaries, state_values, base_tokens, value_tokens, task.checks_steps)
    return rollout


def chosen_boundaries(row: Row, vine: VineConfig, rng) -> list[int]:
    """The boundaries `j` (thoughts kept, `1..n-1`) whose state value the row gets estimated, in order."""
    if vine.failures_only and row.verdict.correct:
        return []
    candidates = list(range(1, row.episode.num_thoughts))
    if vine.max_boundaries is not None and len(candidates) > vine.max_boundaries:
        return sorted(rng.sample(candidates, vine.max_boundaries))
    return candidates


def sibling_values(rewards: list[float], size: int) -> list[float]:
    """The prompt's value for each row: the mean reward of the other rows of its group (leave one out)."""
    out = []
    for start in range(0, len(rewards), size):
        group = rewards[start : start + size]
        out += [(sum(group) - r) / (len(group) - 1) for r in group]
    return out


def step_layout(row: Row, boundaries: list[int], values: list[float]) -> tuple[list[int], list[float]]:
    """Each response token's step (0-based) and the value of the state its step starts from: the steps are the
    spans between the chosen `boundaries`, `values[s]` the value before step `s` (`values[0]` the prompt's)."""
    cuts = [row.episode.ends[j - 1] for j in boundaries]
    segments = [bisect.bisect_right(cuts, t) for t in range(len(row.episode.ids))]
    return segments, [values[s] for s in segments]


def vine_metrics(rows: list[Row], boundaries, state_values, base_tokens: int, value_tokens: int,
                 checks_steps: bool) -> dict[str, float]:
    """The cost split, how many states were estimated, and (with a step checker) how often a failure's largest
    value drop falls on the step holding its first wrong thought."""
    estimated = sum(len(b) for b in boundaries)
    metrics = {
        "vine/tokens_base": float(base_tokens),
        "vine/tokens_values": float(value_tokens),
        "vine/states_per_response": estimated / len(rows),
        "vine/value_mean": sum(sum(v[1:]) for v in state_values) / estimated if estimated else 0.0,
        "verify/sandbox_failures": sandbox_failures([r.verdict for r in rows]),
    }
    if checks_steps:
        hits = []
        for row, cuts, states in zip(rows, boundaries, state_values):
            wrong = row.first_wrong_thought()
            if row.verdict.correct or wrong is None:
                continue
            step = largest_drop(states, row.verdict.reward)  # 1-based step, spanning thoughts
            hits.append(bisect.bisect_left(cuts, wrong) + 1 == step)
        if hits:
            metrics["vine/largest_drop_exact"] = sum(hits) / len(hits)
    return metrics


@registered
@dataclass(frozen=True)
class VineSampler(Sampler):
    name: ClassVar[str] = "vine"
    draws: ClassVar[str] = ("i.i.d. groups plus K continuations from each state between their thoughts "
                            "(Monte-Carlo step values, never trained on)")
    records: ClassVar[Mapping[str, RecordedField]] = {
        "segment_ids": SEGMENT_IDS,
        "step_values": STEP_VALUES,
    }
    iid: ClassVar[bool] = False
    options: ClassVar[type[Section] | None] = VineConfig
    dapo_options: ClassVar[bool] = False

    def sample(self, backend: GenerationBackend, task: Task, stream: ProblemStream, options: RolloutConfig) -> Rollout:
        return sample_vine(backend, task, stream, options)
