"""ARPO's sampler: agent episodes that branch after a tool's result where the policy's entropy rises (arXiv
2507.19849, "Agentic Reinforced Policy Optimization", Dong et al. 2025; github.com/RUC-NLPIR/ARPO at a95cd08,
`verl_arpo_entropy/verl/workers/rollout/vllm_rollout/vllm_rollout_with_tools.py::generate_sequences`).

Per prompt, `n` rows (`rollout.group_size`, the code's `rollout.n`):
1. `M = min(initial_rollouts, n)` fresh episodes.
2. Every turn boundary an episode sampled itself, right after an observation (the environment's answer to turn
   `t - 1`), is a branch point. Its turn `t`, the first after the observation, is compared with the episode's first
   turn (the paper's initial entropy):

       H(turn)  = mean of the sampling entropies of the turn's first `k` tokens / log V    (k = entropy_tokens, 20)
       dH_t     = H(turn t) - H(turn 0)
       P_t      = clip(branch_probability + entropy_weight * dH_t, 0, 1)

   and `beam_size - 1` independent draws, each a branch with probability `P_t`: a new episode continued from the
   state right after the observation (`Episodes.prefix`: the turns before `t`, their observations and the
   environment's state, taken over as they stand), its turn `t` and all after sampled afresh, so that it is an
   alternative to the turn that raised the entropy. A branch is an episode like the others and branches in turn.
3. The branch points are visited in the code's order, depth by depth (boundary `t = 1, 2, ...`) and within a depth
   in the order the episodes were made, a prompt's branches stopping at `n` rows (the code's `remaining_slots`;
   no draw is made for a full prompt). The branches made at one depth, over every prompt, are sampled in one
   lockstep batch before the next depth is visited, so that their own branch points compete at the next depth as
   the code's copies do.
4. A prompt with no branch point left and fewer than `n` rows is topped up with fresh episodes (the code's fresh
   rollouts), sampled with the next batch; a topped-up prompt is full, so they never branch.

Rows: each prompt's `n` episodes in the order they were made, each whole from the prompt, its shared prefix included
(trained: the code's "soft" advantage attribution); `group_id` is the prompt. Counted are the policy's tokens
sampled, never observations nor the prefixes branches take over. The draws use Python's global RNG, which the
trainer seeds and checkpoints. The entropies are the behaviour policy's over the whole vocabulary
(`Completions.entropies`; the code's are a sum over the top-10 log-probs of up to 20 positions): a backend that
does not record them is refused (the vLLM backend).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import torch
from pydantic import Field

from credo.rollout.backend import GenerationBackend
from credo.rollout.chains import Chain, Node, chains_rollout, grow_chains
from credo.rollout.generate import Completions, encode_prompts
from credo.rollout.groups import ProblemStream, Rollout
from credo.rollout.samplers.base import Sampler, registered
from credo.schema import Section
from credo.tasks import Problem, Task

if TYPE_CHECKING:
    from credo.rollout.samplers import RolloutConfig


class EntropyBranchConfig(Section):
    """Options of ARPO's entropy-triggered branching (`rollout.entropy_branch`; arXiv 2507.19849)."""

    initial_rollouts: int = Field(8, ge=1)
    """Fresh episodes per prompt before any branch (the code's `initial_rollouts`, 8), at most `rollout.group_size`."""
    beam_size: int = Field(2, ge=1)
    """Each branch point makes up to `beam_size - 1` branches (the code's `beam_size`, 2; 1: no branching)."""
    branch_probability: float = Field(0.5, ge=0.0, le=1.0)
    """The branch probability where the entropy has not changed (the code's `branch_probability`, alpha = 0.5)."""
    entropy_weight: float = Field(0.2, ge=0.0)
    """How much the entropy's rise after a tool result raises the branch probability (`entropy_weight`, beta 0.2)."""
    entropy_tokens: int = Field(20, ge=1)
    """A turn's entropy is the mean over its first `entropy_tokens` tokens (the code's window of 20)."""


def turn_entropy(chain: Chain, turn: int, tokens: int, log_vocab: float) -> float:
    """The mean sampling entropy of the first `tokens` tokens of the chain's turn `turn`, over `log_vocab` (0 for an
    empty turn, as the code's)."""
    episodes, row = chain.episodes, chain.row
    span = slice(episodes.turn_starts[row][turn], episodes.turn_starts[row][turn] + tokens)
    window = [h for h, t in zip(episodes.entropies[row][span], episodes.turns[row][span], strict=True) if t == turn]
    return sum(window) / len(window) / log_vocab if window else 0.0


def branch_chance(delta: float, config: EntropyBranchConfig) -> float:
    """`P = clip(branch_probability + entropy_weight * delta, 0, 1)`: a branch point's branch probability."""
    return min(1.0, max(0.0, config.branch_probability + config.entropy_weight * delta))


def branch_counts(chances: Sequence[float], room: int, beam_size: int, rng=random) -> list[int]:
    """The branches made at one depth by a prompt's branch points, given in the order their episodes were made with
    their branch probabilities, with `room` rows left: each point draws up to `beam_size - 1` times, fewer where the
    room would run out, each draw a branch when `rng.random()` falls below its probability (the code's loop, which
    draws nothing once the room is filled)."""
    counts, made = [], 0
    for chance in chances:
        draws = max(0, min(beam_size - 1, room - made))
        counts.append(sum(rng.random() < chance for _ in range(draws)))
        made += counts[-1]
    return counts


