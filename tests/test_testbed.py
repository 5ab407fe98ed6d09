"""The testbed's SFT data: the localisation and revision jobs' labels, their agreement with the samplers'
prompts, and the micro-batching of SFT batches."""

from __future__ import annotations

import itertools
import random

import pytest

from credo.rollout.localise import TESTBED_PROMPT, TESTBED_STEP_FORMAT, localisation_prompt
from credo.rollout.revise import TESTBED_REVISE_PROMPT, TESTBED_REVISE_REWRITE, revision_prompt
from credo.rollout.thoughts import ThoughtRules, episode, token_pieces
from credo.tasks.arith import ArithConfig, ArithTask, solution
from credo.testbed import (
    AgentJob,
    LocalisationJob,
    RevisionJob,
    SFTExample,
    TestbedConfig,
    TestbedModel,
    build_tokenizer,
    failable,
    least_padding_cuts,
    localisation_example,
    new_model,
    revision_example,
    sft_batches,
    sft_examples,
    sft_tokenizer,
)


def test_localisation_labels_follow_the_configured_error_profile():
    job = LocalisationJob(p_exact=0.2, p_earlier=0.3)
    task = ArithTask(ArithConfig(min_steps=4, max_steps=6))
    rng = random.Random(0)
    counts = {"exact": 0, "earlier": 0, "later": 0}
    eligible = 0
    for _ in range(3000):
        chain = task.random_chain(rng, rng.randint(4, 6))
        prompt, answer = localisation_example(job, task, chain, rng)
        label = int(answer[len("\\boxed{"):-1])
        lines = prompt.split("\n")[1]
        n = lines.count("</thought>") + 1
        # recover the true first wrong thought from the prompt's own trace
        trace = "".join(part[1:] if part[:1].isdigit() else part for part in _thoughts(lines))
        wrong, _ = task.first_wrong_step(chain, trace)
        k = wrong + 1
        if 1 < k < n:  # both an earlier and a later thought exist
            eligible += 1
            counts["exact" if label == k else "earlier" if label < k else "later"] += 1
    for name, p in (("exact", 0.2), ("earlier", 0.3), ("later", 0.5)):
        share = counts[name] / eligible
        assert abs(share - p) < 4.5 * (p * (1 - p) / eligible) ** 0.5, (name, share)


def _thoughts(steps: str) -> list[str]:
    """'1+5=12</thought>2*3=36</thought>3\\boxed{36}' -> ['1+5=12</thought>', '2*3=36</thought>', '3\\boxed{36}']."""
    parts = steps.split("</thought>")
    return [p + "</thought>" for p in parts[:-1]] + [parts[-1]]


def test_sampler_prompt_equals_the_trained_format():
    # The reset sampler rebuilds the localiser prompt from token-level thoughts; it must match SFT's text.
    tok = build_tokenizer()
    task = ArithTask()
    rng = random.Random(3)
    chain = task.random_chain(rng, 5)
    prompt, _ = localisation_example(LocalisationJob(), task, chain, rng)
    trace = "".join(part[1:] for part in _thoughts(prompt.split("\n")[1]))
    ids = tok(trace + "<|end|>", add_special_tokens=False)["input_ids"]
    ep = episode(ids, token_pieces(tok, ids), ThoughtRules())
    thoughts = [tok.decode(ep.ids[a:b], skip_special_tokens=True) for a, b in zip([0] + ep.ends, ep.ends)]
    assert localisation_prompt(chain.prompt, thoughts, TESTBED_PROMPT, TESTBED_STEP_FORMAT) == prompt


@pytest.mark.parametrize("share", [0.0, 0.25])
@pytest.mark.parametrize("job,marker", [("localisation", "first wrong step?"), ("revision", "revise? ")])
def test_job_shares(job, marker, share):
    jobs = {"localisation": LocalisationJob(share=share), "revision": RevisionJob(share=share)}
    config = TestbedConfig(**{job: jobs[job]})
    tok = build_tokenizer()
    examples = sft_examples(config, ArithTask(config.task), tok, random.Random(0), 400)
    found = sum(marker in tok.decode(e.prompt) for e in examples) / 400
    assert abs(found - share) < 4.5 * (share * (1 - share) / 400) ** 0.5 + 1e-9


def _revision(job, seed, steps=5):
    task = ArithTask(ArithConfig(min_steps=1, max_steps=6))
    rng = random.Random(seed)
    chain = task.random_chain(rng, steps)
    prompt, target = revision_example(job, task, chain, rng)
    reference, attempt, problem = prompt.removeprefix("revise? ").split("\n")
    return task, chain, prompt, (problem, reference, attempt), target


