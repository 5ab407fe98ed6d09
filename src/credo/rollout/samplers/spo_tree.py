"""SPO-tree: a tree of fixed-length segments whose node values are the means of their children (arXiv 2505.23564).

SPO-tree, the paper's instance for long chains of thought (Guo et al. 2025, github.com/AIFrameResearch/SPO), grows
one tree per prompt: the root is the prompt; a node's children are sampled from the node's path (prompt + the
segments above it), each `segment_tokens` long (the paper's `M`), except at the last level, where a child runs to
the end of the response's budget. A child that finishes (its answer, its end token, the budget) is a leaf scored
by the task; a tree whose segments reach the budget before its last level ends there. A node's value is the mean of its children's values, a leaf's its reward:

    V(leaf) = R(leaf),    V(n) = (1 / |children(n)|) * sum_{c in children(n)} V(c),

and each edge (a segment) gets the change in value across it,

    A(p -> c) = V(c) - V(p)        on every token of c's segment.

The leaves under one node are its Monte-Carlo continuations, so the tree values every segment boundary from
samples it trains on anyway: no continuation is drawn only to estimate a value (as SPO-chain's are). Along any
root-to-leaf path the advantages sum to `R(leaf) - V(root)`; a tree of one level is GRPO's centred reward.

The sampler (`SpoTreeSampler`), for every prompt of a step, level by level, batched across prompts and nodes:
1. Grows the tree: `rollout.group_size` children of the root (6 in the paper's 6-6-6), `branching[d]` children of
   each unfinished node of level `d + 1`, each child's tokens with their sampling probabilities.
2. Values the nodes bottom-up and collects the edges whose advantage is not zero (`drop_zero`, the code's
   `only_adv_greater_than_zero`, which keeps every edge whose advantage is non-zero), then draws at most
   `max_edges` of them per prompt (the code's 32 per question).
3. Trains each drawn edge exactly once, in a *carrier* row: the first leaf, in the tree's order, below the
   edge's child that extends its parent's path. The rows are those leaves' whole responses (real rewards and
   verdicts); a row's `edge_mask` marks the tokens of the edges it carries, its `segment_ids` and `step_values`
   the segments of its path and the values of the nodes they start from, so that SPO's segment estimator
   (`credo.credit.spo.TreeEdgeAdvantage`: next segment's start value, the reward after the last, minus this
   segment's) gives every carried token its edge's `V(c) - V(p)`. `cutpoint_mask` marks the tokens
   sampled below `threshold` (the probability mask, as SPO-chain's).
A prompt whose tree has no edge to train gives one row (its first leaf) with nothing in its `edge_mask`. Every
token generated in the tree counts in the rollout's tokens (`spo_tree/tokens`).

Paper and official code (`hybrid_inference_strategy.py::_construct_tree`, `tree_episode_generator.py::
extract_edges_from_tree`, `hybrid_episode_generator.py`; config `polIter_rho1bSft2_spo_tree_GSM8K.jsonnet`): a
6-6-6 tree with `M = 30` tokens per segment (the last level unbounded), node value the mean of its children's,
edge advantage `V(c) - V(p)` (`adv_method: rloo`), edges of advantage 0 dropped, at most 32 edges per question
per iteration, PPO's clipped loss over the edge's tokens with the probability mask (`use_prob_mask`, inherited
from SPO-chain's config) and advantages whitened over the masked tokens, no critic. credo's choices where the
code differs or is silent:
- The code trains an edge as its own sequence (prompt = the parent's text, response = the segment); credo trains
  it inside a leaf's whole response, the tokens before it given as context and left out of the loss: the same
  tokens, the same advantages, fewer rows (a leaf carries every drawn edge it is the first leaf under).
- Edges the draw leaves out are dropped; the code keeps them in an on-policy replay buffer for up to 8
  iterations and draws from it again (off-policy by up to 8 updates).
- A child that kept no token of its own (its episode ended at, or was cut inside, its parent's path) is a leaf
  valued by its reward; its edge trains nothing and it carries nothing. An edge below which every leaf is such a
  child has no carrier and is left out (`spo_tree/edges_uncarried`; the code trains it as its own sequence).
- A zero advantage is one below 1e-9 in size (the code compares floats to 0).
- The whitening runs once over the step's batch (the code whitens each mini-batch).
"""

from __future__ import annotations

