"""RRPO/SRPO on multi-turn episodes: resets at turn boundaries (`credo.rollout.samplers.resets`, `TurnRow`), with
a scripted policy on the calculator environment, and RRPO trained end to end on the calculator task."""

from __future__ import annotations

import json

import pytest
import torch
from calculator_script import (
    C1,
    C2,
    C3,
    CHAIN,
    CHECK,
    PREFIX,
    RIGHT,
    SEED,
    TREE,
    UNDO,
    WRONG,
    Chains,
    TreeScript,
    ids,
)

from credo.config import load_config
from credo.methods import get_method
from credo.rollout.episodes import sample_episodes
from credo.rollout.groups import ProblemStream
from credo.rollout.samplers import resets as resets_module
from credo.rollout.samplers.resets import sample_resets
from credo.testbed import END, chat_prompt


def options(split="1x4"):
    return load_config(None, ["rollout.prompts_per_step=1", "rollout.max_new_tokens=200", f"rollout.resets={{split: "
                              f"'{split}'}}", "method=rrpo"]).rollout


def resets(localiser="oracle", tree=TREE):
    task, backend = Chains(), TreeScript(tree)
    rollout = sample_resets(backend, task, ProblemStream(task, seed=0), options(), localiser)
    return task, backend, rollout


def turn_tokens(tokenizer, turns):
    """The policy's tokens of these turns, as the backend writes them (an answer with the end token)."""
    return sum(len(ids(tokenizer, t + ("" if t.endswith("</call>") else END))) for t in turns)


def test_a_turn_reset_continues_from_exactly_the_prefix_s_tokens_and_environment_state():
    task, backend, rollout = resets()
    tokenizer = backend.tokenizer
    prefix = ids(tokenizer, PREFIX)
    # fresh draws: five episodes in lockstep (the seed takes five turns); then the four continuations, whose
    # every generation call extends the prompt and exactly the seed's first two turns and their observations
    prompt = ids(tokenizer, chat_prompt(tokenizer, CHAIN.prompt))
    assert [len(call) for call in backend.calls] == [5, 5, 5, 5, 1, 4, 4, 2]
    assert backend.calls[5] == [prompt + prefix] * 4
    assert all(p[: len(prompt) + len(prefix)] == prompt + prefix for call in backend.calls[5:] for p in call)
    assert backend.asked[()] == 5 and backend.asked[(C1,)] == 5  # the prefix's turns are never generated again
    # the calculator continues from its state after the prefix's check: the value of its call, the call standing
    states, turns = task.environment.seen[5]
    assert turns == [C2, UNDO, C2, UNDO]
    assert all(s["value"] == 17 and s["taken"] == 1 and s["history"] == [[12, True]] for s in states)
    # so its observations come from that state: the undo takes back the prefix's call (a fresh calculator: "?")
    suffix = rollout.completions.response_ids[4:]
    texts = [tokenizer.decode(row[mask].tolist()) for row, mask in zip(suffix, rollout.completions.response_mask[4:])]
    assert texts[0] == PREFIX + "<call>17-9</call><obs>8</obs><call>8+3</call><obs>11</obs>\\boxed{11}" + END
    assert texts[1] == PREFIX + "<call>undo</call><obs>12</obs>\\boxed{12}" + END
    assert rollout.rewards.tolist() == [1.0] * 4 + [1.0, 0.0, 1.0, 0.0]
    # the continued turns are judged from the kept state: 17-9 is the chain's second step, right
    thought, wrong, judged = (rollout.checks[k][4] for k in ("thought_ids", "thought_wrong", "thought_judged"))
    assert judged[thought == 2].any() and not wrong[thought == 2].any()
    # the prefix's tokens, fields and behaviour statistics are the seed's own, untouched
    policy = rollout.checks["loss_mask"][4:, : len(prefix)]
    assert torch.equal(rollout.completions.token_probs[4:, : len(prefix)], torch.where(policy, 0.5, 0.0))


def test_prefix_len_lands_on_the_turn_boundary_and_segments_are_turns():
    _, backend, rollout = resets()
    p = len(ids(backend.tokenizer, PREFIX))
    assert rollout.records["prefix_len"].tolist() == [0] * 4 + [p] * 4
    ids_, mask = rollout.checks["thought_ids"], rollout.checks["loss_mask"]
    for row in range(4, 8):
        assert ids_[row, p - 1] == 1 and ids_[row, p] == 2  # the prefix ends with turn 1's observation
        assert not mask[row, p - 1] and mask[row, p]  # an observation token, then the policy's next turn
    # the reset sampler's segments are the turns, each with its observation: the batch's thought ids
    response = rollout.completions.response_mask
    assert torch.equal(rollout.records["segment_ids"][response], ids_[response])
    assert (rollout.records["segment_ids"][~response] == -1).all()