@pytest.mark.parametrize("seed", range(40))
def test_revision_examples_keep_the_attempt_before_its_first_error(seed):
    task, chain, prompt, (problem, reference, attempt), target = _revision(RevisionJob(), seed)
    assert prompt.startswith("revise? ") and problem == chain.prompt
    # attempts are shown by their values: put the chain's operations back to read them
    attempt, reference = _with_operations(chain, attempt), _with_operations(chain, reference)
    assert not task.verify(task.problem(chain), attempt).correct
    assert prompt == revision_prompt(chain.prompt, attempt, reference, TESTBED_REVISE_PROMPT,
                                     [TESTBED_REVISE_REWRITE])  # the sampler's text for these responses
    wrong, _ = task.first_wrong_step(chain, attempt)
    kept = attempt.split("</thought>")[:wrong]
    assert target.split("</thought>")[:wrong] == kept
    assert task.first_wrong_step(chain, target)[0] in (None, *range(wrong, len(chain.steps) + 1))


def _with_operations(chain, shown):
    """'12</thought>36</thought>\\boxed{36}' -> '+5=12</thought>*3=36</thought>\\boxed{36}' for chain +5*3."""
    parts = shown.split("</thought>")
    steps = [f"{op}{b}={v}" for (op, b), v in zip(chain.steps, parts[:-1])]
    return "</thought>".join(steps + parts[-1:])


def test_a_reviser_that_uses_a_correct_reference_always_repairs():
    job = RevisionJob(p_correct_reference=1.0, p_use_reference=1.0)
    for seed in range(30):
        task, chain, _, (_, reference, _), target = _revision(job, seed)
        assert _with_operations(chain, reference) == solution(chain) and target == solution(chain)


def test_revision_success_depends_on_the_reference_and_on_how_late_the_error_was():
    def success(job, seeds=600):
        ok = late_ok = late = early_ok = early = 0
        for seed in range(seeds):
            task, chain, _, (_, _, attempt), target = _revision(job, seed, steps=6)
            attempt = _with_operations(chain, attempt)
            right = task.verify(task.problem(chain), target).correct
            wrong, _ = task.first_wrong_step(chain, attempt)
            ok += right
            if wrong >= 4:
                late, late_ok = late + 1, late_ok + right
            elif wrong <= 1:
                early, early_ok = early + 1, early_ok + right
        return ok / seeds, late_ok / max(late, 1), early_ok / max(early, 1)

    with_reference, _, _ = success(RevisionJob(p_correct_reference=1.0))
    without_reference, late, early = success(RevisionJob(p_use_reference=0.0))
    assert with_reference > without_reference + 0.2
    assert late > early + 0.1  # a near miss is likelier to be repaired
    assert 0.0 < without_reference < 1.0  # never certain


def _padded_area(lengths, bounds):
    return sum((b - a) * lengths[b - 1] for a, b in zip([0] + bounds[:-1], bounds))


@pytest.mark.parametrize("seed", range(30))
def test_least_padding_cuts_match_brute_force(seed):
    rng = random.Random(seed)
    lengths = sorted(rng.randint(1, 40) for _ in range(rng.randint(1, 9)))
    parts = rng.randint(1, 4)
    bounds = least_padding_cuts(lengths, parts)
    assert bounds[-1] == len(lengths) and bounds == sorted(set(bounds)) and len(bounds) <= parts
    best = min(
        _padded_area(lengths, sorted(set(cut)) + [len(lengths)])
        for k in range(parts)
        for cut in itertools.combinations(range(1, len(lengths)), k)
    )
    assert _padded_area(lengths, bounds) == best


def test_sft_batches_keep_every_example_once():
    rng = random.Random(0)
    examples = []
    for _ in range(50):
        response = [2] * rng.randint(1, 90)
        examples.append(SFTExample([1] * rng.randint(1, 30), response, [rng.random() < 0.7 for _ in response]))
    batches = sft_batches(examples, 4, pad=0)
    assert len(batches) <= 4 and sum(b["input_ids"].shape[0] for b in batches) == 50
    # labels on the trained response tokens only (a calculator's observations carry none)
    assert sum(int((b["labels"] != -100).sum()) for b in batches) == sum(sum(e.trained) for e in examples)
    assert sum(int(b["attention_mask"].sum()) for b in batches) == sum(len(e.prompt) + len(e.response)
                                                                       for e in examples)


