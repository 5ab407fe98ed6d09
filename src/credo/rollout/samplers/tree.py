"""The tree sampler of Tree-GRPO: a tree search over the turns of multi-turn episodes (arXiv 2509.21240).

Tree-GRPO ("Tree Search for LLM Agent Reinforcement Learning", Ji et al. 2025; github.com/AMAP-ML/Tree-GRPO at
90b1709, `search_r1/llm_agent/generation_ts.py::run_llm_loop_tree_search`, `tree_node.py::get_expand_node`,
`sample_leaf`) grows `M` trees per prompt whose nodes are complete agent turns: a node holds a turn and the
observation after it, so its context is the prompt, the turns above it and their observations, and the environment's
state after it. For every prompt of a step, batched across prompts and trees:
1. Each tree's root grows one full episode (a *chain*), a fresh episode of the prompt.
2. `L` rounds of expansion: each tree picks `N` nodes uniformly *with replacement* from its root and its inner nodes
   (every turn of its chains but a chain's last, which ends the episode: a leaf; the code's `get_expand_node`), and a
   new chain continues a full episode from each: from the root a fresh episode, from a node the episode's first
   turns as they stand (`Episodes.prefix`: token ids, observations and the environment's state after them, never
   generated again). All continuations of a round are sampled together in one lockstep batch.
3. `K` leaves per tree are drawn uniformly without replacement (the code's `sample_leaf`); each tree has grown
   `1 + L N` leaves, one per chain, so `K <= 1 + L N` (refused when the config loads otherwise).
Rows: the `M K` leaves of each prompt, each the leaf's whole episode from the prompt, its shared prefix included
(trained, as the code trains it: the advantage of every leaf below a shared turn lands on that turn's tokens);
`group_id` is the prompt, the recorded `tree_id` the tree (numbered over the batch). The episodes' batch fields come
with the rows (`Rollout.checks`: the policy's tokens as the loss mask, observations never trained). Counted are the
policy's tokens sampled, in every chain grown (those of the leaves left out too), never observations nor the
prefixes continued chains start from.

The code's defaults (`ts_m`, `ts_n`, `ts_l`, `ts_k` in its training scripts): M = 2, N = 2, L = 1, K = 3, six leaves
per prompt, every leaf kept. A tree over single responses has no inner node, so its chains would be independent
samples: a single-response task is refused (the tree is over turns). The node and leaf draws use Python's global
RNG, which the trainer seeds and checkpoints.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import torch
from pydantic import Field

from credo.batch import RecordedField
from credo.rollout.backend import GenerationBackend
from credo.rollout.chains import Chain, Node, chains_rollout, grow_chains
from credo.rollout.generate import encode_prompts
from credo.rollout.groups import ProblemStream, Rollout
from credo.rollout.samplers.base import Sampler, registered
from credo.schema import Section
from credo.tasks import Problem, Task

if TYPE_CHECKING:
    from credo.rollout.samplers import RolloutConfig


class TreeConfig(Section):
    """Options of the Tree-GRPO sampler (`rollout.tree`): a tree search over episodes' turns (arXiv 2509.21240)."""

    trees: int = Field(2, ge=1)
    """Trees per prompt, each grown from a fresh episode (the code's `ts_m`, M = 2)."""
    expansions: int = Field(2, ge=1)
    """Nodes each tree expands per round, drawn with replacement from its root and inner nodes (`ts_n`, N = 2)."""
    rounds: int = Field(1, ge=0)
    """Rounds of expansion (the code's `ts_l`, L = 1); 0: each tree is one fresh episode."""
    leaves: int = Field(3, ge=1)
    """Leaves trained per tree, drawn without replacement from its 1 + L N leaves (the code's `ts_k`, K = 3)."""


def check_leaves(tree: TreeConfig) -> None:
    """A `ValueError` if each tree is to train more leaves than it grows (the code's `sample_leaf` asserts the same)."""
    grown = 1 + tree.rounds * tree.expansions
    if tree.leaves > grown:
        raise ValueError(f"rollout.tree.leaves = {tree.leaves} exceeds the {grown} leaves each tree grows "
                         f"(1 + rounds x expansions = 1 + {tree.rounds} x {tree.expansions})")


@dataclass(eq=False)
class Tree:
    """A prompt's tree: its chains in the order they were grown (the first from the root)."""

    problem: Problem
    prompt: list[int]
    chains: list[Chain] = field(default_factory=list)

    def expandable(self) -> list[Node]:
        """The nodes an expansion draws from (the code's `get_expand_node` candidates): the root, then every chain's
        inner nodes."""
        return [None, *(node for chain in self.chains for node in chain.inner_nodes())]


