"""Evaluation: greedy pass@1, pass@k from n samples (unbiased estimator), avg@k, per difficulty.

pass@k (Chen et al. 2021, arXiv 2107.03374) from `n >= k` samples of which `c` are correct:
`1 - C(n-c, k) / C(n, k)` (`credo.passk.pass_at_k`). avg@k is the mean accuracy over the samples. Results
are fractions in [0, 1], overall (the mean over problems) and under `by_difficulty`.

Each difficulty also reports its responses' mean length in tokens and the share cut off at `max_new_tokens`
(`greedy_tokens`, `greedy_truncated`; `sampled_tokens`, `sampled_truncated`), as rollouts report theirs
(`response/length_mean`, `rollout/truncated_share`): a cut-off answer is scored wrong, so without them a token
budget too small for one difficulty's responses reads as a fall in its accuracy, and greedy responses of another
length than the samples (the long regime's greedy answers skip every optional check its samples make half the
time) cannot be told from truncated ones.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from credo.passk import pass_at_k


def summarise(
    difficulties: Sequence[str],
    greedy_correct: Sequence[bool] | None,
    sample_correct: Sequence[Sequence[bool]] | None,
    ks: Sequence[int],
    responses: Sequence[dict[str, float]] | None = None,
) -> dict:
    """Overall and per-difficulty metrics from per-problem results.

    `greedy_correct[i]`: problem i's greedy answer was right; `sample_correct[i]`: its n sampled answers, or None
    where problem i was not sampled (`eval.sample_problems`). Keys: `greedy_pass@1`, `pass@k` and `avg@n` (n =
    samples per problem), each the mean over the problems that have it, and `by_difficulty`. `responses[i]`:
    problem i's response statistics (`response_statistics`), averaged per difficulty only: lengths mean nothing
    across difficulties, and the overall keys are the accuracies that study reports compare.
    """
    per_problem: list[dict[str, float]] = [{} for _ in difficulties]
    for i in range(len(difficulties)):
        if greedy_correct is not None:
            per_problem[i]["greedy_pass@1"] = float(greedy_correct[i])
        if sample_correct is not None and sample_correct[i] is not None:
            outcomes = sample_correct[i]
            n, c = len(outcomes), sum(bool(x) for x in outcomes)
            for k in ks:
                if k <= n:
                    per_problem[i][f"pass@{k}"] = pass_at_k(n, c, k)
            per_problem[i][f"avg@{n}"] = c / n
    result = _mean(per_problem)
    buckets: dict[str, list[dict[str, float]]] = defaultdict(list)
    for difficulty, metrics in zip(difficulties, per_problem):
        buckets[difficulty].append(metrics)
    statistics: dict[str, list[dict[str, float]]] = defaultdict(list)
    for difficulty, row in zip(difficulties, responses or [{} for _ in difficulties]):
        statistics[difficulty].append(row)
    result["by_difficulty"] = {d: _mean(rows) | _mean(statistics[d]) | {"problems": len(rows)}
                               for d, rows in sorted(buckets.items())}
    return result


def response_statistics(completions, prefix: str, repeat: int = 1) -> list[dict[str, float]]:
    """Per prompt of `completions` (`repeat` consecutive rows each): its responses' mean length in tokens
    (`<prefix>_tokens`) and the share of them cut off at `max_new_tokens` (`<prefix>_truncated`)."""
    lengths = completions.response_mask.sum(dim=1).tolist()
    truncated = completions.truncated.tolist()
    return [{f"{prefix}_tokens": sum(lengths[j : j + repeat]) / repeat,
             f"{prefix}_truncated": sum(truncated[j : j + repeat]) / repeat}
            for j in range(0, len(lengths), repeat)]


def _mean(rows: list[dict[str, float]]) -> dict:
    """Each key's mean over the rows that hold it (keys in first-seen order)."""
    keys = dict.fromkeys(key for r in rows for key in r)
    return {key: sum(r[key] for r in rows if key in r) / sum(key in r for r in rows) for key in keys}


