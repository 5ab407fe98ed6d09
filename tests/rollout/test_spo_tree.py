"""SPO-tree (arXiv 2505.23564): the tree sampler with a scripted policy whose values are known exactly, the tree's
values and edges against the official code's functions, the carriers (each drawn edge trained once), identities
and intent."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import numpy as np
import pytest
import torch
from scripted import exact_policy
from test_spo import LOW, TASK, THOUGHT, ProbedPolicy, credit_of
from tiny import TINY

from credo.config import load_config
from credo.methods import get_method
from credo.rollout.groups import ProblemStream
from credo.rollout.rows import Row
from credo.rollout.samplers.spo_tree import (
    Node,
    SpoTreeConfig,
    assign_values,
    carriers,
    edges,
    first_leaf,
    sample_spo_tree,
    tree_rollout,
)
from credo.rollout.thoughts import Episode
from credo.tasks import Verdict


def options(prompts=2, group=4, max_new_tokens=48, **spo):
    spo = {"segment_tokens": THOUGHT, "branching": [4], **spo}
    return load_config(None, [f"rollout.prompts_per_step={prompts}", f"rollout.group_size={group}",
                              f"rollout.max_new_tokens={max_new_tokens}", f"rollout.spo_tree={json.dumps(spo)}",
                              "method=spo_tree"]).rollout


class TruncatingPolicy(ProbedPolicy):
    """The probed scripted policy (each thought's first token at probability `LOW`) with its replies cut at the
    call's token budget, as a generation engine cuts them: a tree's segments are budget-cut replies."""

    def generate(self, prompts, *, max_new_tokens, **kwargs):
        out = super().generate(prompts, max_new_tokens=max_new_tokens, **kwargs)
        lengths = out.response_mask.sum(dim=1)
        keep = torch.arange(out.response_ids.shape[1]) < max_new_tokens
        mask = out.response_mask & keep
        texts = [self.tokenizer.decode(ids[m].tolist(), skip_special_tokens=True)
                 for ids, m in zip(out.response_ids, mask)]
        return dataclasses.replace(out, response_mask=mask, response_ids=torch.where(mask, out.response_ids, 0),
                                   token_probs=torch.where(mask, out.token_probs, 0.0), texts=texts,
                                   truncated=out.truncated | (lengths > max_new_tokens))


def run(cfg, wrong_rows=None, successes=lambda steps: 2, seed=0):
    """The sampler on the scripted policy: draw 0 of each prompt wrong at its first step (value 0 below it); from
    a right first step, 2 of every 4 continuations finish right (value 0.5)."""
    random.seed(seed)
    policy = exact_policy({0: 0} if wrong_rows is None else wrong_rows, successes, TruncatingPolicy)
    return policy, sample_spo_tree(policy, TASK, ProblemStream(TASK, seed=3), cfg)


# --- the sampler -------------------------------------------------------------------------------------------------


def test_the_tree_values_edges_and_carriers_are_exact():
    _, rollout = run(options())
    # per prompt: the wrong first child (V = 0) carried by its first leaf; each right child (V = 0.5) by its
    # first leaf, which also carries its own leaf edge; the other 3 leaves of each right child their own edge
    assert rollout.group_id.tolist() == [0] * 13 + [1] * 13
    edge, values, segments = (rollout.records[k] for k in ("edge_mask", "step_values", "segment_ids"))
    length = rollout.completions.response_mask.sum(dim=1)
    assert edge[0].tolist()[: int(length[0])] == [True] * THOUGHT + [False] * (int(length[0]) - THOUGHT)
    assert edge[1, : int(length[1])].all() and not edge[2, :THOUGHT].any() and edge[2, THOUGHT : int(length[2])].all()
    assert segments[1, : int(length[1])].tolist() == [0] * THOUGHT + [1] * (int(length[1]) - THOUGHT)
    assert values[0, 0] == pytest.approx(0.375) and values[0, THOUGHT] == 0.0  # root (0 + 3 * 0.5) / 4, child 0
    assert values[1, 0] == pytest.approx(0.375) and values[1, THOUGHT] == 0.5
    assert rollout.rewards[:5].tolist() == [0.0, 1.0, 1.0, 0.0, 0.0]  # child 1's leaves: 2 right, 2 wrong
    credited, _ = get_method("spo_tree", estimator={"whiten": False, "prob_mask": False}).credit(rollout.batch())
    adv = credited.advantages
    assert adv[0, :THOUGHT].tolist() == [pytest.approx(-0.375)] * THOUGHT and adv[0, THOUGHT:].eq(0).all()
    assert adv[1, :THOUGHT].tolist() == [pytest.approx(0.125)] * THOUGHT
    assert adv[1, THOUGHT : int(length[1])].eq(0.5).all() and adv[3, THOUGHT : int(length[3])].eq(-0.5).all()
    assert adv[2, :THOUGHT].eq(0).all()  # child 1's edge is trained once, in row 1
    assert rollout.metrics["spo_tree/edges_kept_per_prompt"] == 16  # child 0's 4 leaf edges have advantage 0
    assert rollout.metrics["spo_tree/nodes_per_prompt"] == 20 and rollout.metrics["spo_tree/edges_uncarried"] == 0


def test_the_probability_mask_trains_only_the_low_probability_tokens_of_carried_edges():
    _, rollout = run(options())
    credited, _ = get_method("spo_tree", estimator={"whiten": False}).credit(rollout.batch())
    low = rollout.records["cutpoint_mask"]
    assert torch.equal(credited.loss_mask, rollout.records["edge_mask"] & low)
    first_tokens = rollout.completions.response_mask & (torch.arange(low.shape[1]) % THOUGHT == 0)
    assert torch.equal(low, first_tokens)  # the scripted policy draws each thought's first token at p = LOW
    assert LOW < 0.9


def test_every_tree_token_is_counted_and_segments_keep_the_budget():
    policy, rollout = run(options(prompts=2))
    leaves = 2 * 16
    assert [c[:2] for c in policy.calls] == [(2, 4), (8, 4)]  # level 1: the roots; level 2: every child
    assert policy.budgets == [THOUGHT, 48 - THOUGHT]
    trained_rows = rollout.completions.response_mask.sum(dim=1)
    assert rollout.generated_tokens == rollout.metrics["spo_tree/tokens"]
    # every level-1 segment once, and every leaf's tokens after it
    full_length = int(trained_rows[1])  # a whole response
    assert rollout.generated_tokens == 2 * 4 * THOUGHT + leaves * (full_length - THOUGHT)


def test_a_finished_child_is_a_leaf_and_is_not_expanded():
    """A reply that ends inside the first segment (budget 24 covers the whole response) is a leaf: no second
    level, and each edge is root -> leaf, GRPO's centred reward."""
    policy, rollout = run(options(prompts=1, max_new_tokens=64, segment_tokens=40, branching=[4]))
    assert len(policy.calls) == 1
    assert rollout.metrics["spo_tree/nodes_per_prompt"] == 4
    credited, _ = get_method("spo_tree", estimator={"whiten": False, "prob_mask": False}).credit(rollout.batch())
    # draw 0 wrong, 3 right: root value 0.75; edges -0.75 and +0.25
    assert credited.advantages[:, 0].tolist() == [pytest.approx(-0.75)] + [pytest.approx(0.25)] * 3


def test_max_edges_draws_reproducibly_and_each_drawn_edge_is_trained_once():
    _, first = run(options(prompts=1, max_edges=5), seed=7)
    _, again = run(options(prompts=1, max_edges=5), seed=7)
    assert torch.equal(first.records["edge_mask"], again.records["edge_mask"])
    edge = first.records["edge_mask"]
    per_row = [edge[r].nonzero()[:, 0].tolist() for r in range(edge.shape[0])]
    carried = sum(_spans(p) for p in per_row)
    assert carried == 5


def _spans(positions: list[int]) -> int:
    """How many edges a row's carried positions hold: a carried span is one segment (or, in a leaf's path, one
    segment per level it covers)."""
    if not positions:
        return 0
    levels = {0 if t < THOUGHT else 1 for t in positions}
    return len(levels)


def test_drop_zero_off_keeps_the_zero_advantage_edges():
    _, rollout = run(options(prompts=1, drop_zero=False, max_edges=None))
    assert rollout.metrics["spo_tree/edges_kept_per_prompt"] == 20
    assert rollout.group_id.numel() == 16  # every leaf carries an edge


def test_a_tree_with_no_edge_to_train_gives_one_row_that_trains_nothing():
    _, rollout = run(options(prompts=1), wrong_rows={}, successes=lambda steps: 4)  # every leaf right: all 0
    assert rollout.group_id.numel() == 1 and not rollout.records["edge_mask"].any()
    credited, _ = get_method("spo_tree").credit(rollout.batch())
    assert not credited.loss_mask.any()


def test_a_tree_ends_where_its_segments_reach_the_budget():
    """Segments of 6 tokens under a 6-token budget: the first level's children are leaves, however many levels
    `branching` asks for."""
    policy, rollout = run(options(prompts=1, max_new_tokens=THOUGHT, branching=[4, 4]))
    assert len(policy.calls) == 1 and rollout.metrics["spo_tree/nodes_per_prompt"] == 4


def test_the_vllm_backend_is_refused():
    with pytest.raises(ValueError, match="rollout.backend = vllm does not record"):
        load_config(None, ["method=spo_tree", "rollout.max_new_tokens=96", "rollout.backend=vllm"])


# --- the official code, ported -----------------------------------------------------------------------------------
# github.com/AIFrameResearch/SPO, commit b9fc6a263dec54e28137fd488a9b9c0e0d026025:
# src/treetune/inference_strategies/hybrid_inference_strategy.py (_construct_tree: a node's reward is the mean of
# its children's) and src/treetune/episode_generators/tree_episode_generator.py (extract_edges_from_tree with
# adv_method "rloo" and only_adv_greater_than_zero). Ported to plain Python, their variable names kept, the
# generation calls and the unused prover advantage dropped.


def official_node_rewards(node):
    if "children" not in node:
        return node["reward"]
    child_rewards = [official_node_rewards(child) for child in node["children"]]
    node["reward"] = np.mean(child_rewards)
    node["reward_std"] = np.std(child_rewards)
    return node["reward"]


def official_extract_edges(tree, only_adv_greater_than_zero=True):
    edges = []

    def dfs(node, parent=None):
        if parent is not None:
            advantage = node["reward"] - parent["reward"]
            if not only_adv_greater_than_zero or advantage != 0:
                edges.append({"query_text": parent["full_text"], "response_text": node["text"],
                              "advantage": advantage})
        for child in node.get("children", []):
            dfs(child, node)

    dfs(tree)
    return edges


def random_tree(gen: random.Random, fan_out: list[int], empty: float = 0.1):
    """A random tree as the official code stores it (token tuples for texts) and as credo's `Node`s: segments of
    1-4 tokens, each child finishing early with probability 0.3 (with no token of its own: `empty`), binary leaf
    rewards; token probabilities random."""
    root = Node(None, [1], [], [])
    official = {"text": (), "full_text": ()}
    counter = iter(range(10, 10**6))

    def grow(node, record, level):
        record["children"] = []
        for _ in range(fan_out[level]):
            stops = gen.random() < empty
            segment = [] if stops else [next(counter) for _ in range(gen.randint(1, 4))]
            path = node.path + segment
            leaf = stops or level == len(fan_out) - 1 or gen.random() < 0.3
            reward = float(gen.random() < 0.5)
            row = Row(None, [1], Episode(path, [len(path)], "eos"), "", Verdict(reward, reward == 1.0), False,
                      prefix_len=len(node.path), tokens=len(segment))
            child = Node(None, [1], path, node.probs + [gen.random() for _ in segment], row)
            child_record = {"text": tuple(segment), "full_text": tuple(path), "reward": reward}
            node.children.append(child)
            record["children"].append(child_record)
            if not leaf:
                grow(child, child_record, level + 1)

    grow(root, official, 0)
    return root, official


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("drop_zero", [True, False])
def test_values_and_edges_match_the_official_code(seed, drop_zero):
    root, official = random_tree(random.Random(seed), [3, 3, 2])
    assign_values(root)
    official_node_rewards(official)
    assert root.value == pytest.approx(official["reward"], abs=1e-12)
    ours = {tuple(child.path): child.value - parent.value for parent, child in edges(root, drop_zero)}
    theirs = {e["query_text"] + e["response_text"]: e["advantage"]
              for e in official_extract_edges(official, drop_zero) if e["response_text"]}  # the code drops empty ones
    assert ours.keys() == theirs.keys()
    assert all(ours[k] == pytest.approx(theirs[k], abs=1e-12) for k in ours)


@pytest.mark.parametrize("seed", range(40))
def test_each_drawn_edge_is_trained_once_with_its_advantage_whitened_as_the_official_trainer(seed):
    """Every edge the code trains (its own sequence, `[advantage] * len(response)`, the probability mask,
    whitened over the masked tokens) appears once, token for token, among credo's carrier rows; except an edge
    below which every leaf kept no token of its own (no response holds the edge and ends below it), counted."""
    gen = random.Random(seed)
    roots = [random_tree(gen, [3, 2, 2])[0] for _ in range(3)]
    rollout = tree_rollout(roots, 0, 0, SpoTreeConfig(max_edges=None), random.Random(seed))
    probs = torch.zeros_like(rollout.completions.response_ids, dtype=torch.float64)
    leaf_probs = [c.path[-1].probs for root in roots for c in carriers(root, edges(root, True))[0]]
    for n, p in enumerate(leaf_probs):
        probs[n, : len(p)] = torch.tensor(p, dtype=torch.float64)
    batch = rollout.batch(old_logp=torch.where(rollout.completions.response_mask, probs.clamp(min=1e-9).log(), 0.0))
    raw, _ = get_method("spo_tree", estimator={"whiten": False, "prob_mask": False}).credit(batch)
    whitened, _ = get_method("spo_tree").credit(batch)
    # the official training tokens: each kept edge's segment with its advantage and its tokens' probabilities
    every = [(child, child.value - parent.value) for root in roots for parent, child in edges(root, True)]
    segments = [(child, a) for child, a in every if first_leaf(child) is not None]
    assert rollout.metrics["spo_tree/edges_uncarried"] == len(every) - len(segments)  # all leaves below add nothing
    official_adv = torch.tensor([a for child, a in segments for _ in range(len(child.path) - child.row.prefix_len)],
                                dtype=torch.float64)
    official_probs = torch.tensor([p for child, _ in segments for p in child.probs[child.row.prefix_len :]],
                                  dtype=torch.float64)
    masked = official_probs < 0.9
    mean = official_adv[masked].mean()
    var = (official_adv[masked] - mean).square().sum() / (masked.sum() - 1)
    official_whitened = (official_adv[masked] - mean) * torch.rsqrt(var + 1e-8)
    ours_raw = raw.advantages[raw.loss_mask]
    assert sorted(ours_raw.tolist()) == pytest.approx(sorted(official_adv.tolist()), abs=1e-6)  # float32 values
    assert sorted(whitened.advantages[whitened.loss_mask].tolist()) == pytest.approx(
        sorted(official_whitened.tolist()), abs=1e-5)


# --- identity and intent -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(20))
def test_a_tree_of_one_level_is_grpo_centred_reward(seed):
    gen = random.Random(seed)
    roots = [random_tree(gen, [5], empty=0.0)[0] for _ in range(3)]
    rollout = tree_rollout(roots, 0, 0, SpoTreeConfig(branching=[], max_edges=None, drop_zero=False),
                           random.Random(0))
    credited, _ = get_method("spo_tree", estimator={"whiten": False, "prob_mask": False}).credit(rollout.batch())
    rewards, groups = rollout.rewards.double(), rollout.group_id
    means = torch.stack([rewards[groups == g].mean() for g in groups])
    expected = (rewards - means).unsqueeze(1).expand_as(credited.advantages)
    mask = rollout.completions.response_mask
    assert torch.allclose(credited.advantages.double(), torch.where(mask, expected, 0.0), atol=1e-6)


@pytest.mark.parametrize("seed", range(60))
def test_credit_moves_each_edge_by_its_value_change_and_nothing_else(seed):
    """On random trees: a trained token's credit has the sign of its edge's value change (a segment after which
    success became less likely loses credit, one after which it became likelier gains), every drawn edge's tokens
    are trained in exactly one row, and no token outside a carried edge (or above the probability threshold) gets
    any credit."""
    gen = random.Random(seed)
    roots = [random_tree(gen, [3, 3, 2])[0] for _ in range(2)]
    rollout = tree_rollout(roots, 0, 0, SpoTreeConfig(max_edges=6), random.Random(seed))
    batch = rollout.batch(old_logp=torch.where(rollout.completions.response_mask, -1.0, 0.0))
    method = get_method("spo_tree", estimator={"whiten": False})
    _, credit = credit_of(method, batch)
    edge = rollout.records["edge_mask"]
    assert credit[~(edge & rollout.records["cutpoint_mask"])].eq(0).all()
    starts, segments = rollout.records["step_values"], rollout.records["segment_ids"]
    for r in range(batch.size):
        n = int(batch.response_mask[r].sum())
        for t in range(n):
            if not (edge[r, t] and rollout.records["cutpoint_mask"][r, t]):
                continue
            later = (segments[r, :n] > segments[r, t]).nonzero()
            after = float(starts[r, later[0, 0]]) if len(later) else float(rollout.rewards[r])
            change = after - float(starts[r, t])
            assert math.copysign(1, float(credit[r, t])) == math.copysign(1, change) or change == 0
    trained_edges = sum(len({int(s) for s in segments[r][edge[r]]}) for r in range(batch.size))
    drawn = sum(min(len(edges(root, True)), 6) for root in roots)
    assert trained_edges == drawn - rollout.metrics["spo_tree/edges_uncarried"]


# --- through the registry and the trainer ------------------------------------------------------------------------


def test_an_spo_tree_run_trains_through_the_registry(tmp_path):
    from credo.train import train

    method = get_method("spo_tree")
    assert set(method.sampler.records) == {"segment_ids", "step_values", "cutpoint_mask", "edge_mask"}
    config = load_config(None, [*TINY, "method=spo_tree", "train.steps=2",
                                "rollout.spo_tree={segment_tokens: 4, branching: [2]}"])
    summary = train(config, tmp_path / "run", show_progress=False)
    assert summary["method"] == "spo_tree" and summary["steps"] == 2 and summary["rollout_tokens"] > 0