def grow_trees(backend: GenerationBackend, task: Task, problems: list[Problem], options: RolloutConfig,
               rng=random) -> tuple[list[Tree], int]:
    """`rollout.tree.trees` trees per problem (a problem's trees consecutive), grown by `rollout.tree.rounds` rounds of
    expansion (module docstring), and the policy tokens sampled for them. `rng` draws the nodes expanded."""
    config: TreeConfig = options.tree
    prompts = encode_prompts(backend.tokenizer, [p.prompt for p in problems])
    trees = [Tree(problem, prompt) for problem, prompt in zip(problems, prompts, strict=True)
             for _ in range(config.trees)]
    tokens = extend(backend, task, [(tree, None) for tree in trees], options)
    for _ in range(config.rounds):
        picks = [(tree, node) for tree in trees for node in rng.choices(tree.expandable(), k=config.expansions)]
        tokens += extend(backend, task, picks, options)
    return trees, tokens


def extend(backend: GenerationBackend, task: Task, picks: list[tuple[Tree, Node]], options: RolloutConfig) -> int:
    """A full episode continued from each picked node (the root: a fresh episode), all in one lockstep batch, each
    added to its tree as a chain; the policy tokens sampled (not the continued prefixes')."""
    chains, tokens = grow_chains(backend, task, [tree.problem for tree, _ in picks], [tree.prompt for tree, _ in picks],
                                 [node for _, node in picks], options)
    for (tree, _), chain in zip(picks, chains, strict=True):
        tree.chains.append(chain)
    return tokens


def sample_trees(backend: GenerationBackend, task: Task, stream: ProblemStream, options: RolloutConfig,
                 rng=random) -> Rollout:
    """`prompts_per_step` prompts' trees, trained as `rollout.tree.leaves` leaves drawn from each (module
    docstring). `rng` (Python's global RNG: seeded and checkpointed by the trainer) draws the nodes and leaves."""
    trees, tokens = grow_trees(backend, task, stream.take(options.prompts_per_step), options, rng)
    return tree_rollout(trees, options.tree, tokens, backend.tokenizer.pad_token_id, rng)


def tree_rollout(trees: list[Tree], config: TreeConfig, tokens: int, pad: int, rng=random) -> Rollout:
    """The rollout that trains grown trees (a problem's `config.trees` trees consecutive): `config.leaves` leaves of
    each drawn by `rng` without replacement, kept in the order they were grown; `tokens`: the tokens sampled."""
    picked = [(index, tree.chains[c]) for index, tree in enumerate(trees)
              for c in sorted(rng.sample(range(len(tree.chains)), config.leaves))]
    tree_id = torch.tensor([index for index, _ in picked], dtype=torch.long)
    expansions = [chain for tree in trees for chain in tree.chains[1:]]
    return chains_rollout(
        [trees[index].problem for index, _ in picked], [chain for _, chain in picked],
        tree_id.div(config.trees, rounding_mode="floor"), tokens, pad,
        {"tree/root_expansion_share": sum(c.kept == 0 for c in expansions) / max(1, len(expansions)),
         "tree/kept_turns_mean": sum(c.kept for c in expansions) / max(1, len(expansions))},
        {"tree_id": tree_id})


@registered
@dataclass(frozen=True)
class TreeSampler(Sampler):
    name: ClassVar[str] = "tree"
    draws: ClassVar[str] = ("trees of episodes per prompt that branch at turn boundaries (rollout.tree: M trees, L "
                            "rounds of N expansions), K leaves of each trained")
    records: ClassVar[Mapping[str, RecordedField]] = {
        "tree_id": RecordedField(
            "row", "int", "the tree of each row (a leaf's episode), numbered over the batch; a tree is one prompt's",
            lambda t, response: (t < 0, "must be >= 0"),
            lambda: torch.tensor([0, 0, 1, 1])),  # the demo: two trees of two leaves
    }
    iid: ClassVar[bool] = False
    options: ClassVar[type[Section] | None] = TreeConfig
    dapo_options: ClassVar[bool] = False
    episodes: ClassVar[bool] = True
    needs_environment: ClassVar[bool] = True

    def sample(self, backend: GenerationBackend, task: Task, stream: ProblemStream, options: RolloutConfig) -> Rollout:
        self.check(options, task.checks_steps, task.environment is not None)
        return sample_trees(backend, task, stream, options)

    def check(self, options: RolloutConfig, checks_steps: bool, multi_turn: bool = False) -> None:
        super().check(options, checks_steps, multi_turn)
        check_leaves(options.tree)
