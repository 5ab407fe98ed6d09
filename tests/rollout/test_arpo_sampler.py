"""ARPO's sampler (`credo.rollout.samplers.entropy_branch`, arXiv 2507.19849): calculator episodes of a scripted policy
whose entropies the test sets, branching after the calculator's results; the rows per prompt, the branch points and
the state after them, the branch probability (and the public code's decision rule, restated), the top-ups, the tokens
counted, the lockstep waves, the draws under the seed, the refusals; ARPO without branching is GRPO with the code's
conventions; ARPO trained end to end."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch
from calculator_script import AFTER, C1, C2, WRONG, Chains, CountingScript, ids

from credo.config import ConfigError, load_config
from credo.credit.groups import GroupAdvantage
from credo.methods import get_method
from credo.rollout import chains as chains_module
from credo.rollout.groups import ProblemStream
from credo.rollout.samplers.entropy_branch import (
    EntropyBranchConfig,
    EntropyBranchSampler,
    branch_chance,
    branch_counts,
    grow_groups,
    turn_entropy,
)
from credo.rollout.samplers.groups import GroupSampler
from credo.testbed import chat_prompt


def rising(text):
    """Every turn after the first is more uncertain than the first (dH > 0 at every branch point)."""
    return 0.1 if text == C1 else 0.9


def falling(text):
    """Every turn after the first is surer than the first (dH < 0)."""
    return 0.9 if text == C1 else 0.1


def only_second(text):
    """The second turn (right or wrong) is less sure than the first, the later ones surer."""
    return 0.9 if text in (C2, WRONG) else 0.5 if text == C1 else 0.1


def only_last(text):
    """The answer turn is less sure than the first, the calls between surer: only the last point (before the answer)."""
    return 0.9 if text.startswith("\\boxed") else 0.5 if text == C1 else 0.1


FORCED = "rollout.entropy_branch={initial_rollouts: 2, entropy_weight: 1000}"
"""Two fresh episodes per prompt; beta so large that any entropy change decides the branch (P = 0 or 1)."""
TWO = "rollout.entropy_branch.initial_rollouts=2"
"""Two fresh episodes per prompt, the code's alpha and beta (the script's entropies constant: P = alpha = 0.5)."""


def options(*overrides, prompts=2, size=6):
    return load_config(None, ["method=arpo", "task.name=calculator", f"rollout.prompts_per_step={prompts}",
                              f"rollout.group_size={size}", "rollout.max_new_tokens=200", *overrides]).rollout


def grown(seed=0, *overrides, prompts=2, size=6, entropy=None):
    task, backend = Chains(), CountingScript(entropy)
    growth = grow_groups(backend, task, task.problems * prompts, options(*overrides, prompts=prompts, size=size),
                         random.Random(seed))
    return task, backend, growth


def sample(seed=0, *overrides, prompts=2, size=6, entropy=None):
    task, backend = Chains(), CountingScript(entropy)
    random.seed(seed)
    rollout = EntropyBranchSampler().sample(backend, task, ProblemStream(task, seed=0),
                                            options(*overrides, prompts=prompts, size=size))
    return task, backend, rollout


def shape(group):
    """Each row as (turns taken over, the index of the row it branched from or None)."""
    return [(chain.kept, None if source is None else group.rows.index(source))
            for chain, source in zip(group.rows, group.sources, strict=True)]


@pytest.mark.parametrize("size, overrides, first", [
    (6, [], 6), (16, [], 8), (5, ["rollout.entropy_branch={initial_rollouts: 2, beam_size: 3}"], 2),
    (4, ["rollout.entropy_branch.initial_rollouts=8"], 4), (6, ["rollout.entropy_branch.initial_rollouts=1"], 1),
    (6, ["rollout.entropy_branch={initial_rollouts: 3, beam_size: 1}"], 3),
])
def test_each_prompt_has_group_size_rows_in_the_order_they_were_made(size, overrides, first):
    """`min(initial_rollouts, n)` fresh episodes first (the code's default 8), then branches and top-ups to n."""
    for seed in range(3):
        _, _, rollout = sample(seed, *overrides, prompts=3, size=size)
        assert rollout.group_id.tolist() == [g for g in range(3) for _ in range(size)]
        _, _, growth = grown(seed, *overrides, prompts=3, size=size)
        assert [len(g.rows) for g in growth.groups] == [size] * 3
        for group in growth.groups:
            assert group.sources[:first] == [None] * first and all(c.kept == 0 for c in group.rows[:first])


def test_a_rising_entropy_forces_branches_depth_by_depth_until_the_group_is_full():
    _, _, growth = grown(0, FORCED, entropy=rising)
    delta = (0.9 - 0.1) / math.log(len(CountingScript().tokenizer.get_vocab()))
    assert growth.deltas and all(d == pytest.approx(delta) for d in growth.deltas)
    for group in growth.groups:  # depth 1: both fresh episodes branch; depth 2: the first two of the four fill it
        assert shape(group) == [(0, None), (0, None), (1, 0), (1, 1), (2, 0), (2, 1)]
    _, _, growth = grown(0, "rollout.entropy_branch={initial_rollouts: 2, entropy_weight: 1000, beam_size: 3}",
                         entropy=rising)
    for group in growth.groups:  # beam 3: two branches a point, the room filled at depth 1
        assert shape(group) == [(0, None), (0, None), (1, 0), (1, 0), (1, 1), (1, 1)]


def test_a_falling_entropy_forbids_branches_and_fresh_episodes_top_the_group_up():
    _, _, growth = grown(0, FORCED, entropy=falling)
    assert growth.deltas and all(d < 0 for d in growth.deltas)
    for group in growth.groups:
        assert shape(group) == [(0, None)] * 6
    _, _, growth = grown(0, FORCED, entropy=only_second)  # branches at depth 1 only, then two top-ups
    for group in growth.groups:
        assert shape(group) == [(0, None), (0, None), (1, 0), (1, 1), (0, None), (0, None)]
    _, _, growth = grown(0, FORCED, entropy=only_last)  # the point before the last turn branches too
    for group in growth.groups:
        assert shape(group) == [(0, None), (0, None), (3, 0), (3, 1), (0, None), (0, None)]
    # alpha alone: 1 always branches, 0 never (beta 0)
    always = grown(0, "rollout.entropy_branch={initial_rollouts: 2, branch_probability: 1, entropy_weight: 0}",
                   entropy=falling)[2]
    never = grown(0, "rollout.entropy_branch={initial_rollouts: 2, branch_probability: 0, entropy_weight: 0}",
                  entropy=rising)[2]
    assert [shape(g) for g in always.groups] == [[(0, None), (0, None), (1, 0), (1, 1), (2, 0), (2, 1)]] * 2
    assert [shape(g) for g in never.groups] == [[(0, None)] * 6] * 2


def test_the_branch_probability_is_alpha_plus_beta_times_the_entropy_change_clipped():
    config = EntropyBranchConfig(branch_probability=0.5, entropy_weight=0.2)
    for delta in (-3.0, -1.0, -0.3, 0.0, 0.25, 1.0, 2.5, 4.0):
        assert branch_chance(delta, config) == pytest.approx(min(1.0, max(0.0, 0.5 + 0.2 * delta)))
    assert branch_chance(-10.0, config) == 0.0 and branch_chance(10.0, config) == 1.0
    rng = random.Random(0)  # the draws: each a branch with that probability
    counts = branch_counts([branch_chance(0.5, config)] * 20_000, 20_000, 2, rng)
    assert sum(counts) / 20_000 == pytest.approx(0.6, abs=0.015)


def code_branches(deltas, remaining_slots, beam_size, branch_probability, entropy_weight, rand):
    """The public code's branching of one prompt at one generation step (`generate_sequences`, the loop over
    `active_idxs` of `active_by_sample`), restated: the sources' indices, one per branch made."""
    made = []
    if remaining_slots <= 0:
        return made
    branches_created = 0
    for source_idx, entropy_delta in enumerate(deltas):
        branches_per_idx = min(beam_size - 1, remaining_slots - branches_created)
        if branches_per_idx <= 0:
            break
        for _ in range(branches_per_idx):
            prob = rand() - entropy_weight * entropy_delta
            prob = max(0.0, min(1.0, prob))
            if prob > branch_probability:
                continue
            made.append(source_idx)
            branches_created += 1
        if branches_created >= remaining_slots:
            break
    return made


def test_the_public_code_s_decision_rule_restated_agrees_on_random_draws():
    setup = random.Random(1)
    agreed = branched = 0
    for seed in range(2000):
        alpha, beta = setup.random(), setup.choice([0.0, 0.2, 0.5, 2.0, setup.uniform(0, 5)])
        deltas = [setup.uniform(-1, 1) for _ in range(setup.randint(0, 8))]
        room, beam = setup.randint(0, 10), setup.randint(1, 4)
        code = code_branches(deltas, room, beam, alpha, beta, random.Random(seed).random)
        config = EntropyBranchConfig(branch_probability=alpha, entropy_weight=beta, beam_size=beam)
        counts = branch_counts([branch_chance(d, config) for d in deltas], room, beam, random.Random(seed))
        ours = [i for i, count in enumerate(counts) for _ in range(count)]
        agreed += ours == code
        branched += len(ours)
    assert agreed == 2000 and branched > 1000
    # the one departure: alpha = 1, where the code's clipped draw never exceeds alpha, so it always branches
    assert code_branches([-1.0], 1, 2, 1.0, 0.5, random.Random(0).random) == [0]
    assert branch_chance(-1.0, EntropyBranchConfig(branch_probability=1.0, entropy_weight=0.5)) == 0.5


class PositionScript(CountingScript):
    """The scripted policy whose j-th token of each turn has entropy j + 1."""

    def generate(self, prompts, **kwargs):
        out = super().generate(prompts, **kwargs)
        positions = torch.arange(1, out.response_ids.shape[1] + 1, dtype=torch.float32).expand_as(out.token_probs)
        out.entropies = positions * out.response_mask
        return out


def test_a_turn_s_entropy_is_the_mean_over_its_first_tokens_over_log_v():
    task, backend = Chains(), PositionScript()
    growth = grow_groups(backend, task, task.problems, options(prompts=1, size=2), random.Random(0))
    chain = growth.groups[0].rows[0]
    log_v = math.log(103)
    ep = chain.episodes
    call = len(ids(backend.tokenizer, C1))  # 17 tokens, then the observation
    assert [t for t in ep.turns[chain.row][:call + 1]] == [0] * call + [-1]
    assert turn_entropy(chain, 0, 3, log_v) == pytest.approx(2.0 / log_v)  # mean of 1, 2, 3
    assert turn_entropy(chain, 0, 20, log_v) == pytest.approx((call + 1) / 2 / log_v)  # the observation left out
    answer = chain.turns - 1  # "\boxed{v}" and the end token
    length = sum(t == answer for t in ep.turns[chain.row])
    assert turn_entropy(chain, answer, 20, log_v) == pytest.approx((length + 1) / 2 / log_v)


def test_each_branch_continues_its_source_right_after_an_observation_from_the_state_there():
    for seed in range(6):
        task, _, growth = grown(seed, "rollout.entropy_branch={initial_rollouts: 2, beam_size: 3}", size=8)
        steps = [(json.dumps(s, sort_keys=True), t) for states, turns in task.environment.seen
                 for s, t in zip(states, turns, strict=True)]
        branches = 0
        for group in growth.groups:
            for chain, source in zip(group.rows, group.sources, strict=True):
                ep, row = chain.episodes, chain.row
                if source is None:
                    assert chain.kept == 0 and ep.prefix_len[row] == 0
                    continue
                branches += 1
                src, srow, kept = source.episodes, source.row, chain.kept
                assert group.rows.index(source) < group.rows.index(chain)
                assert source.kept < kept < source.turns  # a boundary the source sampled itself, not its last turn
                cut = ep.prefix_len[row]
                assert cut == src.turn_starts[srow][kept] and ep.tokens[row][:cut] == src.tokens[srow][:cut]
                assert not ep.policy[row][cut - 1] and src.turns[srow][cut - 1] == -1  # the prefix ends with an obs
                assert ep.outcomes[row][:kept] == src.outcomes[srow][:kept]
                assert ep.entropies[row][:cut] == src.entropies[srow][:cut]
                after = json.dumps(src.outcomes[srow][kept - 1].state, sort_keys=True)
                assert (after, ep.texts[row][kept]) in steps  # its next turn was read from the source's state there
                assert json.loads(after)["taken"] == kept
        assert branches > 0


def test_each_depth_s_branches_are_one_lockstep_batch_over_every_prompt(monkeypatch):
    calls = []
    sample_episodes = chains_module.sample_episodes

    def recording(backend, env, problems, prompts, **kwargs):
        calls.append(sorted({len(s.outcomes) if s is not None else 0 for s in kwargs["starts"]}) + [len(problems)])
        return sample_episodes(backend, env, problems, prompts, **kwargs)

    monkeypatch.setattr(chains_module, "sample_episodes", recording)
    grown(0, FORCED, prompts=3, entropy=rising)
    assert calls == [[0, 6], [1, 6], [2, 6]]  # 3 prompts x 2 fresh, then each depth's 2 branches a prompt
    calls.clear()
    grown(0, FORCED, prompts=3, entropy=only_second)
    assert calls == [[0, 6], [1, 6], [0, 6]]  # the top-ups ride in one batch once no branch point is left


def test_tokens_are_counted_once_where_they_were_sampled():
    for seed in range(4):
        _, backend, rollout = sample(seed, TWO)
        assert rollout.generated_tokens == backend.generated
    _, backend, growth = grown(2, FORCED, entropy=rising)
    chains = [c for g in growth.groups for c in g.rows]
    own = sum(sum(c.episodes.policy[c.row][c.episodes.prefix_len[c.row]:]) for c in chains)
    kept = sum(sum(c.episodes.policy[c.row][:c.episodes.prefix_len[c.row]]) for c in chains)
    assert growth.tokens == own == backend.generated and kept > 0


def test_rows_are_whole_episodes_trained_on_every_policy_token_observations_never():
    task, backend, rollout = sample(1, FORCED, entropy=rising)
    tokenizer, c = backend.tokenizer, rollout.completions
    prompt = ids(tokenizer, chat_prompt(tokenizer, task.problems[0].prompt))
    right = f"{C1}<obs>17</obs>{C2}<obs>8</obs><call>8+3</call><obs>11</obs>\\boxed{{11}}<|end|>"
    wrong = f"{C1}<obs>17</obs>{WRONG}<obs>9</obs>{AFTER}<obs>12</obs>\\boxed{{12}}<|end|>"
    for row in range(len(rollout.problems)):
        text = tokenizer.decode(c.response_ids[row][c.response_mask[row]].tolist())
        assert text in (right, wrong) and rollout.rewards[row] == float(text == right)
        assert c.prompt_ids[row][c.prompt_mask[row]].tolist() == prompt
    credited, _ = get_method("arpo").credit(rollout.batch(**rollout.checks))
    observations = c.response_mask & ~rollout.checks["loss_mask"]
    assert observations.any() and not credited.advantages[observations].any()
    assert torch.equal(credited.loss_mask, rollout.checks["loss_mask"])  # shared prefixes trained in every row
    metrics = rollout.metrics
    assert metrics["branch/branches_per_prompt"] == 4 and metrics["branch/top_ups_per_prompt"] == 0
    assert metrics["branch/kept_turns_mean"] == 1.5  # two branches a prompt at depth 1, two at depth 2
    assert metrics["branch/entropy_change_mean"] > 0 and metrics["branch/points_per_prompt"] > 0


def test_the_draws_follow_the_seed():
    def fingerprint(rollout):
        return rollout.completions.response_ids.tolist(), rollout.rewards.tolist()

    runs = {seed: [fingerprint(sample(seed, TWO)[2]), fingerprint(sample(seed, TWO)[2])] for seed in range(5)}
    assert all(a == b for a, b in runs.values())
    shapes = {seed: str([shape(g) for g in grown(seed, TWO)[2].groups]) for seed in range(5)}
    assert len(set(shapes.values())) > 1


@pytest.mark.parametrize("overrides, refusal", [
    (["rollout.entropy_branch.beam_size=0"], r"rollout.entropy_branch.beam_size: Input should be greater than or"),
    (["rollout.entropy_branch.initial_rollouts=0"], r"rollout.entropy_branch.initial_rollouts: Input should be"),
    (["rollout.entropy_branch.branch_probability=1.5"], r"rollout.entropy_branch.branch_probability: Input should"),
    (["rollout.entropy_branch.entropy_weight=-0.2"], r"rollout.entropy_branch.entropy_weight: Input should be"),
    (["rollout.entropy_branch.entropy_tokens=0"], r"rollout.entropy_branch.entropy_tokens: Input should be"),
    (["rollout.dynamic_sampling=true"], r"rollout.dynamic_sampling applies to the group sampler's groups; the "
                                        r"entropy_branch sampler"),
])
def test_a_config_that_cannot_branch_is_refused_when_it_loads(overrides, refusal):
    with pytest.raises(ConfigError, match=refusal):
        load_config("configs/testbed/agent/arpo.yaml", overrides)


def test_a_single_response_task_and_a_backend_without_entropies_are_refused():
    with pytest.raises(ConfigError, match=r"the entropy_branch sampler draws multi-turn episodes only.*task arith"):
        load_config(None, ["method=arpo"])
    from credo.tasks.arith import ArithTask

    task = ArithTask()
    with pytest.raises(ValueError, match="the entropy_branch sampler draws multi-turn episodes only"):
        EntropyBranchSampler().sample(CountingScript(), task, ProblemStream(task, seed=0), options())

    class NoEntropies(CountingScript):
        def generate(self, prompts, **kwargs):
            out = super().generate(prompts, **kwargs)
            out.entropies = None
            return out

    task = Chains()
    with pytest.raises(ValueError, match="ARPO's branching reads the sampling entropies .* NoEntropies generation"):
        EntropyBranchSampler().sample(NoEntropies(), task, ProblemStream(task, seed=0), options())


def test_the_agent_testbed_s_arpo_config():
    config = load_config("configs/testbed/agent/arpo.yaml")
    assert config.method == "arpo" and config.task["name"] == "calculator"
    branch = config.rollout.entropy_branch
    assert (branch.initial_rollouts, branch.beam_size, branch.branch_probability, branch.entropy_weight,
            branch.entropy_tokens) == (8, 2, 0.5, 0.2, 20)  # the code's scripts and constant
    assert config.rollout.group_size == 16 and config.rollout.max_new_tokens == 128


def test_arpo_is_grpo_with_the_code_s_conventions_when_nothing_branches():
    method = get_method("arpo")
    assert method.estimator == GroupAdvantage(**GroupAdvantage.conventions["verl"])  # sample std, eps 1e-6
    assert (method.loss.clip_low, method.loss.clip_high, method.loss.agg) == (0.2, 0.2, "token_mean")
    never = "rollout.entropy_branch={initial_rollouts: 6, branch_probability: 0, entropy_weight: 0}"
    _, _, rollout = sample(0, never, prompts=3, entropy=rising)
    task, backend = Chains(), CountingScript(rising)
    groups = GroupSampler().sample(backend, task, ProblemStream(task, seed=0), options(prompts=3))
    for a, b in ((rollout.completions.response_ids, groups.completions.response_ids),
                 (rollout.rewards, groups.rewards), (rollout.group_id, groups.group_id)):
        assert torch.equal(a, b)  # the same i.i.d. episodes as GRPO's group sampler draws
    assert rollout.metrics["branch/branches_per_prompt"] == 0
    batch = rollout.batch(old_logp=torch.randn(rollout.completions.response_ids.shape) * 0.1, **rollout.checks)
    grpo = get_method("grpo", estimator={"std_ddof": 1}, loss={"agg": "token_mean"})
    ours, _ = method.credit(batch)
    theirs, _ = grpo.credit(batch)
    assert rollout.rewards.std() > 0 and torch.equal(ours.advantages, theirs.advantages)
    logp = batch.old_logp + torch.randn(batch.old_logp.shape) * 0.3
    assert torch.equal(method.policy_loss(logp, ours).loss, grpo.policy_loss(logp, theirs).loss)


def test_arpo_trains_end_to_end(tmp_path):
    """ARPO on the calculator with the tiny model: 2 prompts of 4 rows, 2 fresh episodes each branching after its
    turns' results or topped up; the rows are 4 per prompt, the tokens within the budget and the loss finite."""
    from tiny import TINY

    from credo.train import train

    config = load_config(None, TINY + ["method=arpo", "task.name=calculator", "task.min_steps=2",
                                       "task.max_steps=3", "task.eval_steps=[2]", "task.max_turns=3",
                                       "rollout.max_new_tokens=40", "rollout.prompts_per_step=2",
                                       "rollout.group_size=4", "rollout.entropy_branch.initial_rollouts=2"])
    summary = train(config, tmp_path / "run", show_progress=False)
    assert summary["steps"] == 3 and summary["rollout_tokens"] > 0
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in steps if "eval" not in r]
    assert all(torch.isfinite(torch.tensor(r["loss/policy"])) for r in steps)
    assert all(0 < r["rollout/tokens"] <= 2 * 4 * 40 for r in steps)
    assert all(r["branch/branches_per_prompt"] + r["branch/top_ups_per_prompt"] == 2 for r in steps)
