"""Monte-Carlo values of the states between a response's thoughts (VinePPO, arXiv 2410.01679, sec. 4).

The state after the first `j` thoughts of a response is `prompt + thoughts 1..j`; its value under the current
policy is the expected reward of finishing the response from there. It is estimated without a critic by
sampling `k` continuations from that state and averaging their rewards:

    V(s_j) ~ (1 / k) * sum_{i=1..k} R(thoughts 1..j + continuation_i)

A continuation's reward is the reward of the whole response it completes (prefix + continuation, verified by
the task), exactly as a reset's continuation is scored. All continuations of a step are one batched generation
call per band of remaining budget: each state's prompt + prefix is encoded once and its KV cache copied to its
`k` continuations (`credo.rollout.rows.continue_rows`). They are sampled at the rollouts' temperature and top-p,
within what the response's token budget leaves after the prefix, and cut by the same thought rules as the
responses they continue.

`prefix_values` estimates the states after any response-token prefixes (SPO's cutpoints,
`credo.rollout.samplers.spo_chain`); `boundary_values` those after whole thoughts, used by the vine sampler (step
advantages, `credo.rollout.samplers.vine`) and by the reset sampler's `sampled` localiser (the thought after
which the estimate drops the most, `credo.rollout.samplers.resets`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from credo.batch import RecordedField
from credo.rollout.backend import GenerationBackend
from credo.rollout.options import RolloutOptions
from credo.rollout.rows import Row, continue_rows
from credo.rollout.thoughts import ThoughtRules
from credo.tasks import Task

STEP_VALUES = RecordedField(
    "token", "float", "Monte-Carlo value of the state each token's step starts from, 0 off the response",
    example=lambda: torch.tensor(((1 / 3, 0.5, 0.75), (2 / 3, 0.75, 0.0), (1 / 3, 0.5, 1.0), (2 / 3, 0.5, 0.75)))
    .repeat_interleave(2, dim=1),
)
"""`step_values`, recorded by the samplers that value the states between steps by continuations (vine,
SPO-chain). The demo's toy responses are three steps of two tokens; each row's value before each step (the first:
its siblings' mean reward) drops across each failure's wrong step."""


def boundary_values(backend: GenerationBackend, task: Task, requests: Sequence[tuple[Row, Sequence[int]]], k: int,
                    options: RolloutOptions, rules: ThoughtRules) -> tuple[list[list[float]], int]:
    """For each `(row, boundaries)`, the Monte-Carlo value of the state after each boundary's first `j`
    thoughts (`j = 0`: the prompt alone), from `k` continuations each; and the tokens the continuations
    generated (every one of them, for the rollout's cost)."""
    return prefix_values(backend, task, [(row, [row.episode.prefix(j) for j in boundaries])
                                         for row, boundaries in requests], k, options, rules)


def prefix_values(backend: GenerationBackend, task: Task, requests: Sequence[tuple[Row, Sequence[list[int]]]], k: int,
                  options: RolloutOptions, rules: ThoughtRules) -> tuple[list[list[float]], int]:
    """For each `(row, prefixes)`, the Monte-Carlo value of the state `row.prompt + prefix` for each of its
    response-token `prefixes` (a thought boundary's or any token position's), from `k` continuations each;
    and the tokens the continuations generated."""
    jobs = [(n, prefix) for n, (_, prefixes) in enumerate(requests) for prefix in prefixes]
    values: list[list[float]] = [[] for _ in requests]
    if not jobs:
        return values, 0
    continuations = continue_rows(backend, task, [(requests[n][0], prefix) for n, prefix in jobs], k, options,
                                  rules)
    for index, (n, _) in enumerate(jobs):
        values[n].append(sum(r.verdict.reward for r in continuations[index * k : (index + 1) * k]) / k)
    return values, sum(r.tokens for r in continuations)


def largest_drop(values: Sequence[float], final: float) -> int:
    """The 1-based step after which the value falls the most: `values[i]` is the value before step `i + 1`
    (`values[0]` the prompt's), `final` the response's reward (the value after its last step); the first
    step on ties.

    >>> largest_drop([0.5, 0.75, 0.0], 0.0), largest_drop([0.5], 0.0)
    (2, 1)
    """
    after = list(values[1:]) + [final]
    drops = [before - later for before, later in zip(values, after)]
    return drops.index(max(drops)) + 1


def first_below(values: Sequence[float], final: float, threshold: float) -> int | None:
    """The first 1-based step after which the value is below `threshold` (None: no such step); `values` and
    `final` as in `largest_drop`.

    >>> first_below([0.5, 0.75, 0.25], 0.0, 0.3), first_below([0.5], 1.0, 0.3)
    (2, None)
    """
    after = list(values[1:]) + [final]
    return next((i + 1 for i, value in enumerate(after) if value < threshold), None)