def evaluate_policy(backend, task, problems, config, *, max_new_tokens: int, seed: int,
                    reward_errors: str = "raise") -> dict:
    """Greedy pass@1 and pass@k / avg@n from `config.samples` samples per problem at `config.temperature` and
    `config.top_p` (of the first `config.sample_problems` of each difficulty, where set), overall and per difficulty,
    and per difficulty the responses' lengths and truncated shares (`summarise`).

    Responses come from the run's generation backend (`credo.rollout.transformers_backend.TransformersBackend` or
    vLLM), drawn and verified as training draws them (`credo.rollout.groups.draw`: multi-turn episodes where the
    task has an environment).
    Sampling runs under its own seed (the training RNG stream is left untouched), so evaluations of
    different runs and methods see the same sampling noise. A verifier that raises follows the run's
    `rollout.reward_errors`, as in training: "raise" stops with the prompt and response, "zero" counts the
    answer wrong (with a warning).
    """
    import torch

    from credo.rollout.generate import encode_prompts
    from credo.rollout.groups import draw

    prompts = encode_prompts(backend.tokenizer, [p.prompt for p in problems])
    greedy = samples = None
    responses: list[dict[str, float]] = [{} for _ in problems]
    with torch.random.fork_rng(devices=[torch.cuda.current_device()] if torch.cuda.is_available() else []):
        torch.manual_seed(seed)
        if config.greedy:
            drawn = draw(backend, task, problems, prompts, repeat=1, max_new_tokens=max_new_tokens,
                         on_error=reward_errors, greedy=True)
            greedy = [v.correct for v in drawn.verdicts]
            responses = response_statistics(drawn.completions, "greedy")
        if config.samples:
            n = config.samples
            chosen = first_per_bucket(problems, config.sample_problems)
            drawn = draw(backend, task, [problems[i] for i in chosen], [prompts[i] for i in chosen], repeat=n,
                         max_new_tokens=max_new_tokens, on_error=reward_errors, temperature=config.temperature,
                         top_p=config.top_p)
            flat = [v.correct for v in drawn.verdicts]
            samples = [None] * len(problems)
            stats = response_statistics(drawn.completions, "sampled", n)
            for j, i in enumerate(chosen):
                samples[i] = flat[j * n : (j + 1) * n]
                responses[i] = responses[i] | stats[j]
    return summarise([p.difficulty for p in problems], greedy, samples, config.ks, responses)


def at_temperature(result: dict, temperature: float) -> dict:
    """An evaluation's sampled metrics keyed with their temperature (`eval.final_temperatures`), overall and per
    difficulty: `pass@1` -> `pass@1@t0.6`; a difficulty's problem count stays.

    >>> at_temperature({"pass@1": 0.5, "by_difficulty": {"steps=8": {"pass@1": 0.5, "problems": 2}}}, 0.6)
    {'pass@1@t0.6': 0.5, 'by_difficulty': {'steps=8': {'pass@1@t0.6': 0.5, 'problems': 2}}}
    """
    def suffixed(metrics: dict) -> dict:
        return {k if k == "problems" else f"{k}@t{temperature:g}": v for k, v in metrics.items()}

    return suffixed({k: v for k, v in result.items() if k != "by_difficulty"}) | {
        "by_difficulty": {d: suffixed(m) for d, m in result["by_difficulty"].items()}}


def eval_subset(problems, max_problems: int | None):
    """The first `max_problems` problems of each difficulty bucket (all when None)."""
    return [problems[i] for i in first_per_bucket(problems, max_problems)]


def first_per_bucket(problems, per_bucket: int | None) -> list[int]:
    """Indices of the first `per_bucket` problems of each difficulty bucket, in order (all when None)."""
    seen: dict[str, int] = defaultdict(int)
    out = []
    for i, p in enumerate(problems):
        if per_bucket is None or seen[p.difficulty] < per_bucket:
            out.append(i)
            seen[p.difficulty] += 1
    return out
