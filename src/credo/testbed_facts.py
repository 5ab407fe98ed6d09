"""A testbed regime's facts, measured on its starting model: what RL starts from, and what a failure's blame is.

Where the blame of a failure lies decides which credit methods can act (docs/testbed.md, sec. 3): resets to the
first wrong thought help when that thought decides the failure, and a reward-only method is misled by *lucky
successes* (right answer, wrong steps). `regime_facts` samples the starting policy on the regime's training
problems and reads every response with the step checker:

- `greedy_pass@1` on the held-out problems (overall and per chain length) and `sampled_accuracy` on training problems;
- `lucky_share`: correct responses that hold a wrong step, over the correct responses;
- `errors_per_failure`: wrong steps per failed response (`ArithTask.wrong_steps`), and `single_error_share`,
  the failures with exactly one;
- `first_error_kinds`: what each failure's first wrong step was (a misconception's name, "slip", "format",
  "answer"), as shares of the failures;
- `decisions_per_response`: thoughts whose step, from the value the response wrote before it, is of a misconception
  type (`ArithTask.decisions`): the uncertain decisions of a response (the starting policy takes a misconception's
  wrong value there with probability about `p_misc`), over all responses and over the failures;
- where outcome-level credit runs out of signal (docs/testbed.md, "Regime knobs"): `decision_types`, the noise
  model's misconception types, and `instances_per_type_per_batch`, how often each type is decided in a rollout batch
  of `batch_responses` (decisions per response x responses / types: about 110 with the three named misconceptions
  shared by every problem, a few with a hundred keyed ones); `no_success_group_share`, the share of groups (the
  `samples` responses to one problem) without a correct response, where GRPO's advantage is zero;
- the lengths that the traces' decays and the length normalisations act on: `response_tokens` (median, 10th and 90th
  percentile, longest), `group_length_spread` (the median over groups of the longest minus the shortest response)
  and `decay_span_0.99` (0.99^-(L-1) at the median length L: how much more a lambda-return or trace of decay 0.99
  weighs a response's last token than its first).

On a task with an environment (the agent testbed, `credo.tasks.calculator`) a response is an episode of turns, and
`episode_facts` reads each turn's outcome instead: the accuracies and `no_success_group_share` as above;
`turn_kinds` (shares of calls, checks, undos, answers, malformed turns); `turns_per_episode` (median, 10th and 90th
percentile, longest) and `group_turn_spread` (the median over groups of the most turns minus the fewest: how much
the turn counts vary within a group, where a per-turn-index baseline is biased); `wrong_turns_per_failure`,
`recovered_share` (successes that hold a wrong turn: a wrong call taken back by an undo; errors cannot cancel here, so
no success is lucky), `decisions_per_episode` (turns the per-turn checker judged) and `instances_per_type_per_batch`
(judged calls per batch over the noise model's decision types); and `episode_tokens` (turns and observations).
"""

from __future__ import annotations

from collections import Counter
from itertools import islice

from credo.evaluate import summarise
from credo.rollout.episodes import sample_episodes
from credo.rollout.generate import encode_prompts
from credo.tasks import verify_all
from credo.tasks.arith import ArithTask


def quantile(values: list[float], q: float) -> float:
    """The `q` quantile of `values`, linear between order statistics (numpy's default).

    >>> quantile([1, 2, 3, 4], 0.5), quantile([5, 1, 3], 0.9)
    (2.5, 4.6)
    """
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (position - low))


def regime_facts(task: ArithTask, backend, *, eval_problems, problems: int, samples: int, seed: int,
                 temperature: float, max_new_tokens: int, batch_responses: int = 128) -> dict:
    """The facts above from `samples` responses to each of the first `problems` training problems of the stream
    `seed`, at `temperature`, and one greedy response per held-out problem in `eval_problems`; a rollout batch holds
    `batch_responses` responses."""
    if not isinstance(task, ArithTask):
        raise ValueError(f"regime facts read arith chains step by step; task {task.name!r} is not the testbed's arith")
    if task.environment is not None:
        return episode_facts(task, backend, eval_problems=eval_problems, problems=problems, samples=samples,
                             seed=seed, temperature=temperature, max_new_tokens=max_new_tokens,
                             batch_responses=batch_responses)
    train = list(islice(task.train_problems(seed), problems))
    out = backend.generate(encode_prompts(backend.tokenizer, [p.prompt for p in train]),
                           max_new_tokens=max_new_tokens, temperature=temperature, repeat=samples)
    rows = [p for p in train for _ in range(samples)]
    verdicts = verify_all(task, rows, out.texts, "raise", out.id_lists())[0]
    errors = [task.wrong_steps(p.meta["chain"], text) for p, text in zip(rows, out.texts)]
    decisions = [len(task.decisions(p.meta["chain"], text)) for p, text in zip(rows, out.texts)]
    noise = task.config.noise
    types = noise.keyed.count or len(noise.misconceptions)
    solved = [any(v.correct for v in verdicts[i:i + samples]) for i in range(0, len(verdicts), samples)]
    lengths = out.response_mask.sum(dim=1).tolist()
    spreads = [max(lengths[i:i + samples]) - min(lengths[i:i + samples]) for i in range(0, len(lengths), samples)]
    correct = [e for v, e in zip(verdicts, errors) if v.correct]
    failed = [(v, e) for v, e in zip(verdicts, errors) if not v.correct]
    greedy_out = backend.generate(encode_prompts(backend.tokenizer, [p.prompt for p in eval_problems]),
                                  max_new_tokens=max_new_tokens, greedy=True)
    greedy = [v.correct for v in verify_all(task, eval_problems, greedy_out.texts, "raise", greedy_out.id_lists())[0]]
    held_out = summarise([p.difficulty for p in eval_problems], greedy, None, [1])
    kinds = Counter(v.error_kind for v, _ in failed)
    return {
        "greedy_pass@1": held_out["greedy_pass@1"],
        "greedy_by_difficulty": {d: m["greedy_pass@1"] for d, m in held_out["by_difficulty"].items()},
        "sampled_accuracy": len(correct) / len(verdicts),
        "lucky_share": sum(e > 0 for e in correct) / len(correct) if correct else 0.0,
        "errors_per_failure": sum(e for _, e in failed) / len(failed) if failed else 0.0,
        "single_error_share": sum(e == 1 for _, e in failed) / len(failed) if failed else 0.0,
        "first_error_kinds": {kind: count / len(failed) for kind, count in kinds.most_common()},
        "decisions_per_response": sum(decisions) / len(decisions),
        "decisions_per_failure": (sum(d for v, d in zip(verdicts, decisions) if not v.correct) / len(failed)
                                  if failed else 0.0),
        "decision_types": types,
        "instances_per_type_per_batch": sum(decisions) / len(decisions) * batch_responses / max(types, 1),
        "no_success_group_share": 1 - sum(solved) / len(solved),
        "response_tokens": {"median": quantile(lengths, 0.5), "p10": quantile(lengths, 0.1),
                            "p90": quantile(lengths, 0.9), "max": float(max(lengths))},
        "group_length_spread": quantile(spreads, 0.5),
        "decay_span_0.99": 0.99 ** -(quantile(lengths, 0.5) - 1),
        "responses": len(verdicts),
    }


