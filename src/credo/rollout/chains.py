"""Episodes continued from turn boundaries, as chains: the samplers that branch a prompt's episodes at their turns
(Tree-GRPO's trees, `samplers/tree.py`; ARPO's entropy-triggered branches, `samplers/entropy_branch.py`) grow and
train them alike.

A *chain* is one full episode of a prompt, grown either fresh from the prompt or from a *node*, another chain's first
turns with the observations after them and the environment's state there (`Episodes.prefix`): those turns are taken
over as they stand, never generated again nor counted, and the chain samples on from the next turn. A wave of chains
over many prompts and nodes is sampled in one lockstep batch (`grow_chains`); the chains a sampler trains become the
rows of its rollout (`chains_rollout`), each its whole episode from the prompt, its taken-over turns included.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from credo.rollout.backend import GenerationBackend
from credo.rollout.episodes import Episodes, Prefix, sample_episodes
from credo.rollout.groups import Rollout
from credo.tasks import Problem, Task, sandbox_failures

if TYPE_CHECKING:
    from credo.rollout.samplers import RolloutConfig


@dataclass(eq=False)
class Chain:
    """One full episode of a prompt: the batch it was sampled in and its row there, and how many of its first turns it
    took over from the node it continues (`kept`; 0: grown fresh from the prompt)."""

    episodes: Episodes
    row: int
    kept: int

    @property
    def turns(self) -> int:
        return len(self.episodes.outcomes[self.row])

    def prefix(self, turns: int) -> Prefix:
        """The chain's first `turns` turns with their observations and the environment's state after them."""
        return self.episodes.prefix(self.row, turns)

    def inner_nodes(self) -> list[tuple[Chain, int]]:
        """The nodes this chain added that do not end it, each as (chain, turns up to and including it): its turns
        after the kept ones, but its last (which ends the episode). Each is followed by an observation."""
        return [(self, turns) for turns in range(self.kept + 1, self.turns)]


Node = tuple[Chain, int] | None
"""Where a chain starts: another chain's first turns, as (chain, number of turns), or None for the prompt (fresh)."""


def grow_chains(backend: GenerationBackend, task: Task, problems: list[Problem], prompts: list[list[int]],
                nodes: list[Node], options: RolloutConfig) -> tuple[list[Chain], int]:
    """A full episode of `problems[i]` (encoded prompt `prompts[i]`) continued from each `nodes[i]`, all in one
    lockstep batch, and the policy tokens sampled (not the taken-over turns')."""
    out = sample_episodes(backend, task.environment, problems, prompts, repeat=1, budget_tokens=options.max_new_tokens,
                          temperature=options.temperature, top_p=options.top_p,
                          starts=[None if node is None else node[0].prefix(node[1]) for node in nodes])
    return [Chain(out, row, 0 if node is None else node[1]) for row, node in enumerate(nodes)], out.policy_tokens


def chains_rollout(problems: list[Problem], chains: list[Chain], group_id: Tensor, tokens: int, pad: int,
                   metrics: Mapping[str, float], records: Mapping[str, Tensor] | None = None) -> Rollout:
    """The rollout that trains `chains` (row `i`: `chains[i]`'s whole episode, a problem of `problems[i]`, in group
    `group_id[i]`): `tokens` the policy tokens sampled for them, `metrics` and `records` the sampler's. The episodes'
    batch fields come as `Rollout.checks` (the policy's tokens as the loss mask, observations never trained)."""
    episodes = Episodes.gather([(chain.episodes, chain.row) for chain in chains])
    completions = episodes.completions(pad)
    verdicts = episodes.verdicts()
    return Rollout(
        problems=problems, completions=completions, verdicts=verdicts,
        rewards=torch.tensor([v.reward for v in verdicts], dtype=torch.float32), group_id=group_id,
        generated_tokens=tokens, metrics={**metrics, "verify/sandbox_failures": sandbox_failures(verdicts)},
        records=dict(records or {}), checks=episodes.token_fields(completions.response_ids.shape[1]))