def test_worked_sft_examples_are_worked_and_the_long_regime_shows_attempts_as_it_learned():
    """The long-horizon regime's SFT writes worked chains in every job (solutions, localisation, revision targets),
    its revision prompts show attempts by their values through `TESTBED_WORKED_REVISE_REWRITE`, and the regime's
    config hands IBPO's sampler that same rewrite, so RL shows the reviser what SFT showed it."""
    from credo.config import load_config
    from credo.rollout.revise import TESTBED_WORKED_REVISE_REWRITE
    from credo.testbed import TestbedConfig, build_tokenizer, sft_examples

    run = load_config("configs/testbed/long/ibpo.yaml")
    assert tuple(run.rollout.revisions.rewrite[0]) == TESTBED_WORKED_REVISE_REWRITE
    config = TestbedConfig(**run.model.testbed)
    task = ArithTask(config.task)
    tokenizer = build_tokenizer()
    examples = sft_examples(config, task, tokenizer, random.Random(0), 300)
    texts = [(tokenizer.decode(e.prompt), tokenizer.decode(e.response)) for e in examples]
    revisions = [(p, a) for p, a in texts if "revise? " in p]
    localisations = [(p, a) for p, a in texts if "first wrong step? " in p]
    assert revisions and localisations
    for prompt, answer in texts:
        if (prompt, answer) in localisations:
            assert "|=" in prompt  # the failed chain is shown worked
        else:
            assert answer.startswith("a") and "|=" in answer  # a worked chain, first step labelled
    for prompt, _ in revisions:
        shown = prompt.split("revise? ", 1)[1]
        assert "|" not in shown.split("<|end|>")[0]  # attempts by their values only


@pytest.mark.parametrize("method", ["grpo", "rrpo", "vine"])
def test_every_well_formed_long_response_fits_the_regimes_token_budget(method):
    """A right answer is never cut off: the longest well-formed response of the long-horizon regime (its longest
    chains, every thought with the check its SFT may add) fits `rollout.max_new_tokens` and the reset and vine
    continuations' budgets, and prompt + response fit the model's positions. At a 448-token budget a 12-step
    response checked at every thought (465-478 tokens) was truncated: greedy decoding, once RL made checking the
    likelier choice, failed every 12-step problem (the second pilot's greedy pass@1 fell to 0.49 on two seeds)."""
    from credo.config import load_config
    from credo.rollout.generate import encode_prompts
    from credo.tasks.arith import trace
    from credo.testbed import END, TestbedConfig, build_tokenizer

    run = load_config(f"configs/testbed/long/{method}.yaml")
    config = ArithConfig(**run.task)
    task = ArithTask(config)
    tokenizer = build_tokenizer()
    problems = [p for p in task.eval_problems() if len(p.meta["chain"].steps) == max(config.eval_steps)][:50]
    problems += list(itertools.islice(task.train_problems(0), 50))
    budget = min(run.rollout.max_new_tokens, run.rollout.resets.thoughts.budget_tokens,
                 run.rollout.vine.thoughts.budget_tokens)
    positions = TestbedConfig(**run.model.testbed).model.max_positions
    for problem in problems:
        chain = problem.meta["chain"]
        response = tokenizer(trace(chain, chain.values(), [True] * len(chain.steps)) + END)["input_ids"]
        prompt = encode_prompts(tokenizer, [problem.prompt])[0]
        assert len(response) <= budget, (len(response), budget, problem.prompt)
        assert len(prompt) + len(response) <= positions


def test_failed_traces_come_from_chains_that_can_fail():
    # Without random slips a chain without a misconception step is always solved: the localisation and revision
    # jobs draw another chain for it instead of sampling failures forever (keyed regimes have p_slip 0).
    task = ArithTask(ArithConfig(min_steps=1, max_steps=8, eval_steps=(8,), decision_rate=0.3,
                                 noise={"misconceptions": {}, "keyed": {"count": 100}, "p_slip": 0.0}))
    rng = random.Random(0)
    plain = next(c for c in (task.random_chain(rng, 1) for _ in range(200)) if not c.misconception_steps(task.config.noise))
    chain = failable(task, plain, rng)
    assert chain is not plain and chain.misconception_steps(task.config.noise) > 0
    config = TestbedConfig(task=task.config, localisation={"share": 0.5}, revision={"share": 0.5})
    assert len(sft_examples(config, task, build_tokenizer(), rng, 64)) == 64
    slipping = ArithTask(ArithConfig())  # with slips every chain can fail: nothing is drawn, the streams stay as they were
    state = rng.getstate()
    assert failable(slipping, plain, rng) is plain and rng.getstate() == state