def episode_facts(task: ArithTask, backend, *, eval_problems, problems: int, samples: int, seed: int,
                  temperature: float, max_new_tokens: int, batch_responses: int = 128) -> dict:
    """The facts of a regime whose responses are episodes (the module's docstring), from `samples` episodes of each of
    the first `problems` training problems of the stream `seed` at `temperature`, each at most `max_new_tokens` turn
    and observation tokens, and one greedy episode per held-out problem."""
    env = task.environment
    train = list(islice(task.train_problems(seed), problems))
    sampled = sample_episodes(backend, env, train, encode_prompts(backend.tokenizer, [p.prompt for p in train]),
                              repeat=samples, budget_tokens=max_new_tokens, temperature=temperature)
    greedy = sample_episodes(backend, env, eval_problems, encode_prompts(backend.tokenizer,
                                                                         [p.prompt for p in eval_problems]),
                             repeat=1, budget_tokens=max_new_tokens, greedy=True)
    held_out = summarise([p.difficulty for p in eval_problems], [r > 0 for r in greedy.rewards], None, [1])
    correct = [r > 0 for r in sampled.rewards]
    wrong = [sum(o.correct is False for o in outcomes) for outcomes in sampled.outcomes]
    judged = [sum(o.correct is not None for o in outcomes) for outcomes in sampled.outcomes]
    turns = [len(outcomes) for outcomes in sampled.outcomes]
    kinds = Counter(o.kind for outcomes in sampled.outcomes for o in outcomes)
    solved = [any(correct[i:i + samples]) for i in range(0, len(correct), samples)]
    spreads = [max(turns[i:i + samples]) - min(turns[i:i + samples]) for i in range(0, len(turns), samples)]
    failures = [w for c, w in zip(correct, wrong) if not c]
    successes = [w for c, w in zip(correct, wrong) if c]
    calls = sum(o.kind == "call" and o.correct is not None for outcomes in sampled.outcomes for o in outcomes)
    types = task.config.noise.keyed.count or len(task.config.noise.misconceptions)
    lengths = [len(tokens) for tokens in sampled.tokens]
    return {
        "greedy_pass@1": held_out["greedy_pass@1"],
        "greedy_by_difficulty": {d: m["greedy_pass@1"] for d, m in held_out["by_difficulty"].items()},
        "sampled_accuracy": sum(correct) / len(correct),
        "no_success_group_share": 1 - sum(solved) / len(solved),
        "turn_kinds": {kind: count / sum(kinds.values()) for kind, count in kinds.most_common()},
        "turns_per_episode": {"median": quantile(turns, 0.5), "p10": quantile(turns, 0.1),
                              "p90": quantile(turns, 0.9), "max": float(max(turns))},
        "group_turn_spread": quantile(spreads, 0.5),
        "wrong_turns_per_failure": sum(failures) / len(failures) if failures else 0.0,
        "recovered_share": sum(w > 0 for w in successes) / len(successes) if successes else 0.0,
        "decisions_per_episode": sum(judged) / len(judged),
        "decision_types": types,
        "instances_per_type_per_batch": calls / len(turns) * batch_responses / max(types, 1),
        "episode_tokens": {"median": quantile(lengths, 0.5), "p10": quantile(lengths, 0.1),
                           "p90": quantile(lengths, 0.9), "max": float(max(lengths))},
        "truncated_share": sum(sampled.truncated) / len(sampled.truncated),
        "responses": len(correct),
    }
