"""The tree sampler of Tree-GRPO (`credo.rollout.samplers.tree`, arXiv 2509.21240): trees of calculator episodes that
branch at turn boundaries, with a scripted policy; the rows, the prefixes continued and the environment's state
after them, the tokens counted, the tree ids, the draws under the seed, the refusals; Tree-GRPO trained end to end."""

from __future__ import annotations

import json
import random

import pytest
import torch
from calculator_script import C1, Chains, CountingScript, ids

from credo.config import ConfigError, load_config
from credo.methods import get_method
from credo.rollout import chains as chains_module
from credo.rollout.groups import ProblemStream
from credo.rollout.samplers.tree import TreeSampler, grow_trees, tree_rollout
from credo.testbed import chat_prompt


def options(*overrides, prompts=2):
    return load_config(None, ["method=tree_grpo", "task.name=calculator", f"rollout.prompts_per_step={prompts}",
                              "rollout.max_new_tokens=200", *overrides]).rollout


def sample(seed=0, *overrides, prompts=2):
    task, backend = Chains(), CountingScript()
    random.seed(seed)
    rollout = TreeSampler().sample(backend, task, ProblemStream(task, seed=0), options(*overrides, prompts=prompts))
    return task, backend, rollout


def grown(seed=0, *overrides, prompts=2):
    task, backend = Chains(), CountingScript()
    trees, tokens = grow_trees(backend, task, task.problems * prompts, options(*overrides, prompts=prompts),
                               random.Random(seed))
    return task, backend, trees, tokens


def test_rows_are_k_leaves_of_m_trees_per_prompt_with_tree_ids_numbered_over_the_batch():
    _, _, rollout = sample()
    assert rollout.group_id.tolist() == [0] * 6 + [1] * 6  # M K = 2 x 3 leaves per prompt, a prompt's consecutive
    assert rollout.records["tree_id"].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert rollout.records["tree_id"].dtype == torch.long
    _, _, rollout = sample(0, "rollout.tree={trees: 3, expansions: 1, rounds: 2, leaves: 2}", prompts=3)
    assert rollout.group_id.tolist() == [g for g in range(3) for _ in range(6)]
    assert rollout.records["tree_id"].tolist() == [t for t in range(9) for _ in range(2)]
    batch = rollout.batch(**rollout.checks)  # as the trainer builds it: the recorded field in the batch
    assert torch.equal(batch.tree_id, rollout.records["tree_id"])


def test_rounds_zero_gives_each_tree_one_fresh_episode():
    _, backend, rollout = sample(0, "rollout.tree={rounds: 0, leaves: 1}")
    assert rollout.records["tree_id"].tolist() == [0, 1, 2, 3] and rollout.group_id.tolist() == [0, 0, 1, 1]
    assert backend.generated == rollout.generated_tokens == int(rollout.checks["loss_mask"].sum())


def test_each_continuation_starts_with_a_real_prefix_of_an_earlier_chain_at_a_turn_boundary():
    for seed in range(8):
        _, _, trees, _ = grown(seed, "rollout.tree={rounds: 2}")
        for tree in trees:
            assert len(tree.chains) == 1 + 2 * 2 and tree.chains[0].kept == 0
            for index, chain in enumerate(tree.chains):
                ep, row = chain.episodes, chain.row
                assert ep.prefix_len[row] == (ep.turn_starts[row][chain.kept] if chain.kept else 0)
                if not chain.kept:
                    continue
                cut = ep.prefix_len[row]
                # some earlier chain of the tree holds these tokens and these turns, at an inner node of its own
                parents = [c for c in tree.chains[:index] if c.kept < chain.kept < c.turns
                           and c.episodes.tokens[c.row][:cut] == ep.tokens[row][:cut]
                           and c.episodes.turn_starts[c.row][chain.kept] == cut]
                assert parents, (seed, index)
                parent = parents[0]
                assert not ep.policy[row][cut - 1]  # the prefix ends with an observation
                assert ep.outcomes[row][:chain.kept] == parent.episodes.outcomes[parent.row][:chain.kept]
                # the turn after the prefix is taken from the calculator's state after it: its parent's state there
                assert ep.anchors[row][chain.kept] == parent.episodes.anchors[parent.row][chain.kept]