def test_the_oracle_localiser_picks_the_first_wrong_turn_never_a_check():
    # the seed's turns: a right call, a check (decides nothing), the wrong call, a call and an answer true to
    # their history; the oracle names the wrong call (turn 3, 1-based), never the check before it
    _, _, rollout = resets("oracle")
    assert rollout.metrics["resets/position_mean"] == 2.0  # two turns kept
    assert rollout.metrics["resets/localiser_exact"] == 1.0
    # the check is not judged, so no turn before the reset is wrong
    batch_wrong = rollout.checks["thought_wrong"][4:]
    p = int(rollout.records["prefix_len"][4])
    assert not batch_wrong[:, :p].any()


def test_suffix_rows_train_only_on_the_policy_s_tokens_after_their_prefix():
    _, _, rollout = resets()
    batch = rollout.batch(**rollout.checks)  # as the trainer builds it (train.behaviour_batch)
    credited, _ = get_method("rrpo").credit(batch)
    positions = torch.arange(batch.response_ids.shape[1]).unsqueeze(0)
    policy = rollout.checks["loss_mask"]
    after = positions >= rollout.records["prefix_len"].unsqueeze(1)
    assert torch.equal(credited.loss_mask, policy & after)
    observations = batch.response_mask & ~policy
    assert observations[4:].any() and not credited.loss_mask[observations].any()
    assert credited.loss_mask[:4].equal(policy[:4])  # base rows: every policy token


def test_in_a_group_of_continuations_only_the_turns_after_the_reset_carry_credit():
    _, _, rollout = resets()
    batch = rollout.batch(**rollout.checks)
    credited, _ = get_method("rrpo").credit(batch)
    credit = credited.advantages * credited.loss_mask
    p = int(rollout.records["prefix_len"][4])
    assert (credit[4:, :p] == 0).all()  # the kept turns (the seed's, shared by the group) get none
    assert (credit[[4, 6], p:][credited.loss_mask[[4, 6], p:]] > 0).all()  # the continuations that solve the chain
    assert (credit[[5, 7], p:][credited.loss_mask[[5, 7], p:]] < 0).all()  # those that undo a right call
    assert (credited.thought_ids[credit != 0] >= 2).all()  # only the turns from the reset point on
    assert (credit[:4] == 0).all()  # the base group all solve the chain: no signal


def test_generated_tokens_count_the_policy_s_sampled_turns_not_observations_nor_prefixes():
    _, backend, rollout = resets()
    tok = backend.tokenizer
    fresh = turn_tokens(tok, SEED) + 4 * turn_tokens(tok, RIGHT)
    continued = 2 * turn_tokens(tok, [C2, C3, "\\boxed{11}"]) + 2 * turn_tokens(tok, [UNDO, "\\boxed{12}"])
    assert rollout.generated_tokens == fresh + continued
    m = rollout.metrics
    assert m["resets/tokens_base"] == 4 * turn_tokens(tok, RIGHT) and m["resets/tokens_seed"] == turn_tokens(tok, SEED)
    assert m["resets/tokens_suffix"] == continued and m["resets/tokens_localisation"] == 0
    assert rollout.generated_tokens < int(rollout.checks["loss_mask"].sum()) + turn_tokens(tok, SEED)


def test_a_reset_at_turn_zero_is_a_fresh_episode(monkeypatch):
    # the episodes: continuing a prefix of no turn samples exactly what a fresh episode does
    task = Chains()
    problems = task.problems
    backend = TreeScript()
    prompts = [ids(backend.tokenizer, chat_prompt(backend.tokenizer, CHAIN.prompt))]
    fresh = sample_episodes(backend, task.environment, problems, prompts, repeat=2, budget_tokens=200)
    start = fresh.prefix(0, 0)
    assert start.state is None and start.tokens == []
    again = sample_episodes(TreeScript(), task.environment, problems, prompts, repeat=2, budget_tokens=200,
                            starts=[start])
    assert again == fresh and again.prefix_len == [0, 0]
    # the sampler: a random localiser that draws the first turn gives continuations that are fresh episodes,
    # field for field the base group's (the scripted policy's later draws solve the chain)
    monkeypatch.setattr(resets_module.random, "randint", lambda a, b: a)
    _, _, rollout = resets("random")
    assert rollout.records["prefix_len"].tolist() == [0] * 8
    for name, value in {**rollout.checks, **rollout.records}.items():
        assert torch.equal(value[4:], value[:4]), name
    c = rollout.completions
    assert torch.equal(c.response_ids[4:], c.response_ids[:4]) and torch.equal(c.token_probs[4:], c.token_probs[:4])