@dataclass(eq=False)
class Group:
    """A prompt's episodes in the order they were made, each with the episode it branched from (None: fresh)."""

    problem: Problem
    prompt: list[int]
    rows: list[Chain] = field(default_factory=list)
    sources: list[Chain | None] = field(default_factory=list)

    def open(self, depth: int, size: int) -> bool:
        """The prompt has room and an episode with a branch point at `depth` or deeper."""
        return len(self.rows) < size and any(chain.turns - 1 >= depth for chain in self.rows)


@dataclass
class Growth:
    """What branching drew: the prompts' groups, the policy tokens sampled and each branch point's entropy change."""

    groups: list[Group]
    tokens: int
    deltas: list[float]


class EntropyRecorded:
    """A generation backend whose `generate` must give each token's sampling entropy (ARPO reads it)."""

    def __init__(self, backend: GenerationBackend) -> None:
        self.backend, self.tokenizer = backend, backend.tokenizer

    def generate(self, prompts: list[list[int]], **kwargs) -> Completions:
        out = self.backend.generate(prompts, **kwargs)
        if out.entropies is None:
            raise ValueError(f"ARPO's branching reads the sampling entropies of each turn, which the "
                             f"{type(self.backend).__name__} generation backend does not record "
                             "(rollout.backend = transformers does)")
        return out


def grow_groups(backend: GenerationBackend, task: Task, problems: list[Problem], options: RolloutConfig,
                rng=random) -> Growth:
    """`rollout.group_size` episodes per problem, grown by entropy-triggered branching and topped up with fresh ones
    (module docstring). `rng` makes the branch draws."""
    config: EntropyBranchConfig = options.entropy_branch
    size, backend = options.group_size, EntropyRecorded(backend)
    log_vocab = math.log(len(backend.tokenizer.get_vocab()))
    prompts = encode_prompts(backend.tokenizer, [p.prompt for p in problems])
    groups = [Group(problem, prompt) for problem, prompt in zip(problems, prompts, strict=True)]
    tokens = extend(backend, task, [(g, None) for g in groups for _ in range(min(config.initial_rollouts, size))],
                    options)
    deltas: list[float] = []
    depth = 1
    while True:
        wave: list[tuple[Group, Node]] = []
        for group in groups:
            if not group.open(depth, size):
                wave += [(group, None)] * (size - len(group.rows))  # top-ups (none for a full prompt)
                continue
            points = [chain for chain in group.rows if chain.kept < depth < chain.turns]
            changes = [turn_entropy(c, depth, config.entropy_tokens, log_vocab)
                       - turn_entropy(c, 0, config.entropy_tokens, log_vocab) for c in points]
            counts = branch_counts([branch_chance(d, config) for d in changes], size - len(group.rows),
                                   config.beam_size, rng)
            deltas += changes
            wave += [(group, (chain, depth)) for chain, count in zip(points, counts, strict=True) for _ in range(count)]
        if not wave and not any(group.open(depth, size) for group in groups):
            return Growth(groups, tokens, deltas)
        if wave:
            tokens += extend(backend, task, wave, options)
        depth += 1


def extend(backend: GenerationBackend, task: Task, picks: list[tuple[Group, Node]], options: RolloutConfig) -> int:
    """A full episode continued from each picked node (None: a fresh episode), all in one lockstep batch, each added
    to its prompt's group with its source; the policy tokens sampled."""
    chains, tokens = grow_chains(backend, task, [g.problem for g, _ in picks], [g.prompt for g, _ in picks],
                                 [node for _, node in picks], options)
    for (group, node), chain in zip(picks, chains, strict=True):
        group.rows.append(chain)
        group.sources.append(None if node is None else node[0])
    return tokens


def sample_branches(backend: GenerationBackend, task: Task, stream: ProblemStream, options: RolloutConfig,
                    rng=random) -> Rollout:
    """`prompts_per_step` prompts' groups of `group_size` episodes grown by entropy-triggered branching (module
    docstring); `rng`: Python's global RNG, seeded and checkpointed by the trainer."""
    growth = grow_groups(backend, task, stream.take(options.prompts_per_step), options, rng)
    groups, size = growth.groups, options.group_size
    first = min(options.entropy_branch.initial_rollouts, size)
    branches = [chain for g in groups for chain, source in zip(g.rows, g.sources, strict=True) if source is not None]
    return chains_rollout(
        [g.problem for g in groups for _ in g.rows], [chain for g in groups for chain in g.rows],
        torch.arange(len(groups)).repeat_interleave(size), growth.tokens, backend.tokenizer.pad_token_id,
        {"branch/branches_per_prompt": len(branches) / len(groups),
         "branch/top_ups_per_prompt": (len(groups) * (size - first) - len(branches)) / len(groups),
         "branch/kept_turns_mean": sum(chain.kept for chain in branches) / max(1, len(branches)),
         "branch/entropy_change_mean": sum(growth.deltas) / max(1, len(growth.deltas)),
         "branch/points_per_prompt": len(growth.deltas) / len(groups)})


@registered
@dataclass(frozen=True)
class EntropyBranchSampler(Sampler):
    name: ClassVar[str] = "entropy_branch"
    draws: ClassVar[str] = ("groups of episodes per prompt that branch after tool results where the policy's entropy "
                            "rises (rollout.entropy_branch), topped up with fresh episodes")
    iid: ClassVar[bool] = False
    options: ClassVar[type[Section] | None] = EntropyBranchConfig
    dapo_options: ClassVar[bool] = False
    episodes: ClassVar[bool] = True
    needs_environment: ClassVar[bool] = True

    def sample(self, backend: GenerationBackend, task: Task, stream: ProblemStream, options: RolloutConfig) -> Rollout:
        self.check(options, task.checks_steps, task.environment is not None)
        return sample_branches(backend, task, stream, options)