def test_the_environment_continues_from_the_state_after_the_prefix():
    task, backend, trees, _ = grown(3)
    steps = task.environment.seen
    chains = [c for t in trees for c in t.chains]
    fresh = [c for c in chains if c.kept == 0]
    continued = [c for c in chains if c.kept]
    assert continued
    # the expansion round's first step: one lockstep batch of every continuation of both prompts' trees
    first = next(i for i, (states, _) in enumerate(steps) if len(states) == len(chains) - len(trees))
    states, turns = steps[first]
    expansions = [c for t in trees for c in t.chains[1:]]
    for chain, state, turn in zip(expansions, states, turns, strict=True):
        if chain.kept == 0:
            assert state["taken"] == 0 and turn == C1  # a fresh episode from the root
        else:
            assert state == dict(chain.episodes.outcomes[chain.row][chain.kept - 1].state)
            assert state["taken"] == chain.kept and turn == chain.episodes.texts[chain.row][chain.kept]
    assert len(fresh) >= len(trees)


def test_the_nodes_are_drawn_uniformly_with_replacement_from_the_root_and_inner_nodes():
    class Spy(random.Random):
        def __init__(self):
            super().__init__(0)
            self.populations, self.leaves = [], []

        def choices(self, population, k):
            self.populations.append((list(population), k))
            return [population[-1], population[-1]]  # the same node twice: the last turn before a leaf

        def sample(self, population, k):
            self.leaves.append((list(population), k))
            return super().sample(population, k)

    task, backend = Chains(), CountingScript()
    spy = Spy()
    trees, _ = grow_trees(backend, task, task.problems, options(prompts=1), spy)
    # per tree, its root and its first chain's turns but the last (four-turn episodes: 3 inner nodes)
    assert [(len(p), k) for p, k in spy.populations] == [(4, 2), (4, 2)]
    for (population, _), tree in zip(spy.populations, trees, strict=True):
        first = tree.chains[0]
        assert population == [None, (first, 1), (first, 2), (first, 3)]
        assert [c.kept for c in tree.chains] == [0, 3, 3]  # both continue after three turns
    tree_rollout(trees, options(prompts=1).tree, 0, backend.tokenizer.pad_token_id, spy)
    assert [(p, k) for p, k in spy.leaves] == [([0, 1, 2], 3), ([0, 1, 2], 3)]
    # a continued chain's own inner nodes start after its prefix
    later = trees[0].chains[1]
    assert later.inner_nodes() == [] and trees[0].expandable() == [None, *trees[0].chains[0].inner_nodes()]


def test_all_continuations_of_a_round_are_sampled_in_one_lockstep_batch(monkeypatch):
    calls = []
    sample_episodes = chains_module.sample_episodes

    def recording(backend, env, problems, prompts, **kwargs):
        calls.append((len(problems), kwargs["repeat"], sum(s is not None for s in kwargs["starts"])))
        return sample_episodes(backend, env, problems, prompts, **kwargs)

    monkeypatch.setattr(chains_module, "sample_episodes", recording)
    _, _, trees, _ = grown(1, "rollout.tree={rounds: 2, expansions: 3, leaves: 4}", prompts=3)
    continued = [sum(c.kept > 0 for t in trees for c in t.chains[1 + 3 * r: 4 + 3 * r]) for r in range(2)]
    assert calls == [(6, 1, 0), (18, 1, continued[0]), (18, 1, continued[1])]  # 3 prompts x 2 trees (x 3 nodes)


def test_tokens_are_counted_once_where_they_were_sampled():
    for seed in range(4):
        _, backend, rollout = sample(seed)
        # every token the policy generated, in every chain (the leaves left out too), once; never a prefix again
        assert rollout.generated_tokens == backend.generated
    _, backend, trees, tokens = grown(5)
    chains = [c for t in trees for c in t.chains]
    own = sum(sum(c.episodes.policy[c.row][c.episodes.prefix_len[c.row]:]) for c in chains)
    assert tokens == own == backend.generated
    kept = sum(sum(c.episodes.policy[c.row][:c.episodes.prefix_len[c.row]]) for c in chains)
    assert kept > 0  # the continued chains' prefixes hold policy tokens not counted again