def test_the_random_localiser_resets_to_a_uniformly_drawn_turn(monkeypatch):
    drawn = []

    def randint(a, b):
        drawn.append((a, b))
        return 2  # turn 2 of 5: keep the first call

    monkeypatch.setattr(resets_module.random, "randint", randint)
    tree = {**TREE, (C1,): [CHECK, C2, C2, C2, C2, CHECK, C2]}  # continuations from the call: check, or go on
    tree[(C1, CHECK)] = [WRONG, C2]
    _, backend, rollout = resets("random", tree)
    assert drawn == [(1, 5)]  # the seed's five turns
    p = len(ids(backend.tokenizer, "<call>12+5</call><obs>17</obs>"))
    assert rollout.records["prefix_len"].tolist() == [0] * 4 + [p] * 4


@pytest.mark.parametrize("localiser", ["self", "sampled"])
def test_localisers_that_cannot_read_turns_refuse(localiser):
    with pytest.raises(ValueError, match=f"localiser = '{localiser}' cannot localise a wrong turn"):
        resets(localiser)


@pytest.mark.parametrize("overrides, refusal", [
    (["method=srpo"], "localiser = 'self' cannot localise a wrong turn"),
    (["rollout.resets.localiser=sampled"], "localiser = 'sampled' cannot localise a wrong turn"),
    (["method=vine"], "the vine sampler draws single responses, not multi-turn episodes"),
    (["method=ibpo"], "the revisions sampler draws single responses, not multi-turn episodes"),
])
def test_a_multi_turn_task_refuses_what_cannot_draw_its_episodes_when_the_config_loads(overrides, refusal):
    """Before any model loads: samplers that draw single responses, and localisers that cannot read turns, are
    refused on a multi-turn task (the calculator), naming why and the task."""
    from credo.config import ConfigError

    with pytest.raises(ConfigError, match=refusal + r".*task calculator"):
        load_config("configs/testbed/agent/rrpo.yaml", overrides)


@pytest.mark.parametrize("name, localiser", [("rrpo", None), ("srpo_oracle", "oracle")])
def test_the_agent_testbed_s_reset_configs(name, localiser):
    config = load_config(f"configs/testbed/agent/{name}.yaml")
    assert config.task["name"] == "calculator" and config.rollout.max_new_tokens == 128
    assert config.rollout.resets.localiser == localiser and config.rollout.resets.split == "1x4"
    assert config.method == ("rrpo" if name == "rrpo" else "srpo")


@pytest.mark.parametrize("method", ["rrpo", "srpo_oracle"])
def test_resets_of_episodes_train_end_to_end(tmp_path, method):
    """RRPO (random turns) and SRPO with the oracle localiser on the calculator: the tiny model writes no valid call,
    so every episode fails, each turn is answered "?" and judged wrong, and the seeds reset to their turns."""
    from tiny import TINY

    from credo.train import train

    extra = ["method=rrpo"] if method == "rrpo" else ["method=srpo", "rollout.resets.localiser=oracle"]
    config = load_config(None, TINY + extra + ["task.name=calculator", "task.min_steps=2", "task.max_steps=3",
                                               "task.eval_steps=[2]", "task.max_turns=3", "rollout.max_new_tokens=40",
                                               "rollout.prompts_per_step=2"])
    summary = train(config, tmp_path / "run", show_progress=False)
    assert summary["steps"] == 3 and summary["rollout_tokens"] > 0
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in steps if "eval" not in r]
    # per step: 2 prompts, each 5 fresh episodes and 4 continuations of at most 40 policy tokens
    assert all(0 < r["rollout/tokens"] <= 2 * 9 * 40 for r in steps)
    assert all(r["rollout/tokens"] == r["resets/tokens_base"] + r["resets/tokens_seed"] + r["resets/tokens_suffix"]
               for r in steps)
    kept = [r["credit/suffix_row_share"] for r in steps]  # rows that continue a prefix of one turn or more
    if method == "srpo_oracle":  # every first turn is wrong: the oracle resets to the start, a fresh episode
        assert all(r["resets/position_mean"] == 0.0 and r["resets/localiser_exact"] == 1.0 for r in steps)
        assert kept == [0.0] * 3
    else:  # random turns: some seeds keep turns (4 of a prompt's 8 rows continue its seed)
        assert all(share in (0.0, 0.25, 0.5) for share in kept) and any(kept)
    # the logged samples (base rows): the calculator's observations are in the sequence but never trained on
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    untrained = ["".join(t for t, trained in zip(s["tokens"], s["loss_mask"]) if not trained) for s in samples]
    assert all(u == "<obs>?</obs>" * u.count("<obs>") for u in untrained) and any(untrained)