import bisect
import dataclasses
import random
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import torch
from pydantic import Field

from credo.batch import RecordedField, inside_response
from credo.rollout.backend import GenerationBackend
from credo.rollout.generate import encode_prompts, per_token
from credo.rollout.groups import ProblemStream, Rollout
from credo.rollout.rows import SEGMENT_IDS, Row, assemble, make_rows
from credo.rollout.samplers.base import Sampler, registered
from credo.rollout.samplers.spo_chain import SpoChainSampler
from credo.rollout.thoughts import ThoughtRules
from credo.rollout.values import STEP_VALUES
from credo.schema import Section
from credo.tasks import Problem, Task, sandbox_failures

if TYPE_CHECKING:
    from credo.rollout.samplers import RolloutConfig

ZERO_ADVANTAGE = 1e-9
"""An edge whose advantage is smaller than this in size has advantage 0 (dropped with `drop_zero`)."""


class SpoTreeConfig(Section):
    """Options of the SPO-tree sampler (`rollout.spo_tree`): a tree of fixed-length segments (arXiv 2505.23564)."""

    branching: list[int] = Field(default_factory=lambda: [6, 6])
    """Children of each unfinished node below the root, level by level (the root's: `rollout.group_size`).

    The paper's 6-6-6 tree is `group_size: 6` with `branching: [6, 6]`; `[]` is a tree of one level (GRPO's
    groups, credited by centred rewards)."""
    segment_tokens: int = Field(30, ge=1)
    """Tokens of a segment above the last level (the paper's `M` = 30); the last level's run to the budget."""
    max_edges: int | None = Field(32, ge=1)
    """Train at most this many edges per prompt, drawn at random among those kept (the code's 32; None: all)."""
    drop_zero: bool = True
    """Leave out the edges whose advantage is 0 (the code's `only_adv_greater_than_zero`)."""
    threshold: float = Field(0.9, gt=0.0, le=1.0)
    """A token sampled with probability below this is a cutpoint (the code's 0.9).

    Only the cutpoints of the carried edges train (the probability mask, as SPO-chain's; `credit.prob_mask`)."""
    thoughts: ThoughtRules = ThoughtRules()
    """When a response's episode ends (answer, budgets), as for the vine sampler; segments ignore thoughts."""


@dataclass(eq=False)
class Node:
    """A state of a prompt's tree: the response tokens of its path, their sampling probabilities, its row (the
    path verified as a response; None at the root) and its children."""

    problem: Problem
    prompt: list[int]
    path: list[int]
    probs: list[float]
    row: Row | None = None
    children: list[Node] = field(default_factory=list)
    value: float = 0.0

    @property
    def extends(self) -> bool:
        """Whether the node's path extends its parent's (it kept a token of its own); always for the root."""
        return self.row is None or len(self.path) > self.row.prefix_len