def test_rows_are_the_leaves_whole_episodes_and_train_on_every_policy_token_observations_never():
    task, backend, rollout = sample(2)
    tokenizer = backend.tokenizer
    c = rollout.completions
    right = "<call>12+5</call><obs>17</obs><call>17-9</call><obs>8</obs><call>8+3</call><obs>11</obs>\\boxed{11}"
    wrong = "<call>12+5</call><obs>17</obs><call>17-8</call><obs>9</obs><call>9+3</call><obs>12</obs>\\boxed{12}"
    prompt = ids(tokenizer, chat_prompt(tokenizer, task.problems[0].prompt))
    for row in range(len(rollout.problems)):
        text = tokenizer.decode(c.response_ids[row][c.response_mask[row]].tolist())
        assert text in (right + "<|end|>", wrong + "<|end|>")
        assert rollout.rewards[row] == (1.0 if text.startswith(right) else 0.0)
        assert c.prompt_ids[row][c.prompt_mask[row]].tolist() == prompt
    policy, response = rollout.checks["loss_mask"], c.response_mask
    batch = rollout.batch(**rollout.checks)
    credited, _ = get_method("tree_grpo").credit(batch)
    observations = response & ~policy
    assert observations.any() and not credited.advantages[observations].any()
    assert torch.equal(credited.loss_mask, policy)  # the shared prefix's policy tokens too, as the code trains them


def test_the_draws_follow_the_seed():
    def fingerprint(rollout):
        c = rollout.completions
        return c.response_ids.tolist(), rollout.records["tree_id"].tolist(), rollout.rewards.tolist()

    runs = {seed: [fingerprint(sample(seed)[2]), fingerprint(sample(seed)[2])] for seed in range(6)}
    assert all(a == b for a, b in runs.values())  # the same seed, the same trees and leaves
    kept = {seed: [c.kept for t in grown(seed)[2] for c in t.chains] for seed in range(6)}
    assert len({tuple(k) for k in kept.values()}) > 1  # other seeds, other nodes


@pytest.mark.parametrize("overrides, refusal", [
    (["rollout.tree.leaves=4"], r"rollout.tree.leaves = 4 exceeds the 3 leaves each tree grows \(1 \+ rounds x "
                                r"expansions = 1 \+ 1 x 2\)"),
    (["rollout.tree={rounds: 0, leaves: 2}"], r"rollout.tree.leaves = 2 exceeds the 1 leaves each tree grows"),
    (["rollout.dynamic_sampling=true"], r"rollout.dynamic_sampling applies to the group sampler's groups"),
])
def test_a_tree_that_cannot_be_grown_is_refused_when_the_config_loads(overrides, refusal):
    with pytest.raises(ConfigError, match=refusal + r".*task calculator"):
        load_config("configs/testbed/agent/tree_grpo.yaml", overrides)


def test_a_single_response_task_is_refused_the_tree_is_over_turns():
    with pytest.raises(ConfigError, match=r"the tree sampler draws multi-turn episodes only.*task arith"):
        load_config(None, ["method=tree_grpo"])
    from credo.tasks.arith import ArithTask

    task = ArithTask()
    with pytest.raises(ValueError, match="the tree sampler draws multi-turn episodes only"):
        TreeSampler().sample(CountingScript(), task, ProblemStream(task, seed=0), options())


def test_the_agent_testbed_s_tree_grpo_config():
    config = load_config("configs/testbed/agent/tree_grpo.yaml")
    assert config.method == "tree_grpo" and config.task["name"] == "calculator"
    tree = config.rollout.tree
    assert (tree.trees, tree.expansions, tree.rounds, tree.leaves) == (2, 2, 1, 3)  # the code's M, N, L, K
    assert config.rollout.max_new_tokens == 128


def test_tree_grpo_trains_end_to_end(tmp_path):
    """Tree-GRPO on the calculator with the tiny model: every episode fails (no valid call), its turns answered "?";
    the trees grow, the rows are 6 leaves per prompt and the loss is finite."""
    from tiny import TINY

    from credo.train import train

    config = load_config(None, TINY + ["method=tree_grpo", "task.name=calculator", "task.min_steps=2",
                                       "task.max_steps=3", "task.eval_steps=[2]", "task.max_turns=3",
                                       "rollout.max_new_tokens=40", "rollout.prompts_per_step=2"])
    summary = train(config, tmp_path / "run", show_progress=False)
    assert summary["steps"] == 3 and summary["rollout_tokens"] > 0
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in steps if "eval" not in r]
    assert all(torch.isfinite(torch.tensor(r["loss/policy"])) for r in steps)
    # per step: 2 prompts, each 2 fresh episodes and 4 continuations of at most 40 policy tokens
    assert all(0 < r["rollout/tokens"] <= 2 * 6 * 40 for r in steps)
    assert all(r["credit/tree_size"] == 3.0 for r in steps)