def test_fewer_key_value_heads_make_a_grouped_query_model_with_a_smaller_cache():
    import torch

    tokenizer = build_tokenizer()
    full = new_model(TestbedModel(), tokenizer)
    grouped = new_model(TestbedModel(num_kv_heads=1), tokenizer)
    assert full.config.num_key_value_heads == 4 and grouped.config.num_key_value_heads == 1
    ids = torch.tensor([[5, 6, 7, 8]])
    cache = grouped(input_ids=ids, use_cache=True).past_key_values
    full_cache = full(input_ids=ids, use_cache=True).past_key_values
    keys = [layer.keys for layer in cache.layers]
    assert keys[0].shape[1] == 1 and full_cache.layers[0].keys.shape[1] == 4  # (batch, kv heads, positions, dim)
    assert TestbedConfig().digest() == TestbedConfig(model={"num_kv_heads": None}).digest()  # shipped names kept
    with pytest.raises(ValueError, match="must divide num_heads"):
        TestbedModel(num_kv_heads=3)


def _agent_config(**job) -> TestbedConfig:
    keyed = {"misconceptions": {}, "p_slip": 0.0, "offsets_may_cancel": False, "keyed": {"count": 100}}
    return TestbedConfig(task=ArithConfig(min_steps=1, max_steps=6, decision_rate=0.7, noise=keyed),
                         localisation=LocalisationJob(share=0), revision=RevisionJob(share=0),
                         agent=AgentJob(**{"share": 1.0, **job}))


def test_agent_examples_are_the_episodes_the_sampler_builds_with_observations_untrained():
    """An agent SFT example is the token sequence `credo.rollout.episodes` builds for the same turns (each turn and
    observation tokenised alone, appended in order), its labels on the policy's turns and the end token only, and
    the calculator's rules replay it to the transcript's own observations."""
    from credo.tasks.calculator import CALL_WORDS, start_state
    from credo.tasks.environment import rules_in_process

    config = _agent_config()
    tok = sft_tokenizer(config)
    assert all(len(tok(w, add_special_tokens=False)["input_ids"]) == 1 for w in CALL_WORDS)
    assert tok("7+", add_special_tokens=False)["input_ids"] == build_tokenizer()("7+", add_special_tokens=False)[
        "input_ids"]  # the other ids are every testbed model's
    task = ArithTask(config.task)
    rules = rules_in_process("calculator_env")
    examples = sft_examples(config, task, tok, random.Random(5), 60)
    for example in examples:
        assert tok.decode(example.prompt).startswith("<|user|>calc ")
        text = tok.decode(example.response)
        assert text.endswith("<|end|>") and "\\boxed{" in text
        trained = tok.decode([t for t, keep in zip(example.response, example.trained) if keep])
        untrained = tok.decode([t for t, keep in zip(example.response, example.trained) if not keep])
        assert "<obs>" not in trained and untrained.startswith("<obs>") and untrained.count("<obs>") == text.count(
            "<obs>")
    # replay one transcript through the calculator: every observation is the rules' answer to the turn before it
    rng = random.Random(7)
    chain = task.random_chain(rng, 5)
    from credo.testbed import agent_example

    _, pieces = agent_example(config.agent, task, chain, rng)
    state = start_state(task.problem(chain))
    for turn, observation in zip(pieces[::2], pieces[1::2] + [""]):
        reply = rules.step(state, turn)
        assert reply["observation"] == observation
        state = reply["state"]
    assert reply["done"] and reply["kind"] == "answer"


def test_an_agent_job_changes_no_other_models_name():
    """The agent job is an option added later: at its default (share 0) every model keeps its name and tokenizer."""
    assert TestbedConfig().digest() == TestbedConfig(agent=AgentJob()).digest()
    assert TestbedConfig().digest() != TestbedConfig(agent=AgentJob(share=0.5)).digest()
    assert len(sft_tokenizer(TestbedConfig())) == len(build_tokenizer())


@pytest.mark.parametrize("p_check", [0.0, 1.0])
def test_agent_transcripts_check_as_often_as_asked(p_check):
    config = _agent_config(p_check=p_check)
    tok = sft_tokenizer(config)
    examples = sft_examples(config, ArithTask(config.task), tok, random.Random(1), 40)
    texts = [tok.decode(e.response) for e in examples]
    calls = sum(t.count("<call>") - t.count("<call>check") - t.count("<call>undo") for t in texts)
    checks = sum(t.count("<call>check") for t in texts)
    # every call is checked, but where a check would leave no turn for the answer (the transcript's turn limit)
    assert checks == 0 if p_check == 0 else calls - len(texts) <= checks <= calls