def grow_trees(backend: GenerationBackend, task: Task, problems: list[Problem], options: RolloutConfig) -> tuple[list[Node], int]:
    """One tree per problem, level by level (module docstring), and the tokens generated for them."""
    spo: SpoTreeConfig = options.spo_tree
    prompts = encode_prompts(backend.tokenizer, [p.prompt for p in problems])
    roots = [Node(p, prompt, [], []) for p, prompt in zip(problems, prompts)]
    fan_out = [options.group_size, *spo.branching]
    frontier, tokens = list(roots), 0
    for level, size in enumerate(fan_out):
        last = level == len(fan_out) - 1
        calls: dict[int, list[Node]] = defaultdict(list)
        for node in frontier:
            left = options.max_new_tokens - len(node.path)
            calls[left if last else min(spo.segment_tokens, left)].append(node)
        frontier = []
        for budget, parents in sorted(calls.items()):
            out = backend.generate([n.prompt + n.path for n in parents], max_new_tokens=budget,
                                   temperature=options.temperature, top_p=options.top_p, repeat=size)
            if out.token_probs is None:
                raise ValueError("the spo_tree sampler masks by the sampled tokens' probabilities, which this "
                                 "generation backend does not record (Completions.token_probs)")
            rows = make_rows(backend.tokenizer, task, [n.problem for n in parents for _ in range(size)], out,
                             spo.thoughts, options.reward_errors, prefixes=[n.path for n in parents for _ in range(size)])
            for index, row in enumerate(rows):
                parent = parents[index // size]
                own = max(0, len(row.episode.ids) - len(parent.path))
                child = Node(parent.problem, parent.prompt, row.episode.ids, parent.probs[: row.prefix_len]
                             + out.token_probs[index, :own].tolist(), row)
                parent.children.append(child)
                tokens += row.tokens
                finished = (last or not bool(out.truncated[index]) or row.episode.reason != "eos"
                            or len(child.path) >= options.max_new_tokens or not child.extends)
                if not finished:
                    frontier.append(child)
    return roots, tokens


def assign_values(node: Node) -> float:
    """Set every node's value below and at `node`: a leaf's reward, the mean of a node's children's values."""
    if not node.children:
        node.value = node.row.verdict.reward
    else:
        node.value = sum(assign_values(c) for c in node.children) / len(node.children)
    return node.value


def edges(root: Node, drop_zero: bool) -> list[tuple[Node, Node]]:
    """The tree's trainable `(parent, child)` edges in the tree's order (depth first, children in draw order):
    those whose child kept tokens of its own and, with `drop_zero`, whose advantage is not 0."""
    out = []
    for child in root.children:
        if child.extends and not (drop_zero and abs(child.value - root.value) < ZERO_ADVANTAGE):
            out.append((root, child))
        out += edges(child, drop_zero)
    return out


def first_leaf(node: Node) -> list[Node] | None:
    """The path (from `node` down) to the first leaf below `node` whose nodes all extend their parents; None if
    there is none."""
    if not node.children:
        return [node] if node.extends else None
    for child in node.children:
        if child.extends and (below := first_leaf(child)) is not None:
            return [node, *below]
    return None


@dataclass
class Carrier:
    """A leaf's response trained for the edges it carries: its path of nodes (root first) and the carried edges'
    children."""

    path: list[Node]
    carried: list[Node] = field(default_factory=list)


def carriers(root: Node, drawn: list[tuple[Node, Node]]) -> tuple[list[Carrier], int]:
    """The rows that train the `drawn` edges of `root`'s tree, each edge in the first leaf below its child (in the
    tree's order), and the number of edges with no such leaf. A tree with no carried edge gives its first leaf
    carrying nothing."""
    rows: dict[int, Carrier] = {}
    missing = 0
    for parent, child in drawn:
        below = first_leaf(child)
        if below is None:
            missing += 1
            continue
        upper = path_to(root, child)
        carrier = rows.setdefault(id(below[-1]), Carrier(upper[:-1] + below))
        carrier.carried.append(child)
    if not rows:
        below = first_leaf(root) or path_to(root, leaves(root)[0])
        return [Carrier(below)], missing
    order = {id(leaf): n for n, leaf in enumerate(leaves(root))}
    return sorted(rows.values(), key=lambda c: order[id(c.path[-1])]), missing


def leaves(node: Node) -> list[Node]:
    """The leaves below `node`, in the tree's order."""
    return [node] if not node.children else [leaf for c in node.children for leaf in leaves(c)]


def path_to(root: Node, target: Node) -> list[Node] | None:
    """The nodes from `root` down to `target` (both included); None if `target` is not below `root`."""
    if root is target:
        return [root]
    for child in root.children:
        if (found := path_to(child, target)) is not None:
            return [root, *found]
    return None


def carrier_layout(carrier: Carrier) -> tuple[list[int], list[float], list[bool]]:
    """Each response token of the carrier's leaf: its segment (0-based, one per edge of the path), the value of
    the node its segment starts from, and whether it belongs to a carried edge."""
    path = carrier.path
    starts = [len(n.path) for n in path[1:-1]]  # where the segments below the root's first child begin
    length = len(path[-1].path)
    segments = [bisect.bisect_right(starts, t) for t in range(length)]
    carried = [False] * length
    for child in carrier.carried:
        parent = path[path.index(child) - 1]
        carried[len(parent.path) : len(child.path)] = [True] * (len(child.path) - len(parent.path))
    return segments, [path[s].value for s in segments], carried


def sample_spo_tree(backend: GenerationBackend, task: Task, stream: ProblemStream, options: RolloutConfig,
                    rng=random) -> Rollout:
    """`prompts_per_step` prompts' trees, trained as the leaves that carry their drawn edges (module docstring).
    `rng` draws the edges kept (Python's global RNG: seeded and checkpointed by the trainer)."""
    roots, tokens = grow_trees(backend, task, stream.take(options.prompts_per_step), options)
    return tree_rollout(roots, tokens, backend.tokenizer.pad_token_id, options.spo_tree, rng)


def tree_rollout(roots: list[Node], tokens: int, pad: int, spo: SpoTreeConfig, rng=random) -> Rollout:
    """The rollout that trains grown trees, valued here: per tree, at most `spo.max_edges` of its edges drawn by
    `rng`, in the leaves that carry them, with their segments, values, cutpoints and carried tokens recorded;
    `tokens`: the tokens generated for the trees."""
    groups, chosen, kept, missing = [], [], 0, 0
    for root in roots:
        assign_values(root)
        candidates = edges(root, spo.drop_zero)
        kept += len(candidates)
        drawn = candidates if spo.max_edges is None or len(candidates) <= spo.max_edges else \
            sorted(rng.sample(candidates, spo.max_edges), key=candidates.index)
        rows, lost = carriers(root, drawn)
        missing += lost
        groups.append([c.path[-1].row for c in rows])
        chosen += rows
    rollout = assemble(groups, pad, tokens)
    width = rollout.completions.response_ids.shape[1]
    layouts = [carrier_layout(c) for c in chosen]
    low = [[q < spo.threshold for q in c.path[-1].probs] for c in chosen]
    rollout.records = {"segment_ids": per_token([s for s, _, _ in layouts], width, -1, torch.long),
                       "step_values": per_token([v for _, v, _ in layouts], width, 0.0, torch.float32),
                       "cutpoint_mask": per_token(low, width, False, torch.bool),
                       "edge_mask": per_token([e for _, _, e in layouts], width, False, torch.bool)}
    below = [n for root in roots for n in descendants(root)]
    rollout.metrics = {
        "spo_tree/tokens": float(tokens),
        "spo_tree/nodes_per_prompt": len(below) / len(roots),
        "spo_tree/leaves_per_prompt": sum(not n.children for n in below) / len(roots),
        "spo_tree/edges_kept_per_prompt": kept / len(roots),
        "spo_tree/edges_uncarried": float(missing),
        "spo_tree/edge_token_share": sum(map(sum, (e for _, _, e in layouts)))
        / max(1, int(rollout.completions.response_mask.sum())),
        "spo_tree/root_value_mean": sum(r.value for r in roots) / len(roots),
        "verify/sandbox_failures": sandbox_failures([n.row.verdict for n in below]),
    }
    return rollout


def descendants(node: Node) -> list[Node]:
    """Every node below `node`, in the tree's order."""
    return [n for c in node.children for n in (c, *descendants(c))]


@registered
@dataclass(frozen=True)
class SpoTreeSampler(Sampler):
    name: ClassVar[str] = "spo_tree"
    draws: ClassVar[str] = ("a tree per prompt of fixed-length segments (group_size, then rollout.spo_tree.branching "
                            "children per node); trains the leaves that carry the drawn edges")
    records: ClassVar[Mapping[str, RecordedField]] = {
        "segment_ids": SEGMENT_IDS,
        "step_values": STEP_VALUES,
        "cutpoint_mask": dataclasses.replace(
            SpoChainSampler.records["cutpoint_mask"],
            meaning="tokens sampled with probability below rollout.spo_tree.threshold (the probability mask)"),
        "edge_mask": RecordedField(
            "token", "bool", "tokens of the tree edges (segments) a row trains; each drawn edge in one row only",
            inside_response, lambda: torch.tensor([False, False, True, True, True, True]).repeat(4, 1)),
    }
    iid: ClassVar[bool] = False
    options: ClassVar[type[Section] | None] = SpoTreeConfig
    dapo_options: ClassVar[bool] = False

    def sample(self, backend: GenerationBackend, task: Task, stream: ProblemStream, options: RolloutConfig) -> Rollout:
        return sample_spo_tree(backend, task, stream, options)

    def check(self, options: RolloutConfig, checks_steps: bool, multi_turn: bool = False) -> None:
        super().check(options, checks_steps, multi_turn)
        if options.backend == "vllm":
            raise ValueError("the spo_tree sampler masks by the sampled tokens' probabilities, which rollout.backend "
                             "= vllm does not record (top-k log-probs only); use rollout.backend = transformers")
